"""What the evaluations of one sync batch share: the pool view, quota use, health-excluded nodes and lookups,
each computed once, lazily. :func:`clusters.kube_sync.evaluate.evaluate_job` reads it for every job of the batch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from django.db.models import Count, Q

from clusters.models import KubeConfigObject, KubeJobState
from kernel.quantity import parse_quantity
from pools.health.selectors import health_excluded_nodes
from pools.models import USABLE_HEALTH, Allocation, Cluster, Device, Node, ResourceFlavor
from pools.selectors import SHARING_KIND
from queues import kueue_messages as km
from queues import services as job_services
from queues.engine.reservations import CLUSTER_QUEUE
from queues.guarantees.selectors import applied_lines, cluster_guarantees
from queues.models import Job, QuotaLine, TeamQuota
from queues.reservations.overrides import cluster_quota_overrides


@dataclass
class QuotaUse:
    """Per (ClusterQueue, flavor, resource): nominal, borrowing limit, used; and the ClusterQueue's cohort."""

    nominal: dict[tuple[str, str, str], int] = field(default_factory=dict)
    borrowing: dict[tuple[str, str, str], int | None] = field(default_factory=dict)
    used: dict[tuple[str, str, str], int] = field(default_factory=dict)
    cohort_of: dict[str, str] = field(default_factory=dict)
    reclaim_of: dict[str, str] = field(default_factory=dict)


class EvalContext:
    """What evaluations in one sync batch share: the pool view, quota use, lookups; computed once, lazily."""

    def __init__(self, cluster: Cluster, *, now: datetime) -> None:
        self.cluster = cluster
        self.now = now
        self._pool: dict[tuple[str, str], dict[tuple[str, str], km.PoolFigures]] = {}
        self._health_nodes: dict[tuple[str, str], dict[tuple[str, str], tuple[km.HealthNode, ...]]] = {}
        #: Devices a team holds per (team, flavor, resource), counted once and kept up to date by admissions
        #: made through this context; any other transition (a release) drops the counts.
        self.held: dict[tuple[int, str, str], int] = {}
        #: Where wait reasons of a closed-set code go when the caller writes them in bulk (None: one by one).
        self.waits: job_services.WaitReasonBatch | None = None
        #: Nodes by name and their free usable devices per (resource, kind), read for a chunk at once by
        #: :meth:`prefetch`; an admission takes its devices out of these lists, a release drops them.
        self._nodes: dict[str, Node | None] = {}
        self._free: dict[tuple[str, str], dict[int, list[Device]]] = {}

    def forget(self) -> None:
        """Drop what was read from the database (a rolled-back evaluation may have changed it); flavors stay."""
        self._pool.clear()
        self._health_nodes.clear()
        self.held.clear()
        self._nodes.clear()
        self._free.clear()
        for name in ("quota_use", "_quota_figures", "_team_quota"):
            self.__dict__.pop(name, None)

    @cached_property
    def flavors(self) -> dict[str, ResourceFlavor]:
        """Flavors by name."""
        return {f.name: f for f in ResourceFlavor.objects.select_related("topology")}

    @cached_property
    def topology_flavors(self) -> dict[str, list[str]]:
        """Topology name → flavors that use it."""
        out: dict[str, list[str]] = defaultdict(list)
        for f in self.flavors.values():
            if f.topology is not None:
                out[f.topology.name].append(f.name)
        return dict(out)

    @cached_property
    def quota_use(self) -> QuotaUse:
        """Quota and use per ClusterQueue of the cluster: the quota in force (a guarantee less its part of a shortfall
        of healthy capacity, and moved by the reservations in force, as pushed to Kueue: queues.guarantees,
        queues.reservations), Kueue's own reservation figures where synced."""
        use = QuotaUse()
        quotas: dict[int | None, TeamQuota] = {
            q.pk: q for q in TeamQuota.objects.filter(cluster=self.cluster).select_related("team", "cohort")
        }
        for q in quotas.values():
            use.reclaim_of[q.cluster_queue_name] = q.reclaim_within_cohort
            if q.cohort is not None:
                use.cohort_of[q.cluster_queue_name] = self._root(q.cohort)
        team_lines = list(QuotaLine.objects.filter(team_quota__in=quotas).select_related("flavor"))
        guarantees = cluster_guarantees(self.cluster, quotas=[q for q in quotas.values() if q is not None])
        for line in applied_lines(team_lines, guarantees):
            key = (quotas[line.team_quota_id].cluster_queue_name, line.flavor.name, line.resource_name)
            try:
                use.nominal[key] = parse_quantity(line.nominal, line.resource_name)
                use.borrowing[key] = (
                    parse_quantity(line.borrowing_limit, line.resource_name) if line.borrowing_limit else None
                )
            except ValueError:
                continue
        # A reservation's window in force moves quota between the cohort's queues (as pushed to Kueue at its edges):
        # the reasons read the quota Kueue has, not the one configured (queues.reservations.overrides).
        for (kind, name, flavor, resource), (nominal, _lending) in cluster_quota_overrides(
            cluster=self.cluster, at=self.now
        ).lines.items():
            if kind == CLUSTER_QUEUE and (name, flavor, resource) in use.nominal:
                use.nominal[(name, flavor, resource)] = nominal
        live = KubeConfigObject.objects.filter(cluster=self.cluster, kind="ClusterQueue").values_list(
            "name", "live_status"
        )
        for name, status in live:
            for flavor in (status or {}).get("flavorsReservation") or []:
                for res in flavor.get("resources") or []:
                    try:
                        use.used[(name, flavor["name"], res["name"])] = parse_quantity(res.get("total", 0), res["name"])
                    except (ValueError, KeyError):
                        continue
        if not use.used:  # no ClusterQueue status synced: count the devices the portal's allocations hold
            rows = (
                Allocation.objects.filter(job__cluster=self.cluster, ended_at__isnull=True)
                .values("job__team_id", "device__node__flavor__name", "device__resource_name")
                .annotate(n=Count("id"))
            )
            cq_of_team = {q.team_id: q.cluster_queue_name for q in quotas.values()}
            for row in rows:
                cq = cq_of_team.get(row["job__team_id"])
                if cq and row["device__node__flavor__name"]:
                    key = (cq, row["device__node__flavor__name"], row["device__resource_name"])
                    use.used[key] = use.used.get(key, 0) + row["n"]
        return use

    @staticmethod
    def _root(cohort) -> str:
        seen = set()
        while cohort.parent_id and cohort.pk not in seen:
            seen.add(cohort.pk)
            cohort = cohort.parent
        return cohort.name

    def quota_figures(self) -> dict[tuple[str, str, str], km.QuotaFigures]:
        """Figures per (ClusterQueue, flavor, resource), with cohort totals."""
        use = self.quota_use
        cohort_cap: dict[tuple[str, str, str], int] = defaultdict(int)
        cohort_used: dict[tuple[str, str, str], int] = defaultdict(int)
        for (cq, flavor, res), nominal in use.nominal.items():
            root = use.cohort_of.get(cq)
            if root:
                cohort_cap[(root, flavor, res)] += nominal
                cohort_used[(root, flavor, res)] += use.used.get((cq, flavor, res), 0)
        out = {}
        for key, nominal in use.nominal.items():
            cq, flavor, res = key
            root = use.cohort_of.get(cq)
            out[key] = km.QuotaFigures(
                nominal=nominal,
                used=use.used.get(key, 0),
                borrowing_limit=use.borrowing.get(key),
                in_cohort=bool(root),
                cohort_capacity=cohort_cap.get((root, flavor, res)) if root else None,
                cohort_used=cohort_used.get((root, flavor, res)) if root else None,
                cohort=root or "",
                reclaim=use.reclaim_of.get(cq, ""),
            )
        return out

    @cached_property
    def _quota_figures(self) -> dict[tuple[str, str, str], km.QuotaFigures]:
        return self.quota_figures()

    def pool(self, resource: str, kind: str) -> dict[tuple[str, str], km.PoolFigures]:
        """Present, free and health-excluded units of a resource per flavor, in two aggregate queries."""
        key = (resource, kind)
        if key not in self._pool:
            units = Device.objects.filter(
                node__cluster=self.cluster,
                node__gone_at__isnull=True,
                gone_at__isnull=True,
                resource_name=resource,
                kind=kind,
            ).exclude(node__flavor__isnull=True)
            healthy = Q(health__in=USABLE_HEALTH, node__ready=True, node__unschedulable=False)
            held = Allocation.objects.filter(ended_at__isnull=True).values("device_id")
            free_q = healthy & ~Q(pk__in=held)
            per_node = (
                units.filter(free_q)
                .values("node__flavor__name", "node_id")
                .annotate(n=Count("id", distinct=True))
                .order_by()
            )
            free: dict[str, int] = defaultdict(int)
            best: dict[str, int] = defaultdict(int)
            for row in per_node:
                free[row["node__flavor__name"]] += row["n"]
                best[row["node__flavor__name"]] = max(best[row["node__flavor__name"]], row["n"])
            totals = (
                units.values("node__flavor__name")
                .annotate(total=Count("id", distinct=True), excluded=Count("id", filter=~healthy, distinct=True))
                .order_by()
            )
            self._pool[key] = {
                (row["node__flavor__name"], resource): km.PoolFigures(
                    total=row["total"],
                    free=free.get(row["node__flavor__name"], 0),
                    health_excluded=row["excluded"],
                    max_free_per_node=best.get(row["node__flavor__name"], 0),
                )
                for row in totals
            }
        return self._pool[key]

    def health_nodes(self, resource: str, kind: str) -> dict[tuple[str, str], tuple[km.HealthNode, ...]]:
        """Per (flavor, resource): the nodes with units out for health and why (pools' health selector)."""
        key = (resource, kind)
        if key not in self._health_nodes:
            out: dict[tuple[str, str], list[km.HealthNode]] = defaultdict(list)
            for row in health_excluded_nodes(cluster=self.cluster, resource=resource, kind=kind):
                out[(row.flavor, row.resource)].append(km.HealthNode(node=row.node, units=row.units, causes=row.causes))
            self._health_nodes[key] = {k: tuple(v) for k, v in out.items()}
        return self._health_nodes[key]

    def message_context(self, job: Job) -> km.MessageContext:
        """The translation context of one job: its queue, its class's flavors and its request."""
        rc = job.resource_class
        quota = self._team_quota.get(job.team_id)
        per_pod = {rc.resource_name: job.devices_per_pod}
        try:
            per_pod["cpu"] = parse_quantity(rc.cpu_per_device, "cpu") * job.devices_per_pod
            per_pod["memory"] = parse_quantity(rc.memory_per_device, "memory") * job.devices_per_pod
        except ValueError:
            pass
        return km.MessageContext(
            cluster_queue=quota.cluster_queue_name if quota else "",
            quotas=self._quota_figures,
            pool=self.pool(rc.resource_name, SHARING_KIND[rc.sharing]),
            health_nodes=self.health_nodes(rc.resource_name, SHARING_KIND[rc.sharing]),
            flavor_labels={n: f.label for n, f in self.flavors.items()},
            topology_flavors=self.topology_flavors,
            class_flavors=tuple(link.flavor.name for link in rc.flavor_links.all()),
            request={k: v * job.pod_count for k, v in per_pod.items()},
            per_pod=per_pod,
        )

    @cached_property
    def _team_quota(self) -> dict[int, TeamQuota]:
        return {q.team_id: q for q in TeamQuota.objects.filter(cluster=self.cluster)}

    def prefetch(self, jobs: list[Job], states: dict[int, KubeJobState]) -> None:
        """Read at once what a chunk's evaluations look up per job: the nodes its pods are on and, for pending
        jobs with pods on nodes (about to be admitted), the free devices there. Replaces the previous chunk's."""
        self._nodes.clear()
        self._free.clear()
        names: set[str] = set()
        admitting: dict[tuple[str, str], set[str]] = defaultdict(set)
        for job in jobs:
            st = states.get(job.pk)
            on = {p["node"] for p in ((st.pods if st else None) or {}).values() if p.get("node")}
            names |= on
            if on and job.state == Job.State.PENDING:
                rc = job.resource_class
                admitting[(rc.resource_name, SHARING_KIND[rc.sharing])] |= on
        self.nodes(names)
        for (resource, kind), on in admitting.items():
            self.free_devices([n for n in on if self._nodes.get(n) is not None], resource, kind)

    def nodes(self, names: set[str]) -> dict[str, Node]:
        """This cluster's nodes by name (gone ones included; names it never had left out)."""
        missing = [n for n in names if n not in self._nodes]
        if missing:
            rows = Node.objects.filter(cluster=self.cluster, name__in=missing).only("pk", "name", "gone_at")
            found = {n.name: n for n in rows}
            for name in missing:
                self._nodes[name] = found.get(name)
        return {n: node for n in names if (node := self._nodes[n]) is not None}

    def gone_nodes(self, names: set[str]) -> set[str]:
        """Which of these node names the inventory knows as gone from the cluster."""
        return {name for name, node in self.nodes(names).items() if node.gone_at is not None}

    def free_devices(self, names: list[str], resource: str, kind: str) -> dict[str, list[Device]]:
        """Free usable devices of a resource on these (present) nodes, by node name, healthy first; the lists
        are shared: take devices out of them when they are allocated."""
        nodes = {name: node for name, node in self.nodes(set(names)).items() if node.gone_at is None}
        free = self._free.setdefault((resource, kind), {})
        missing = [node.pk for node in nodes.values() if node.pk not in free]
        if missing:
            found = job_services.usable_free_devices(node_ids=missing, resource_name=resource, kind=kind)
            for pk in missing:
                free[pk] = found.get(pk, [])
        return {name: free[node.pk] for name, node in nodes.items()}

    def released(self) -> None:
        """Devices or quota were given back: counts and free lists are read again when next needed."""
        self.held.clear()
        self._free.clear()

    def job_by_uid(self, uid: str) -> Job | None:
        """The portal job whose batch Job has this uid (a preemptor named in Kueue's message)."""
        if not uid:
            return None
        return Job.objects.filter(k8s_uid=uid).select_related("team").first()

    def nominal(self, job: Job, flavor: str, resource: str) -> int | None:
        """The team's nominal quota of a flavor/resource in this cluster."""
        quota = self._team_quota.get(job.team_id)
        if quota is None:
            return None
        return self.quota_use.nominal.get((quota.cluster_queue_name, flavor, resource))
