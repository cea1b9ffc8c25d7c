"""Helpers of the validation tests."""

from __future__ import annotations

from pools.services import ClassSpec


def spec_for(*, slug: str, resource: str, flavors: list) -> ClassSpec:
    """A dedicated class spec on the given flavors."""
    return ClassSpec(
        slug=slug,
        name=slug.upper(),
        resource_name=resource,
        sharing="dedicated",
        flavors=flavors,
        allowed_counts=[1, 2, 4],
        description="",
        cpu_per_device="8",
        memory_per_device="64Gi",
        topology_mode="",
        topology_level="",
        min_driver_version="",
        min_cuda_version="",
        active=True,
        display_order=100,
    )
