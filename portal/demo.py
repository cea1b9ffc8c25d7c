"""The demo: teams, users, a nested cohort, quotas, classes, a month of history and jobs in every state.

Built on the product's own services: the pool is imported through the inventory service, classes are
validated by the class service, jobs are submitted through ``job_submit`` and moved by the simulated
backend's ticks at past times, so the history the pages show is what the engine decided.
Idempotent: a second run changes nothing (the history is only replayed into an empty demo cluster).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone

from clusters.backends.simulated import simulated_cluster_tick_run
from clusters.simulated_dcgm import simulated_dcgm_record
from pools.demo import DEGRADED_NODE, RACK, demo_health_seed, demo_pool_install
from pools.health.services import active_policy
from pools.models import Cluster, ResourceClass, ResourceFlavor
from pools.services import ClassSpec, resource_class_save
from queues import services as job_services
from queues.health_jobs import validation_queue_ensure
from queues.models import Cohort, Job, Membership, PriorityClass, QuotaLine, Team, TeamQuota
from queues.selectors import OPERATOR_GROUP, OPERATOR_PERMISSIONS
from queues.waiting.rollup import wait_attribution_sync

DEMO_CLUSTER = "sim-1"
DEMO_PASSWORD = "demo-password"  # published: scripts/demo prints it

#: (username, first name, is admin, [(team, role)])
USERS = [
    ("admin", "Ada", True, []),
    ("alice", "Alice", False, [("vision", "member"), ("nlp", "member")]),
    ("carol", "Carol", False, [("vision", "lead")]),
    ("bob", "Bob", False, [("nlp", "member")]),
    ("erin", "Erin", False, [("nlp", "lead")]),
    ("dave", "Dave", False, [("speech", "member")]),
    ("frank", "Frank", False, [("speech", "lead"), ("vision", "member")]),
    ("oscar", "Oscar", False, []),
]
#: Users of the read-only operator role (the ``operator`` group): every team's jobs and the pool, no actions.
OPERATORS = {"oscar"}
TEAMS = [
    ("vision", "Computer Vision", "team-vision"),
    ("nlp", "Language Models", "team-nlp"),
    ("speech", "Speech", "team-speech"),
]
#: name → parent: org ─┬─ research ─┬─ vision, nlp      product ── speech
COHORTS = [("org", None), ("research", "org"), ("product", "org")]
PRIORITIES = [
    ("urgent", 1000, "Deadline work; may preempt lower priorities.", True, False),
    ("training", 100, "Normal training.", True, True),
    ("preemptible", 10, "Opportunistic: runs on idle capacity, first to be preempted.", False, False),
]
#: team → (cohort, preemption, [(flavor, resource, nominal, borrowing limit, lending limit)])
QUOTAS = {
    "vision": (
        "research",
        {"within_cluster_queue": "LowerPriority", "reclaim_within_cohort": "Any"},
        [
            ("h100", "nvidia.com/gpu", "16", "8", ""),
            ("a100-mig", "nvidia.com/mig-1g.10gb", "8", "", ""),
            ("a100-mig", "nvidia.com/mig-3g.40gb", "4", "", ""),
            ("l4-shared", "nvidia.com/gpu.shared", "8", "8", ""),
        ],
    ),
    "nlp": (
        "research",
        {"within_cluster_queue": "LowerPriority", "reclaim_within_cohort": "LowerPriority"},
        [
            ("h100", "nvidia.com/gpu", "16", "16", "8"),
            ("a100-mig", "nvidia.com/mig-2g.20gb", "8", "", ""),
            ("a100-mig", "nvidia.com/mig-3g.40gb", "4", "", ""),
            ("mi300x", "amd.com/gpu", "8", "8", ""),
        ],
    ),
    "speech": (
        "product",
        {"within_cluster_queue": "Never", "reclaim_within_cohort": "Any"},
        [
            ("h100", "nvidia.com/gpu", "8", "0", ""),
            ("a100-mig", "nvidia.com/mig-1g.10gb", "16", "", ""),
            ("l4-shared", "nvidia.com/gpu.shared", "16", "", ""),
            ("mi300x", "amd.com/gpu", "8", "", ""),
        ],
    ),
}
CLASSES = [
    {
        "slug": "h100-nvlink-8x",
        "allowed_kinds": ["batch", "jobset", "pytorchjob", "rayjob", "inference-lws"],
        "name": "8× H100, one NVLink domain",
        "description": "Large training: multi-node gangs of 8-GPU pods kept inside one NVLink domain (one rack).",
        "resource_name": "nvidia.com/gpu",
        "sharing": "dedicated",
        "flavors": ["h100"],
        "allowed_counts": [8],
        "cpu_per_device": "12",
        "memory_per_device": "120Gi",
        "topology_mode": "required",
        "topology_level": RACK,
        "display_order": 10,
    },
    {
        "slug": "h100",
        "allowed_kinds": ["batch", "jobset", "pytorchjob", "rayjob"],
        "name": "H100 80GB, 1–8 GPUs",
        "description": "Training and fine-tuning on one node: full H100 cards.",
        "resource_name": "nvidia.com/gpu",
        "sharing": "dedicated",
        "flavors": ["h100"],
        "allowed_counts": [1, 2, 4, 8],
        "cpu_per_device": "12",
        "memory_per_device": "120Gi",
        "display_order": 20,
    },
    {
        "slug": "a100-3g-40gb",
        "allowed_kinds": ["batch", "session", "inference"],
        "name": "A100 half card (MIG 3g.40gb)",
        "description": "Fine-tuning and evaluation that needs 40 GB of GPU memory, not a whole card.",
        "resource_name": "nvidia.com/mig-3g.40gb",
        "sharing": "mig",
        "flavors": ["a100-mig"],
        "allowed_counts": [1],
        "cpu_per_device": "8",
        "memory_per_device": "64Gi",
        "display_order": 30,
    },
    {
        "slug": "a100-1g-10gb",
        "allowed_kinds": ["batch", "session"],
        "name": "A100 slice (MIG 1g.10gb)",
        "description": "Notebooks, debugging and small experiments on an isolated 10 GB slice.",
        "resource_name": "nvidia.com/mig-1g.10gb",
        "sharing": "mig",
        "flavors": ["a100-mig"],
        "allowed_counts": [1],
        "cpu_per_device": "2",
        "memory_per_device": "16Gi",
        "display_order": 40,
        "idle_window_seconds": 1800,  # notebooks and development: idle GPUs are negotiated (queues.idle)
    },
    {
        "slug": "a100-2g-20gb",
        "allowed_kinds": ["batch", "inference"],
        "name": "A100 slice (MIG 2g.20gb)",
        "description": "Inference services and mid-size experiments on a 20 GB slice.",
        "resource_name": "nvidia.com/mig-2g.20gb",
        "sharing": "mig",
        "flavors": ["a100-mig"],
        "allowed_counts": [1],
        "cpu_per_device": "4",
        "memory_per_device": "32Gi",
        "display_order": 45,
    },
    {
        "slug": "l4-shared",
        "allowed_kinds": ["batch", "session", "inference"],
        "name": "L4, time-shared",
        "description": "Development and light inference; the card is shared with up to 3 other pods.",
        "resource_name": "nvidia.com/gpu.shared",
        "sharing": "time-shared",
        "flavors": ["l4-shared"],
        "allowed_counts": [1],
        "cpu_per_device": "4",
        "memory_per_device": "24Gi",
        "display_order": 50,
        "idle_window_seconds": 1800,  # notebooks and development: idle GPUs are negotiated (queues.idle)
    },
    {
        "slug": "mi300x",
        "allowed_kinds": ["batch", "pytorchjob", "rayjob", "inference"],
        "name": "AMD MI300X 192GB, 1–8 GPUs",
        "description": "Large-memory training and inference on ROCm: 192 GB per GPU.",
        "resource_name": "amd.com/gpu",
        "sharing": "dedicated",
        "flavors": ["mi300x"],
        "allowed_counts": [1, 2, 4, 8],
        "cpu_per_device": "16",
        "memory_per_device": "200Gi",
        "display_order": 60,
    },
]
#: team → classes its jobs use in the history, with weights
TEAM_CLASSES = {
    "vision": [("h100", 5), ("h100-nvlink-8x", 1), ("a100-1g-10gb", 3), ("a100-3g-40gb", 2), ("l4-shared", 2)],
    "nlp": [("h100", 4), ("h100-nvlink-8x", 2), ("mi300x", 3), ("a100-2g-20gb", 2), ("a100-3g-40gb", 1)],
    "speech": [("h100", 2), ("a100-1g-10gb", 4), ("l4-shared", 4), ("mi300x", 1)],
}
JOB_NAMES = ["resnet", "vit", "llama-ft", "bert", "whisper", "diffusion", "eval", "sweep", "distill", "rlhf", "asr"]
#: What people add to a job's name (not a counter: the page shows the job's id beside its name already).
JOB_VARIANTS = ["baseline", "lr-sweep", "ablation", "bf16", "long-ctx", "v2", "retry", "small", "seed2", "warmup"]


def demo_logins() -> list[dict[str, str]]:
    """The demo's logins for the sign-in page: username, password and what the user can do."""
    out = []
    for username, _, is_admin, roles in USERS:
        if is_admin:
            role = "platform admin"
        elif username in OPERATORS:
            role = "operator (reads every team's jobs)"
        else:
            role = ", ".join(f"{'team lead' if r == 'lead' else 'researcher'} in {t}" for t, r in roles)
        out.append({"username": username, "password": DEMO_PASSWORD, "role": role})
    return out


@dataclass
class DemoReport:
    """What seeding did."""

    created_users: int
    history_jobs: int
    ticks: int
    devices: int


def _users(password: str = DEMO_PASSWORD) -> int:
    """Demo users with the given password (the published one by default); admin is a superuser, the operators are
    in the operator group."""
    user_model = get_user_model()
    operators, _ = Group.objects.get_or_create(name=OPERATOR_GROUP)  # kept by queues.apps after migrate, too
    for name in OPERATOR_PERMISSIONS:
        app_label, codename = name.split(".")
        operators.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    created = 0
    for username, first, is_admin, _ in USERS:
        user, made = user_model.objects.get_or_create(
            username=username,
            defaults={
                "first_name": first,
                "email": f"{username}@example.org",
                "is_staff": is_admin,
                "is_superuser": is_admin,
            },
        )
        if made:
            user.set_password(password)
            user.save(update_fields=["password"])
            created += 1
        if username in OPERATORS:
            user.groups.add(operators)
    return created


def _policy(cluster: Cluster) -> None:
    """Teams, memberships, cohorts, priority classes and quotas (get-or-create by natural keys)."""
    user_model = get_user_model()
    teams = {}
    for slug, name, namespace in TEAMS:
        teams[slug], _ = Team.objects.get_or_create(slug=slug, defaults={"name": name, "namespace": namespace})
    for username, _, _, roles in USERS:
        user = user_model.objects.get(username=username)
        for team, role in roles:
            Membership.objects.get_or_create(team=teams[team], user=user, defaults={"role": role})
    cohorts: dict[str, Cohort] = {}
    for name, parent in COHORTS:
        cohorts[name], _ = Cohort.objects.get_or_create(name=name, defaults={"parent": cohorts.get(parent)})
    for name, value, description, may_preempt, is_default in PRIORITIES:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={"value": value, "description": description, "may_preempt": may_preempt, "is_default": is_default},
        )
    flavors = {f.name: f for f in ResourceFlavor.objects.all()}
    for slug, (cohort, preemption, lines) in QUOTAS.items():
        quota, made = TeamQuota.objects.get_or_create(
            team=teams[slug],
            cluster=cluster,
            defaults={"cluster_queue_name": slug, "cohort": cohorts[cohort], **preemption},
        )
        if not made:
            continue
        for order, (flavor, resource, nominal, borrowing, lending) in enumerate(lines):
            QuotaLine.objects.create(
                team_quota=quota,
                flavor=flavors[flavor],
                flavor_order=order,
                resource_name=resource,
                nominal=nominal,
                borrowing_limit=borrowing,
                lending_limit=lending,
            )
    # The platform's validation team and its queue are part of the set-up: repair tickets' burn-in jobs run there.
    validation_queue_ensure(slug=active_policy().validation_team_slug, cluster=cluster)


def _classes() -> None:
    """The demo's resource classes, validated by the class service (existing ones are left as admins set them)."""
    flavors = {f.name: f for f in ResourceFlavor.objects.select_related("topology")}
    for spec in CLASSES:
        if ResourceClass.objects.filter(slug=spec["slug"]).exists():
            continue
        values = dict(spec)
        values["flavors"] = [flavors[name] for name in spec["flavors"]]
        resource_class_save(spec=ClassSpec(**values))


@dataclass
class Submission:
    """One job of the generated history."""

    at: datetime
    team: str
    user: str
    cls: str
    name: str
    devices: int
    pods: int
    runtime: int
    priority: str
    max_runtime: int | None = None
    fails: bool = False
    cancel_after: int | None = None
    checkpoint: bool = False
    kind: str = "batch"


def _history(start: datetime, end: datetime, rng: random.Random) -> list[Submission]:
    """A month of believable submissions: office-hours peaks, mostly small jobs, a few big gangs."""
    members = {t: [u for u, _, _, roles in USERS for team, _ in roles if team == t] for t, _, _ in TEAMS}
    classes = {c["slug"]: c for c in CLASSES}
    out = []
    t = start
    n = 0
    while t < end:
        hour = t.hour
        busy = 9 <= hour <= 19 and t.weekday() < 5
        t += timedelta(minutes=rng.expovariate(1 / (30 if busy else 90)))
        if t >= end:
            break
        team = rng.choice(list(TEAM_CLASSES))
        slug = rng.choices([c for c, _ in TEAM_CLASSES[team]], weights=[w for _, w in TEAM_CLASSES[team]])[0]
        counts = classes[slug]["allowed_counts"]
        devices = rng.choice(counts)
        pods = rng.choice([2, 2, 3]) if slug == "h100-nvlink-8x" else 1
        runtime = int(rng.lognormvariate(9.0, 0.9))  # median ~2 h 15 min
        runtime = max(300, min(runtime, 14 * 3600))
        roll = rng.random()
        n += 1
        out.append(
            Submission(
                at=t,
                team=team,
                user=rng.choice(members[team]),
                cls=slug,
                name=f"{rng.choice(JOB_NAMES)}-{JOB_VARIANTS[n * 7 % len(JOB_VARIANTS)]}",
                devices=devices,
                pods=pods,
                runtime=runtime,
                priority=rng.choices(["training", "preemptible", "urgent"], weights=[8, 3, 1])[0],
                max_runtime=runtime // 2 if roll < 0.04 else None,
                fails=0.04 <= roll < 0.09,
                cancel_after=int(runtime * 0.3) if 0.09 <= roll < 0.12 else None,
                checkpoint=rng.random() < 0.5,
            )
        )
    return out


def _submit(sub: Submission, *, now: datetime, notify: bool) -> Job:
    """Submit one generated job through the product's service."""
    team = Team.objects.get(slug=sub.team)
    user = get_user_model().objects.get(username=sub.user)
    rc = ResourceClass.objects.get(slug=sub.cls)
    session = sub.kind == "session"  # the notebook image and its own command
    spec = job_services.JobSpec(
        name=sub.name,
        kind=sub.kind,
        image="" if session else f"registry.example.org/{sub.team}/train:{1 + len(sub.name) % 4}.{len(sub.name) % 7}",
        command=[] if session else ["python", "train.py", "--config", f"configs/{sub.name.rsplit('-', 1)[0]}.yaml"],
        resource_class=rc,
        topology_mode=rc.topology_mode,
        topology_level=rc.topology_level,
        devices_per_pod=sub.devices,
        pod_count=sub.pods,
        priority_class=PriorityClass.objects.get(name=sub.priority),
        max_runtime_seconds=sub.max_runtime if sub.max_runtime and sub.max_runtime >= 60 else None,
        checkpoint_path="/ckpt" if sub.checkpoint else "",
        checkpoint_signal="SIGUSR1" if sub.checkpoint else "",
        checkpoint_interval_seconds=1800 if sub.checkpoint else None,
        sim_runtime_seconds=sub.runtime,
        sim_fails=sub.fails,
    )
    return job_services.job_submit(owner=user, team=team, spec=spec, now=now, notify_backend=notify)


def _next_completion(cluster: Cluster) -> datetime | None:
    """When the next running job ends (its simulated runtime or its maximum), if any is running."""
    soonest = None
    for job in Job.objects.filter(cluster=cluster, state=Job.State.RUNNING):
        if job.kind_spec.runs_until_stopped:
            continue  # a session or a service has no natural end
        remaining = job_services.default_runtime(job) - timedelta(seconds=job.run_seconds_banked)
        if job.max_runtime_seconds:
            remaining = min(remaining, timedelta(seconds=job.max_runtime_seconds - job.run_seconds_banked))
        end = job.state_changed_at + remaining
        soonest = end if soonest is None or end < soonest else soonest
    return soonest


#: ``progress(step, fraction)``: what the seeding is doing, and how far it is through that step (0 to 1).
Progress = Callable[[str, float], None]


def _no_progress(step: str, fraction: float) -> None:
    """The default ``Progress``: says nothing."""


def _replay(
    cluster: Cluster, subs: list[Submission], *, end: datetime, progress: Progress = _no_progress, step: str = ""
) -> int:
    """Drive the simulated cluster through the history, ticking only when something happens."""
    ticks = 0
    cancels: list[tuple[datetime, int]] = []
    queue = list(subs)
    clock = queue[0].at if queue else end
    begin = clock
    span = (end - begin).total_seconds() or 1.0
    progress(step, 0.0)
    while clock < end:
        progress(step, min(1.0, (clock - begin).total_seconds() / span))
        while queue and queue[0].at <= clock:
            sub = queue.pop(0)
            job = _submit(sub, now=sub.at, notify=False)
            if sub.cancel_after:
                cancels.append((sub.at + timedelta(seconds=sub.cancel_after), job.pk))
        for when, job_id in [c for c in cancels if c[0] <= clock]:
            cancels.remove((when, job_id))
            job = Job.objects.get(pk=job_id)
            if not job.is_final:
                job_services.job_cancel(job=job, user=job.owner, now=when, notify_backend=False)
        report = simulated_cluster_tick_run(cluster_id=cluster.pk, now=clock)
        ticks += 1
        if report.admitted or report.requeued:
            clock += timedelta(seconds=20)  # pods start (or checkpoints finish) shortly after
            continue
        candidates = [end]
        if queue:
            candidates.append(queue[0].at)
        if cancels:
            candidates.append(min(c[0] for c in cancels))
        done = _next_completion(cluster)
        if done is not None:
            candidates.append(done)
        if Job.objects.filter(cluster=cluster, state=Job.State.PREEMPTING).exists():
            candidates.append(clock + timedelta(seconds=15))
        clock = max(min(candidates), clock + timedelta(seconds=1))
    progress(step, 1.0)
    return ticks


#: The last hour's submissions, chosen to show each kind of wait and each workload kind in the live demo.
LIVE = [
    # (minutes ago, team, user, class, name, devices, pods, runtime, priority, kind)
    (50, "nlp", "bob", "h100-nvlink-8x", "llama-70b-pretrain", 8, 3, 6 * 3600, "training", "jobset"),
    (48, "nlp", "erin", "h100", "ray-hpo", 1, 2, 3 * 3600, "training", "rayjob"),
    (45, "vision", "alice", "h100", "vit-huge", 8, 1, 5 * 3600, "training", "batch"),
    (40, "vision", "carol", "h100", "detr-finetune", 8, 1, 4 * 3600, "training", "batch"),
    (35, "speech", "dave", "h100", "whisper-large", 8, 1, 3 * 3600, "training", "batch"),
    (30, "vision", "alice", "h100-nvlink-8x", "vit-22b", 8, 2, 8 * 3600, "training", "batch"),
    (25, "nlp", "erin", "mi300x", "mixtral-sft", 8, 1, 5 * 3600, "training", "batch"),
    (24, "nlp", "bob", "mi300x", "mixtral-dpo", 8, 1, 3 * 3600, "training", "batch"),
    (22, "nlp", "bob", "mi300x", "mixtral-ddp", 1, 2, 2 * 3600, "training", "pytorchjob"),
    (20, "nlp", "bob", "mi300x", "mixtral-eval", 8, 1, 2 * 3600, "preemptible", "batch"),
    (18, "nlp", "erin", "h100-nvlink-8x", "llama-405b-serve", 8, 1, 8 * 3600, "training", "inference-lws"),
    (15, "speech", "dave", "a100-1g-10gb", "asr-notebook", 1, 1, 2 * 3600, "training", "session"),
    (12, "vision", "frank", "l4-shared", "demo-inference", 1, 1, 4 * 3600, "training", "inference"),
    (10, "speech", "dave", "h100", "tts-multispeaker", 4, 1, 2 * 3600, "training", "batch"),
    (5, "vision", "alice", "h100", "sam-distill", 4, 1, 3 * 3600, "urgent", "batch"),
]


def _live(cluster: Cluster, now: datetime, progress: Progress = _no_progress) -> int:
    """The last hour: a burst that fills the H100s and MI300Xs so that jobs wait for different reasons."""
    subs = [
        Submission(
            at=now - timedelta(minutes=ago),
            team=team,
            user=user,
            cls=cls,
            name=name,
            devices=devices,
            pods=pods,
            runtime=runtime,
            priority=priority,
            checkpoint=True,
            kind=kind,
        )
        for ago, team, user, cls, name, devices, pods, runtime, priority, kind in LIVE
    ]
    return _replay(cluster, subs, end=now, progress=progress, step="replaying the last hour's burst")


@transaction.atomic
def demo_seed(
    *,
    now: datetime | None = None,
    days: int = 30,
    seed: int = 7,
    progress: Progress = _no_progress,
    password: str = DEMO_PASSWORD,
) -> DemoReport:
    """Seed (or top up) the demo; the history is generated only into a demo cluster that has no jobs yet.

    ``progress(step, fraction)`` is told each step and how far the replay of the history is (``seed_demo``
    prints it: the replay takes minutes on a small machine). New demo users get ``password``.
    """
    now = now or timezone.now()
    progress("installing the pool, users, policy and classes", 0.0)
    cluster, _ = Cluster.objects.get_or_create(
        name=DEMO_CLUSTER, defaults={"display_name": "Simulated cluster", "backend": Cluster.Backend.SIMULATED}
    )
    import_report = demo_pool_install(cluster=cluster, now=now)
    created = _users(password)
    _policy(cluster)
    _classes()
    history_jobs = ticks = 0
    if not Job.objects.filter(cluster=cluster).exists():
        rng = random.Random(seed)
        live_start = now - timedelta(hours=1)
        subs = _history(now - timedelta(days=days), live_start - timedelta(hours=14), rng)
        step = f"replaying {days} days of history ({len(subs)} jobs) through the simulated cluster"
        ticks = _replay(cluster, subs, end=live_start, progress=progress, step=step)
        ticks += _live(cluster, now, progress)
        history_jobs = len(subs) + len(LIVE)
        # the last hour as the simulated DCGM saw it: idle sessions are visible (and negotiated) from the start
        simulated_dcgm_record(cluster=cluster, start=live_start, end=now, step=timedelta(minutes=1))
        demo_health_seed(cluster=cluster, now=now)
    progress("rolling the jobs' wait reasons up (where the waiting went)", 1.0)
    wait_attribution_sync(now=now)
    return DemoReport(
        created_users=created, history_jobs=history_jobs, ticks=ticks, devices=import_report.devices.created
    )


__all__ = ["DEGRADED_NODE", "DEMO_CLUSTER", "DEMO_PASSWORD", "OPERATORS", "DemoReport", "demo_seed"]
