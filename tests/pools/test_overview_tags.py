"""The words and tooltips of the pool overview's device grid."""

from __future__ import annotations

import pytest

from pools.selectors import DeviceCell
from pools.templatetags.pools_tags import cell_states, cell_title, state_label
from tests.factories import DeviceFactory

pytestmark = pytest.mark.django_db


def test_state_label_words():
    assert state_label("in-use") == "In use"
    assert state_label("not-ready") == "Node not ready"
    assert state_label("something-new") == "Something new"


def test_cell_states_cover_the_legend_in_order():
    states = [s for s, _ in cell_states()]
    assert states[:2] == ["free", "in-use"]
    assert {"degraded", "unhealthy", "quarantined", "validating", "retired", "cordoned"} <= set(states)


def test_cell_title_of_a_held_card():
    device = DeviceFactory.build(index=3, uuid="GPU-1234", health="healthy")
    title = cell_title(DeviceCell(device=device, state="in-use", job_label="vision/resnet"))
    assert title.splitlines() == [
        "GPU 3 · NVIDIA H100 80GB HBM3",
        "GPU-1234",
        "80 GiB · nvidia.com/gpu",
        "In use by vision/resnet",
    ]


def test_cell_title_of_an_unhealthy_card_gives_the_reason():
    device = DeviceFactory.build(index=0, health="unhealthy", health_reason="XID 79")
    assert cell_title(DeviceCell(device=device, state="unhealthy")).splitlines()[-1] == "Unhealthy (excluded): XID 79"


def test_cell_title_of_a_partitioned_card_counts_its_units():
    card = DeviceFactory.build(partitioned=True, index=1, health="degraded", health_reason="ECC")
    units = [DeviceCell(device=DeviceFactory.build(mig=True), state=s) for s in ("in-use", "free", "in-use")]
    lines = cell_title(DeviceCell(device=card, state="degraded", children=units)).splitlines()
    assert lines[2] == "80 GiB · partitioned card"
    assert lines[3] == "Degraded (used last): ECC"
    assert lines[4] == "3 units, 2 in use"
    assert cell_title(units[1]).splitlines()[0] == "MIG 1g.10gb · NVIDIA A100-SXM4-80GB MIG 1g.10gb"


def test_cell_title_names_other_vendors_partitions_without_calling_them_mig():
    amd = DeviceFactory.build(mig=True, vendor="amd", product="AMD Instinct MI300X", mig_profile="cpx_nps4")
    assert (
        cell_title(DeviceCell(device=amd, state="free")).splitlines()[0] == "Partition CPX / NPS4 · AMD Instinct MI300X"
    )
    core = DeviceFactory.build(mig=True, vendor="aws-neuron", product="Trainium2", mig_profile="neuroncore", index=5)
    assert cell_title(DeviceCell(device=core, state="free")).splitlines()[0] == "NeuronCore 5 · Trainium2"
