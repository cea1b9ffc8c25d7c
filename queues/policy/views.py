"""Admin pages of the policy: the dashboard, effective quota, the audit log (with CSV export) and what-if previews.
Staff only.

The dashboard and the audit log need the view permission on team quotas; a what-if preview needs the change
permission on the model it changes (as its Apply does). The preview page polls its status fragment every second
while the replay runs; the fragment answers HTTP 286 once the preview is finished, which stops the polling.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django.apps import apps
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from kernel.htmx import STOP_POLLING, wants_fragment
from pools.models import Cluster
from queues.guarantees.selectors import guarantees_overview
from queues.models import PolicyPreview, QuotaShortfall
from queues.policy import charts
from queues.policy.audit import POLICY_MODELS, audit_csv, audit_entries
from queues.policy.previews import policy_preview_discard, policy_preview_stale, preview_display
from queues.policy.selectors import (
    class_utilisation,
    cohort_tree,
    flatten,
    previews_visible_to,
    queue_figures,
    team_queues,
)

#: HTTP status that tells htmx to stop polling.
#: A preview queued longer than this without a worker taking it gets a hint on the page.
QUEUED_HINT_SECONDS = 30

RANGES = {"24h": (timedelta(hours=24), timedelta(hours=1)), "7d": (timedelta(days=7), timedelta(hours=6))}


def _require(request, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"needs the {perm} permission")


def dashboard(request):
    """Pool utilisation per class, queues and waits per team, borrowed/lent, the cohort tree with live usage."""
    _require(request, "queues.view_teamquota")
    span_key = request.GET.get("range", "7d")
    span, bucket = RANGES.get(span_key, RANGES["7d"])
    now = timezone.now()
    figures = queue_figures()
    tree = flatten(cohort_tree())
    queues = team_queues(now=now)
    context = {
        **admin.site.each_context(request),
        "title": "Policy dashboard",
        "range": span_key,
        "ranges": list(RANGES),
        "figures": figures,
        "tree": tree,
        "queues": queues,
        "charts": {
            "classes": charts.class_utilisation_figure(class_utilisation(start=now - span, end=now, bucket=bucket)),
            "queues": charts.team_queue_figure(queues),
            "borrowed": charts.borrowed_lent_figure(figures),
            "tree": charts.cohort_tree_figure(tree),
        },
    }
    return TemplateResponse(request, "admin/policy/dashboard.html", context)


def guarantees(request):
    """Effective quota: per cluster and cohort, the guaranteed quotas against the healthy devices, the policy that
    applies, the quota in force per team, the repairs behind a shortfall, and the recent shortfalls."""
    _require(request, "queues.view_teamquota")
    clusters = list(Cluster.objects.order_by("name"))
    context = {
        **admin.site.each_context(request),
        "title": "Effective quota: guarantees against healthy GPUs",
        "rows": guarantees_overview(clusters=clusters),
        "history": list(
            QuotaShortfall.objects.select_related("cluster", "cohort", "team_quota", "flavor").order_by(
                "-started_at", "-id"
            )[:50]
        ),
        "now": timezone.now(),
    }
    return TemplateResponse(request, "admin/policy/guarantees.html", context)


def audit(request):
    """Every policy change (who, when, before → after), filterable; ``?format=csv`` downloads it."""
    _require(request, "queues.view_teamquota")
    model = request.GET.get("model") or None
    if model not in POLICY_MODELS:
        model = None
    user = (request.GET.get("user") or "").strip() or None
    raw_since = request.GET.get("since") or ""
    try:
        since_day = parse_date(raw_since)
    except ValueError:  # well formed but no such day: 2024-13-45
        since_day = None
    if raw_since and since_day is None:
        messages.error(
            request, f"“Since” must be a date such as 2026-01-31, not {raw_since[:40]!r}: showing every change."
        )
    since = None
    if since_day is not None:
        since = timezone.make_aware(datetime.combine(since_day, time.min))
    entries = audit_entries(since=since, model=model, user=user, limit=2000 if request.GET.get("format") else 200)
    if request.GET.get("format") == "csv":
        response = HttpResponse(audit_csv(entries), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="policy-audit-{timezone.now():%Y%m%d-%H%M}.csv"'
        return response
    context = {
        **admin.site.each_context(request),
        "title": "Policy audit log",
        "entries": entries,
        "models": POLICY_MODELS,
        "model": model or "",
        "user_filter": user or "",
        "since": request.GET.get("since", ""),
        "query": request.GET.urlencode(),
    }
    return TemplateResponse(request, "admin/policy/audit.html", context)


@require_GET
def previews(request):
    """The recent what-if previews the user may open: what each proposed, its status, whether it was applied."""
    _require(request, "queues.view_teamquota")
    rows = previews_visible_to(request.user)
    context = {
        **admin.site.each_context(request),
        "title": "What-if previews",
        "previews": rows,
        "keep_days": settings.WHATIF_PREVIEW_KEEP_DAYS,
    }
    return TemplateResponse(request, "admin/policy/previews.html", context)


def _preview_for(request, pk: int) -> tuple[PolicyPreview, object]:
    """The preview and its model's options, if the user may change that model (else 403)."""
    preview = get_object_or_404(PolicyPreview.objects.select_related("requested_by"), pk=pk)
    app_label, model_name = preview.model_label.split(".", 1)
    _require(request, f"{app_label}.change_{model_name}")
    return preview, apps.get_model(app_label, model_name)._meta


def _preview_urls(preview: PolicyPreview, opts) -> tuple[str, str]:
    """(where Apply / Preview again post, where Discard goes back to)."""
    name = f"admin:{opts.app_label}_{opts.model_name}"
    if preview.object_id:
        change = reverse(f"{name}_change", args=[preview.object_id])
        return change, change
    return reverse(f"{name}_add"), reverse(f"{name}_changelist")


@require_GET
@vary_on_headers("HX-Request")
def preview(request, pk: int):
    """A what-if preview: its status while queued or running (polled), then the replay's chart and table."""
    preview, opts = _preview_for(request, pk)
    now = timezone.now()
    since = preview.started_at or preview.requested_at
    apply_url, back_url = _preview_urls(preview, opts)
    context = {
        "preview": preview,
        "opts": opts,
        "elapsed": ((preview.finished_at or now) - since).total_seconds(),
        "waiting": (now - preview.requested_at).total_seconds(),
        "queued_hint": preview.status == PolicyPreview.Status.QUEUED
        and (now - preview.requested_at).total_seconds() > QUEUED_HINT_SECONDS,
        "apply_url": apply_url,
        "back_url": back_url,
        "percent": round(preview.progress * 100),
    }
    if preview.is_finished:
        context.update(preview_display(preview))
        context["stale"] = policy_preview_stale(preview=preview)
    if wants_fragment(request):
        response = TemplateResponse(request, "admin/policy/partials/preview_status.html", context)
        if preview.is_finished:
            response.status_code = STOP_POLLING
        return response
    context.update({**admin.site.each_context(request), "title": f"What if: {preview.object_repr}"})
    return TemplateResponse(request, "admin/policy/preview.html", context)


@require_POST
def preview_discard(request, pk: int):
    """Forget the preview (nothing of the proposal was saved) and go back to the object or the list."""
    preview, opts = _preview_for(request, pk)
    _, back_url = _preview_urls(preview, opts)
    policy_preview_discard(preview=preview)
    messages.info(request, "Change discarded: nothing was saved.")
    return redirect(back_url)
