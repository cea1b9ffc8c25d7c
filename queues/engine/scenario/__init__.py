"""Scenario files (``kubectl get -o yaml|json`` output plus ``sim.portal/*`` annotations) and their runner.

``load_scenario`` turns a file into a ``Scenario`` (a ClusterState plus simulation facts); ``run_scenario``
runs it in one of three modes and returns the JSON document of ``manage.py simulate --json``:

* ``settle`` (default): cycles at the start time until nothing changes, evictions completing at once;
* ``once``: exactly one cycle (a preemptor stays pending, its victims are reported ``preempted``);
* ``replay``: event-driven over simulated time until ``until`` seconds (None = until the end).

Modules: ``manifest`` (documents, field-path errors, durations), ``fields`` and ``kinds`` (the cluster
objects), ``workloads`` (Workload objects and submission times), ``loader``, ``runner`` and ``report``.
"""

from .loader import Scenario, load_scenario, loads_scenario
from .manifest import ScenarioError, parse_duration
from .report import render_table
from .runner import run_scenario

__all__ = [
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "loads_scenario",
    "parse_duration",
    "render_table",
    "run_scenario",
]
