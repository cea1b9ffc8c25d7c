"""Writes of billing: rates, metering, rollups, budgets, demotions, unused-reservation notices — the only writers of
billing's models."""

from billing.services.budgets import (
    budget_check,
    budget_check_one,
    budget_set,
    budget_spent,
    period_bounds,
    team_demote,
    team_demotion_lift,
)
from billing.services.metering import MeteringReport, hard_stop, metering_sync
from billing.services.quotas import QuotaHistoryReport, quota_history_sync
from billing.services.rates import rate_errors, rate_set
from billing.services.reservation_notices import reservation_unused_notices
from billing.services.rollup import (
    is_hardware_reason,
    month_rollup,
    pending_days,
    usage_rollup,
    usage_rollup_pending,
    usage_rollup_range,
)
from billing.services.settlement import settlement_errors, settlement_set

__all__ = [
    "MeteringReport",
    "QuotaHistoryReport",
    "budget_check",
    "budget_check_one",
    "budget_set",
    "budget_spent",
    "hard_stop",
    "is_hardware_reason",
    "metering_sync",
    "month_rollup",
    "pending_days",
    "period_bounds",
    "quota_history_sync",
    "rate_errors",
    "rate_set",
    "reservation_unused_notices",
    "settlement_errors",
    "settlement_set",
    "team_demote",
    "team_demotion_lift",
    "usage_rollup",
    "usage_rollup_pending",
    "usage_rollup_range",
]
