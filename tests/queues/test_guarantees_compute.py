"""Effective quota, worked by hand: each policy on a cohort short of healthy capacity (queues.guarantees.compute)."""

from __future__ import annotations

from queues.guarantees.compute import (
    PROPORTIONAL,
    SPARE_FIRST,
    WARN,
    Claim,
    GroupPolicy,
    effective_quotas,
    split,
)

GPU = "nvidia.com/gpu"


def claims(*specs: tuple[str, str, int, str | None], group: str = "org", lending: dict | None = None) -> list[Claim]:
    """Claims on H100 (flavor ``h100``) of one group: (key, team, nominal)."""
    return [
        Claim(key, "h100", GPU, group, nominal, (lending or {}).get(key), team)
        for key, team, nominal, *_ in [(*s, None) for s in specs]
    ]


ORG = claims(("line:1", "vision", 8), ("line:2", "nlp", 6), ("line:3", "speech", 2))


def test_split_is_whole_units_largest_remainder_first():
    # 3 shared over 8 / 6 / 2 (16): exact shares 1.5 / 1.125 / 0.375 → floors 1 / 1 / 0, the unit left goes to the
    # largest remainder (vision's .5)
    assert split(3, {"a": 8, "b": 6, "c": 2}) == {"a": 2, "b": 1, "c": 0}
    assert split(0, {"a": 8}) == {"a": 0}
    assert split(99, {"a": 2, "b": 1}) == {"a": 2, "b": 1}  # never more than each weight
    # ties go to the first key
    assert split(1, {"b": 1, "a": 1}) == {"a": 1, "b": 0}


def test_backed_in_full_changes_nothing():
    result = effective_quotas(claims=ORG, capacity={("h100", GPU): 16}, policies={"org": GroupPolicy(PROPORTIONAL)})
    assert result.shortfalls == []
    assert {k: (e.nominal, e.backed) for k, e in result.claims.items()} == {
        "line:1": (8, 8),
        "line:2": (6, 6),
        "line:3": (2, 2),
    }


def test_proportional_scales_every_guarantee():
    # 16 guaranteed, 14 healthy: 2 short, shared 8:6:2 → exact 1, 0.75, 0.25 → floors 1, 0, 0; the unit left goes
    # to nlp (.75): vision 7, nlp 5, speech 2 = 14
    result = effective_quotas(claims=ORG, capacity={("h100", GPU): 14}, policies={"org": GroupPolicy(PROPORTIONAL)})
    assert {k: e.nominal for k, e in result.claims.items()} == {"line:1": 7, "line:2": 5, "line:3": 2}
    assert {k: e.backed for k, e in result.claims.items()} == {"line:1": 7, "line:2": 5, "line:3": 2}
    (short,) = result.shortfalls
    assert (short.base, short.backed, short.shortfall, short.policy) == (16, 14, 2, PROPORTIONAL)
    assert short.reductions == {"line:1": ("vision", 1), "line:2": ("nlp", 1)}


def test_spare_team_gives_first_then_the_rest_in_proportion():
    policy = {"org": GroupPolicy(SPARE_FIRST, spare_team="speech")}
    # 2 short: speech (2) gives both
    result = effective_quotas(claims=ORG, capacity={("h100", GPU): 14}, policies=policy)
    assert {k: e.nominal for k, e in result.claims.items()} == {"line:1": 8, "line:2": 6, "line:3": 0}
    # 5 short: speech gives its 2, the other 3 split 8:6 → exact 1.71, 1.29 → floors 1, 1; the unit left to vision
    result = effective_quotas(claims=ORG, capacity={("h100", GPU): 11}, policies=policy)
    assert {k: e.nominal for k, e in result.claims.items()} == {"line:1": 6, "line:2": 5, "line:3": 0}


def test_warn_keeps_the_quotas_and_reports_what_is_not_backed():
    result = effective_quotas(claims=ORG, capacity={("h100", GPU): 14}, policies={"org": GroupPolicy(WARN)})
    assert {k: e.nominal for k, e in result.claims.items()} == {"line:1": 8, "line:2": 6, "line:3": 2}
    assert {k: e.backed for k, e in result.claims.items()} == {"line:1": 7, "line:2": 5, "line:3": 2}
    assert result.shortfalls[0].policy == WARN


def test_groups_share_the_shortfall_in_proportion_to_their_guarantees():
    # org guarantees 16, a queue outside any cohort 8 (24 in all) on 21 healthy: 3 short, 16:8 → 2 and 1
    lone = claims(("line:9", "ops", 8), group="queue:ops")
    result = effective_quotas(
        claims=[*ORG, *lone],
        capacity={("h100", GPU): 21},
        policies={"org": GroupPolicy(PROPORTIONAL)},
    )
    by_group = {s.group: s.shortfall for s in result.shortfalls}
    assert by_group == {"org": 2, "queue:ops": 1}
    assert result.claims["line:9"].nominal == 8  # a queue outside any cohort is warned, never cut
    assert result.claims["line:9"].backed == 7


def test_lending_limit_comes_down_with_the_quota():
    org = claims(("line:1", "vision", 8), ("line:2", "nlp", 8), lending={"line:1": 6})
    result = effective_quotas(claims=org, capacity={("h100", GPU): 8}, policies={"org": GroupPolicy(PROPORTIONAL)})
    assert result.claims["line:1"].nominal == 4
    assert result.claims["line:1"].lending_limit == 4


def test_adjustments_compose_before_the_shortfall():
    # a reservation adds 4 to nlp's base (6 → 10): 20 guaranteed on 16 healthy, 4 short split 8:10:2
    # → exact 1.6, 2, 0.4 → floors 1, 2, 0; the unit left to vision (.6): 6, 8, 2
    result = effective_quotas(
        claims=ORG,
        capacity={("h100", GPU): 16},
        policies={"org": GroupPolicy(PROPORTIONAL)},
        adjustments={"line:2": 4},
    )
    assert {k: (e.base, e.nominal) for k, e in result.claims.items()} == {
        "line:1": (8, 6),
        "line:2": (10, 8),
        "line:3": (2, 2),
    }


def test_a_flavor_no_node_reports_is_left_alone():
    result = effective_quotas(claims=ORG, capacity={}, policies={"org": GroupPolicy(PROPORTIONAL)})
    assert {k: e.nominal for k, e in result.claims.items()} == {"line:1": 8, "line:2": 6, "line:3": 2}
    assert result.shortfalls == []
