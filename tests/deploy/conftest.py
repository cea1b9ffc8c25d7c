"""The chart, loaded once per module."""

from __future__ import annotations

import helm_python
import pytest

from tests.deploy.helm import CHART


@pytest.fixture(scope="module")
def chart():
    """deploy/helm/gpu-pool-portal as Helm loads it."""
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded
