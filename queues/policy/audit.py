"""The policy audit trail (django-simple-history): every change to a policy model, who made it, before → after."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import datetime
from heapq import merge

from django.apps import apps

from kernel.csv_cells import csv_row

#: The policy models whose history is kept, as ``app_label.ModelName``.
POLICY_MODELS = (
    "queues.TeamQuota",
    "queues.QuotaLine",
    "queues.Cohort",
    "queues.PriorityClass",
    "queues.Team",
    "queues.Membership",
    "pools.Cluster",
    "pools.ResourceFlavor",
    "pools.ResourceClass",
    "pools.ResourceClassFlavor",
    "pools.Topology",
    "portal.SsoMapping",
)
ACTIONS = {"+": "created", "~": "changed", "-": "deleted"}


@dataclass(frozen=True)
class Change:
    """One field of one audited change."""

    field: str
    before: str
    after: str


@dataclass(frozen=True)
class AuditEntry:
    """One audited change of one object."""

    at: datetime
    user: str
    model: str
    object_id: int
    object_repr: str
    action: str
    changes: tuple[Change, ...]
    reason: str


def _text(value) -> str:
    return "" if value is None else str(value)


def entry_of(record, model_label: str) -> AuditEntry:
    """An audit entry from a historical record, with the fields that differ from the record before it."""
    fields = [f for f in record.instance_type._meta.fields if f.name in {h.name for h in record._meta.fields}]
    changes: list[Change] = []
    if record.history_type == "~":
        prev = record.prev_record
        if prev is not None:
            delta = record.diff_against(prev)
            changes = [Change(c.field, _text(c.old), _text(c.new)) for c in delta.changes]
    elif record.history_type == "+":
        changes = [Change(f.name, "", _text(getattr(record, f.attname))) for f in fields if f.name != "id"]
    else:
        changes = [Change(f.name, _text(getattr(record, f.attname)), "") for f in fields if f.name != "id"]
    user = record.history_user
    return AuditEntry(
        at=record.history_date,
        user=user.get_username() if user is not None else "system",
        model=model_label,
        object_id=record.id,
        object_repr=str(record.instance) if record.history_type != "-" else f"{model_label} #{record.id}",
        action=ACTIONS.get(record.history_type, record.history_type),
        changes=tuple(changes),
        reason=record.history_change_reason or "",
    )


def audit_entries(
    *, since: datetime | None = None, model: str | None = None, user: str | None = None, limit: int = 500
) -> list[AuditEntry]:
    """Newest first: changes to the policy models, optionally since a time, of one model, or by one user."""
    streams = []
    for label in POLICY_MODELS:
        if model and label != model:
            continue
        qs = apps.get_model(label).history.select_related("history_user").order_by("-history_date", "-history_id")
        if since is not None:
            qs = qs.filter(history_date__gte=since)
        if user:
            qs = qs.filter(history_user__username=user)
        streams.append([(r, label) for r in qs[:limit]])
    newest = list(merge(*streams, key=lambda pair: pair[0].history_date, reverse=True))[:limit]
    # Diffs are computed for the kept records only (each needs the record before it).
    return [entry_of(record, label) for record, label in newest]


def audit_csv(entries: list[AuditEntry]) -> str:
    """CSV of audit entries: one row per changed field (when, who, model, object, action, field, before, after)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["at", "user", "model", "object_id", "object", "action", "field", "before", "after", "reason"])
    for e in entries:
        for c in e.changes or (Change("", "", ""),):
            writer.writerow(
                csv_row(
                    [
                        e.at.isoformat(),
                        e.user,
                        e.model,
                        e.object_id,
                        e.object_repr,
                        e.action,
                        c.field,
                        c.before,
                        c.after,
                        e.reason,
                    ]
                )
            )
    return out.getvalue()
