"""Every importer refuses what its real source cannot produce, naming the object and the field, exit status 2."""

from __future__ import annotations

import io
import time

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from kernel import safe_yaml
from pools.inventory.parse import load_text, parse_inventory
from pools.inventory.records import DEVICE_FIELD_MAX, NODE_NAME_MAX, InventoryError
from pools.models import Device, Node
from queues.engine.scenario import ScenarioError
from queues.engine.scenario.loader import loads_scenario
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def node(name: str = "gpu-1", gpus="8", labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **(labels or {})}},
        "status": {"capacity": {"nvidia.com/gpu": gpus, "cpu": "96500m"}},
    }


def import_file(tmp_path, text: str, name: str = "nodes.yaml") -> CommandError:
    ClusterFactory(name="sim")
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CommandError) as caught:
        call_command("import_inventory", str(path), "--cluster", "sim", stdout=io.StringIO())
    assert caught.value.returncode == 2
    assert not Node.objects.exists()
    return caught.value


# --- inventory ------------------------------------------------------------------------------------------------

BAD_NODES = {
    "fractional GPUs": (node(gpus="8.5"), 'status.capacity["nvidia.com/gpu"]', "not a whole number"),
    "milli GPUs": (node(gpus="8500m"), 'status.capacity["nvidia.com/gpu"]', "not a whole number"),
    "100,000 GPUs": (node(gpus="100000"), 'status.capacity["nvidia.com/gpu"]', "at most 4096"),
    "huge gpu.count": (node(labels={"nvidia.com/gpu.count": "100000"}), "nvidia.com/gpu.count", "more than 64"),
    "upper case name": (node(name="GPU-1"), "metadata.name", "not an RFC 1123 DNS subdomain"),
    "underscore name": (node(name="gpu_1"), "metadata.name", "not an RFC 1123 DNS subdomain"),
    "300-character name": (node(name="a" * 300), "metadata.name", "300 characters, at most 253"),
    "long product": (node(labels={"nvidia.com/gpu.product": "H" * 250}), "product", "at most 200"),
}


@pytest.mark.parametrize(("obj", "field", "problem"), BAD_NODES.values(), ids=BAD_NODES.keys())
def test_impossible_node_values_are_refused_naming_the_field(tmp_path, obj, field, problem):
    error = import_file(tmp_path, yaml.safe_dump(obj))
    assert field in str(error)
    assert problem in str(error)
    assert "Node" in str(error)


def test_whole_quantities_and_fractional_cpu_still_import():
    inv = parse_inventory([node(gpus="8"), node(name="gpu-2", gpus=4), node(name="gpu-3.rack-1", gpus="1e1")])
    assert len(inv.devices) == 22
    assert inv.nodes[0].capacity["cpu"] == "96500m"


def test_yaml_alias_bomb_is_refused_at_once(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20)
    )
    started = time.monotonic()
    error = import_file(tmp_path, bomb)
    assert time.monotonic() - started < 5
    assert "aliases are not accepted" in str(error)
    with pytest.raises(safe_yaml.YAMLError):
        safe_yaml.safe_load("a: &x 1\nb: *x\n")


@pytest.mark.parametrize("name", ["deep.yaml", "deep.json"])
def test_deep_nesting_is_refused(tmp_path, name):
    text = "[" * 100_000 + "]" * 100_000
    error = import_file(tmp_path, text, name)
    assert "nested too deeply" in str(error) or "not valid" in str(error)


def test_slice_node_names_are_checked_too():
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "Bad_Node",
            "pool": {"name": "p", "generation": 1},
            "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-1"}}}],
        },
    }
    with pytest.raises(InventoryError, match=r"spec\.nodeName"):
        parse_inventory(load_text(yaml.safe_dump(slice_)))


def test_limits_match_the_model():
    assert Node._meta.get_field("name").max_length == NODE_NAME_MAX
    for name, limit in DEVICE_FIELD_MAX.items():
        assert Device._meta.get_field(name).max_length == limit, name


# --- scenario files (simulate) ---------------------------------------------------------------------------------


SCENARIO_NODE = """
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{capacity: {{nvidia.com/gpu: "{gpus}"}}}}
"""


@pytest.mark.parametrize(
    ("name", "gpus", "problem"),
    [
        ("gpu-1", "8.5", "not a whole number"),
        ("gpu-1", "8500m", "not a whole number"),
        ("gpu-1", "100000", "at most 4096"),
        ("GPU_1", "8", "not an RFC 1123 DNS subdomain"),
        ("a" * 300, "8", "300 characters"),
    ],
)
def test_scenario_files_refuse_impossible_nodes(name, gpus, problem):
    with pytest.raises(ScenarioError) as caught:
        loads_scenario(SCENARIO_NODE.format(name=name, gpus=gpus), source="s.yaml")
    assert problem in str(caught.value)


def test_scenario_alias_bomb_is_refused():
    with pytest.raises(ScenarioError, match="aliases are not accepted"):
        loads_scenario("a: &a [1, 2]\nb: [*a, *a]\n", source="s.yaml")


def test_simulate_exits_2_on_a_bad_scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO_NODE.format(name="gpu-1", gpus="8.5"))
    with pytest.raises(CommandError) as caught:
        call_command("simulate", str(path), stdout=io.StringIO())
    assert caught.value.returncode == 2
    assert "Node/gpu-1: status.capacity.nvidia.com/gpu" in str(caught.value)


# --- kubectl dumps (explain) ----------------------------------------------------------------------------------


def _workload(name: str = "train", gpus: str = "8") -> dict:
    pod = {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"queueName": "main", "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}]},
        "status": {"conditions": []},
    }


@pytest.mark.parametrize(
    ("workload", "problem"),
    [
        (_workload(gpus="8.5"), "not a whole number of devices"),
        (_workload(gpus="8500m"), "not a whole number of devices"),
        (_workload(name="Train_1"), "not an RFC 1123 DNS subdomain"),
    ],
)
def test_explain_refuses_impossible_dumps(tmp_path, workload, problem):
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump(workload))
    with pytest.raises(CommandError) as caught:
        call_command("explain", str(path), stdout=io.StringIO())
    assert caught.value.returncode == 2
    assert problem in str(caught.value)


def test_explain_refuses_aliases(tmp_path):
    path = tmp_path / "dump.yaml"
    path.write_text("a: &a [1, 2]\nb: [*a, *a]\n")
    with pytest.raises(CommandError, match="aliases are not accepted"):
        call_command("explain", str(path), stdout=io.StringIO())
