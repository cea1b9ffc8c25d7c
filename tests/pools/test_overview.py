"""The pool overview page and its polled node-grid fragment: thin checks of access, rendering, filters and queries."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from pools.models import HealthState
from tests.factories import (
    AllocationFactory,
    ClusterFactory,
    DeviceFactory,
    JobFactory,
    NodeFactory,
    QuotaLineFactory,
    ResourceClassFactory,
    ResourceFlavorFactory,
    TeamFactory,
    TeamQuotaFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

URL = "/pool/"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def user_client(client):
    """A client signed in as a plain user."""
    client.force_login(UserFactory())
    return client


@pytest.fixture
def pool():
    """Two clusters; an H100 node (one card held by a job, one unhealthy), a cordoned node, an A100 MIG node."""
    east = ClusterFactory(name="east")
    west = ClusterFactory(name="west")
    h100 = ResourceFlavorFactory(name="h100", display_name="H100")
    a100 = ResourceFlavorFactory(name="a100-mig", display_name="A100 MIG")
    big = ResourceClassFactory(slug="train-h100", name="H100 training", flavors=[h100])
    ResourceClassFactory(
        slug="mig-small", name="MIG 1g.10gb", resource_name="nvidia.com/mig-1g.10gb", sharing="mig", flavors=[a100]
    )
    team = TeamFactory(slug="vision")
    QuotaLineFactory(team_quota=TeamQuotaFactory(team=team, cluster=east), flavor=h100)

    busy_node = NodeFactory(cluster=east, name="h100-a", flavor=h100)
    cards = [DeviceFactory(node=busy_node, index=i) for i in range(8)]
    cards[7].health = HealthState.UNHEALTHY
    cards[7].health_reason = "XID 79: fell off the bus"
    cards[7].save()
    job = JobFactory(team=team, cluster=east, resource_class=big, name="resnet", running=True)
    AllocationFactory(job=job, device=cards[0])
    AllocationFactory(job=job, device=cards[1])

    cordoned = NodeFactory(cluster=east, name="h100-b", flavor=h100, unschedulable=True)
    for i in range(4):
        DeviceFactory(node=cordoned, index=i)

    mig_node = NodeFactory(cluster=west, name="a100-a", flavor=a100)
    card = DeviceFactory(node=mig_node, partitioned=True, index=0)
    for _ in range(7):
        DeviceFactory(node=mig_node, mig=True, parent=card, index=0)

    gone = NodeFactory(cluster=west, name="gone-node", flavor=h100, gone_at=timezone.now())
    DeviceFactory(node=gone)
    return {"east": east, "west": west, "h100": h100, "a100": a100, "big": big, "job": job}


def test_overview_requires_login(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={URL}"


def test_overview_poll_after_logout_redirects_the_browser(client):
    response = client.get(URL + "?page=2", HTTP_HX_CURRENT_URL="http://testserver/pool/?page=2", **HTMX)
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith(reverse("login") + "?next=")
    assert response.content == b""


def test_overview_renders_capacity_numbers(user_client, pool):
    response = user_client.get(URL)
    assert response.status_code == 200
    totals = response.context["totals"]
    # 8 + 4 H100 cards and 7 MIG slices are schedulable; the gone node and the partitioned parent card are not.
    assert (totals.exists, totals.in_use, totals.unhealthy, totals.cordoned) == (19, 2, 1, 4)
    assert totals.available == 12
    html = response.content.decode()
    assert "<html" in html
    assert 'id="pools-pool-nodes"' in html
    assert 'id="pools-pool-summary"' in html
    assert "H100 training" in html
    assert "MIG 1g.10gb" in html
    for name in ("h100-a", "h100-b", "a100-a"):
        assert name in html
    assert "gone-node" not in html


def test_overview_device_grid_cells(user_client, pool):
    html = user_client.get(URL).content.decode()
    assert html.count('class="cell s-in-use"') == 2
    assert html.count('class="cell s-unhealthy"') == 1
    assert html.count('class="cell s-cordoned"') == 4
    # tenant privacy: a user outside team vision reads its job as the team's, never by name (admins read names)
    assert "In use by a job of team vision" in html
    assert "resnet" not in html
    assert "XID 79: fell off the bus" in html
    # MIG slices are grouped under their parent card.
    assert html.count('class="card-group') == 1
    assert html.count("MIG 1g.10gb") >= 7


def test_overview_page_uses_local_htmx_and_polls(user_client, pool):
    html = user_client.get(URL).content.decode()
    assert "/static/django_htmx/htmx-2.min.js" in html
    assert 'hx-trigger="every 10s"' in html
    assert "plotly" not in html
    assert "https://" not in html
    assert "http://" not in html


def test_overview_htmx_request_returns_the_fragment_only(user_client, pool):
    response = user_client.get(URL, **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert "<body" not in html
    assert html.startswith('<section id="pools-pool-nodes"')
    assert 'hx-trigger="every 10s"' in html
    assert 'id="pools-pool-summary" class="summary" hx-swap-oob="true"' in html
    assert response.templates[0].name == "pools/partials/pool_nodes_grid.html"


def test_overview_history_restore_gets_the_full_page(user_client, pool):
    response = user_client.get(URL, HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HTMX)
    html = response.content.decode()
    assert "<html" in html
    assert "hx-swap-oob" not in html


@pytest.mark.parametrize("headers", [{}, HTMX])
def test_overview_varies_on_hx_request(user_client, pool, headers):
    response = user_client.get(URL, **headers)
    assert "HX-Request" in response["Vary"]


def test_overview_filter_by_cluster(user_client, pool):
    response = user_client.get(URL, {"cluster": "west"})
    names = [n.node.name for n in response.context["node_page"].nodes]
    assert names == ["a100-a"]
    assert response.context["totals"].exists == 7


def test_overview_filter_by_flavor(user_client, pool):
    response = user_client.get(URL, {"flavor": "h100"})
    assert [n.node.name for n in response.context["node_page"].nodes] == ["h100-a", "h100-b"]


def test_overview_filter_by_class(user_client, pool):
    response = user_client.get(URL, {"resource_class": "mig-small"})
    assert [n.node.name for n in response.context["node_page"].nodes] == ["a100-a"]


def test_overview_filter_problems_only(user_client, pool):
    response = user_client.get(URL, {"health": "problems"})
    assert [n.node.name for n in response.context["node_page"].nodes] == ["h100-a", "h100-b"]
    assert "matching the filters" in response.content.decode()


def _figures(response):
    totals = response.context["totals"]
    return (totals.exists, totals.in_use, totals.unhealthy, totals.cordoned, totals.available)


def test_overview_totals_without_filters_cover_every_node(user_client, pool):
    response = user_client.get(URL)
    assert _figures(response) == (19, 2, 1, 4, 12)
    assert "Figures over all 3 nodes." in response.content.decode()


def test_overview_totals_narrow_with_the_flavor_filter(user_client, pool):
    response = user_client.get(URL, {"flavor": "h100"})
    # the two H100 nodes: 8 + 4 cards, 2 held, 1 unhealthy, 4 cordoned; the MIG node is left out
    assert _figures(response) == (12, 2, 1, 4, 5)
    assert [(f.flavor.name, f.exists) for f in response.context["flavors"]] == [("h100", 12)]
    classes = {c.resource_class.slug: c.exists for c in response.context["classes"]}
    assert classes == {"train-h100": 12, "mig-small": 0}
    html = response.content.decode()
    assert "Figures over <strong>2 of 3 nodes</strong>: those matching the filters." in html


def test_overview_totals_narrow_with_the_class_filter(user_client, pool):
    response = user_client.get(URL, {"resource_class": "mig-small"})
    assert _figures(response) == (7, 0, 0, 0, 7)
    assert [c.resource_class.slug for c in response.context["classes"]] == ["mig-small"]
    html = response.content.decode()
    assert "1 of 3 nodes</strong>: those matching the filters, counting only the units behind MIG 1g.10gb." in html


def test_overview_totals_narrow_with_problems_and_cluster(user_client, pool):
    response = user_client.get(URL, {"health": "problems"})
    assert _figures(response) == (12, 2, 1, 4, 5)
    response = user_client.get(URL, {"cluster": "west", "health": "problems"})
    assert _figures(response) == (0, 0, 0, 0, 0)
    assert "Figures over <strong>0 of 1 node</strong> in West" in response.content.decode()
    response = user_client.get(URL, {"cluster": "east"})
    assert "Figures over all 2 nodes in East." in response.content.decode()


def test_overview_polled_summary_keeps_the_narrowed_totals(user_client, pool):
    response = user_client.get(URL, {"flavor": "h100"}, **HTMX)
    assert _figures(response) == (12, 2, 1, 4, 5)
    html = response.content.decode()
    assert 'id="pools-pool-summary" class="summary" hx-swap-oob="true"' in html
    assert "2 of 3 nodes" in html


def test_overview_unknown_filter_value_is_reported_and_ignored(user_client, pool):
    response = user_client.get(URL, {"cluster": "nowhere"})
    assert response.status_code == 200
    assert len(response.context["node_page"].nodes) == 3
    assert "Unknown cluster" in response.content.decode()


def test_overview_fragment_keeps_the_filters(user_client, pool):
    html = user_client.get(URL + "?flavor=h100&health=problems", **HTMX).content.decode()
    assert 'hx-get="/pool/?flavor=h100&amp;health=problems"' in html


def test_overview_paginates_nodes_with_totals_over_every_page(user_client):
    flavor = ResourceFlavorFactory(name="l4")
    cluster = ClusterFactory(name="east")
    for i in range(60):
        DeviceFactory(node=NodeFactory(cluster=cluster, flavor=flavor, name=f"n{i:03d}"))
    first = user_client.get(URL)
    assert len(first.context["node_page"].nodes) == 50
    assert first.context["node_page"].num_pages == 2
    assert "1–50 of 60 nodes" in first.content.decode()
    second = user_client.get(URL, {"page": "2"})
    assert second.context["node_page"].nodes[0].node.name == "n050"
    assert len(second.context["node_page"].nodes) == 10
    assert second.context["totals"].exists == 60
    assert user_client.get(URL, {"page": "abc"}).context["node_page"].page == 1
    assert user_client.get(URL, {"page": "99"}).context["node_page"].page == 2


def test_overview_empty_pool(user_client):
    response = user_client.get(URL)
    assert response.status_code == 200
    assert "No nodes have been imported yet." in response.content.decode()


def test_overview_shows_stale_sync_banner(user_client):
    now = timezone.now()
    ClusterFactory(
        name="prod",
        backend="kubernetes",
        last_synced_at=now - timezone.timedelta(hours=1),
        last_sync_error="connection refused",
        last_sync_error_at=now,
    )
    html = user_client.get(URL).content.decode()
    assert "data may be stale" in html
    assert "connection refused" in html


def _populate(*, nodes: int, devices_per_node: int) -> None:
    """Nodes on two flavors and clusters, a quarter of the cards held by jobs, some unhealthy or cordoned."""
    clusters = [ClusterFactory(name="east"), ClusterFactory(name="west")]
    flavors = [ResourceFlavorFactory(name="h100"), ResourceFlavorFactory(name="a100")]
    rc = ResourceClassFactory(slug="train", flavors=flavors)
    team = TeamFactory(slug="vision")
    for cluster in clusters:
        QuotaLineFactory(team_quota=TeamQuotaFactory(team=team, cluster=cluster), flavor=flavors[0])
    for i in range(nodes):
        node = NodeFactory(
            cluster=clusters[i % 2], flavor=flavors[i % 2], name=f"node-{i:04d}", unschedulable=i % 10 == 9
        )
        job = JobFactory(team=team, cluster=node.cluster, resource_class=rc, running=True)
        for d in range(devices_per_node):
            device = DeviceFactory(node=node, index=d, health="unhealthy" if d == 7 and i % 5 == 0 else "healthy")
            if d < devices_per_node // 4:
                AllocationFactory(job=job, device=device)


#: Queries of one overview view, whatever the number of nodes and devices and whichever filters: session and user,
#: the three filter lists, four for the node page (its node counts in one aggregate), three for flavor capacity,
#: five for class capacity (a baseline: lower it when the selectors share their aggregation), and on the full page
#: two for the navigation (whether the user leads a team: Cost, else My usage; whether they are in a team: Submit);
#: and up to four for tenant privacy (whether the user sees every team: their permissions and their groups'; their
#: teams), whose job names they read; three for the account of the utilisation (the flavors, units and cards per
#: flavor in one aggregate, the jobs waiting for each flavor in another).
MAX_QUERIES = 26


@pytest.mark.parametrize("nodes", [20, 60])
@pytest.mark.parametrize("headers", [{}, HTMX])
def test_overview_query_count_does_not_grow_with_the_pool(user_client, django_assert_max_num_queries, nodes, headers):
    _populate(nodes=nodes, devices_per_node=8)
    with django_assert_max_num_queries(MAX_QUERIES):
        response = user_client.get(URL, {"health": "problems"} if nodes == 60 else {}, **headers)
    assert response.status_code == 200


@pytest.mark.parametrize("nodes", [20, 60])
def test_overview_query_count_with_every_filter(user_client, django_assert_max_num_queries, nodes):
    _populate(nodes=nodes, devices_per_node=8)
    params = {"cluster": "east", "flavor": "h100", "resource_class": "train", "health": "problems", "page": "1"}
    with django_assert_max_num_queries(MAX_QUERIES):
        response = user_client.get(URL, params)
    assert response.status_code == 200
