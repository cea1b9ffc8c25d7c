"""The ``gpupool`` command: submit, list, status, why, cancel, logs, timeline, classes, reservations.

The portal's address and a team token come from ``GPUPOOL_URL`` and ``GPUPOOL_TOKEN`` (or ``--url`` and
``--token``). Every command prints text for people, or the API's JSON with ``--json``. A refused request
prints why (a 400 names each field) and exits with 1; a usage error — a missing address or token, a bad flag value,
a file that is not a job file — exits with 2, in one line.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import click

from gpupool import __version__, show
from gpupool.api import ApiError, Client
from gpupool.spec import SpecError, parse_duration, pod_set, submission, with_flags

TOPOLOGY = ["required", "preferred"]
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class State:
    """The global options, and the client made from them on first use."""

    def __init__(self, url: str | None, token: str | None) -> None:
        self.url = url
        self.token = token
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        """The API client (a usage error when the address or the token is missing)."""
        if self._client is None:
            if not self.url:
                raise click.UsageError(
                    "say where the portal is: set GPUPOOL_URL (or --url), e.g. https://gpu.example.org"
                )
            if not self.token:
                raise click.UsageError(
                    "give a team token: set GPUPOOL_TOKEN (or --token); create one on the portal's API tokens page "
                    f"({self.url.rstrip('/')}/tokens/)"
                )
            url = self.url.rstrip("/")
            self._client = Client(url.removesuffix("/api"), self.token)
        return self._client


pass_state = click.make_pass_decorator(State)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON.")
job_id = click.argument("job_id", type=click.IntRange(min=1), metavar="JOB_ID")


def now() -> datetime:
    """The time the answers are read at (relative times are from it)."""
    return datetime.now(UTC)


def fail(error: ApiError | SpecError) -> NoReturn:
    """Print why, to stderr, and exit: 1 for the portal's refusal, 2 for input the client could not use."""
    lines = error.lines() if isinstance(error, ApiError) else [" ".join(str(error).split())]
    click.echo(f"gpupool: {lines[0]}", err=True)
    for line in lines[1:]:
        click.echo(line, err=True)
    sys.exit(2 if isinstance(error, SpecError) else 1)


def emit(data: Any) -> None:
    """JSON, indented."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="gpupool")
@click.option("--url", envvar="GPUPOOL_URL", help="The portal's address (env GPUPOOL_URL).")
@click.option("--token", envvar="GPUPOOL_TOKEN", help="A team API token (env GPUPOOL_TOKEN; prefer the variable).")
@click.pass_context
def cli(ctx: click.Context, url: str | None, token: str | None) -> None:
    """Submit jobs to the GPU pool and see why they wait, with a team token from the portal's API tokens page."""
    ctx.obj = State(url, token)


@cli.command(context_settings=CONTEXT)
@click.option("-f", "--file", "file", type=click.Path(dir_okay=False), help="A YAML file of the job's fields.")
@click.option("--team", help="Team slug (default: the token's team).")
@click.option("--name", help="Job name: lower-case letters, digits and '-'.")
@click.option("--image", help="Container image.")
@click.option("--class", "resource_class", help="Resource class slug (see `gpupool classes`).")
@click.option("--kind", help="Workload kind: batch, jobset, pytorchjob, rayjob, session, inference, inference-lws.")
@click.option("--gpus", "devices_per_pod", type=int, help="Devices per pod (of the workers, replicas…).")
@click.option("--pods", "pod_count", type=int, help="Pods that start together (a gang; the workers, replicas…).")
@click.option(
    "--pod-set",
    "pod_sets",
    multiple=True,
    metavar="NAME=COUNT[:DEVICES][,cpu=Q][,memory=Q]",
    help="A companion pod set's shape, e.g. head=1:0,cpu=16 (repeatable).",
)
@click.option("--priority", "priority_class", help="Priority class name.")
@click.option("--topology", "topology_mode", type=click.Choice(TOPOLOGY), help="Keep the pods together.")
@click.option("--topology-level", help="The topology level (label) to keep them within.")
@click.option("--max-runtime", help="e.g. 8h, 90m, 1d (a bare number is minutes).")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", help="An environment variable (repeatable).")
@click.option("--args", "args", help="Arguments, split like a shell line.")
@click.option("--checkpoint-path", help="Where the job writes checkpoints.")
@click.option("--checkpoint-signal", help="Signal that asks the job to checkpoint, e.g. SIGUSR1.")
@click.option("--checkpoint-command", help="Command that makes the job checkpoint (shell-like line).")
@click.option("--checkpoint-interval", help="How often the job checkpoints, e.g. 30m.")
@click.option("--sim-runtime", help="Simulated clusters only: how long the job runs, e.g. 20m.")
@click.option("--min-runtime", help="Not preempted before it has run this long, e.g. 30m (within the class's limit).")
@click.option("--finishing-protection", help="Not preempted in the last minutes of its maximum runtime, e.g. 15m.")
@click.option(
    "--preempt-after-checkpoint/--preempt-any-time",
    default=None,
    help="Preempted only just after one of its periodic checkpoints (default: the class's).",
)
@click.option("--check", is_flag=True, help="Only ask whether it would start now; submit nothing.")
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_state
def submit(state: State, file: str | None, check: bool, as_json: bool, command: tuple[str, ...], **flags: Any) -> None:
    """Submit a job from a YAML file and/or flags; the command line goes after `--`.

    \b
    gpupool submit -f job.yaml
    gpupool submit --name resnet --image registry.example.org/train:1.2 --class h100 --gpus 4 \\
        --max-runtime 8h -- python train.py --epochs 10
    gpupool submit --name tune --kind rayjob --image registry.example.org/ray:2 --class h100 --gpus 2 \\
        --pods 4 --pod-set head=1:0,cpu=16,memory=64Gi -- python tune.py
    """
    flags["command"] = list(command) or None
    flags["env"] = list(flags["env"]) or None
    try:
        flags["pod_sets"] = [pod_set(text) for text in flags["pod_sets"]] or None
        body = submission(file, flags)
        client = state.client
        answer = client.feasibility(body) if check else client.submit(body)
    except ApiError as exc:
        fail(ApiError(exc.message, exc.status, with_flags(exc.fields)))
    except SpecError as exc:
        fail(exc)
    if as_json:
        emit(answer)
        return
    if check:
        click.echo(show.feasibility_text(answer, now=now()))
        return
    click.echo(f"submitted job {answer['id']} {answer['name']}: {answer['state']}")
    click.echo("  " + client.page_url(f"jobs/{answer['id']}/"))
    if answer["state"] not in show.FINAL_STATES:
        click.echo(f"  gpupool why {answer['id']}   (why it waits, ETA and what would start it sooner)")


@cli.command("list", context_settings=CONTEXT)
@click.option("--mine", is_flag=True, help="Only your jobs (default: the team's).")
@click.option(
    "--state",
    "job_state",
    type=click.Choice(show.STATES),
    help="Only jobs in this state.",
)
@click.option("--class", "resource_class", help="Only jobs of this class.")
@click.option("--owner", help="Only this user's jobs.")
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True, help="Jobs per page.")
@click.option("--all", "every_page", is_flag=True, help="Follow every page (default: the first).")
@json_option
@pass_state
def list_jobs(
    state: State,
    mine: bool,
    job_state: str | None,
    resource_class: str | None,
    owner: str | None,
    limit: int,
    every_page: bool,
    as_json: bool,
) -> None:
    """The team's jobs (or yours), newest first, with state and what a pending job waits for."""
    params = {
        "scope": "mine" if mine else None,
        "state": job_state,
        "resource_class": resource_class,
        "owner": owner,
        "limit": limit,
    }
    try:
        jobs = state.client.jobs(params={k: v for k, v in params.items() if v}, pages=0 if every_page else 1)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(jobs)
    else:
        click.echo(show.job_table(jobs))


@cli.command(context_settings=CONTEXT)
@job_id
@json_option
@pass_state
def status(state: State, job_id: int, as_json: bool) -> None:
    """A job: what it asked for, its state and times, and why it waits if it does."""
    try:
        job = state.client.job(job_id)
        wait = state.client.wait_reason(job_id) if job["state"] == "pending" else None
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit({"job": job, "wait_reason": wait})
        return
    moment = now()
    click.echo(show.job_text(job, now=moment))
    if wait is not None:
        click.echo(show.diagnosis(wait, now=moment))


@cli.command(context_settings=CONTEXT)
@job_id
@json_option
@pass_state
def why(state: State, job_id: int, as_json: bool) -> None:
    """Why a job waits: the reason, since when, its place in the queue, the ETA and what would start it now."""
    try:
        found = state.client.wait_reason(job_id)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(found)
    else:
        click.echo(show.diagnosis(found, now=now()))


@cli.command(context_settings=CONTEXT)
@job_id
@json_option
@pass_state
def cancel(state: State, job_id: int, as_json: bool) -> None:
    """Cancel a job (an ended job cannot be cancelled)."""
    try:
        job = state.client.cancel(job_id)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(job)
    else:
        click.echo(f"job {job['id']} {job['name']}: {job['state']}")


@cli.command(context_settings=CONTEXT)
@job_id
@click.option("--tail", type=click.IntRange(1, 1000), default=None, help="Lines per pod (default: the portal's).")
@json_option
@pass_state
def logs(state: State, job_id: int, tail: int | None, as_json: bool) -> None:
    """A job's last log lines, per pod, read from its cluster now."""
    try:
        found = state.client.logs(job_id, tail=tail)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(found)
        return
    click.echo(show.logs_text(found))


@cli.command(context_settings=CONTEXT)
@job_id
@json_option
@pass_state
def timeline(state: State, job_id: int, as_json: bool) -> None:
    """A job's timeline: every event and reason change, with how long each lasted."""
    try:
        entries = state.client.timeline(job_id)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(entries)
    else:
        click.echo(show.timeline_text(entries, now=now()))


@cli.command(context_settings=CONTEXT)
@json_option
@pass_state
def classes(state: State, as_json: bool) -> None:
    """The team's resource classes: available now, the team's quota and use, the expected wait."""
    try:
        cards = state.client.classes()
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(cards)
        return
    moment = now()
    rows = []
    for c in cards:
        quota = c.get("quota")
        rows.append(
            [
                c["slug"],
                c["name"],
                "/".join(str(n) for n in c.get("allowed_counts") or []) or "-",
                f"{c['availability']['available']}/{c['availability']['exists']}",
                f"{quota['used']}/{quota['nominal']}" if quota else "-",
                show.eta_text(c.get("expected_wait"), now=moment),
            ]
        )
    click.echo(
        show.table(rows, ["CLASS", "NAME", "COUNTS", "FREE/ALL", "TEAM USED/QUOTA", "EXPECTED START"])
        if rows
        else "no classes"
    )


# --------------------------------------------------------------------------- reservations


def moment(text: str, *, key: str) -> datetime:
    """``2026-12-10T09:00`` (your local time), ``2026-12-10 09:00+01:00`` or ``…Z`` → an aware datetime."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time such as 2026-12-10T09:00 or 2026-12-10T09:00Z", param_hint=key
        ) from None
    return value if value.tzinfo else value.astimezone()  # a bare time is the terminal's local time


@cli.group(context_settings=CONTEXT)
def reservations() -> None:
    """Reservations: a team's devices of a class for a time window (team leads request them)."""


@reservations.command("list", context_settings=CONTEXT)
@click.option("--state", "reservation_state", type=click.Choice(show.RESERVATION_STATES), help="Only this state.")
@click.option(
    "--days", type=click.IntRange(0, 366), default=30, show_default=True, help="Also windows ended so long ago."
)
@json_option
@pass_state
def reservations_list(state: State, reservation_state: str | None, days: int, as_json: bool) -> None:
    """The team's reservations, upcoming and recent, earliest first."""
    params = {"days": days, **({"state": reservation_state} if reservation_state else {})}
    try:
        rows = state.client.reservations(params=params)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(rows)
    else:
        click.echo(show.reservation_table(rows))


@reservations.command("show", context_settings=CONTEXT)
@click.argument("reservation_id", type=click.IntRange(min=1), metavar="RESERVATION_ID")
@json_option
@pass_state
def reservations_show(state: State, reservation_id: int, as_json: bool) -> None:
    """One reservation: what, when, its state and why."""
    try:
        row = state.client.reservation(reservation_id)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(row)
    else:
        click.echo(show.reservation_text(row, now=now()))


@reservations.command("request", context_settings=CONTEXT)
@click.option("--team", help="Team slug (default: the token's team).")
@click.option("--class", "resource_class", required=True, help="Resource class slug, e.g. h100.")
@click.option("--flavor", help="One flavor of the class (default: the rules pick one the team has quota on).")
@click.option("--gpus", "count", type=click.IntRange(1, 4096), required=True, help="Devices to reserve.")
@click.option("--from", "starts", required=True, help="Start, e.g. 2026-12-10T09:00 (local time) or …Z.")
@click.option("--to", "ends", help="End, e.g. 2026-12-10T17:00.")
@click.option("--for", "length", help="Or the length, e.g. 8h, 90m, 1d.")
@click.option("--purpose", required=True, help='What it is for, e.g. "evaluation run before the release".')
@json_option
@pass_state
def reservations_request(
    state: State,
    team: str | None,
    resource_class: str,
    flavor: str | None,
    count: int,
    starts: str,
    ends: str | None,
    length: str | None,
    purpose: str,
    as_json: bool,
) -> None:
    """Request a reservation: approved at once within the rules, else it waits for an admin; refused with the reasons
    (exit 1) when it cannot be honoured."""
    if (ends is None) == (length is None):
        raise click.UsageError("say when it ends: --to TIME or --for LENGTH (one of them)")
    start = moment(starts, key="--from")
    try:
        end = moment(ends, key="--to") if ends else start + timedelta(seconds=parse_duration(length, key="--for"))
    except SpecError as exc:
        raise click.BadParameter(str(exc).removeprefix("--for: "), param_hint="--for") from None
    body = {
        "resource_class": resource_class,
        "count": count,
        "starts_at": start.isoformat(),
        "ends_at": end.isoformat(),
        "purpose": purpose,
        **({"team": team} if team else {}),
        **({"flavor": flavor} if flavor else {}),
    }
    try:
        row = state.client.reserve(body)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(row)
    else:
        click.echo(show.reservation_text(row, now=now()))


@reservations.command("cancel", context_settings=CONTEXT)
@click.argument("reservation_id", type=click.IntRange(min=1), metavar="RESERVATION_ID")
@json_option
@pass_state
def reservations_cancel(state: State, reservation_id: int, as_json: bool) -> None:
    """Cancel a reservation (an open window closes now; the hours until now are charged)."""
    try:
        row = state.client.reservation_cancel(reservation_id)
    except ApiError as exc:
        fail(exc)
    if as_json:
        emit(row)
    else:
        click.echo(f"reservation {row['id']}: {row['state']}")
