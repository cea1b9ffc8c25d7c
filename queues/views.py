"""Researcher pages: class catalogue, submit (with a feasibility check), job list and live job page.

Thin views: parse, authorize through ``jobs_visible_to`` / the user's teams, call one service or selector,
render the page — or, for an HTMX request, only its fragment (``Vary: HX-Request``). Polling fragments
answer HTTP 286 once nothing on them can change any more.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from kernel.errors import Conflict, ValidationFailed
from kernel.htmx import STOP_POLLING, htmx_login_required, not_modified, validated, wants_fragment
from kernel.labels import duration_words
from kernel.safe_yaml import safe_dump_all
from pools.models import Cluster
from pools.workload_kinds import WorkloadKind
from queues import diagnosis, idle, services
from queues import job_run as job_run_util
from queues import selectors as sel
from queues.forms import JobFilterForm, JobSubmitForm, job_initial
from queues.guarantees.selectors import team_guarantees
from queues.models import Job, Team
from queues.page_validators import job_live_tag
from queues.pod_sets import job_pod_set_rows, pod_set_hours, session_access
from queues.ports import ClusterUnreachable, cluster_port, job_cost_port
from queues.preemptions import job_preemption_episodes
from queues.privacy import redactor_for
from queues.protection import job_protection_status

#: Session key of the team the researcher is working as.
SESSION_TEAM = "queues.current_team"
JOBS_PER_PAGE = 50
#: HTTP status that tells htmx to stop polling.


def current_team(request: HttpRequest) -> tuple[Team | None, list[Team]]:
    """The team kept in the session (if the user still belongs to it), else their first team; and all their teams."""
    teams = list(sel.teams_of(request.user))
    request.user_teams = teams  # the navigation's Submit link reads it (portal.context_processors), no 2nd query
    chosen = request.session.get(SESSION_TEAM)
    team = next((t for t in teams if t.pk == chosen), teams[0] if teams else None)
    return team, teams


def _base_context(request: HttpRequest) -> dict:
    team, teams = current_team(request)
    cluster = sel.team_cluster(team) if team else None
    return {
        "team": team,
        "teams": teams,
        "cluster": cluster,
        "simulated": cluster is None or cluster.backend == Cluster.Backend.SIMULATED,
    }


@require_POST
@htmx_login_required
def team_switch(request: HttpRequest) -> HttpResponse:
    """Work as another of one's teams (kept in the session); back to the page the switcher was on."""
    team = sel.team_for(request.user, slug=request.POST.get("team", ""))
    if team is None:
        messages.error(request, "You are not a member of that team.")
    else:
        request.session[SESSION_TEAM] = team.pk
    target = request.POST.get("next") or reverse("queues:classes")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("queues:classes")
    return HttpResponseRedirect(target)


# --------------------------------------------------------------------------- catalogue


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def class_catalogue(request: HttpRequest) -> HttpResponse:
    """A card per active class: what it is for, hardware, available now, the team's quota and use, expected wait."""
    context = _base_context(request)
    team = context["team"]
    every_class = team is None and sel.sees_every_team(request.user)
    cards = sel.class_catalogue(team=team, cluster=context["cluster"], every_class=every_class)
    if team is not None:
        diagnosis.catalogue_wait_estimates(team=team, cards=cards, owner=request.user)
        if context["cluster"] is not None:  # guarantees repairs leave unbacked: "guaranteed 16, backed now by 14…"
            guarantees = team_guarantees(team=team, cluster=context["cluster"])
            for card in cards:
                card.guarantees = [
                    guarantees[(link.flavor_id, card.resource_class.resource_name)]
                    for link in card.resource_class.flavor_links.all()
                    if (link.flavor_id, card.resource_class.resource_name) in guarantees
                ]
    context.update(cards=cards, every_class=every_class, rendered_at=timezone.now())
    if wants_fragment(request):
        return render(request, "queues/partials/class_cards.html", context)
    return render(request, "queues/class_catalogue.html", context)


# --------------------------------------------------------------------------- submit


def _suggestion_links(request: HttpRequest, feasibility) -> list[tuple[diagnosis.Suggestion, str]]:
    """Each suggestion with the URL of the form filled in as now, plus the suggested change."""
    if feasibility is None:
        return []
    base = {k: v for k, v in request.POST.items() if k not in ("csrfmiddlewaretoken", "action")}
    url = reverse("queues:job_submit")
    return [
        (sug, f"{url}?{urlencode({**base, **{k: '' if v is None else v for k, v in sug.changes.items()}})}")
        for sug in feasibility.suggestions
    ]


def _form_initial(request: HttpRequest) -> dict:
    """Initial values: a job to resubmit (``from``), then any field given in the query string."""
    initial: dict = {}
    source = request.GET.get("from")
    if source and source.isdigit():
        job = get_object_or_404(
            sel.jobs_visible_to(request.user).select_related("resource_class", "priority_class"), pk=source
        )
        initial.update(job_initial(job))
    for name in request.GET:
        if name in JobSubmitForm.base_fields or name.startswith("pod_set_"):
            initial[name] = request.GET[name]
    return initial


def _private(request: HttpRequest, feasibility: diagnosis.Feasibility) -> diagnosis.Feasibility:
    """The check's answer with other teams' jobs named as their team only (queues.privacy)."""
    redactor = redactor_for(request.user)
    return dataclasses.replace(feasibility, verdict=redactor.fields(feasibility.verdict))


@require_http_methods(["GET", "POST"])
@htmx_login_required
@vary_on_headers("HX-Request")
def job_submit(request: HttpRequest) -> HttpResponse:
    """The submit form. POST submits (or, with ``action=check`` and no JavaScript, runs the feasibility check)."""
    context = _base_context(request)
    team = context["team"]
    if team is None:
        return render(request, "queues/no_team.html", context, status=403)
    feasibility = None
    if request.method == "POST":
        form = JobSubmitForm(request.POST, team=team, simulated=context["simulated"])
        if form.is_valid():
            spec = form.spec()
            if request.POST.get("action") == "check":
                errors = services.job_spec_errors(spec, team=team)
                if errors:
                    form.add_service_errors(errors)
                else:
                    found = diagnosis.spec_feasibility(owner=request.user, team=team, spec=spec)
                    feasibility = _private(request, found)
            else:
                try:
                    job = services.job_submit(owner=request.user, team=team, spec=spec)
                except ValidationFailed as exc:
                    form.add_service_errors(exc)
                else:
                    messages.success(request, f"Submitted {job.name}.")
                    return redirect("queues:job_detail", pk=job.pk)
        else:
            form.add_remaining_errors()
    else:
        form = JobSubmitForm(
            initial=_form_initial(request),
            team=team,
            simulated=context["simulated"],
            class_changed=request.headers.get("HX-Trigger-Name") == "resource_class",
        )
    context.update(
        form=form,
        feasibility=feasibility,
        checked=feasibility is not None,
        suggestion_links=_suggestion_links(request, feasibility),
    )
    if wants_fragment(request) and request.method == "GET":
        # The class changed: the counts and topology levels follow it, typed values are kept.
        return render(request, "queues/partials/job_form_fields.html", context)
    return render(request, "queues/job_submit.html", context)


@require_POST
@htmx_login_required
def job_feasibility(request: HttpRequest) -> HttpResponse:
    """The feasibility fragment: would the form's job start now, and if not why, when, and what would help."""
    context = _base_context(request)
    team = context["team"]
    if team is None:
        return render(request, "queues/no_team.html", context, status=403)
    form = JobSubmitForm(request.POST, team=team, simulated=context["simulated"])
    feasibility = None
    if form.is_valid():
        spec = form.spec()
        errors = services.job_spec_errors(spec, team=team)
        if errors:
            form.add_service_errors(errors)
        else:
            found = diagnosis.spec_feasibility(owner=request.user, team=team, spec=spec)
            feasibility = _private(request, found)
    else:
        form.add_remaining_errors()
    context.update(
        form=form, feasibility=feasibility, checked=True, suggestion_links=_suggestion_links(request, feasibility)
    )
    return render(request, "queues/partials/job_feasibility.html", context)


# --------------------------------------------------------------------------- list


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def job_list(request: HttpRequest) -> HttpResponse:
    """The team's (or my) jobs, filtered, newest first, keyset-paginated; the first page polls while jobs move."""
    context = _base_context(request)
    form = JobFilterForm(request.GET, team=context["team"], user=request.user)
    # Admins and operators list every team's jobs, or the team picked in the filter; the others their team's.
    team = form.chosen_team() if form.every_team else context["team"]
    qs = sel.filter_jobs(sel.jobs_visible_to(request.user, team=team), form.filters(), user=request.user)
    listed = team is not None or form.every_team
    page = sel.job_list_page(qs if listed else Job.objects.none(), cursor=form.page_cursor(), per_page=JOBS_PER_PAGE)
    live = page.is_first and any(not j.is_final for j in page.jobs)
    params = {k: v for k, v in request.GET.items() if k != "cursor" and v}
    context.update(
        form=form,
        every_team=form.every_team,
        listed_team=team,
        page=page,
        live=live,
        filtered=form.filtered,
        next_url=f"?{urlencode({**params, 'cursor': page.next_cursor})}" if page.next_cursor else "",
        prev_url=f"?{urlencode({**params, 'cursor': page.prev_cursor})}" if page.prev_cursor else "",
        first_url=f"?{urlencode(params)}" if params else "?",
        rendered_at=timezone.now(),
    )
    if wants_fragment(request):
        response = render(request, "queues/partials/job_list_table.html", context)
        if request.htmx.trigger == "queues-job-list-table" and not live:
            response.status_code = STOP_POLLING
        return response
    return render(request, "queues/job_list.html", context)


# --------------------------------------------------------------------------- one job


def _visible_job(request: HttpRequest, pk: int) -> Job:
    """The job if the user may see it; 404 otherwise (another team's job does not exist for them)."""
    return get_object_or_404(
        sel.jobs_visible_to(request.user).select_related(
            "team", "owner", "cluster", "resource_class", "priority_class", "assigned_flavor"
        ),
        pk=pk,
    )


@require_GET
@htmx_login_required
@vary_on_headers("HX-Request")
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The job page: live state, the wait-reason box (reason, since, position, ETA, suggestions), the timeline.

    Its poll (the fragment) is answered 304 while nothing it shows changed (``queues.page_validators``).
    """
    now = timezone.now()
    fragment = wants_fragment(request)
    tag = job_live_tag(request.user, pk, now=now) if fragment else None
    unchanged = not_modified(request, tag)
    if unchanged is not None:
        return unchanged
    job = _visible_job(request, pk)
    context = _base_context(request)
    cost_port = job_cost_port()
    redactor = redactor_for(request.user, teams=context["teams"])  # other teams' jobs appear as their team only
    timeline = sel.job_timeline(job, now=now, redactor=redactor)
    context.update(
        job=job,
        can_act=sel.may_act_on_job(request.user, job),
        in_job_team=job.team in context["teams"],
        diagnosis=redactor.fields(diagnosis.job_diagnosis(job, now=now)),
        timeline=timeline,
        preemptions=job_preemption_episodes(
            job, events=[e.event for e in timeline], texts=[e.message for e in timeline]
        ),
        protection=job_protection_status(job, now=now),
        pod_sets=job_pod_set_rows(job),
        session=session_access(job, ingress_domain=settings.KUBE_SESSION_INGRESS_DOMAIN)
        if job.kind == WorkloadKind.SESSION
        else None,
        # GPU-hours and cost as metered (billing, above queues, answers through its port; absent without it).
        cost=(cost := cost_port.job_cost(job_id=job.pk) if cost_port is not None and job.started_at else None),
        cost_by_pod_set=pod_set_hours(job, cost.device_hours_by_pod) if cost and job.companion_pod_sets else [],
        billing=cost_port is not None,
        idle=idle.job_idle_notice(job, user=request.user),
        rendered_at=now,
    )
    if fragment:
        response = render(request, "queues/partials/job_live.html", context)
        if job.is_final:
            response.status_code = STOP_POLLING
            return response
        return validated(response, tag)
    return render(request, "queues/job_detail.html", context)


@require_GET
@htmx_login_required
def job_run(request: HttpRequest, pk: int) -> HttpResponse:
    """The job's run as the cluster saw it: last log lines per pod, Kubernetes events, GPU utilisation.

    Loaded by htmx when the job page opens (and on "Refresh"), never by the page's 5-second poll: it asks the
    cluster now. A cluster that does not answer in time gives a message in place of the logs or the events.
    """
    job = _visible_job(request, pk)
    port = cluster_port()
    context: dict = {"job": job, "tail_lines": settings.JOB_LOG_TAIL_LINES, "fetched_at": timezone.now()}
    try:
        context["logs"] = port.job_logs(job_id=job.pk, tail_lines=settings.JOB_LOG_TAIL_LINES)
    except ClusterUnreachable as exc:
        context["logs_error"] = exc.message
    try:
        redactor = redactor_for(request.user)
        context["events"] = [redactor.fields(e, ("message",)) for e in port.job_events(job_id=job.pk)]
    except ClusterUnreachable as exc:
        context["events_error"] = exc.message
    context["utilisation"] = job_run_util.job_utilisation(job, now=context["fetched_at"])
    return render(request, "queues/partials/job_run.html", context)


@require_GET
@htmx_login_required
def job_sent(request: HttpRequest, pk: int) -> HttpResponse:
    """What the portal creates for the job on a Kubernetes cluster, as YAML: its kind's object and its DRA
    ResourceClaimTemplates (on a simulated cluster: what a Kubernetes one would get).

    Loaded by htmx when the job page opens, never by its poll. Built from the job's record (no request to the
    cluster). Everyone who may see the job sees all of it, as the job page shows its command and environment.
    """
    job = _visible_job(request, pk)
    sent = cluster_port().job_sent_objects(job_id=job.pk)
    objects = [
        {"kind": o.get("kind", ""), "name": (o.get("metadata") or {}).get("name", ""), "yaml": safe_dump_all([o])}
        for o in sent.objects
    ]
    context = {"job": job, "sent": sent, "objects": objects, "built_at": timezone.now()}
    return render(request, "queues/partials/job_sent.html", context)


@require_POST
@htmx_login_required
def job_idle_snooze(request: HttpRequest, pk: int) -> HttpResponse:
    """The owner's one snooze of an idle-GPU warning (queues.idle); a refusal is shown on the job page."""
    job = _visible_job(request, pk)
    if not sel.may_act_on_job(request.user, job):
        raise PermissionDenied("operators see every team's jobs read-only: snoozing is for the job's owner")
    try:
        idle.job_idle_snooze(job=job, user=request.user)
    except (Conflict, ValidationFailed) as exc:
        messages.error(request, f"Not snoozed: {exc.message}.")
    else:
        window = job.resource_class.idle_window_seconds or 0
        messages.success(
            request, f"Snoozed: {job.name} is warned again only after another {duration_words(window)} idle."
        )
    return redirect("queues:job_detail", pk=job.pk)


def _past(verb: str) -> str:
    """ "Cancel" → "Cancelled", "Stop" → "Stopped"."""
    return "Stopped" if verb == "Stop" else "Cancelled"


@require_http_methods(["GET", "POST"])
@htmx_login_required
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Confirm (GET) and cancel (POST) a job: its team's members and platform admins (operators only look: 403)."""
    job = _visible_job(request, pk)
    if not sel.may_act_on_job(request.user, job):
        raise PermissionDenied("operators see every team's jobs read-only: cancelling is for the team's members")
    if request.method == "POST":
        try:
            services.job_cancel(job=job, user=request.user)
        except Conflict as exc:
            messages.error(request, f"Not {_past(job.stop_verb).lower()}: {exc.message}.")
        except ValidationFailed as exc:
            messages.error(request, f"Not {_past(job.stop_verb).lower()}: {exc.message}.")
        else:
            messages.success(request, f"{_past(job.stop_verb)} {job.name}.")
        return redirect("queues:job_detail", pk=job.pk)
    context = _base_context(request)
    context["job"] = job
    return render(request, "queues/job_cancel.html", context)
