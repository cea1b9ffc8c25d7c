"""Internal settlement of a cohort's borrowing: switched on (with a share of the rate) or off from a month on."""

from __future__ import annotations

from datetime import date
from decimal import Decimal, InvalidOperation

from django.db import transaction

from billing.models import CohortSettlement
from kernel.errors import ValidationFailed
from queues.models import Cohort


def settlement_errors(*, cohort: Cohort, effective_from: date, share_percent: Decimal | str | None) -> dict:
    """What is wrong with a settlement, by field (empty when nothing)."""
    errors: dict[str, list[str]] = {}
    if effective_from.day != 1:
        errors["effective_from"] = [f"choose the first day of a month (e.g. {effective_from:%Y-%m}-01)"]
    if cohort.parent_id is not None:
        errors["cohort"] = [f"choose a root cohort: {cohort.name}'s borrowing is settled in its root cohort"]
    if share_percent not in (None, ""):
        try:
            share = Decimal(str(share_percent))
        except InvalidOperation:
            errors["share_percent"] = [f"{share_percent!r} is not a number"]
        else:
            if not Decimal(0) <= share <= Decimal(100):
                errors["share_percent"] = [f"choose from 0 to 100 %, not {share}"]
    return errors


@transaction.atomic
def settlement_set(
    *, cohort: Cohort, effective_from: date, share_percent: Decimal | str | None, note: str = ""
) -> CohortSettlement:
    """Switch a root cohort's internal settlement on (``share_percent`` of the rate) or off (None) from the month of
    ``effective_from``; the statements and the cost report read it at once (nothing is re-rolled)."""
    errors = settlement_errors(cohort=cohort, effective_from=effective_from, share_percent=share_percent)
    if errors:
        raise ValidationFailed(errors)
    share = None if share_percent in (None, "") else Decimal(str(share_percent))
    row, _ = CohortSettlement.objects.update_or_create(
        cohort=cohort, effective_from=effective_from, defaults={"share_percent": share, "note": note}
    )
    return row
