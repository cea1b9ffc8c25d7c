"""Wait reasons that say when a wait is due to a guarantee repairs left unbacked.

A pending job of a team whose guaranteed quota on the job's class is not fully backed now gets one more sentence
(and ``details.quotaReducedByRepair``): under a policy that reduces quotas, when it waits for quota; under warn-only,
when it waits for capacity (the quota stayed, the devices behind it did not). Same sentence on both backends: the
simulated cluster's tick stores it with the reason; the job page and the API add it to Kueue's stored reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queues.guarantees.compute import WARN
from queues.guarantees.selectors import ClusterGuarantees
from queues.selectors import unit_noun

#: Codes of a wait for quota (the quota in force is what a reducing policy lowered).
QUOTA_CODES = frozenset({"quota_exhausted", "borrow_limit", "quota_lent_out"})
#: Codes of a wait for devices (what a warn-only policy leaves unbacked).
CAPACITY_CODES = frozenset({"class_exhausted", "health_blocked", "topology_fragmented"})
DETAIL = "quotaReducedByRepair"

POLICY_WORDS = {
    "spare_first": "the spare team gives first",
    "proportional": "every team's guarantee is scaled in proportion",
    WARN: "warn only: no quota is changed",
}


@dataclass(frozen=True)
class LineBacking:
    """A team's guarantee on one (flavor, resource) that is not fully backed now."""

    flavor_id: int
    flavor_label: str
    resource: str
    guaranteed: int
    applied: int
    backed: int
    policy: str
    out: int


def backing_index(guarantees: ClusterGuarantees) -> dict[tuple[int, int, str], LineBacking]:
    """(team id, flavor id, resource) → its guarantee, of every team line not fully backed now."""
    policies = {(s.flavor, s.resource, key): s.policy for s in guarantees.result.shortfalls for key in s.reductions}
    out: dict[tuple[int, int, str], LineBacking] = {}
    for key, line in guarantees.lines.items():
        eff = guarantees.result.claims[key]
        quota = guarantees.quotas.get(line.team_quota_id) if line.team_quota_id else None
        if quota is None or eff.backed >= eff.base:
            continue
        fr = (line.flavor.name, line.resource_name)
        out[(quota.team_id, line.flavor_id, line.resource_name)] = LineBacking(
            flavor_id=line.flavor_id,
            flavor_label=line.flavor.label,
            resource=line.resource_name,
            guaranteed=eff.base,
            applied=eff.nominal,
            backed=eff.backed,
            policy=policies.get((*fr, key), WARN),
            out=sum(guarantees.out_by_state.get(fr, {}).values()),
        )
    return out


def repair_note(
    *,
    code: str,
    details: Mapping,
    team_id: int,
    flavor_ids: Iterable[int],
    resource: str,
    index: Mapping[tuple[int, int, str], LineBacking],
) -> tuple[str, dict] | None:
    """The sentence and detail a wait of ``code`` gets when repairs left the team's guarantee on the class's flavors
    unbacked (None: they did not, the wait is not about it, or the reason says so already)."""
    if DETAIL in details:
        return None
    for flavor_id in flavor_ids:
        b = index.get((team_id, flavor_id, resource))
        if b is None:
            continue
        out = f"{unit_noun(resource, b.out)} of {b.flavor_label} are out for repair" if b.out else "devices are out"
        if b.applied < b.guaranteed and code in QUOTA_CODES:
            text = (
                f"Your team's guaranteed quota of {unit_noun(resource, b.guaranteed)} of {b.flavor_label} is reduced "
                f"to {b.applied} while {out} ({POLICY_WORDS.get(b.policy, b.policy)}): the wait is due to quota "
                "reduced by repairs; the guarantee is restored when they return from validation."
            )
        elif b.applied == b.guaranteed and code in CAPACITY_CODES:
            text = (
                f"Your team is guaranteed {unit_noun(resource, b.guaranteed)} of {b.flavor_label}, but only "
                f"{b.backed} of them are backed by healthy devices while {out} ({POLICY_WORDS[WARN]}): the wait is "
                "due to the repairs, not to your team's use."
            )
        else:
            continue
        detail = {
            "flavor": b.flavor_label,
            "resource": resource,
            "guaranteed": b.guaranteed,
            "applied": b.applied,
            "backed": b.backed,
            "policy": b.policy,
            "inRepair": b.out,
        }
        return text, detail
    return None


def with_repair_note(
    *, code: str, message: str, details: Mapping, team_id: int, flavor_ids: Iterable[int], resource: str, index
) -> tuple[str, dict]:
    """``message`` and ``details`` with the repair note added where it applies (unchanged otherwise)."""
    note = repair_note(
        code=code, details=details, team_id=team_id, flavor_ids=flavor_ids, resource=resource, index=index
    )
    if note is None:
        return message, dict(details)
    return f"{message} {note[0]}", {**details, DETAIL: note[1]}
