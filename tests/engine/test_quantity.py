"""Quantity parsing and Kueue-style formatting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.quantity import format_quantity, is_device_resource, parse_decimal, parse_quantity


@pytest.mark.parametrize(
    ("text", "resource", "expected"),
    [
        ("500m", "cpu", 500),
        ("3", "cpu", 3000),
        ("0.1", "cpu", 100),
        ("2e3", "cpu", 2_000_000),
        ("1Ti", "memory", 2**40),
        ("1.5Gi", "memory", 3 * 2**29),
        ("16", "nvidia.com/gpu", 16),
        ("1k", "nvidia.com/gpu", 1000),
        ("100M", "memory", 100_000_000),
        (8, "nvidia.com/gpu", 8),
        ("1E", "ephemeral-storage", 10**18),
        ("1E3", "pods", 1000),
        ("0.5", "nvidia.com/gpu", 1),
        ("1n", "cpu", 1),
    ],
)
def test_parse_quantity(text, resource, expected):
    assert parse_quantity(text, resource) == expected


@pytest.mark.parametrize("bad", ["12GB", "abc", "", "1.2.3", "--1", "5 Gi", True, None, "1e999"])
def test_parse_quantity_rejects_with_value_in_message(bad):
    with pytest.raises(ValueError, match="invalid quantity") as info:
        parse_quantity(bad, "memory")
    assert repr(bad) in str(info.value)


def test_parse_quantity_negative():
    with pytest.raises(ValueError, match="must not be negative"):
        parse_quantity("-1", "cpu")
    assert parse_quantity("-1", "cpu", allow_negative=True) == -1000


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        (500, "cpu", "500m"),
        (3000, "cpu", "3"),
        (1500, "cpu", "1500m"),
        (5 * 2**30, "memory", "5Gi"),
        (1536 * 2**20, "memory", "1536Mi"),
        (500, "memory", "500"),
        (1536, "memory", "1536"),
        (4, "nvidia.com/gpu", "4"),
        (0, "nvidia.com/gpu", "0"),
        (2**30, "hugepages-1Gi", "1Gi"),
        (1000, "nvidia.com/gpu", "1k"),
    ],
)
def test_format_quantity_like_kueue(value, resource, text):
    assert format_quantity(value, resource) == text


def test_is_device_resource():
    assert is_device_resource("nvidia.com/gpu")
    assert is_device_resource("nvidia.com/mig-1g.10gb")
    assert not is_device_resource("cpu")
    assert not is_device_resource("hugepages-2Mi")


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"]))
def test_format_then_parse_round_trips(value, resource):
    assert parse_quantity(format_quantity(value, resource), resource) == value


def test_parse_decimal_exact():
    assert str(parse_decimal("1.5Gi")) == "1610612736.0"
