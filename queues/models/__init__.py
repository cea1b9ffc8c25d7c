"""Models of job scheduling: teams and their quotas (Kueue ClusterQueues), cohorts, priorities, jobs.

``teams`` holds the teams, quotas, cohorts, priority classes, API tokens, policy pushes and quota shortfalls;
``jobs`` the jobs, their timeline, stored diagnoses and idle negotiation; ``waiting`` the wait attribution's
rollups. Everything is importable from ``queues.models``.
"""

from queues.models.jobs import (
    CatalogueEstimate,
    ClusterDiagnosis,
    Job,
    JobDiagnosis,
    JobEvent,
    JobIdle,
    WaitReason,
)
from queues.models.teams import (
    ApiToken,
    Cohort,
    Membership,
    PolicyPreview,
    PolicyPush,
    PreemptionWithinClusterQueue,
    PriorityClass,
    QuotaLine,
    QuotaShortfall,
    ReclaimWithinCohort,
    Team,
    TeamQuota,
)
from queues.models.waiting import WaitActionStudy, WaitCause, WaitCursor, WaitOpen, WaitTally, WaitWeekly

__all__ = [
    "ApiToken",
    "CatalogueEstimate",
    "ClusterDiagnosis",
    "Cohort",
    "Job",
    "JobDiagnosis",
    "JobEvent",
    "JobIdle",
    "Membership",
    "PolicyPreview",
    "PolicyPush",
    "PreemptionWithinClusterQueue",
    "PriorityClass",
    "QuotaLine",
    "QuotaShortfall",
    "ReclaimWithinCohort",
    "Team",
    "TeamQuota",
    "WaitActionStudy",
    "WaitCause",
    "WaitCursor",
    "WaitOpen",
    "WaitReason",
    "WaitTally",
    "WaitWeekly",
]
