"""Health ingestion: dcgm-exporter scrapes, explicit XID / reset events, and what the inventory import recorded.

Sources: scrapes (``health_ingest_scrape``), event records or NVRM kernel-log lines (``health_ingest_events``,
``health_ingest_text``), and — without parsing Node objects again — what the inventory import stored: node
conditions, node taints and allocatable below capacity (read by pools.health.nodes), DRA device taints
(``health_reconcile``). Each maps inputs to cards (UUID, else node + GPU index, else node + PCI address), updates
their signals and settles their state through pools.health.services.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from django.db import transaction

from pools.gpu_usage import activity_percent, utilisation_prune, utilisation_record
from pools.health import policy as pol
from pools.health import tickets
from pools.health.catalog import XidEvent
from pools.health.dcgm import GpuSample, ScrapeError, parse_scrape
from pools.health.events import EventError, EventRecord, load_event_text, looks_like_exposition, normalise_pci
from pools.health.nodes import health_nodes_reconcile
from pools.health.services import (
    Actor,
    DeviceSeen,
    HealthInputError,
    IngestReport,
    Source,
    active_policy,
    aware_now,
    card_of,
    lock_cards,
    observation_record,
    record_xid,
    refresh_event_signals,
    save_signal,
    signals_of,
    state_of,
)
from pools.health.settle import settle_card
from pools.models import Cluster, Device, HealthLevel, HealthSignal

EVENT_SIGNALS = ("xid", "resets")


# --- mapping inputs to devices ---------------------------------------------------------------------------


class DeviceResolver:
    """Finds the card a series or event is about: by UUID, else by (node, GPU index), else by (node, PCI address)."""

    def __init__(self, *, cluster: Cluster | None = None, node_map: Mapping[str, str] | None = None) -> None:
        self.node_map = dict(node_map or {})
        qs = Device.objects.filter(gone_at__isnull=True, node__gone_at__isnull=True).select_related(
            "node", "node__cluster", "parent"
        )
        if cluster is not None:
            qs = qs.filter(node__cluster=cluster)
        self.by_uuid: dict[str, Device] = {}
        self.by_index: dict[tuple[str, int], list[Device]] = {}
        self.cards_by_node: dict[str, list[Device]] = {}
        self.node_names: set[str] = set()
        cards: dict[int, Device] = {}
        for device in qs:
            self.node_names.add(device.node.name)
            if device.uuid:
                self.by_uuid[device.uuid] = device
            if device.parent_id is None:
                cards[device.pk] = device
                self.cards_by_node.setdefault(device.node.name, []).append(device)
                if device.index is not None:
                    self.by_index.setdefault((device.node.name, device.index), []).append(device)
        self.by_pci: dict[tuple[str, str], Device] = {}
        for device_id, data in HealthSignal.objects.filter(signal="identity", device_id__in=list(cards)).values_list(
            "device_id", "data"
        ):
            if data.get("pci"):
                card = cards[device_id]
                self.by_pci[(card.node.name, data["pci"])] = card
        for card in cards.values():
            pci = normalise_pci(str((card.attributes or {}).get("resource.kubernetes.io/pciBusID", "")))
            if pci:
                self.by_pci.setdefault((card.node.name, pci), card)

    def node_name(self, host: str) -> str:
        """The node a host label or event names, through the node map."""
        return self.node_map.get(host, host)

    def resolve(self, *, uuid: str = "", host: str = "", gpu: int | None = None, pci: str = "") -> Device | None:
        """The card meant, or None (unknown, or ambiguous across clusters)."""
        if uuid and uuid in self.by_uuid:
            return card_of(self.by_uuid[uuid])
        node = self.node_name(host) if host else ""
        if node and gpu is not None:
            found = self.by_index.get((node, gpu), [])
            if len(found) == 1:
                return found[0]
        if node and pci:
            return self.by_pci.get((node, normalise_pci(pci)))
        return None


# --- DCGM scrapes --------------------------------------------------------------------------------------------


def _ingest_sample(
    card: Device, sample: GpuSample, *, rules: pol.Rules, now: datetime, actor: Actor, report: IngestReport
) -> None:
    rows = signals_of(card)
    evaluation = pol.evaluate(sample, {k: state_of(v) for k, v in rows.items()}, rules, now)
    evidence = {"uuid": sample.uuid, "hostname": sample.hostname, "gpu": sample.gpu, "model": sample.model}
    turned = []
    first_obs = None
    for name, new in evaluation.states.items():
        before = rows[name].level if name in rows else HealthLevel.UNKNOWN
        obs = save_signal(card, rows, name, new, source=Source.DCGM, now=now, evidence=evidence, report=report)
        first_obs = first_obs or obs
        if new.level == pol.UNHEALTHY and before != pol.UNHEALTHY:
            turned.append(name)
    identity = {"pci": normalise_pci(sample.pci_bus_id), "hostname": sample.hostname, "uuid": sample.uuid}
    row = rows.get("identity")
    if row is None or row.data != identity:
        HealthSignal.objects.update_or_create(
            device=card, signal="identity", defaults={"data": identity, "observed_at": now, "level": "unknown"}
        )
    for event in evaluation.xid_events:
        record_xid(card, event, source=Source.DCGM, rules=rules, report=report, evidence=evidence)
    if evaluation.reset_detected:
        observation_record(
            source=Source.DCGM,
            signal="reset_event",
            level=HealthLevel.OK,
            message="GPU reset or driver reload (the since-boot energy counter went back)",
            observed_at=now,
            device=card,
            evidence=evidence,
            report=report,
        )
    turned += refresh_event_signals(card, rows, rules=rules, now=now, report=report)
    settle_card(card, now=now, actor=actor, report=report, turned_unhealthy=turned, observation=first_obs)
    card.refresh_from_db(fields=["health"])
    report.matched.append(
        DeviceSeen(
            node=card.node.name,
            device=card.key,
            uuid=card.uuid,
            health=card.health,
            signals={k: v.level for k, v in sorted(rows.items()) if k != "identity"},
            unknown=dict(evaluation.unknown),
        )
    )


@transaction.atomic
def health_ingest_scrape(
    *,
    text: str,
    now: datetime | None = None,
    node_map: Mapping[str, str] | None = None,
    cluster: Cluster | None = None,
    origin: str = "scrape",
    actor: Actor | None = None,
) -> IngestReport:
    """Ingest one dcgm-exporter scrape: update each mapped GPU's signals and settle its state.

    A GPU of a node named in the scrape but absent from it is reported as unknown (``not_in_input``), and keeps
    its state: missing data is never read as healthy.
    """
    now = aware_now(now)
    actor = actor or Actor(label="dcgm scrape")
    try:
        scrape = parse_scrape(text)
    except ScrapeError as exc:
        raise HealthInputError(f"{origin}: {exc}") from None
    rules = pol.Rules.from_policy(active_policy())
    resolver = DeviceResolver(cluster=cluster, node_map=node_map)
    report = IngestReport(origin=origin, gpus=len(scrape.gpus))
    pairs = []
    for sample in scrape.gpus:
        card = resolver.resolve(uuid=sample.uuid, host=sample.hostname, gpu=sample.gpu, pci=sample.pci_bus_id)
        if card is None:
            node = resolver.node_name(sample.hostname) if sample.hostname else ""
            why = "node not in the pool" if node and node not in resolver.node_names else "no such GPU in the pool"
            report.unmatched.append(f"{sample.identity}: {why}")
            continue
        pairs.append((card, sample))
    lock_cards(c for c, _ in pairs)
    for card, sample in pairs:
        _ingest_sample(card, sample, rules=rules, now=now, actor=actor, report=report)
    # Activity is not health: kept as samples for the job page, idle GPUs and billing (pruned past the retention).
    busy = ((c.pk, activity_percent(s.fields)) for c, s in pairs)
    utilisation_record(((pk, percent) for pk, percent in busy if percent is not None), now=now)
    utilisation_prune(now=now)
    seen = {c.pk for c, _ in pairs}
    for node_name in sorted({c.node.name for c, _ in pairs}):
        for card in resolver.cards_by_node.get(node_name, []):
            if card.pk not in seen and card.vendor == Device.Vendor.NVIDIA:
                report.not_in_input.append(f"{node_name}/{card.key}: not in this scrape (unknown, state kept)")
    return report


# --- explicit events -----------------------------------------------------------------------------------------


@transaction.atomic
def health_ingest_events(
    *,
    records: Sequence[EventRecord],
    now: datetime | None = None,
    node_map: Mapping[str, str] | None = None,
    cluster: Cluster | None = None,
    origin: str = "events",
    actor: Actor | None = None,
) -> IngestReport:
    """Ingest explicit XID / GPU-reset events (re-importing the same events changes nothing)."""
    now = aware_now(now)
    actor = actor or Actor(label="xid events")
    rules = pol.Rules.from_policy(active_policy())
    resolver = DeviceResolver(cluster=cluster, node_map=node_map)
    report = IngestReport(origin=origin, gpus=len(records))
    touched: dict[int, Device] = {}
    pending: list[tuple[Device, EventRecord]] = []
    for record in records:
        card = resolver.resolve(uuid=record.uuid, host=record.node, gpu=record.gpu, pci=record.pci_bus_id)
        if card is None:
            ref = record.uuid or f"{record.node}/{record.gpu if record.gpu is not None else record.pci_bus_id}"
            report.unmatched.append(f"{record.origin}: {ref}: no such GPU in the pool")
            continue
        pending.append((card, record))
        touched[card.pk] = card
    lock_cards(touched.values())
    for card, record in pending:
        at = record.at or now
        ref = record.uuid or f"{card.node.name}/{record.gpu}/{record.pci_bus_id}"
        if record.kind == "reset":
            observation_record(
                source=Source.NVML,
                signal="reset_event",
                level=HealthLevel.OK,
                message=record.message or "GPU reset",
                observed_at=at,
                device=card,
                evidence={"origin": record.origin},
                dedupe_key=f"reset:{card.pk}:{at.isoformat()}" if record.at else "",
                report=report,
            )
            continue
        key = f"xid:{card.pk}:{record.xid}:{at.isoformat()}:{ref}" if record.at else ""
        record_xid(
            card,
            XidEvent(xid=int(record.xid), at=at, message=record.message),
            source=Source.XID,
            rules=rules,
            report=report,
            dedupe_key=key,
            evidence={"origin": record.origin},
        )
    for card in touched.values():
        rows = signals_of(card)
        turned = refresh_event_signals(card, rows, rules=rules, now=now, report=report)
        settle_card(card, now=now, actor=actor, report=report, turned_unhealthy=turned)
        card.refresh_from_db(fields=["health"])
        report.matched.append(
            DeviceSeen(
                node=card.node.name,
                device=card.key,
                uuid=card.uuid,
                health=card.health,
                signals={k: v.level for k, v in sorted(rows.items()) if k != "identity"},
            )
        )
    return report


def health_ingest_text(
    *,
    text: str,
    now: datetime | None = None,
    node_map: Mapping[str, str] | None = None,
    cluster: Cluster | None = None,
    origin: str = "input",
    node: str = "",
    actor: Actor | None = None,
) -> IngestReport:
    """Ingest a scrape, XID event records (JSON/YAML) or NVRM kernel-log lines, whichever the text is."""
    if looks_like_exposition(text):
        return health_ingest_scrape(text=text, now=now, node_map=node_map, cluster=cluster, origin=origin, actor=actor)
    try:
        records = load_event_text(text, node=node, origin=origin)
    except EventError as exc:
        raise HealthInputError(str(exc)) from None
    if not records:
        raise HealthInputError(f"{origin}: no GPU series, event records or NVRM Xid lines found")
    return health_ingest_events(
        records=records, now=now, node_map=node_map, cluster=cluster, origin=origin, actor=actor
    )


# --- what the inventory import recorded ----------------------------------------------------------------------

DRA_XID_TAINT = "gpu.nvidia.com/xid"


def _dra_xid_taints(device: Device, *, rules: pol.Rules, report: IngestReport) -> bool:
    """XIDs the NVIDIA DRA driver put on a device as ``gpu.nvidia.com/xid=<n>`` taints, as XID events."""
    created = False
    for taint in device.taints or []:
        if taint.get("key") != DRA_XID_TAINT or not str(taint.get("value", "")).isdigit():
            continue
        at = taint.get("timeAdded")
        when = datetime.fromisoformat(str(at).replace("Z", "+00:00")) if at else device.last_seen_at
        card = card_of(device)
        created |= record_xid(
            card,
            XidEvent(xid=int(taint["value"]), at=when, message=f"DRA device taint {taint.get('effect', '')}"),
            source=Source.XID,
            rules=rules,
            report=report,
            dedupe_key=f"dra-xid:{device.pk}:{taint['value']}:{at or ''}",
            evidence={"taint": taint, "dra_device": device.dra_device},
        )
    return created


@transaction.atomic
def health_reconcile(*, cluster: Cluster, now: datetime | None = None) -> IngestReport:
    """Sweep one cluster: what its nodes say (health changes the inventory import wrote, node conditions, health
    taints: pools.health.nodes), DRA XID taints and decaying XID chains; then advance repair tickets (drains done,
    validations finished). Idempotent: a second run changes nothing."""
    now = aware_now(now)
    rules = pol.Rules.from_policy(active_policy())
    report = IngestReport(origin=f"reconcile {cluster.name}")
    health_nodes_reconcile(cluster=cluster, now=now, report=report)
    devices = [
        d
        for d in Device.objects.filter(node__cluster=cluster, node__gone_at__isnull=True, gone_at__isnull=True)
        .select_related("node", "parent")
        .order_by("pk")
        if d.taints
    ]
    lock_cards(devices)
    tainted = {card_of(d).pk: card_of(d) for d in devices if _dra_xid_taints(d, rules=rules, report=report)}
    for card in tainted.values():
        card.refresh_from_db()
        rows = signals_of(card)
        turned = refresh_event_signals(card, rows, rules=rules, now=now, report=report)
        settle_card(card, now=now, actor=Actor(label="DRA device taint"), report=report, turned_unhealthy=turned)
    decaying = HealthSignal.objects.filter(device__node__cluster=cluster, signal__in=EVENT_SIGNALS).exclude(
        level__in=(HealthLevel.OK, HealthLevel.UNKNOWN)
    )
    for card in {s.device for s in decaying.select_related("device__node")}:
        rows = signals_of(card)
        refresh_event_signals(card, rows, rules=rules, now=now, report=report)
        settle_card(card, now=now, actor=Actor(label="portal health"), report=report)
    report.notes += [str(c) for c in tickets.repair_tickets_advance(cluster=cluster, now=now)]
    return report
