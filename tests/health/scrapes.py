"""Build dcgm-exporter expositions for tests (injected faults), in the exporter's own label layout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

GAUGE, COUNTER = "gauge", "counter"
TYPES = {
    "DCGM_FI_DEV_GPU_TEMP": GAUGE,
    "DCGM_FI_DEV_MEMORY_TEMP": GAUGE,
    "DCGM_FI_DEV_XID_ERRORS": GAUGE,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": COUNTER,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": COUNTER,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": GAUGE,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": COUNTER,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": GAUGE,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": COUNTER,
    "DCGM_FI_DEV_POWER_USAGE": GAUGE,
}


def gpu(device, *, host: str | None = None, **fields: float) -> dict:
    """One GPU's series: the device's UUID, index and node (or ``host``), plus field values."""
    return {"uuid": device.uuid, "gpu": device.index, "host": host or device.node.name, "fields": fields}


def exposition(gpus: Sequence[Mapping], *, host_label: str = "Hostname", xid_msg: str = "") -> str:
    """A scrape with HELP/TYPE lines, one series per (field, GPU)."""
    names: list[str] = []
    for g in gpus:
        for name in g["fields"]:
            if name not in names:
                names.append(name)
    out = []
    for name in names:
        out.append(f"# HELP {name} {name}.")
        out.append(f"# TYPE {name} {TYPES.get(name, GAUGE)}")
        for i, g in enumerate(gpus):
            if name not in g["fields"]:
                continue
            labels = (
                f'gpu="{g["gpu"]}",UUID="{g["uuid"]}",pci_bus_id="00000000:{0x18 + i:02X}:00.0",'
                f'device="nvidia{g["gpu"]}",'
                f'modelName="NVIDIA H100 80GB HBM3",{host_label}="{g["host"]}",DCGM_FI_DRIVER_VERSION="550.54.15"'
            )
            if name == "DCGM_FI_DEV_XID_ERRORS":
                code = int(g["fields"][name])
                msg = xid_msg or ("No Error" if code == 0 else "Graphics Engine Exception")
                labels += f',err_code="{code}",err_msg="{msg}"'
            out.append(f"{name}{{{labels}}} {g['fields'][name]}")
    return "\n".join(out) + "\n"
