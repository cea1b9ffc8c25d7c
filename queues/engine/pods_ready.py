"""Kueue's ``waitForPodsReady`` inside the engine: which workloads holding quota have pods not Ready yet, the
timeout that evicts them (``PodsReadyTimeout``), the requeue backoff, deactivation past ``backoffLimitCount``, and
``blockAdmission`` (no admission while an admitted workload is not Ready).

Followed: Kueue's workload controller (``reconcileNotReadyTimeout``, ``triggerDeactivation``,
``workload.UpdateRequeueState``), its scheduler (``waitForPodsReadyIfNeeded``) and cache (``WorkloadsNotReady``:
every workload holding quota without ``PodsReady=True``). The engine never reads a clock: the replay calls
``mark_ready``, ``timeout`` and ``backoff_finished`` at the instants they happen (``simulation.Replay``). Only an
engine whose state has ``wait_for_pods_ready`` tracks anything; without it pods count as Ready once admitted.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from .decisions import WaitReason
from .model import Eviction, WaitForPodsReady
from .queueing import enqueue
from .records import ADMITTED, EVICTING, PENDING, RESERVED, WorkloadInfo

if TYPE_CHECKING:
    from .scheduler import Engine

#: The eviction reason of a workload whose pods were not Ready in time.
TIMEOUT_REASON = "PodsReadyTimeout"
#: Kueue's cause of a deactivation past ``backoffLimitCount`` (``DeactivationTarget`` reason).
DEACTIVATION_CAUSE = "RequeuingLimitExceeded"
#: Its message ("The workload is deactivated due to ...").
LIMIT_TEXT = "exceeding the maximum number of re-queuing retries"
#: Evictions after which the workload's queue time follows ``requeuingStrategy.timestamp`` (``requeue_time``).
EVICTION_REASONS = frozenset({TIMEOUT_REASON, "Deactivated", f"DeactivatedDueTo{DEACTIVATION_CAUSE}"})
#: Kueue's QuotaReserved=False message while ``blockAdmission`` holds a workload back.
BLOCK_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"


def timeout_message(key: str) -> str:
    """Kueue's eviction message: ``Exceeded the PodsReady timeout ns/name``."""
    return f"Exceeded the PodsReady timeout {key}"


def backoff_seconds(config: WaitForPodsReady, count: int) -> float:
    """The backoff before the ``count``-th requeue: base·2^(count-1), capped (Kueue's jitter left out)."""
    return min(config.backoff_base_seconds * 2 ** max(0, count - 1), config.backoff_max_seconds)


def duration_text(seconds: float) -> str:
    """``90s``, ``5m``, ``1h30m`` (whole seconds)."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"


def load(engine: Engine, now: float) -> None:
    """A new engine's workloads: which holding quota are not Ready (their spec's ``pods_ready_after`` counted from
    their admission), and pending ones whose backoff already ended queue again."""
    for wl in engine.live.values():
        if wl.state in (ADMITTED, EVICTING):
            after = wl.spec.pods_ready_after
            start = wl.admitted_at if wl.admitted_at is not None else now
            wl.pods_ready_at = start if after is None else start + after
            if wl.pods_ready_at > now:
                engine.not_ready.add(wl.key)
        elif wl.state == RESERVED:
            engine.not_ready.add(wl.key)


def admitted(engine: Engine, wl: WorkloadInfo, now: float) -> None:
    """``wl`` got quota at ``now`` (reserved: its pods have not started; admitted: they start, Ready after its
    ``pods_ready_after``)."""
    if wl.state == RESERVED:
        engine.not_ready.add(wl.key)
        return
    after = wl.spec.pods_ready_after
    wl.pods_ready_at = now if after is None else now + after
    if wl.pods_ready_at > now:
        engine.not_ready.add(wl.key)
    else:
        engine.not_ready.discard(wl.key)


def ready_at(wl: WorkloadInfo) -> float | None:
    """When the admitted workload's pods are all Ready (None: never, or not tracked)."""
    at = wl.pods_ready_at
    return None if at is None or math.isinf(at) else at


def mark_ready(engine: Engine, key: str, now: float) -> None:
    """Every pod of ``key`` is Ready (PodsReady=True)."""
    wl = engine.workloads.get(key)
    if wl is None or wl.state not in (ADMITTED, EVICTING):
        return
    wl.pods_ready_at = now
    engine.not_ready.discard(key)


def timeout(engine: Engine, key: str, now: float) -> Eviction | None:
    """The PodsReady timeout of ``key`` expired: evict it and set its requeue backoff, or deactivate it when the
    requeue would pass ``backoffLimitCount``. Returns the eviction issued (None: Ready, or not running)."""
    config = engine.pods_ready_config
    wl = engine.workloads.get(key)
    if config is None or wl is None or wl.state != ADMITTED or key not in engine.not_ready or not wl.spec.active:
        return None
    limit = config.backoff_limit_count
    if limit is not None and wl.requeue_count + 1 > limit:
        # Kueue's triggerDeactivation: spec.active=false, then evicted as deactivated; the requeue state is cleared.
        wl.spec = replace(wl.spec, active=False)
        wl.requeue_count, wl.requeue_at = 0, None
        engine._deactivate(wl, now, LIMIT_TEXT)
        return wl.eviction
    wl.requeue_count += 1
    wl.requeue_at = now + backoff_seconds(config, wl.requeue_count)
    wl.state = EVICTING
    engine.evicting.add(key)
    wl.eviction = Eviction(reason=TIMEOUT_REASON, message=timeout_message(key), preemptor=None, issued_at=now)
    return wl.eviction


def requeue_time(engine: Engine, wl: WorkloadInfo, now: float) -> None:
    """The queue time of a workload whose PodsReady-timeout (or deactivation) eviction completed: the eviction's
    time with ``requeuingStrategy.timestamp: Eviction``, else its creation (Kueue's ``GetQueueOrderTimestamp``)."""
    config = engine.pods_ready_config
    eviction = wl.eviction
    by_eviction = config is not None and config.requeuing_timestamp == "Eviction"
    if by_eviction and eviction is not None and eviction.reason == TIMEOUT_REASON:
        wl.ts = eviction.issued_at
        wl.evicted_at = eviction.issued_at
    else:
        wl.ts = wl.created


def backoff_finished(engine: Engine, key: str) -> bool:
    """The requeue backoff of ``key`` ended (Requeued=True, ``BackoffFinished``): it queues again if it can."""
    wl = engine.workloads.get(key)
    if wl is None or wl.requeue_at is None:
        return False
    wl.requeue_at = None
    if wl.state == PENDING and wl.group is None:
        enqueue(engine, wl)
    return wl.group is not None


def blocking(engine: Engine) -> bool:
    """True while ``blockAdmission`` holds every admission back (an admitted workload is not Ready yet)."""
    config = engine.pods_ready_config
    return config is not None and config.block_admission and bool(engine.not_ready)


def hold_reason(engine: Engine, wl: WorkloadInfo) -> WaitReason | None:
    """Why a pending workload waits out a requeue backoff (None: it does not)."""
    config = engine.pods_ready_config
    if wl.state != PENDING or wl.requeue_at is None or config is None:
        return None
    limit = config.backoff_limit_count
    count = f"requeue {wl.requeue_count}" + (f" of at most {limit}" if limit is not None else "")
    wait = max(0.0, wl.requeue_at - engine.now)
    return WaitReason(
        code="awaiting_provisioning",
        message=(
            f"This job's pods did not all become Ready within the {duration_text(config.timeout)} PodsReady timeout, "
            f"so Kueue stopped it; it queues again after a backoff, in {duration_text(wait)} ({count})."
        ),
        kueue_message=timeout_message(wl.key),
        kueue_reason=TIMEOUT_REASON,
        details={
            "requeueCount": wl.requeue_count,
            "requeueAt": wl.requeue_at,
            "backoffSeconds": backoff_seconds(config, wl.requeue_count),
            "timeoutSeconds": config.timeout,
        },
    )


def block_reason(engine: Engine, wl: WorkloadInfo) -> WaitReason | None:
    """Why a workload that fits waits under ``blockAdmission`` (None: admission is not blocked)."""
    if not blocking(engine):
        return None
    starting = sorted(engine.not_ready)
    shown = ", ".join(starting[:3]) + (f" and {len(starting) - 3} more" if len(starting) > 3 else "")
    return WaitReason(
        code="higher_priority_ahead",
        message=(
            "This job fits, but Kueue admits nothing more until every admitted job's pods are Ready "
            f"(waitForPodsReady.blockAdmission); still starting: {shown}."
        ),
        kueue_message=BLOCK_MESSAGE,
        kueue_reason="WaitingForPodsReady",
        details={"notReady": starting, "clusterQueue": wl.cq or ""},
    )


__all__ = [
    "BLOCK_MESSAGE",
    "DEACTIVATION_CAUSE",
    "EVICTION_REASONS",
    "LIMIT_TEXT",
    "TIMEOUT_REASON",
    "admitted",
    "backoff_finished",
    "backoff_seconds",
    "block_reason",
    "blocking",
    "hold_reason",
    "load",
    "mark_ready",
    "ready_at",
    "requeue_time",
    "timeout",
    "timeout_message",
]
