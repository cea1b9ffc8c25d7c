"""Soak the embedded mode: run what ``scripts/demo`` runs for a given time under a scripted load, then print what the
background work did.

The processes are ``scripts/embedded.py`` (web server, Celery worker with beat, the embedded broker, SQLite) on a
copy of a seeded demo database (``--database``), or on a database seeded now (minutes). The load, from threads:
researchers (alice, bob, dave, frank) submit jobs through the API, cancel some, and poll the pages the way the
browser does (the job list, a job, the catalogue: full pages and their htmx fragments); the operator polls the
pool and the status page; the admin changes a team quota through the admin every ``--admin-every`` minutes
(save → what-if preview replayed on the worker → apply → push). A sampler reads ``/status.json`` every 5 s.

It prints: requests and their answers; per periodic entry runs, late runs, failures and the longest lag; the
tasks the worker ran and failed (from its log); tracebacks, "database is locked" and other problems in every log;
supervisor restarts; the longest heartbeat gap of worker and beat; how long ``/status.json`` said not ok. It exits
1 when any task failed, any log holds a problem, the worker restarted or an entry ran late.

    .venv/bin/python benchmarks/soak.py --minutes 60 --port 18150 --database /path/to/seeded.sqlite3
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PASSWORD = "demo-password"
RESEARCHERS = {"alice": "vision", "bob": "nlp", "dave": "speech", "frank": "speech"}
#: Small jobs of the demo's classes (the simulated runtime makes some end during the soak).
JOB_CLASSES = ("a100-1g-10gb", "a100-2g-20gb", "l4-shared", "h100")
PROBLEM = re.compile(r"Traceback \(most recent call last\)|CRITICAL|Unrecoverable error|database is locked")


@dataclass
class Tally:
    """What the load did, counted under a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    def add(self, key: str, n: int = 1) -> None:
        """Count ``key``."""
        with self.lock:
            self.counts[key] += n

    def error(self, text: str) -> None:
        """Remember a failure of the load (the first 50)."""
        with self.lock:
            self.counts["load errors"] += 1
            if len(self.errors) < 50:
                self.errors.append(f"{datetime.now(UTC):%H:%M:%S} {text}")


class FormFields(HTMLParser):
    """The named fields of one form of a page, as the browser would post them."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside, self.fields, self._select, self._text = form_id, False, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        if tag == "input" and a.get("name") and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.fields.append([a["name"], a.get("value", "on" if a.get("type") == "checkbox" else "")])
        elif tag == "select" and a.get("name"):
            self._select = [a["name"], None]
        elif tag == "option" and self._select is not None and ("selected" in a or self._select[1] is None):
            if "selected" in a or self._select[1] is None:
                self._select[1] = a.get("value", "")
        elif tag == "textarea" and a.get("name"):
            self._text = [a["name"], ""]

    def handle_data(self, data):
        if self._text is not None:
            self._text[1] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False
        elif tag == "select" and self._select is not None:
            self.fields.append([self._select[0], self._select[1] or ""])
            self._select = None
        elif tag == "textarea" and self._text is not None:
            self.fields.append(self._text)
            self._text = None


class Portal:
    """The running embedded portal: its URL and signed-in sessions."""

    def __init__(self, base: str) -> None:
        self.base = base

    def session(self, username: str) -> requests.Session:
        """Signed in through the sign-in page."""
        s = requests.Session()
        s.get(f"{self.base}/accounts/login/", timeout=60)
        s.post(
            f"{self.base}/accounts/login/",
            data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": s.cookies["csrftoken"]},
            headers={"Referer": f"{self.base}/accounts/login/"},
            timeout=60,
        )
        if "sessionid" not in s.cookies:
            raise RuntimeError(f"sign-in as {username} failed")
        s.headers.update({"X-CSRFToken": s.cookies["csrftoken"], "Referer": f"{self.base}/"})
        return s


def researcher(portal: Portal, name: str, team: str, token: str, stop: threading.Event, tally: Tally) -> None:
    """Submit every ~40 s, cancel one of one's jobs every ~3 min, poll pages and fragments every few seconds."""
    rnd = random.Random(name)
    browser = portal.session(name)
    api = requests.Session()
    api.headers["Authorization"] = f"Token {token}"
    mine: list[int] = []
    next_submit = time.monotonic() + rnd.uniform(5, 40)
    next_cancel = time.monotonic() + rnd.uniform(60, 180)
    n = 0
    while not stop.is_set():
        now = time.monotonic()
        try:
            if now >= next_submit:
                n += 1
                body = {
                    "name": f"soak-{name}-{n}",
                    "image": "registry.example.org/soak:1",
                    "resource_class": rnd.choice(JOB_CLASSES),
                    "devices_per_pod": 1,
                    "sim_runtime_seconds": rnd.choice((120, 300, 900, 1800)),
                }
                answer = api.post(f"{portal.base}/api/jobs/", json=body, timeout=60)
                tally.add(f"submissions {answer.status_code}")
                if answer.status_code == 201:
                    mine.append(answer.json()["id"])
                elif answer.status_code != 400:  # 400: a class the team has no quota for, by design of the demo
                    tally.error(f"{name} submit: {answer.status_code} {answer.text[:200]}")
                next_submit = now + rnd.uniform(20, 60)
            if now >= next_cancel and mine:
                job = mine.pop(rnd.randrange(len(mine)))
                answer = api.post(f"{portal.base}/api/jobs/{job}/cancel/", timeout=60)
                tally.add(f"cancels {answer.status_code}")
                if answer.status_code not in (200, 409):  # 409: it had ended already
                    tally.error(f"{name} cancel {job}: {answer.status_code} {answer.text[:200]}")
                next_cancel = now + rnd.uniform(120, 240)
            page = rnd.choice(["/jobs/", "/classes/", f"/jobs/{mine[-1]}/" if mine else "/jobs/"])
            headers = {"HX-Request": "true"} if rnd.random() < 0.7 else {}
            answer = browser.get(f"{portal.base}{page}", headers=headers, timeout=60)
            tally.add("page polls")
            if answer.status_code not in (200, 286):
                tally.error(f"{name} GET {page}: {answer.status_code}")
            elif "Live data paused" in answer.text:
                tally.add("pages saying live data paused")
        except requests.RequestException as exc:
            tally.error(f"{name}: {type(exc).__name__}: {exc}")
        stop.wait(rnd.uniform(3, 8))


def operator(portal: Portal, stop: threading.Event, tally: Tally) -> None:
    """Poll the pool (page and node grid) and the status page."""
    s = portal.session("oscar")
    while not stop.is_set():
        for page, hx in (("/pool/", False), ("/pool/", True), ("/status/", True)):
            try:
                answer = s.get(f"{portal.base}{page}", headers={"HX-Request": "true"} if hx else {}, timeout=60)
                tally.add("page polls")
                if answer.status_code != 200:
                    tally.error(f"oscar GET {page}: {answer.status_code}")
            except requests.RequestException as exc:
                tally.error(f"oscar: {type(exc).__name__}: {exc}")
        stop.wait(10)


def admin_change(portal: Portal, s: requests.Session, tally: Tally, rnd: random.Random) -> None:
    """Change one quota line's nominal by ±1 through the admin: save, wait for the what-if preview, apply."""
    listing = s.get(f"{portal.base}/admin/queues/teamquota/", timeout=60).text
    ids = sorted(set(re.findall(r"/admin/queues/teamquota/(\d+)/change/", listing)))
    if not ids:
        tally.error("admin: no team quota to change")
        return
    url = f"{portal.base}/admin/queues/teamquota/{rnd.choice(ids)}/change/"
    parser = FormFields("teamquota_form")
    parser.feed(s.get(url, timeout=60).text)
    fields = parser.fields
    nominal = next((f for f in fields if re.fullmatch(r"[\w-]+-\d+-nominal", f[0]) and f[1].isdigit()), None)
    if nominal is None:
        tally.error("admin: no integer nominal on the quota form")
        return
    nominal[1] = str(int(nominal[1]) + (1 if int(nominal[1]) < 2 or rnd.random() < 0.5 else -1))
    answer = s.post(url, data=[*fields, ("_save", "Save")], timeout=120, allow_redirects=False)
    preview = re.search(r"/admin/policy/previews/(\d+)/", answer.headers.get("Location", ""))
    if answer.status_code != 302 or preview is None:
        tally.error(f"admin save: {answer.status_code} {answer.headers.get('Location', '')}")
        return
    page_url = f"{portal.base}/admin/policy/previews/{preview.group(1)}/"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        page = s.get(page_url, timeout=60).text
        status = re.search(r'data-status="(\w+)"', page)
        if status and status.group(1) in ("done", "failed"):
            break
        time.sleep(2)
    else:
        tally.error(f"admin: preview {preview.group(1)} not finished in 10 min")
        return
    if status.group(1) != "done" or 'name="_whatif_apply"' not in page:
        tally.error(f"admin: preview {preview.group(1)} {status.group(1)}, not applicable")
        return
    apply = FormFields("whatif-form")
    apply.feed(page)
    action = re.search(r'<form method="post" action="([^"]+)" id="whatif-form"', page).group(1)
    answer = s.post(
        f"{portal.base}{action}", data=[*apply.fields, ("_whatif_apply", "Apply change")], timeout=120,
        allow_redirects=False,
    )  # fmt: skip
    tally.add(f"admin changes {answer.status_code}")
    if answer.status_code != 302:
        tally.error(f"admin apply: {answer.status_code}")


def admin(portal: Portal, every: float, stop: threading.Event, tally: Tally) -> None:
    """An admin change every ``every`` seconds (the first after a minute)."""
    s = portal.session("admin")
    rnd = random.Random("admin")
    if stop.wait(60):
        return
    while not stop.is_set():
        try:
            admin_change(portal, s, tally, rnd)
        except (requests.RequestException, AttributeError) as exc:
            tally.error(f"admin: {type(exc).__name__}: {exc}")
        stop.wait(every)


@dataclass
class Samples:
    """What /status.json said over time."""

    not_ok_seconds: float = 0.0
    gaps: dict = field(default_factory=lambda: {"worker": 0.0, "beat": 0.0})
    overdue: Counter = field(default_factory=Counter)
    count: int = 0


def sampler(portal: Portal, stop: threading.Event, samples: Samples, tally: Tally) -> None:
    """Every 5 s: /status.json; the age of each heartbeat, how long the whole was not ok, which entry was overdue."""
    s = portal.session("oscar")
    last = time.monotonic()
    while not stop.wait(5):
        try:
            body = s.get(f"{portal.base}/status.json", timeout=60).json()
        except (requests.RequestException, ValueError) as exc:
            tally.error(f"status.json: {type(exc).__name__}: {exc}")
            continue
        now = time.monotonic()
        samples.count += 1
        if not body["ok"]:
            samples.not_ok_seconds += now - last
        last = now
        for name in ("worker", "beat"):
            seen = body["components"][name]["last_seen"]
            if seen:
                age = (datetime.now(UTC) - datetime.fromisoformat(seen)).total_seconds()
                samples.gaps[name] = max(samples.gaps[name], age)
        for entry in body["components"]["tasks"]["overdue"]:
            samples.overdue[entry] += 1


def wait_for(url: str, timeout: float) -> None:
    """Until ``url`` answers 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s")


def manage(env: dict, *args: str) -> str:
    """``manage.py ARGS`` on the soak's database."""
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout


TOKEN_CODE = """
from django.contrib.auth import get_user_model
from queues.api.tokens import api_token_create
from queues.models import Team
user = get_user_model().objects.get(username={user!r})
print("KEY=" + api_token_create(user=user, team=Team.objects.get(slug={team!r}), name="soak").key)
"""


def report(db: Path, logs: list[Path], supervisor_log: Path, samples: Samples, tally: Tally, minutes: float) -> int:
    """Print the figures; 1 when something went wrong."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT entry, runs, late, failures, last_lag_seconds, last_error FROM liveness_periodictaskstate "
            "ORDER BY entry"
        ).fetchall()
        task_failures = conn.execute("SELECT task, count, last_error FROM portal_taskfailure").fetchall()
    texts = {path.name: path.read_text(errors="replace") if path.exists() else "" for path in logs}
    worker_log = texts.get("worker.log", "")
    ran = len(re.findall(r"\] succeeded in ", worker_log))
    failed = len(re.findall(r"\] raised unexpected", worker_log))
    retried = len(re.findall(r"\] retry: ", worker_log))
    problems = {name: [m.group(0) for m in PROBLEM.finditer(text)] for name, text in texts.items()}
    restarts = supervisor_log.read_text().count("exited with") if supervisor_log.exists() else 0
    print(f"\nsoak: {minutes:.0f} min of scripts/embedded.py (SQLite, embedded broker) under load")
    print("load: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.counts.items())))
    print(f"\n{'periodic entry':<62} {'runs':>6} {'late':>5} {'failed':>6} {'last lag s':>10}")
    total = Counter()
    for entry, runs, late, failures, lag, _error in rows:
        print(f"{entry:<62} {runs:>6} {late:>5} {failures:>6} {lag if lag is not None else 0:>10.2f}")
        total.update(runs=runs, late=late, failures=failures)
    print(f"{'total':<62} {total['runs']:>6} {total['late']:>5} {total['failures']:>6}")
    print(f"\nworker tasks (its log): {ran} succeeded, {failed} failed, {retried} retried")
    longest: dict[str, float] = {}
    for task, seconds in re.findall(r"Task (\S+)\[[^\]]+\] succeeded in ([0-9.]+)s", worker_log):
        longest[task] = max(longest.get(task, 0.0), float(seconds))
    print("longest run per task (s): " + ", ".join(f"{t} {v:.2f}" for t, v in sorted(longest.items())))
    print(f"task failures recorded (portal.TaskFailure): {sum(r[1] for r in task_failures)}")
    for task, count, error in task_failures:
        print(f"  {task}: {count} × {error[:160]}")
    for entry, _runs, _late, failures, _lag, error in rows:
        if failures:
            print(f"  {entry}: last error {error[:160]}")
    tracebacks = sum(p.count("Traceback (most recent call last)") for p in problems.values())
    locked = sum(p.count("database is locked") for p in problems.values())
    other = sum(len(p) for p in problems.values()) - tracebacks - locked
    print(f'tracebacks in the logs: {tracebacks}; "database is locked": {locked}; other problems: {other}')
    for name, found in problems.items():
        if found:
            first = PROBLEM.search(texts[name])
            excerpt = texts[name][max(first.start() - 600, 0) : first.end() + 1500]
            print(f"  {name}: {len(found)}, the first:\n{excerpt}")
    print(f"supervisor restarts: {restarts}")
    threshold = os.environ.get("HEARTBEAT_STALE_SECONDS", "60")
    print(
        f"heartbeat gaps (the longest age seen in /status.json, threshold {threshold} s): "
        f"worker {samples.gaps['worker']:.1f} s, beat {samples.gaps['beat']:.1f} s"
    )
    print(f"/status.json not ok: {samples.not_ok_seconds:.0f} s of {samples.count} samples; overdue seen: "
          f"{dict(samples.overdue) or 'never'}")  # fmt: skip
    if tally.errors:
        print("load errors (first 50):\n  " + "\n  ".join(tally.errors))
    bad = total["failures"] or failed or tracebacks or locked or other or restarts or total["late"] or samples.overdue
    print("\nverdict:", "FAIL" if bad else "OK: 0 failures, 0 tracebacks, 0 'database is locked', every entry on time")
    return 1 if bad else 0


def main() -> int:
    """Parse the options, start the portal, run the load, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--port", type=int, default=8150)
    parser.add_argument("--database", type=Path, help="a seeded demo SQLite file to copy (default: seed one now)")
    parser.add_argument("--workdir", type=Path, help="where the copy, logs and var/ go (default: a temporary dir)")
    parser.add_argument("--admin-every", type=float, default=10.0, help="minutes between admin changes")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="portal-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    db, var = work / "db.sqlite3", work / "var"
    var.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")}
    env.update(DATABASE_URL=f"sqlite:///{db}", PORTAL_VAR_DIR=str(var), PYTHONUNBUFFERED="1", DEBUG="0")
    env["CELERY_BROKER_URL"] = f"sqla+sqlite:///{var / 'celery-broker.sqlite3'}"
    if args.database:
        shutil.copyfile(args.database, db)
    manage(env, "migrate", "--noinput")
    if not args.database:
        print("seeding the demo (minutes)…", flush=True)
        manage(env, "seed_demo")
    tokens = {}
    for user, team in RESEARCHERS.items():
        out = manage(env, "shell", "-c", TOKEN_CODE.format(user=user, team=team))
        tokens[user] = re.search(r"KEY=(\S+)", out).group(1)
    web_log, supervisor_log = work / "web.log", var / "supervisor.log"
    with open(work / "embedded.log", "ab") as out:
        process = subprocess.Popen(
            [PYTHON, "scripts/embedded.py", "--no-setup", "--port", str(args.port), "--web-log", str(web_log)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{args.port}"
    stop, tally, samples = threading.Event(), Tally(), Samples()
    try:
        wait_for(f"{base}/healthz", 300)
        portal = Portal(base)
        print(f"soak: {args.minutes:.0f} min against {base} (work dir {work})", flush=True)
        threads = [
            threading.Thread(target=researcher, args=(portal, u, t, tokens[u], stop, tally))
            for u, t in RESEARCHERS.items()
        ]
        threads += [
            threading.Thread(target=operator, args=(portal, stop, tally)),
            threading.Thread(target=admin, args=(portal, args.admin_every * 60, stop, tally)),
            threading.Thread(target=sampler, args=(portal, stop, samples, tally)),
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + args.minutes * 60
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(min(30, max(0.0, deadline - time.monotonic())))
            print(f"  {datetime.now(UTC):%H:%M:%S} " + ", ".join(f"{k} {v}" for k, v in sorted(tally.counts.items())),
                  flush=True)  # fmt: skip
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        stop.set()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    logs = [var / "worker.log", web_log, supervisor_log, work / "embedded.log"]
    return report(db, logs, supervisor_log, samples, tally, args.minutes)


if __name__ == "__main__":
    sys.exit(main())
