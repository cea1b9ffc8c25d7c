"""A scenario's reservations: ``sim.portal/v1`` ``Reservation`` documents, as the portal's reservations reach Kueue.

::

    apiVersion: sim.portal/v1
    kind: Reservation
    metadata: {name: speech-eval}
    spec:
      clusterQueue: speech        # the queue it is for (a ClusterQueue of the scenario, in a cohort)
      flavor: h100                # a ResourceFlavor of the scenario
      resource: nvidia.com/gpu
      count: 8
      start: 1h                   # an offset from the scenario's start, or an RFC 3339 time (may be before it)
      end: 3h
      holder: Speech              # optional: who it is for, in the wait reasons' sentences

While in force the queue's guaranteed quota of that flavor and resource rises by the count and the rest of its cohort
tree's falls by as much (``queues.engine.reservations``); the replay rebuilds the engine at each edge. The document's
``reservations`` section lists the holds and, at the start and at each edge the run reached, the quota of every
queue and cohort in the reserved flavors (``report.reservations_section``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from queues.engine.durations import parse_duration
from queues.engine.model import ClusterQueue, QuotaHold

from .manifest import Manifest, parse_timestamp

RESERVATION_KIND = "Reservation"
RESERVATION_VERSION = "sim.portal/v1"
SPEC_FIELDS = frozenset({"clusterQueue", "flavor", "resource", "count", "start", "end", "holder"})


def offset_text(seconds: float) -> str:
    """A duration as the scenario files write it: ``2h``, ``1h30m``, ``90s`` → ``1m30s``, ``0s``."""
    total = round(seconds)
    sign = "-" if total < 0 else ""
    total = abs(total)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return sign + ("".join(parts) or "0s")


def _time(obj: Manifest, path: str, start: float) -> float:
    raw = obj.get(path, required=True)
    text = str(raw)
    try:
        if isinstance(raw, str) and "T" in text and ":" in text:
            return parse_timestamp(text)
        return start + parse_duration(raw)
    except ValueError as exc:
        raise obj.fail(path, str(exc)) from None


def parse_reservations(
    objs: Iterable[Manifest], *, start: float, cluster_queues: Iterable[ClusterQueue], flavors: Iterable[str]
) -> tuple[QuotaHold, ...]:
    """The Reservation documents as holds (ScenarioError naming the Reservation and the field on bad input)."""
    queues = {cq.name: cq for cq in cluster_queues}
    flavor_names = set(flavors)
    holds = []
    seen: set[str] = set()
    for obj in objs:
        api = str(obj.raw.get("apiVersion", ""))
        if api != RESERVATION_VERSION:
            raise obj.fail("apiVersion", f"expected {RESERVATION_VERSION}, got {api!r}")
        if not obj.name:
            raise obj.fail("metadata.name", "required field is missing")
        if obj.name in seen:
            raise obj.fail("metadata.name", "duplicate object")
        seen.add(obj.name)
        spec = obj.get("spec", required=True, types=(Mapping,))
        unknown = sorted(set(spec) - SPEC_FIELDS)
        if unknown:
            raise obj.fail(f"spec.{unknown[0]}", f"unknown field (known: {', '.join(sorted(SPEC_FIELDS))})")
        queue = str(obj.get("spec.clusterQueue", required=True, types=(str,)))
        if queue not in queues:
            raise obj.fail("spec.clusterQueue", f"no ClusterQueue {queue!r} in the scenario")
        if queues[queue].cohort is None:
            raise obj.fail("spec.clusterQueue", f"ClusterQueue {queue} is in no cohort: no quota can move to it")
        flavor = str(obj.get("spec.flavor", required=True, types=(str,)))
        if flavor not in flavor_names:
            raise obj.fail("spec.flavor", f"no ResourceFlavor {flavor!r} in the scenario")
        resource = str(obj.get("spec.resource", required=True, types=(str,)))
        offered = {(fq.name, rq.name) for g in queues[queue].resource_groups for fq in g.flavors for rq in fq.resources}
        if (flavor, resource) not in offered:
            raise obj.fail("spec.resource", f"ClusterQueue {queue} has no quota of {flavor}/{resource}")
        count = obj.quantity("spec.count", obj.get("spec.count", required=True, types=(int, str)), resource)
        if count <= 0:
            raise obj.fail("spec.count", "must be more than 0")
        begin = _time(obj, "spec.start", start)
        end = _time(obj, "spec.end", start)
        if end <= begin:
            raise obj.fail("spec.end", "must be after spec.start")
        holder = str(obj.get("spec.holder", "", types=(str,)))
        holds.append(
            QuotaHold(
                name=obj.name,
                cluster_queue=queue,
                flavor=flavor,
                resource=resource,
                count=count,
                start=begin,
                end=end,
                holder=holder,
                until=f"t={offset_text(end - start)}",
            )
        )
    return tuple(sorted(holds, key=lambda h: (h.start, h.name)))


def describe(hold: QuotaHold, start: float) -> dict[str, Any]:
    """A hold as the document lists it (times in seconds from the start)."""
    return {
        "name": hold.name,
        "clusterQueue": hold.cluster_queue,
        "holder": hold.holder or hold.cluster_queue,
        "flavor": hold.flavor,
        "resource": hold.resource,
        "count": hold.count,
        "start": round(hold.start - start, 3),
        "end": round(hold.end - start, 3),
    }


__all__ = ["RESERVATION_KIND", "RESERVATION_VERSION", "describe", "offset_text", "parse_reservations"]
