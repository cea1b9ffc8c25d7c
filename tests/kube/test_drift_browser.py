"""The drift admin page in a real browser: Playwright driving Debian's /usr/bin/chromium headless.

The live server's requests reach the cluster through the real client over HTTP to the API emulator.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from clusters.kube_sync.config import kube_config_push
from clusters.models import KubeConfigObject
from queues.models import QuotaLine
from tests.browsing import DB_LOCK
from tests.factories import PASSWORD, UserFactory
from tests.kube.cluster import kueue_config_map

pytestmark = pytest.mark.django_db(transaction=True)


def open_drift_page_as_admin(page) -> None:
    """Sign in as a new superuser and land on the drift page."""
    UserFactory(username="root", is_staff=True, is_superuser=True)
    page.goto("/admin/login/?next=/admin/clusters/kubeconfigobject/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")


def test_drift_page_reapply_and_adopt_in_the_browser(page, portal, cluster, api, emulator, shots):
    kube_config_push(cluster=cluster, api=api)
    live = emulator.get_obj("ClusterQueue", "vision")
    groups = live["spec"]["resourceGroups"]
    for res in groups[0]["flavors"][0]["resources"]:
        if res["name"] == "nvidia.com/gpu":
            res["nominalQuota"] = "12"
    emulator.edit("ClusterQueue", "vision", spec={"resourceGroups": groups})
    emulator.edit("WorkloadPriorityClass", "normal", value=150)

    open_drift_page_as_admin(page)
    page.click("#kube-check")
    expect(page.locator("ul.messagelist")).to_contain_text("Cluster gpu-east: 0 created, 0 updated")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)  # only what needs attention
    expect(page.locator("#result_list")).to_contain_text("ClusterQueue vision")
    expect(page.locator("#result_list")).to_contain_text("Drifted (changed in the cluster)")
    page.screenshot(path=str(shots / "admin-drift-list.png"), full_page=True)

    page.get_by_role("link", name="ClusterQueue vision").click()
    diff = page.locator("table.kube-drift")
    expect(diff).to_contain_text("resources[name=nvidia.com/gpu].nominalQuota")
    cells = diff.locator("tbody tr").first.locator("td")
    expect(cells.nth(2)).to_have_text("16")
    expect(cells.nth(3)).to_have_text("12")
    expect(page.locator("pre.kube-drift-diff")).to_contain_text("+        nominalQuota: '12'")
    page.screenshot(path=str(shots / "admin-drift-object.png"), full_page=True)
    page.click("#kube-adopt")
    expect(page.locator("ul.messagelist")).to_contain_text("adopted the cluster's values")
    with DB_LOCK:
        assert QuotaLine.objects.get(team_quota=portal.quota, resource_name="nvidia.com/gpu").nominal == "12"

    page.goto("/admin/clusters/kubeconfigobject/")
    page.get_by_role("link", name="WorkloadPriorityClass normal").click()
    page.click("#kube-reapply")
    expect(page.locator("ul.messagelist")).to_contain_text("re-applied the portal's version")
    assert emulator.get_obj("WorkloadPriorityClass", "normal")["value"] == 100
    with DB_LOCK:
        assert not KubeConfigObject.objects.exclude(status="in_sync").exists()
    page.goto("/admin/clusters/kubeconfigobject/")
    expect(page.locator("#result_list")).to_have_count(0)  # nothing left to look at


def test_drift_page_shows_kueues_configuration_against_the_switch(page, portal, cluster, emulator, shots):
    emulator.put(
        kueue_config_map(
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n"
        )
    )
    open_drift_page_as_admin(page)
    page.click("#kube-check")
    expect(page.locator("ul.messagelist")).to_contain_text("Kueue's configuration has fair sharing on")
    row = page.locator(f"#pools-kueue-config-{cluster.pk}")
    expect(row).to_have_class("kube-attention")
    expect(row).to_contain_text("Does not match the switch")
    expect(row).to_contain_text("but this cluster's switch is off")
    expect(page.locator("#pools-kueue-config-fix")).to_contain_text("restart Kueue")
    page.screenshot(path=str(shots / "admin-drift-kueue-config.png"), full_page=True)
    row.get_by_role("link", name="gpu-east").click()
    expect(page.locator("#cluster-kueue-config")).to_contain_text("Does not match the switch")
    expect(page.locator("#cluster-kueue-config-fix")).to_contain_text("edit this cluster's fair-sharing switch")
