"""Admin pages of the policy: the dashboard and the audit log (with CSV export). Staff with view permission only."""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.dateparse import parse_date

from queues.policy import charts
from queues.policy.audit import POLICY_MODELS, audit_csv, audit_entries
from queues.policy.selectors import class_utilisation, cohort_tree, flatten, queue_figures, team_queues

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


def audit(request):
    """Every policy change (who, when, before → after), filterable; ``?format=csv`` downloads it."""
    _require(request, "queues.view_teamquota")
    model = request.GET.get("model") or None
    if model not in POLICY_MODELS:
        model = None
    user = (request.GET.get("user") or "").strip() or None
    since_day = parse_date(request.GET.get("since") or "")
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
