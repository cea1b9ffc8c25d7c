"""The pool page accounts for its utilisation (issue 32: "33 %" with no account of why: MIG slices and time-shared
replicas counted like whole cards, 13 H100s free while H100 jobs waited on their team's quota)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from pools import selectors
from pools.models import Allocation, Device
from queues.models import Job, WaitReason
from tests.browser.scenarios import add_catalogue_classes, occupy, research_pool
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool():
    pool = research_pool(racks={"rack-a": [4, 4]}, nominal="2")
    add_catalogue_classes(pool)  # an A100 node of 2 cards × 7 MIG slices, an L4 node of 2 cards × 4 replicas
    occupy(pool, node=pool.nodes[0], count=2)
    slice_ = Device.objects.filter(kind=Device.Kind.MIG).order_by("pk").first()
    holder = JobFactory(team=pool.team, owner=pool.user, cluster=pool.cluster, resource_class=pool.rc, running=True)
    Allocation.objects.create(job=holder, device=slice_, started_at=timezone.now())
    for name in ("big-1", "big-2"):  # Vision's quota (2) is used: these wait on it, not on the hardware
        JobFactory(
            team=pool.team,
            owner=pool.user,
            cluster=pool.cluster,
            resource_class=pool.rc,
            name=name,
            state=Job.State.PENDING,
            wait_reason=WaitReason.QUOTA_EXHAUSTED,
        )
    return pool


def test_units_and_cards_are_counted_apart(pool):
    account = selectors.utilisation_account(cluster=pool.cluster)
    by_kind = {r.kind: r for r in account.rows}
    h100, mig, shared = by_kind["full"], by_kind["mig"], by_kind["shared"]
    assert (h100.units, h100.units_in_use, h100.cards, h100.cards_in_use) == (8, 2, 8, 2)
    assert (mig.units, mig.units_in_use, mig.cards, mig.cards_in_use) == (14, 1, 2, 1)  # one slice: one busy card
    assert (shared.units, shared.units_in_use, shared.cards, shared.cards_in_use) == (8, 0, 2, 0)
    # 3 of 30 units (10 %), 3 of 12 cards (25 %): the two figures the page gives
    assert (account.units, account.units_in_use, account.cards, account.cards_in_use) == (30, 3, 12, 3)
    assert h100.waiting == [("Team quota used up", 2, True)]
    assert h100.waiting_on_quota == 2


def test_the_pool_page_explains_it(client, pool):
    client.force_login(pool.user)
    html = client.get(reverse("pools:overview")).content.decode()
    assert 'id="pools-util-account"' in html
    assert "3 of 30 schedulable units are in use." in html
    assert "3 of 12 physical cards have at least one unit in use." in html
    assert '10% <small class="muted">of units · 25% of cards</small>' in html
    assert "6 free, yet 2 jobs wait on their team's quota:" in html
