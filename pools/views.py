"""Pool pages: thin views that parse filters, call the pool selectors and render a page or its fragment."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from kernel.htmx import htmx_login_required, wants_fragment
from pools import selectors
from pools.models import Cluster, ResourceClass, ResourceFlavor
from pools.ports import job_visibility

#: Nodes per page of the overview's node list (totals are over every node the filters keep, on all pages).
NODES_PER_PAGE = 50


class PoolFilterForm(forms.Form):
    """The overview's filters over lists loaded once (they also feed the banners); an unknown value is ignored."""

    cluster = forms.ChoiceField(required=False)
    flavor = forms.ChoiceField(required=False)
    resource_class = forms.ChoiceField(required=False, label="Class")
    health = forms.ChoiceField(
        choices=[("", "All nodes"), ("problems", "With problems")], required=False, label="Node health"
    )

    def __init__(
        self,
        data,
        *,
        clusters: list[Cluster],
        flavors: list[ResourceFlavor],
        classes: list[ResourceClass],
    ) -> None:
        super().__init__(data)
        self._objects = {
            "cluster": {c.name: c for c in clusters},
            "flavor": {f.name: f for f in flavors},
            "resource_class": {rc.slug: rc for rc in classes},
        }
        self.fields["cluster"].choices = [("", "All clusters"), *((c.name, str(c)) for c in clusters)]
        self.fields["flavor"].choices = [("", "All flavors"), *((f.name, f.label) for f in flavors)]
        self.fields["resource_class"].choices = [("", "All classes"), *((rc.slug, rc.name) for rc in classes)]

    def filters(self) -> dict:
        """The valid filters as keyword arguments of ``node_capacity_page``."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        objects = {name: self._objects[name].get(data.get(name) or "") for name in self._objects}
        return {**objects, "problems_only": data.get("health") == "problems"}


def _page_number(raw: str | None) -> int:
    """The requested page, 1 when absent or not a number (the selector clamps it to the last page)."""
    try:
        return max(int(raw or 1), 1)
    except ValueError:
        return 1


def _sync_warnings(clusters: list[Cluster]) -> list[Cluster]:
    """Clusters whose last sync failed after the last success (or that never synced and reported an error)."""
    return [
        c
        for c in clusters
        if c.last_sync_error_at and (c.last_synced_at is None or c.last_sync_error_at > c.last_synced_at)
    ]


def _totals(flavors: list[selectors.FlavorCapacity]) -> selectors.Counts:
    """Capacity over every (flavor, resource) group, i.e. over all nodes the filters keep."""
    totals = selectors.Counts()
    for f in flavors:
        totals.add(n=f.exists, in_use=f.in_use, unhealthy=f.unhealthy, cordoned=f.cordoned)
    return totals


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def overview(request: HttpRequest) -> HttpResponse:
    """Capacity per resource class, per flavor and per node with device grids, all narrowed by the filters; the node
    grid polls as a fragment (the summary rides along)."""
    clusters = list(Cluster.objects.all())
    form = PoolFilterForm(
        request.GET,
        clusters=clusters,
        flavors=list(ResourceFlavor.objects.all()),
        classes=list(ResourceClass.objects.filter(active=True)),
    )
    filters = form.filters()
    cluster = filters["cluster"]
    node_page = selectors.node_capacity_page(
        **filters,
        page=_page_number(request.GET.get("page")),
        per_page=NODES_PER_PAGE,
        job_teams=job_visibility().job_teams_seen_by(request.user),  # other teams' jobs: team only
    )
    flavors = selectors.flavor_capacity(**filters)
    rc = filters["resource_class"]
    first = (node_page.page - 1) * NODES_PER_PAGE + 1 if node_page.total_nodes else 0
    context = {
        "form": form,
        "filtered": any(v for k, v in filters.items() if k != "cluster"),
        "cluster": cluster,
        "resource_class": rc,
        "classes": selectors.class_capacity(**filters, classes=ResourceClass.objects.filter(pk=rc.pk) if rc else None),
        "flavors": flavors,
        "totals": _totals(flavors),
        "account": selectors.utilisation_account(**filters),
        "node_page": node_page,
        "first_index": first,
        "last_index": first + len(node_page.nodes) - 1 if node_page.nodes else 0,
        "rendered_at": timezone.now(),
    }
    if wants_fragment(request):
        # The summary rides along out of band, so the totals stay in step with the grid.
        return render(request, "pools/partials/pool_nodes_grid.html", {**context, "fragment": True})
    context["sync_warnings"] = _sync_warnings([cluster] if cluster else clusters)
    return render(request, "pools/overview.html", context)
