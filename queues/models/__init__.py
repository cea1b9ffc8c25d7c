"""Models of job scheduling: teams and their quotas (Kueue ClusterQueues), cohorts, priorities, jobs.

``teams`` holds the teams, quotas, cohorts, priority classes, API tokens, policy pushes and quota shortfalls;
``jobs`` the jobs, their timeline, stored diagnoses and idle negotiation; ``reservations`` the teams' reservations
of capacity; ``waiting`` the wait attribution's rollups. Everything is importable from ``queues.models``.
"""

from queues.models.jobs import (
    CatalogueEstimate,
    ClusterDiagnosis,
    DiagnosisPage,
    Job,
    JobEvent,
    JobIdle,
    JobSuggestions,
    WaitReason,
)
from queues.models.reservations import Reservation, ReservationPolicy, ReservationPreview
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
    "DiagnosisPage",
    "Job",
    "JobEvent",
    "JobIdle",
    "JobSuggestions",
    "Membership",
    "PolicyPreview",
    "PolicyPush",
    "PreemptionWithinClusterQueue",
    "PriorityClass",
    "QuotaLine",
    "QuotaShortfall",
    "ReclaimWithinCohort",
    "Reservation",
    "ReservationPolicy",
    "ReservationPreview",
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
