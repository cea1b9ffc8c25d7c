"""Parse dcgm-exporter Prometheus scrapes into per-GPU samples (no Django).

What the parser guarantees (samples: tests/fixtures/reference/dcgm, SOURCE.md):

* text is read with ``prometheus_client.parser.text_string_to_metric_families`` (with or without HELP/TYPE lines);
* the host label is ``Hostname`` (every release up to 4.5.x) or ``hostname`` (master); the UUID label is ``UUID``
  (or ``uuid`` with ``--use-old-namespace``, whose metric names are the 1.x ``dcgm_*`` ones, mapped here);
* DCGM "blank" sentinels (int32/int64/fp64 ``*_BLANK`` and the not-found / not-supported / no-permission values
  above them) are dropped, as is ``DCGM_FI_DEV_MEMORY_TEMP`` 0 (boards without a memory sensor report 0);
* a field absent from the scrape is absent from the sample: the caller treats it as *unknown*, never healthy;
* MIG series (``GPU_I_PROFILE``/``GPU_I_ID``) carry the parent card's UUID; card-level health fields are folded
  into the card's sample and the instances are listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from pools.health.events import MAX_GPU_INDEX, MAX_XID

#: DCGM blank sentinels: DCGM_INT32_BLANK, DCGM_INT64_BLANK, DCGM_FP64_BLANK (values at or above are "no value").
INT32_BLANK = 0x7FFFFFF0
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0

#: Fields DCGM stores as int32 (their blank is INT32_BLANK); every other numeric field is int64 or fp64.
INT32_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    }
)
FP64_FIELDS = frozenset({"DCGM_FI_DEV_POWER_USAGE"})

#: 1.x names (``--use-old-namespace``, 1.x-compatibility-metrics.csv) → DCGM field names.
OLD_NAMES = {
    "dcgm_sm_clock": "DCGM_FI_DEV_SM_CLOCK",
    "dcgm_memory_clock": "DCGM_FI_DEV_MEM_CLOCK",
    "dcgm_memory_temp": "DCGM_FI_DEV_MEMORY_TEMP",
    "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "dcgm_pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "dcgm_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",
    "dcgm_mem_copy_utilization": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "dcgm_enc_utilization": "DCGM_FI_DEV_ENC_UTIL",
    "dcgm_dec_utilization": "DCGM_FI_DEV_DEC_UTIL",
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_power_violation": "DCGM_FI_DEV_POWER_VIOLATION",
    "dcgm_thermal_violation": "DCGM_FI_DEV_THERMAL_VIOLATION",
    "dcgm_sync_boost_violation": "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "dcgm_board_limit_violation": "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "dcgm_low_util_violation": "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "dcgm_reliability_violation": "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    "dcgm_ecc_sbe_volatile_total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "dcgm_ecc_dbe_volatile_total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "dcgm_ecc_sbe_aggregate_total": "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "dcgm_ecc_dbe_aggregate_total": "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "dcgm_retired_pages_sbe": "DCGM_FI_DEV_RETIRED_SBE",
    "dcgm_retired_pages_dbe": "DCGM_FI_DEV_RETIRED_DBE",
    "dcgm_retired_pages_pending": "DCGM_FI_DEV_RETIRED_PENDING",
    "dcgm_nvlink_replay_error_count_total": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
}
#: Newer DCGM names of renamed fields → the name this module uses.
ALIASES = {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT_FAMILY = "DCGM_EXP_XID_ERRORS_COUNT"
HEALTH_FAMILY = "DCGM_EXP_GPU_HEALTH_STATUS"
#: Fields that describe the physical card, not one MIG instance.
CARD_LEVEL_PREFIXES = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_XID",
    "DCGM_FI_DEV_ECC_",
    "DCGM_FI_DEV_RETIRED_",
    "DCGM_FI_DEV_ROW_REMAP",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_NVLINK_",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
)


class ScrapeError(ValueError):
    """The text is not a Prometheus exposition."""


@dataclass
class GpuSample:
    """Everything one scrape said about one physical GPU."""

    uuid: str = ""
    gpu: int | None = None
    hostname: str = ""
    pci_bus_id: str = ""
    model: str = ""
    driver_version: str = ""
    #: Field name → value (sentinels removed). A field not here was not reported: unknown.
    fields: dict[str, float] = field(default_factory=dict)
    #: Last XID from DCGM_FI_DEV_XID_ERRORS (0 = none) and its err_code/err_msg labels, when the series exists.
    last_xid: int | None = None
    last_xid_message: str = ""
    #: XID → count in the exporter's window (DCGM_EXP_XID_ERRORS_COUNT), with the window in ms.
    xid_counts: dict[int, float] = field(default_factory=dict)
    xid_window_ms: float | None = None
    #: DCGM health watch → result (0 pass, 10 warn, 20 fail) from DCGM_EXP_GPU_HEALTH_STATUS.
    health_watches: dict[str, float] = field(default_factory=dict)
    mig_instances: list[str] = field(default_factory=list)
    #: Fields that were present but held a sentinel (unsupported / blank).
    blank_fields: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def identity(self) -> str:
        """How messages name this GPU."""
        where = f"{self.hostname}/gpu{self.gpu}" if self.hostname and self.gpu is not None else ""
        return " ".join(p for p in (where, self.uuid) if p) or "unidentified GPU"

    def has(self, name: str) -> bool:
        """Whether the scrape carried a usable value for the field."""
        return name in self.fields


@dataclass
class Scrape:
    """A parsed scrape: GPUs in order of first appearance, plus what could not be attributed."""

    gpus: list[GpuSample]
    families: int
    skipped_series: int = 0
    notes: list[str] = field(default_factory=list)


def is_blank(name: str, value: float) -> bool:
    """Whether a value is one of DCGM's blank / not-supported sentinels for that field."""
    if value != value:  # NaN
        return True
    if value >= INT64_BLANK or value <= -INT64_BLANK:
        return True
    if name in INT32_FIELDS and value >= INT32_BLANK:
        return True
    if name in FP64_FIELDS and value >= FP64_BLANK:
        return True
    return name == "DCGM_FI_DEV_MEMORY_TEMP" and value == 0


def _label(labels: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


def _sample_name(name: str) -> str:
    name = OLD_NAMES.get(name, name)
    return ALIASES.get(name, name)


def _gpu_index(raw: str) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def parse_scrape(text: str) -> Scrape:
    """Per-GPU samples of a dcgm-exporter scrape (raises ScrapeError on text that is not an exposition)."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, TypeError) as exc:
        raise ScrapeError(f"not a Prometheus text exposition: {exc}") from None
    gpus: dict[tuple[str, str, str], GpuSample] = {}
    skipped = 0
    for family in families:
        for s in family.samples:
            labels = s.labels
            uuid = _label(labels, "UUID", "uuid")
            gpu = _label(labels, "gpu")
            host = _label(labels, "Hostname", "hostname")
            if not uuid and not gpu:
                skipped += 1  # NVSwitch / NVLink / exporter-level series: not a GPU
                continue
            where = f"GPU {uuid or gpu}" + (f" on {host}" if host else "") + f" ({s.name})"
            if gpu and not (_gpu_index(gpu) is not None and 0 <= int(gpu) <= MAX_GPU_INDEX):
                raise ScrapeError(f"{where}: label gpu: {gpu!r} is not a GPU index (0 to {MAX_GPU_INDEX})")
            key = (uuid, host if not uuid else "", gpu if not uuid else "")
            sample = gpus.get(key)
            if sample is None:
                sample = gpus[key] = GpuSample(
                    uuid=uuid,
                    gpu=_gpu_index(gpu),
                    hostname=host,
                    pci_bus_id=_label(labels, "pci_bus_id"),
                    model=_label(labels, "modelName"),
                    driver_version=_label(labels, "DCGM_FI_DRIVER_VERSION"),
                    labels={k: v for k, v in labels.items() if k in ("device", "modelName", "pci_bus_id")},
                )
            sample.hostname = sample.hostname or host
            # prometheus_client names a counter's samples ``<family>_total``; DCGM's fields have no such suffix.
            raw_name = family.name if family.type == "counter" and s.name == f"{family.name}_total" else s.name
            name = _sample_name(raw_name)
            profile = _label(labels, "GPU_I_PROFILE")
            if profile:
                instance = f"{profile}/{_label(labels, 'GPU_I_ID')}"
                if instance not in sample.mig_instances:
                    sample.mig_instances.append(instance)
                if not name.startswith(CARD_LEVEL_PREFIXES):
                    continue  # per-instance utilisation: not health
            value = float(s.value)
            if family.name == XID_COUNT_FAMILY or name == XID_COUNT_FAMILY:
                xid = _gpu_index(labels.get("xid", ""))
                if xid is not None and not 1 <= xid <= MAX_XID:
                    raise ScrapeError(f"{where}: label xid: {xid} is out of range (1 to {MAX_XID})")
                if xid is not None and not is_blank(name, value) and value < 0:
                    raise ScrapeError(f"{where}: a count of XID {xid} events cannot be negative ({value:g})")
                if xid is not None and not is_blank(name, value):
                    sample.xid_counts[xid] = value
                    window = labels.get("window_size_in_ms")
                    if window:
                        sample.xid_window_ms = float(window)
                continue
            if family.name == HEALTH_FAMILY or name == HEALTH_FAMILY:
                watch = labels.get("health_watch", "ALL")
                if not is_blank(name, value):
                    sample.health_watches[watch] = value
                continue
            if is_blank(name, value):
                sample.blank_fields.append(name)
                continue
            if name == XID_FIELD:
                if not (value.is_integer() and 0 <= value <= MAX_XID):
                    raise ScrapeError(f"{where}: {value:g} is not an XID (0 for none, else 1 to {MAX_XID})")
                sample.last_xid = int(value)
                sample.last_xid_message = _label(labels, "err_msg")
            sample.fields[name] = value
    return Scrape(gpus=list(gpus.values()), families=len(families), skipped_series=skipped)
