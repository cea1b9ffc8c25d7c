"""Kubernetes resource quantities: parse strings into canonical integers and print them as Kueue does.

Canonical units: cpu in millicores, every other resource in its base unit (bytes, counts). Printing
follows Kueue's ``resources.ResourceQuantityString``: cpu is a DecimalSI milli-quantity ("500m", "3"),
memory / ephemeral-storage / hugepages-* are BinarySI ("5Gi", "1536Mi"), anything else (GPUs and other
extended resources) is DecimalSI, i.e. a plain integer for ordinary counts.
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation, localcontext

_QUANTITY_RE = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?P<suffix>[eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_SUFFIX = {power: suffix for suffix, power in _BINARY.items()}

#: Schedulable units of one extended resource on one node, at most: 8 cards x 48 time-slicing replicas is 384 and a
#: trn2 node has 128 NeuronCores, so this leaves room to spare; 100,000 GPUs on a node is a typo.
MAX_NODE_DEVICE_UNITS = 4096

_NON_DEVICE = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})
_BINARY_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})


def is_device_resource(resource: str) -> bool:
    """True for extended resources (GPUs, MIG slices, ...), False for cpu, memory, storage, pods, hugepages."""
    return resource not in _NON_DEVICE and not resource.startswith("hugepages-")


def _is_binary(resource: str) -> bool:
    return resource in _BINARY_RESOURCES or resource.startswith("hugepages-")


def parse_decimal(value: str | int | float) -> Decimal:
    """Return the exact value of a Kubernetes quantity in base units; ValueError names a bad value."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}: expected a number or a quantity string such as '500m' or '8Gi'")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"invalid quantity {value!r}: not a finite number")
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}: expected a number or a quantity string such as '500m' or '8Gi'")
    text = value.strip()
    match = _QUANTITY_RE.match(text)
    if not match:
        raise ValueError(
            f"invalid quantity {value!r}: expected a number with an optional suffix "
            "(m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
        )
    suffix = match.group("suffix") or ""
    with localcontext() as ctx:
        ctx.prec = 60
        try:
            number = Decimal(match.group("number"))
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid numbers
            raise ValueError(f"invalid quantity {value!r}") from exc
        if suffix in _BINARY:
            return number * (Decimal(1024) ** _BINARY[suffix])
        if suffix in _DECIMAL:
            return number.scaleb(_DECIMAL[suffix])
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise ValueError(f"invalid quantity {value!r}: exponent out of range")
        return number.scaleb(exponent)


def parse_quantity(value: str | int | float, resource: str = "", *, allow_negative: bool = False) -> int:
    """Parse a quantity into the canonical integer for ``resource`` (cpu: millicores), rounding up."""
    amount = parse_decimal(value)
    if amount < 0 and not allow_negative:
        raise ValueError(f"invalid quantity {value!r}: must not be negative")
    if resource == "cpu":
        amount = amount * 1000
    with localcontext() as ctx:
        ctx.prec = 60
        result = int(amount.to_integral_value(rounding=ROUND_CEILING))
    if abs(result) >= 2**63:
        raise ValueError(f"invalid quantity {value!r}: too large")
    return result


def _format_decimal_si(base_value: Decimal) -> str:
    if base_value == 0:
        return "0"
    sign = "-" if base_value < 0 else ""
    magnitude = abs(base_value)
    for exp in range(18, -12, -3):
        mantissa = magnitude.scaleb(-exp)
        if mantissa == mantissa.to_integral_value():
            return f"{sign}{int(mantissa)}{_DECIMAL_SUFFIX[exp]}"
    # Finer than nano: Kubernetes rounds up to the nano unit.
    nanos = int(magnitude.scaleb(9).to_integral_value(rounding=ROUND_CEILING))
    return f"{sign}{nanos}n"


def _format_binary_si(value: int) -> str:
    if -1024 < value < 1024:
        return _format_decimal_si(Decimal(value))
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    power = 0
    while power < 6 and magnitude % 1024 == 0:
        magnitude //= 1024
        power += 1
    return f"{sign}{magnitude}{_BINARY_SUFFIX.get(power, '')}"


@functools.lru_cache(maxsize=4096, typed=True)
def format_quantity(value: int, resource: str) -> str:
    """Print a canonical quantity the way Kueue prints it in its messages (memoised: few distinct values recur)."""
    if resource == "cpu":
        return _format_decimal_si(Decimal(value).scaleb(-3))
    if _is_binary(resource):
        return _format_binary_si(value)
    return _format_decimal_si(Decimal(value))


def gib(num_bytes: int | None) -> str:
    """Bytes as GiB for people: 85899345920 → "80 GiB", 10737418240 → "10 GiB", 1.5 GiB → "1.5 GiB"."""
    if not num_bytes:
        return ""
    value = num_bytes / 1024**3
    if value >= 10 or value == int(value):
        return f"{value:.0f} GiB"
    return f"{value:.1f} GiB"
