"""Kueue's manager Configuration in scenarios: the fair-sharing switch, bare or in its ConfigMap, and bad values."""

from __future__ import annotations

import pytest

from queues.engine.model import FairSharing
from queues.engine.scenario import ScenarioError, loads_scenario

FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: a100}\nspec: {}\n"


def bare(body: str, api: str = "config.kueue.x-k8s.io/v1beta2") -> str:
    return f"apiVersion: {api}\nkind: Configuration\n{body}---\n{FLAVOR}"


def config_map(body: str, api: str = "config.kueue.x-k8s.io/v1beta2") -> str:
    inner = "\n".join("    " + line for line in f"apiVersion: {api}\nkind: Configuration\n{body}".splitlines())
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kueue-manager-config, namespace: kueue-system}\n"
        f"data:\n  controller_manager_config.yaml: |\n{inner}\n---\n{FLAVOR}"
    )


def test_config_absent_means_fair_sharing_off():
    assert loads_scenario(FLAVOR).state.fair_sharing is None
    assert loads_scenario(bare("health: {healthProbeBindAddress: ':8081'}\n")).state.fair_sharing is None


@pytest.mark.parametrize("wrap", [bare, config_map])
def test_config_v1beta2_fair_sharing_on(wrap):
    text = wrap("fairSharing:\n  preemptionStrategies: [LessThanInitialShare]\n")
    assert loads_scenario(text).state.fair_sharing == FairSharing(("LessThanInitialShare",))


def test_config_v1beta1_enable_flag_and_default_strategies():
    on = bare("fairSharing: {enable: true}\n", api="config.kueue.x-k8s.io/v1beta1")
    assert loads_scenario(on).state.fair_sharing == FairSharing()
    off = bare(
        "fairSharing: {enable: false, preemptionStrategies: [LessThanInitialShare]}\n", "config.kueue.x-k8s.io/v1beta1"
    )
    assert loads_scenario(off).state.fair_sharing is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            bare("fairSharing: {}\n"),
            "Configuration: fairSharing.preemptionStrategies: required field is missing",
        ),
        (
            bare("fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare]}\n"),
            "Configuration: fairSharing.enable: unknown field in v1beta2",
        ),
        (
            bare("fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare, Bogus]\n"),
            "Configuration: fairSharing.preemptionStrategies[1]: unsupported value 'Bogus'",
        ),
        (
            bare("fairSharing:\n  preemptionStrategies: [LessThanInitialShare, LessThanOrEqualToFinalShare]\n"),
            "Configuration: fairSharing.preemptionStrategies: unsupported combination",
        ),
        (bare("fairSharing: yes-please\n"), "Configuration: fairSharing: expected an object, got str"),
        (
            bare("fairSharing: {enable: 'on'}\n", api="config.kueue.x-k8s.io/v1beta1"),
            "Configuration: fairSharing.enable: expected true or false",
        ),
        (
            bare("namespace: kueue-system\n", api="kueue.x-k8s.io/v1beta2"),
            "Configuration: apiVersion: expected config.kueue.x-k8s.io/v1beta2",
        ),
        (
            config_map("fairSharing:\n  preemptionStrategies: []\n"),
            'ConfigMap/kueue-system/kueue-manager-config: data["controller_manager_config.yaml"].'
            "fairSharing.preemptionStrategies: required field is missing",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: default}\ndata: {a: b}\n",
            "ConfigMap/default/other: data: only the Kueue manager ConfigMap is read",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: k}\n"
            "data:\n  controller_manager_config.yaml: 'kind: Other'\n",
            "data[\"controller_manager_config.yaml\"].kind: expected Configuration, got 'Other'",
        ),
        (
            bare("fairSharing:\n  preemptionStrategies: [LessThanInitialShare]\n")
            + "---\n"
            + bare("namespace: kueue-system\n").split("---")[0],
            "a second Kueue Configuration",
        ),
    ],
)
def test_config_bad_values_are_named(text, message):
    with pytest.raises(ScenarioError) as err:
        loads_scenario(text)
    assert message in str(err.value)
