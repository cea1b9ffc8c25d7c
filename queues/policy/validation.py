"""Rules a queue policy must follow before it is saved; each message names the line, the value and the limit.

Errors are what Kueue would reject or what cannot work (a lending limit above nominal, limits on a queue
outside any cohort, a flavor listed twice, a resource split over two resource groups, a cohort cycle);
warnings are what can be saved but deserves a second look (quota on a flavor no node carries).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kernel.quantity import parse_quantity
from pools.models import Cluster, Node, ResourceFlavor
from queues.models import Cohort, Team, TeamQuota


@dataclass(frozen=True)
class LineSpec:
    """One proposed quota line: (flavor, resource) with nominal, borrowing and lending limits as typed."""

    flavor: ResourceFlavor
    resource_name: str
    nominal: str
    borrowing_limit: str = ""
    lending_limit: str = ""

    @property
    def label(self) -> str:
        """How messages name the line."""
        return f"{self.flavor.name} / {self.resource_name}"


@dataclass
class PolicyCheck:
    """Errors (the change cannot be saved) and warnings (it can, but the admin should know)."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No errors."""
        return not self.errors


def _quantity(line: LineSpec, what: str, value: str, check: PolicyCheck) -> int | None:
    """Parse one quantity of a line, recording an error naming the line and field when it is not valid."""
    try:
        return parse_quantity(value, line.resource_name)
    except ValueError as exc:
        check.errors.append(f"{line.label}: {what}: {exc}")
        return None


def quota_lines_check(
    *, lines: Iterable[LineSpec], in_cohort: bool, owner: str, cluster: Cluster | None = None
) -> PolicyCheck:
    """Check the quota lines of a ClusterQueue (``owner`` "queue") or a cohort (``owner`` "cohort").

    ``in_cohort``: the queue has a cohort (for a cohort: it has a parent); without one there is nobody to
    borrow from or lend to, and Kueue rejects borrowing and lending limits. ``cluster``: where the
    queue's nodes live (None: any cluster, for cohorts).
    """
    check = PolicyCheck()
    lines = list(lines)
    seen: dict[tuple[int, str], int] = {}
    resources_of: dict[str, set[str]] = defaultdict(set)
    flavors: dict[str, ResourceFlavor] = {}
    for line in lines:
        key = (line.flavor.pk, line.resource_name)
        seen[key] = seen.get(key, 0) + 1
        resources_of[line.flavor.name].add(line.resource_name)
        flavors[line.flavor.name] = line.flavor
        nominal = _quantity(line, "nominal quota", line.nominal, check)
        if line.borrowing_limit:
            _quantity(line, "borrowing limit", line.borrowing_limit, check)
        lending = _quantity(line, "lending limit", line.lending_limit, check) if line.lending_limit else None
        if not in_cohort:
            where = "the queue is in no cohort" if owner == "queue" else "the cohort has no parent"
            if line.borrowing_limit:
                check.errors.append(
                    f"{line.label}: borrowing limit {line.borrowing_limit} has nobody to borrow from: {where}. "
                    "Put it in a cohort, or clear the limit."
                )
            if line.lending_limit:
                check.errors.append(
                    f"{line.label}: lending limit {line.lending_limit} has nobody to lend to: {where}. "
                    "Put it in a cohort, or clear the limit."
                )
        if nominal is not None and lending is not None and lending > nominal:
            check.errors.append(
                f"{line.label}: lending limit {line.lending_limit} is above the nominal quota {line.nominal}; "
                "a queue can lend at most the quota it owns."
            )
    for (flavor_pk, resource), n in seen.items():
        if n > 1:
            name = next(ln.flavor.name for ln in lines if ln.flavor.pk == flavor_pk)
            check.errors.append(
                f"{name} / {resource}: the flavor is listed {n} times for this resource; give each "
                "(flavor, resource) one line."
            )
    groups: dict[str, set[frozenset[str]]] = defaultdict(set)
    for resources in resources_of.values():
        for resource in resources:
            groups[resource].add(frozenset(resources))
    for resource, sets in sorted(groups.items()):
        if len(sets) > 1:
            shown = " vs ".join("{" + ", ".join(sorted(s)) + "}" for s in sorted(sets, key=sorted))
            check.errors.append(
                f"{resource}: flavors quote different resource sets ({shown}); Kueue needs every flavor of a "
                "resource group to cover the same resources: add the missing lines (nominal 0 is fine)."
            )
    for name, flavor in sorted(flavors.items()):
        nodes = Node.objects.filter(flavor=flavor, gone_at__isnull=True)
        if cluster is not None:
            nodes = nodes.filter(cluster=cluster)
        if not nodes.exists():
            where = f"in cluster {cluster.name}" if cluster is not None else "in any cluster"
            check.warnings.append(
                f"{name}: no node of this flavor {where} (labels {flavor.node_labels or {}}); "
                "its quota cannot be used until such nodes join."
            )
    return check


def cohort_parent_check(*, cohort: Cohort | None, name: str, parent: Cohort | None) -> PolicyCheck:
    """A cohort's parent must not lead back to the cohort itself (Kueue stops a cohort tree with a cycle)."""
    check = PolicyCheck()
    if parent is None:
        return check
    path = [name]
    seen: set[int] = set()
    node: Cohort | None = parent
    while node is not None:
        path.append(node.name)
        if (cohort is not None and cohort.pk is not None and node.pk == cohort.pk) or node.name == name:
            check.errors.append(f"parent: cohort cycle {' → '.join(path)}; a cohort cannot be its own ancestor.")
            return check
        if node.pk in seen:
            break
        seen.add(node.pk)
        node = node.parent
    return check


def cohort_shortfall_check(
    *, cohort: Cohort | None, parent: Cohort | None, policy: str, spare_team: Team | None
) -> PolicyCheck:
    """A shortfall policy is set on a root cohort; "spare team first" names a team whose queue is in the cohort's tree;
    a spare team is named only for that policy. Errors name the field (``shortfall_policy`` / ``spare_team``)."""
    check = PolicyCheck()
    warn = Cohort.ShortfallPolicy.WARN
    if parent is not None and policy != warn:
        root = parent
        seen: set[int] = set()
        while root.parent is not None and root.pk not in seen:
            seen.add(root.pk)
            root = root.parent
        check.errors.append(
            f"shortfall_policy: set it on the root cohort {root.name}: a nested cohort's teams follow their root's "
            "policy (the shortfall is shared over the whole tree)."
        )
    if policy == Cohort.ShortfallPolicy.SPARE_FIRST and spare_team is None:
        check.errors.append("spare_team: name the team whose guaranteed quota gives up units first.")
    if spare_team is not None and policy != Cohort.ShortfallPolicy.SPARE_FIRST:
        check.errors.append("spare_team: a spare team is used only with the policy 'spare team first'; clear it.")
    if spare_team is not None and cohort is not None and cohort.pk is not None:
        tree = _cohort_tree_ids(cohort)
        if not TeamQuota.objects.filter(team=spare_team, cohort_id__in=tree).exists():
            check.errors.append(
                f"spare_team: team {spare_team.slug} has no queue in cohort {cohort.name} or below it: it has no "
                "guaranteed quota there to give."
            )
    return check


def _cohort_tree_ids(cohort: Cohort) -> set[int]:
    """The cohort and every cohort below it."""
    ids = {cohort.pk}
    frontier = [cohort.pk]
    while frontier:
        frontier = list(Cohort.objects.filter(parent_id__in=frontier).exclude(pk__in=ids).values_list("pk", flat=True))
        ids.update(frontier)
    return ids
