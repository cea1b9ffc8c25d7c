"""Guarantees that hold: guaranteed quotas backed by healthy capacity (effective quota) — docs/admin.md.

``compute`` is the pure rule (claims and capacity in, effective quotas out); ``selectors`` reads a cluster's quota
lines, cohort policies and healthy capacity and gives the effective quotas, the quota lines as applied (the one
answer to "what quota is pushed to Kueue and given to the engine") and each team's guarantee as its pages say it;
``services`` records shortfalls as they open, change and close, tells the admins and pushes the change.
"""
