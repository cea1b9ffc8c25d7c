"""Rates: effective periods that never overlap, one validation path, history re-priced after a change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from billing import services
from billing.models import Rate
from kernel.errors import ValidationFailed
from tests.billing.conftest import T0

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 1, tzinfo=UTC)


def test_rate_set_closes_the_open_rate_where_the_new_one_starts(world):
    new = services.rate_set(flavor=world.flavor, price_per_hour="2.50", effective_from=T0)
    old = Rate.objects.get(flavor=world.flavor, effective_from=JAN)
    assert old.effective_to == T0
    assert new.effective_to is None
    assert new.currency == "EUR"


def test_rate_set_refuses_overlap_naming_the_field(world):
    services.rate_set(flavor=world.flavor, price_per_hour="3", effective_from=T0, effective_to=T0 + timedelta(days=5))
    with pytest.raises(ValidationFailed) as exc:
        services.rate_set(
            flavor=world.flavor,
            price_per_hour="4",
            effective_from=T0 + timedelta(days=1),
            effective_to=T0 + timedelta(days=2),
        )
    assert "overlaps the rate in force from" in exc.value.errors["effective_from"][0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"price_per_hour": "-1"}, "price_per_hour"),
        ({"price_per_hour": "abc"}, "price_per_hour"),
        ({"currency": "euro"}, "currency"),
        ({"kind": "mig", "mig_profile": "big"}, "mig_profile"),
        ({"kind": "full", "mig_profile": "1g.10gb"}, "mig_profile"),
        ({"effective_to": JAN}, "effective_to"),
        ({"effective_from": datetime(2027, 1, 1)}, "effective_from"),
    ],
)
def test_rate_set_rejects_bad_input(world, kwargs, field):
    values = {
        "flavor": world.flavor,
        "price_per_hour": "1",
        "effective_from": datetime(2027, 1, 1, tzinfo=UTC),
        **kwargs,
    }
    with pytest.raises(ValidationFailed) as exc:
        services.rate_set(**values)
    assert field in exc.value.errors


def test_rate_errors_for_the_admin_form_match_the_service(world):
    errors = services.rate_errors(
        flavor=world.flavor,
        price_per_hour="1",
        effective_from=JAN - timedelta(days=1),
        effective_to=JAN + timedelta(days=1),
    )
    assert "effective_from" in errors
    assert services.rate_errors(flavor=world.flavor, price_per_hour="1", effective_from=T0) == {}
