"""Devices of the device-plugin world: counts in node capacity plus feature-discovery labels, no UUIDs.

Synthetic keys are stable across re-imports: a full card scheduled as ``R`` is ``R-<i>`` (``nvidia.com/gpu-3``);
a partitioned or shared physical card is ``gpu-<i>`` with units ``gpu-<i>/mig-<profile>-<k>`` (MIG) or
``gpu-<i>/replica-<r>`` (time-slicing). When allocatable is below capacity the highest-index units of that
resource are the unhealthy ones: the device plugin does not say which, so we choose deterministically.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace

from pools.inventory.records import (
    AMD,
    AWS_NEURON,
    GOOGLE_TPU,
    HABANA,
    INTEL,
    MAX_CARDS_PER_NODE,
    MAX_UNITS_PER_RESOURCE,
    MIG,
    NVIDIA,
    SHARED,
    InventoryError,
    ParsedDevice,
    ParsedNode,
)

GPU, GPU_SHARED = "nvidia.com/gpu", "nvidia.com/gpu.shared"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>.+?)(?P<shared>\.shared)?$")
MIG_PROFILE = re.compile(r"^(?P<g>\d+)g\.(?P<gb>\d+)gb")
AMD_PARTITION = re.compile(r"^amd\.com/(?P<compute>spx|dpx|tpx|qpx|cpx)_(?P<memory>nps\d+)$")
#: Compute partitions per AMD Instinct card for each compute-partition mode (MI300X: 8 XCDs).
AMD_PARTITIONS_PER_CARD = {"spx": 1, "dpx": 2, "tpx": 3, "qpx": 4, "cpx": 8}
SHARING_ON = ("time-slicing", "mps")
#: Memory of one accelerator in MiB, at most (``nvidia.com/gpu.memory``): 16 TiB, far above any card.
MAX_MEMORY_MIB = 16 * 2**20

_ARCH_BY_COMPUTE = {
    (3,): "Kepler",
    (5,): "Maxwell",
    (6,): "Pascal",
    (7, 0): "Volta",
    (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada Lovelace",
    (9,): "Hopper",
    (10,): "Blackwell",
    (12,): "Blackwell",
}
_AMD_ARCH = (("MI300", "CDNA 3"), ("MI325", "CDNA 3"), ("MI350", "CDNA 4"), ("MI355", "CDNA 4"), ("MI2", "CDNA 2"))
_NEURON_PRODUCT = (("trn3", "Trainium3"), ("trn2", "Trainium2"), ("trn1", "Trainium"), ("inf2", "Inferentia2"))
_NEURON_PRODUCT += (("inf1", "Inferentia"),)

Warn = Callable[[str], None]


class _Context:
    """One node's labels and resource counts, with helpers that raise errors naming the field."""

    def __init__(self, node: ParsedNode, capacity: dict[str, int], allocatable: dict[str, int], where: str) -> None:
        self.node = node
        self.labels = node.labels
        self.capacity = capacity
        self.allocatable = allocatable
        self.where = where

    def label_int(self, key: str, maximum: int = MAX_UNITS_PER_RESOURCE) -> int | None:
        """An integer label, or None when absent; a non-integer, negative or too large value is an error."""
        value = self.labels.get(key)
        if value is None or value == "":
            return None
        try:
            number = int(value)
        except ValueError:
            raise InventoryError(self.where, f'metadata.labels["{key}"]', f"not an integer: {value!r}") from None
        if number < 0:
            raise InventoryError(self.where, f'metadata.labels["{key}"]', f"must not be negative: {value!r}")
        if number > maximum:
            raise InventoryError(self.where, f'metadata.labels["{key}"]', f"{number} is more than {maximum}")
        return number

    def alloc(self, resource: str) -> int:
        """Allocatable count of a resource (equal to capacity when the node reports no allocatable)."""
        return self.allocatable.get(resource, self.capacity.get(resource, 0))

    def device(self, **fields) -> ParsedDevice:
        """A device on this node."""
        return ParsedDevice(node=self.node.name, **fields)


def plugin_devices(
    node: ParsedNode, *, capacity: dict[str, int], allocatable: dict[str, int], where: str, warn: Warn
) -> list[ParsedDevice]:
    """Every accelerator unit a node's capacity and labels describe, all vendors."""
    ctx = _Context(node, capacity, allocatable, where)
    devices = _nvidia(ctx, warn)
    devices += _amd(ctx)
    devices += _others(ctx)
    return devices


# --- helpers shared by vendors -------------------------------------------------------------------------------


def _mark_allocatable(ctx: _Context, units: list[ParsedDevice], resource: str) -> None:
    """Mark the highest-index units unhealthy when allocatable is below capacity."""
    capacity = ctx.capacity.get(resource, 0)
    allocatable = ctx.alloc(resource)
    if allocatable >= capacity:
        return
    reason = f"node allocatable {allocatable} < capacity {capacity} (device plugin marked devices unhealthy)"
    for unit in units[allocatable:capacity]:
        unit.mark_unhealthy(reason)


def _full_units(
    ctx: _Context,
    resource: str,
    *,
    vendor: str,
    product: str = "",
    memory_bytes: int | None = None,
    architecture: str = "",
    driver_version: str = "",
    cuda_version: str = "",
    attributes: dict | None = None,
) -> list[ParsedDevice]:
    """``capacity[resource]`` full cards keyed ``<resource>-<i>``."""
    units = [
        ctx.device(
            key=f"{resource}-{i}",
            vendor=vendor,
            resource_name=resource,
            index=i,
            product=product,
            memory_bytes=memory_bytes,
            architecture=architecture,
            driver_version=driver_version,
            cuda_version=cuda_version,
            attributes=dict(attributes or {}),
        )
        for i in range(ctx.capacity.get(resource, 0))
    ]
    _mark_allocatable(ctx, units, resource)
    return units


def _replicas(card: ParsedDevice, resource: str, replicas: int, first_index: int) -> list[ParsedDevice]:
    """Time-shared replicas of a card (or MIG device), which keeps an empty resource name."""
    card.resource_name = ""
    return [
        replace(
            card,
            key=f"{card.key}/replica-{r}",
            kind=SHARED,
            resource_name=resource,
            parent_key=card.key,
            replica_index=r,
            index=first_index + r,
            attributes=dict(card.attributes),
        )
        for r in range(replicas)
    ]


# --- NVIDIA --------------------------------------------------------------------------------------------------


def nvidia_architecture(labels: dict[str, str]) -> str:
    """Architecture from the compute capability (reliable), else from gpu.family ("hopper" → "Hopper")."""
    major, minor = labels.get("nvidia.com/gpu.compute.major", ""), labels.get("nvidia.com/gpu.compute.minor", "")
    if major.isdigit():
        key = (int(major), int(minor)) if minor.isdigit() else (int(major),)
        found = _ARCH_BY_COMPUTE.get(key) or _ARCH_BY_COMPUTE.get((int(major),))
        if found:
            return found
    family = labels.get("nvidia.com/gpu.family", "")
    return family.replace("-", " ").title() if family else ""


def nvidia_driver_version(labels: dict[str, str]) -> str:
    """The driver version as GFD publishes it ("580.126.09")."""
    full = labels.get("nvidia.com/cuda.driver-version.full")
    if full:
        return full
    for prefix, rev in (("nvidia.com/cuda.driver-version.", "revision"), ("nvidia.com/cuda.driver.", "rev")):
        parts = [labels.get(prefix + p, "") for p in ("major", "minor", rev)]
        if parts[0]:
            return ".".join(p for p in parts if p)
    return ""


def nvidia_cuda_version(labels: dict[str, str]) -> str:
    """The CUDA version the driver supports ("13.0")."""
    full = labels.get("nvidia.com/cuda.runtime-version.full")
    if full:
        return full
    for prefix in ("nvidia.com/cuda.runtime-version.", "nvidia.com/cuda.runtime."):
        major, minor = labels.get(prefix + "major", ""), labels.get(prefix + "minor", "")
        if major:
            return f"{major}.{minor}" if minor else major
    return ""


def mig_units_per_card(profile: str, card_product: str) -> int | None:
    """MIG devices of one profile that fill a card (an ``all-<profile>`` layout), or None when unknown.

    A100/H100/H200/B200 have 7 compute and 8 memory slices; A30 has 4 and 4. The memory per slice comes from
    the card's memory in its product name (``-80GB``), so ``3g.40gb`` fills an 80GB card with 2 devices.
    """
    match = MIG_PROFILE.match(profile)
    if not match:
        return None
    g, gb = int(match["g"]), int(match["gb"])
    if "A30" in card_product:
        compute_slices, memory_slices, card_gb = 4, 4, 24
    else:
        compute_slices, memory_slices = 7, 8
        size = re.search(r"(\d+)GB", card_product)
        if not size:
            return None
        card_gb = int(size[1])
    used = max(round(gb / (card_gb / memory_slices)), 1)
    return max(min(compute_slices // g, memory_slices // used), 1)


def _nvidia(ctx: _Context, warn: Warn) -> list[ParsedDevice]:
    """NVIDIA full cards, MIG devices (single and mixed strategy) and time-shared replicas."""
    labels, capacity = ctx.labels, ctx.capacity
    gpu_resources = [(r, capacity[r]) for r in (GPU, GPU_SHARED) if capacity.get(r, 0) > 0]
    mig_resources = {}
    for resource, n in sorted(capacity.items()):
        match = MIG_RESOURCE.match(resource)
        if match and n > 0:  # per-profile resources left over from mixed mode linger at 0: ignored
            mig_resources[match["profile"]] = (resource, n, bool(match["shared"]))
    count = ctx.label_int("nvidia.com/gpu.count", MAX_CARDS_PER_NODE)
    if not gpu_resources and not mig_resources:
        if GPU not in capacity or not count:
            return []
        if labels.get("nvidia.com/mig.config.state") in ("pending", "rebooting"):
            warn(f"{ctx.where}: MIG reconfiguration in progress, no NVIDIA devices advertised yet")
            return []
        gpu_resources = [(GPU, 0)]  # gpu.count cards exist but the plugin advertises none: all unhealthy

    product = labels.get("nvidia.com/gpu.product") or labels.get("cloud.google.com/gke-accelerator", "")
    memory_mib = ctx.label_int("nvidia.com/gpu.memory", MAX_MEMORY_MIB)
    replicas = ctx.label_int("nvidia.com/gpu.replicas") or 1
    sharing = labels.get("nvidia.com/gpu.sharing-strategy", "none")
    attributes: dict[str, str] = {}
    if labels.get("nvidia.com/gpu.compute.major"):
        attributes["computeCapability"] = (
            f"{labels['nvidia.com/gpu.compute.major']}.{labels.get('nvidia.com/gpu.compute.minor', '0')}"
        )
    if labels.get("nvidia.com/vgpu.present") == "true":
        attributes["vgpu"] = "true"
        if labels.get("nvidia.com/vgpu.host-driver-version"):
            attributes["vgpuHostDriverVersion"] = labels["nvidia.com/vgpu.host-driver-version"]
    base = {
        "vendor": NVIDIA,
        "architecture": nvidia_architecture(labels),
        "driver_version": nvidia_driver_version(labels),
        "cuda_version": nvidia_cuda_version(labels),
        "attributes": attributes,
    }
    single_profile = _single_mig_profile(labels, product) if not mig_resources else None
    if single_profile:
        return _nvidia_mig_single(ctx, gpu_resources, product, single_profile, memory_mib, replicas, base, warn)

    card_product = product.removesuffix("-SHARED")
    memory = memory_mib * 2**20 if memory_mib is not None else None
    parents: list[ParsedDevice] = []  # cards with an empty resource name: partitioned or shared
    units: list[ParsedDevice] = []
    next_card = 0
    for resource, n in gpu_resources:
        shared = resource == GPU_SHARED or sharing in SHARING_ON or replicas > 1
        rep = replicas if shared else 1
        expected = n
        if count and not mig_resources and len(gpu_resources) == 1 and count * rep > n:
            expected = count * rep  # capacity itself dropped: gpu.count says how many cards there are
        resource_units: list[ParsedDevice] = []
        for i in range(next_card, next_card + math.ceil(expected / rep)):
            card_fields = {"index": i, "product": card_product, "memory_bytes": memory, **_copy(base)}
            if rep == 1:
                resource_units.append(ctx.device(key=f"{resource}-{i}", resource_name=resource, **card_fields))
                continue
            card = ctx.device(key=f"gpu-{i}", resource_name="", **card_fields)
            parents.append(card)
            resource_units += _replicas(card, resource, rep, first_index=len(resource_units))
        next_card += math.ceil(expected / rep)
        _mark_missing(resource_units, n, expected, count)
        _mark_allocatable(ctx, resource_units, resource)
        units += resource_units

    if mig_resources:
        partitioned: list[ParsedDevice] = []
        if count is None:
            warn(f"{ctx.where}: no nvidia.com/gpu.count label: MIG devices imported without their physical cards")
        elif count <= next_card:
            warn(f"{ctx.where}: nvidia.com/gpu.count={count} leaves no card for the MIG devices")
        else:
            partitioned = [
                ctx.device(
                    key=f"gpu-{i}", resource_name="", index=i, product=card_product, memory_bytes=memory, **_copy(base)
                )
                for i in range(next_card, count)
            ]
        parents += partitioned
        for profile, (resource, n, renamed) in mig_resources.items():
            prefix = f"nvidia.com/mig-{profile}."
            mig_memory = ctx.label_int(prefix + "memory", MAX_MEMORY_MIB)
            mig_rep = (ctx.label_int(prefix + "replicas") or 1) if (renamed or sharing in SHARING_ON) else 1
            units += _mig_units(
                ctx,
                resource,
                n,
                profile,
                partitioned,
                mig_rep,
                product=labels.get(prefix + "product") or f"{card_product}-MIG-{profile}",
                memory_bytes=mig_memory * 2**20 if mig_memory is not None else None,
                base=base,
            )
    return parents + units


def _copy(base: dict) -> dict:
    """The shared fields with a fresh attributes dict."""
    return {**base, "attributes": dict(base["attributes"])}


def _mark_missing(units: list[ParsedDevice], n: int, expected: int, count: int | None) -> None:
    """Units beyond capacity (known from gpu.count) were dropped by the plugin: unhealthy."""
    if expected <= n:
        return
    reason = (
        f"node capacity {n} < {expected} expected from nvidia.com/gpu.count={count} "
        f"(device plugin dropped devices it marked unhealthy)"
    )
    for unit in units[n:expected]:
        unit.mark_unhealthy(reason)


def _mig_units(
    ctx: _Context,
    resource: str,
    n: int,
    profile: str,
    cards: list[ParsedDevice],
    replicas: int,
    *,
    product: str,
    memory_bytes: int | None,
    base: dict,
) -> list[ParsedDevice]:
    """``n`` schedulable units of one MIG profile, spread evenly over the partitioned cards in index order."""
    n_mig = math.ceil(n / replicas)
    per_card: dict[int, int] = {}
    units: list[ParsedDevice] = []
    migs: list[ParsedDevice] = []
    for j in range(n_mig):
        fields = {"kind": MIG, "mig_profile": profile, "product": product, "memory_bytes": memory_bytes, **_copy(base)}
        if cards:
            card = cards[j * len(cards) // n_mig]
            k = per_card[card.index] = per_card.get(card.index, -1) + 1
            key = f"{card.key}/mig-{profile}-{k}"
            mig = ctx.device(key=key, resource_name=resource, index=j, parent_key=card.key, **fields)
        else:
            mig = ctx.device(key=f"mig-{profile}-{j}", resource_name=resource, index=j, **fields)
        if replicas > 1:
            migs.append(mig)
            units += _replicas(mig, resource, replicas, first_index=len(units))
        else:
            units.append(mig)
    _mark_allocatable(ctx, units, resource)
    return migs + units


def _single_mig_profile(labels: dict[str, str], product: str) -> str | None:
    """The one MIG profile of a node under strategy single: from the product suffix, else an ``all-<P>`` config."""
    if "-MIG-" in product:
        return product.split("-MIG-", 1)[1]
    config = labels.get("nvidia.com/mig.config", "")
    if config.startswith("all-") and MIG_PROFILE.match(config.removeprefix("all-")):
        return config.removeprefix("all-")
    return None


def _nvidia_mig_single(
    ctx: _Context,
    gpu_resources: list[tuple[str, int]],
    product: str,
    profile: str,
    memory_mib: int | None,
    replicas: int,
    base: dict,
    warn: Warn,
) -> list[ParsedDevice]:
    """MIG strategy single: ``nvidia.com/gpu`` counts MIG devices of one profile (gpu.count does too)."""
    card_product = product.split("-MIG-", 1)[0]
    product = product if "-MIG-" in product else f"{card_product}-MIG-{profile}".lstrip("-")
    if len(gpu_resources) > 1:
        warn(f"{ctx.where}: both nvidia.com/gpu and nvidia.com/gpu.shared advertised under MIG single; using the first")
    resource, n = gpu_resources[0]
    rep = replicas if (resource == GPU_SHARED or replicas > 1) else 1
    n_mig = math.ceil(n / rep)
    per_card = mig_units_per_card(profile, card_product)
    cards: list[ParsedDevice] = []
    if per_card and n_mig:
        cards = [
            ctx.device(key=f"gpu-{i}", resource_name="", index=i, product=card_product, **_copy(base))
            for i in range(math.ceil(n_mig / per_card))
        ]
    elif n_mig:
        warn(
            f"{ctx.where}: cannot tell how many {profile} MIG devices fill a card "
            f"({card_product or 'product unknown'}): MIG devices imported without their physical cards"
        )
    memory = memory_mib * 2**20 if memory_mib is not None else None
    units = _mig_units(ctx, resource, n, profile, cards, rep, product=product, memory_bytes=memory, base=base)
    return cards + units


# --- AMD -----------------------------------------------------------------------------------------------------


def _amd_label(labels: dict[str, str], name: str) -> str:
    """An AMD node-labeller value: ``amd.com/gpu.<name>``, else the legacy ``beta.amd.com/gpu.<name>.<value>``."""
    for prefix in ("amd.com/gpu.", "beta.amd.com/gpu."):
        if labels.get(prefix + name):
            return labels[prefix + name]
    legacy = f"beta.amd.com/gpu.{name}."
    return next((key.removeprefix(legacy) for key in sorted(labels) if key.startswith(legacy)), "")


def _amd_vram(value: str) -> int | None:
    """``amd.com/gpu.vram`` ("192G", the labeller's GiB) in bytes."""
    match = re.fullmatch(r"(\d+)\s*([KMGT])i?B?", value)
    if not match:
        return None
    return int(match[1]) * 1024 ** "KMGT".index(match[2]) * 1024


def _amd(ctx: _Context) -> list[ParsedDevice]:
    """AMD Instinct cards (``amd.com/gpu``) and compute partitions (``amd.com/cpx_nps4``…)."""
    labels = ctx.labels
    resources = [r for r in sorted(ctx.capacity) if r == "amd.com/gpu" or AMD_PARTITION.match(r)]
    if not any(ctx.capacity[r] > 0 for r in resources):
        return []
    device_id = _amd_label(labels, "device-id")
    product = _amd_label(labels, "product-name") or (f"AMD GPU {device_id}" if device_id else "AMD GPU")
    architecture = next((arch for prefix, arch in _AMD_ARCH if prefix in product), "")
    attributes = {
        k: v
        for k in ("family", "device-id", "cu-count", "simd-count", "firmware", "compute-memory-partition")
        if (v := _amd_label(labels, k))
    }
    base = {
        "vendor": AMD,
        "product": product,
        "architecture": architecture,
        "driver_version": _amd_label(labels, "driver-version"),
        "attributes": attributes,
    }
    memory = _amd_vram(_amd_label(labels, "vram"))
    devices = _full_units(ctx, "amd.com/gpu", memory_bytes=memory, **base)
    card_index = len(devices)
    for resource in resources:
        match = AMD_PARTITION.match(resource)
        n = ctx.capacity[resource]
        if not match or n <= 0:
            continue
        per_card = AMD_PARTITIONS_PER_CARD[match["compute"]]
        if per_card == 1:  # SPX: one partition is the whole card
            devices += _full_units(ctx, resource, memory_bytes=memory, **base)
            continue
        profile = f"{match['compute']}_{match['memory']}"
        cards = [
            ctx.device(key=f"gpu-{i}", resource_name="", index=i, memory_bytes=memory, **_copy(base))
            for i in range(card_index, card_index + math.ceil(n / per_card))
        ]
        card_index += len(cards)
        units = []
        for j in range(n):
            card = cards[j // per_card]
            key = f"{card.key}/{profile}-{j % per_card}"
            fields = {"kind": MIG, "mig_profile": profile, "parent_key": card.key, **_copy(base)}
            units.append(ctx.device(key=key, resource_name=resource, index=j, **fields))
        _mark_allocatable(ctx, units, resource)
        devices += cards + units
    return devices


# --- other vendors -------------------------------------------------------------------------------------------


NEURON_DEVICE = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice")
NEURON_CORE = "aws.amazon.com/neuroncore"


def _others(ctx: _Context) -> list[ParsedDevice]:
    """Gaudi, Neuron, TPU and Intel GPUs: counted units with the product from the labels where there is one."""
    labels = ctx.labels
    instance_type = labels.get("node.kubernetes.io/instance-type", "")
    neuron = next((p for prefix, p in _NEURON_PRODUCT if instance_type.startswith(prefix)), "Neuron")
    simple = {
        "habana.ai/gaudi": (HABANA, "Intel Gaudi", {}),
        **{r: (AWS_NEURON, neuron, {"instanceType": instance_type} if instance_type else {}) for r in NEURON_DEVICE},
        "google.com/tpu": (
            GOOGLE_TPU,
            labels.get("cloud.google.com/gke-tpu-accelerator", "TPU"),
            {"topology": t} if (t := labels.get("cloud.google.com/gke-tpu-topology")) else {},
        ),
        **dict.fromkeys(
            ("gpu.intel.com/i915", "gpu.intel.com/xe"),
            (INTEL, labels.get("gpu.intel.com/product", "Intel GPU"), _intel_attributes(labels)),
        ),
    }
    devices: list[ParsedDevice] = []
    for resource in sorted(ctx.capacity):
        if resource in simple and ctx.capacity[resource] > 0:
            vendor, product, attributes = simple[resource]
            devices += _full_units(ctx, resource, vendor=vendor, product=product, attributes=attributes)
    return devices + _neuron_cores(ctx, [d for d in devices if d.resource_name in NEURON_DEVICE], neuron)


def _intel_attributes(labels: dict[str, str]) -> dict[str, str]:
    """The Intel GPU labels worth keeping on a device."""
    return {k.removeprefix("gpu.intel.com/"): labels[k] for k in ("gpu.intel.com/family",) if labels.get(k)}


def _neuron_cores(ctx: _Context, neuron_devices: list[ParsedDevice], product: str) -> list[ParsedDevice]:
    """NeuronCores, children of the Neuron devices they belong to (both views stay schedulable)."""
    n = ctx.capacity.get(NEURON_CORE, 0)
    if n <= 0:
        return []
    per_device = math.ceil(n / len(neuron_devices)) if neuron_devices else 0
    units = []
    for j in range(n):
        fields = {"vendor": AWS_NEURON, "product": product, "kind": MIG, "mig_profile": "neuroncore"}
        if per_device:
            parent = neuron_devices[min(j // per_device, len(neuron_devices) - 1)]
            key, fields["parent_key"] = f"{parent.key}/neuroncore-{j % per_device}", parent.key
        else:
            key = f"{NEURON_CORE}-{j}"
        units.append(ctx.device(key=key, resource_name=NEURON_CORE, index=j, **fields))
    _mark_allocatable(ctx, units, NEURON_CORE)
    return units
