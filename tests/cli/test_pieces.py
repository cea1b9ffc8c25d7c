"""The client's parts on their own: durations, command lines, environment, refusals, the text it prints."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from gpupool.api import flatten_errors, refusal
from gpupool.main import cli
from gpupool.show import diagnosis, job_text, span
from gpupool.spec import SpecError, command_line, environment, parse_duration, pod_set, submission, with_flags

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("45s", 45), ("90", 5400), (5, 300)],
)
def test_durations_read_as_the_submit_form_reads_them(text, seconds):
    assert parse_duration(text, key="max_runtime") == seconds


@pytest.mark.parametrize("text", ["", "soon", "1x", "-5", True, "1.5h"])
def test_a_bad_duration_names_its_key(text):
    with pytest.raises(SpecError, match=r"^max_runtime: .* is not a duration"):
        parse_duration(text, key="max_runtime")


def test_command_lines_and_environment():
    assert command_line("python train.py --msg 'a b'", key="command") == ["python", "train.py", "--msg", "a b"]
    assert command_line(["python", 3], key="command") == ["python", "3"]
    with pytest.raises(SpecError, match=r"^command: "):
        command_line({"a": 1}, key="command")
    with pytest.raises(SpecError, match=r"^args: No closing quotation"):
        command_line("echo 'open", key="args")
    assert environment(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    assert environment({"A": 1, "B": None}) == {"A": "1", "B": ""}
    with pytest.raises(SpecError, match=r"^env: 'A' is not KEY=VALUE"):
        environment(["A"])


def test_flags_win_over_the_file_and_add_to_its_environment(tmp_path):
    spec = tmp_path / "job.yml"
    spec.write_text("name: a\nclass: h100\ngpus: 2\nenv: {A: '1', B: '2'}\ncheckpoint_interval: 30m\n")
    body = submission(spec, {"devices_per_pod": 4, "env": ["B=3"], "name": None, "command": ()})
    assert body == {
        "name": "a",
        "resource_class": "h100",
        "devices_per_pod": 4,
        "env": {"A": "1", "B": "3"},
        "checkpoint_interval_seconds": 1800,
    }
    spec.write_text("- not a mapping\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        submission(spec, {})
    with pytest.raises(SpecError, match="cannot read"):
        submission(tmp_path / "missing.yml", {})


def test_protection_reads_from_the_file_and_the_flags(tmp_path):
    spec = tmp_path / "job.yml"
    spec.write_text(
        "name: a\nclass: h100\nmin_runtime: 30m\nfinishing_protection: 10m\npreempt_after_checkpoint: true\n"
    )
    assert submission(spec, {}) == {
        "name": "a",
        "resource_class": "h100",
        "protect_min_runtime_seconds": 1800,
        "protect_finishing_seconds": 600,
        "preempt_after_checkpoint": True,
    }
    flags = {"min_runtime": "1h", "preempt_after_checkpoint": False}
    body = submission(spec, flags)
    assert (body["protect_min_runtime_seconds"], body["preempt_after_checkpoint"]) == (3600, False)
    with pytest.raises(SpecError, match="min_runtime"):
        submission(None, {"min_runtime": "soon"})


def test_refusals_are_sentences():
    assert flatten_errors({"env": {"A": ["too long"]}, "command": {"0": ["blank"]}, "name": ["bad"]}) == {
        "env[A]": ["too long"],
        "command[0]": ["blank"],
        "name": ["bad"],
    }
    assert with_flags({"devices_per_pod": ["x"], "name": ["y"]}) == {"devices_per_pod (--gpus)": ["x"], "name": ["y"]}
    one_field = refusal(400, {"detail": "no such team", "field": "team"}, url="http://p/")
    assert one_field.lines() == ["the portal refused the request:", "  team: no such team"]
    throttled = refusal(429, {"detail": "Request was throttled."}, url="http://p/", retry_after="12")
    assert str(throttled) == "too many requests: Request was throttled. Try again in 12 s."
    assert "create a new one at http://p/tokens/" in str(refusal(401, {"detail": "x"}, url="http://p/"))
    assert str(refusal(502, None, url="http://p/")) == "the portal answered HTTP 502"
    down = refusal(503, {"detail": "The portal's cache cannot be reached right now: try again shortly."}, url="http://p/",
                   retry_after="30")  # fmt: skip
    assert str(down) == (
        "the portal is temporarily unavailable: The portal's cache cannot be reached right now: try again shortly."
        " Try again in 30 s."
    )


def test_spans_and_a_job_that_does_not_wait():
    assert [span(s) for s in (0, 59, 60, 3599, 3600, 5400, 86400, 90000)] == [
        "0s", "59s", "1m", "59m", "1h", "1h 30m", "1d", "1d 1h"
    ]  # fmt: skip
    assert (
        diagnosis({"job": 3, "state": "running", "waiting": False}, now=NOW) == "job 3 is running: it is not waiting."
    )
    text = diagnosis(
        {
            "job": 3,
            "state": "pending",
            "waiting": True,
            "code": "quota_exhausted",
            "label": "Quota used up",
            "message": "Your team uses 16 of 16.",
            "since": "2026-12-04T11:00:00Z",
            "eta": None,
            "suggestions": [{"title": "Fewer GPUs", "message": "2 instead of 4", "changes": {"devices_per_pod": 2}}],
        },
        now=NOW,
    )
    assert text.splitlines() == [
        "job 3 is pending: Quota used up (quota_exhausted)",
        "  Your team uses 16 of 16.",
        "  since:    2026-12-04 11:00 UTC (1h ago)",
        "  expected: no estimate",
        "It would start now if:",
        "  1. Fewer GPUs: 2 instead of 4",
        "     (resubmit with devices_per_pod=2)",
    ]


def test_an_unreachable_portal_is_said_so():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(cli, ["--url", f"http://127.0.0.1:{port}", "--token", "gpp_x", "list"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"gpupool: cannot reach the portal at http://127.0.0.1:{port}/: ")


def test_pod_set_flags_read_as_the_api_pod_sets(tmp_path):
    assert pod_set("head=1:0,cpu=16,memory=64Gi") == {
        "name": "head",
        "count": 1,
        "devices_per_pod": 0,
        "cpu": "16",
        "memory": "64Gi",
    }
    assert pod_set("launcher=,cpu=8") == {"name": "launcher", "cpu": "8"}
    for bad in ("head", "head=x", "head=1,gpus=2", "=1"):
        with pytest.raises(SpecError, match="NAME=COUNT"):
            pod_set(bad)
    path = tmp_path / "job.yaml"
    path.write_text("kind: rayjob\npod_sets:\n- {name: head, cpu: '4'}\n- {name: other, count: 1}\n")
    body = submission(path, {"pod_sets": [pod_set("head=1,cpu=16")]})
    assert body["kind"] == "rayjob"
    assert body["pod_sets"] == [{"name": "head", "count": 1, "cpu": "16"}, {"name": "other", "count": 1}]


def test_status_names_the_kind_and_each_pod_set():
    job = {
        "id": 7,
        "name": "tune",
        "state": "running",
        "kind": "rayjob",
        "resource_class": "h100",
        "devices_per_pod": 2,
        "pod_count": 2,
        "image": "registry.example.org/ml/ray:2",
        "pod_sets": [
            {"name": "head", "count": 1, "devices_per_pod": 0, "cpu": "4", "memory": "16Gi", "flavors": []},
            {"name": "workers", "count": 2, "devices_per_pod": 2, "cpu": "16", "memory": "128Gi", "flavors": ["h100"]},
        ],
    }
    text = job_text(job, now=NOW)
    assert "  kind rayjob" in text
    assert "  pod set head: 1 pod(s) × 0 devices, 4 CPU, 16Gi memory" in text
    assert "  pod set workers: 2 pod(s) × 2 devices, 16 CPU, 128Gi memory on h100" in text


def test_a_pytorchjob_is_listed_with_every_pod_set_counted():
    """Issue 32: a PyTorchJob of 2 workers × 8 plus a master of 8 was listed as "8×2" while the page said 24."""
    from gpupool.show import job_table

    job = {
        "id": 9,
        "name": "ddp",
        "state": "pending",
        "resource_class": "h100",
        "devices_per_pod": 8,
        "pod_count": 2,
        "total_devices": 24,
        "pod_set_count": 2,
        "owner": "alice",
        "submitted_at": "2026-12-04T19:40:00Z",
        "wait_reason": "quota_exhausted",
        "wait_label": "Team quota used up",
    }
    row = job_table([job]).splitlines()[1]
    assert "24 in 2 pod sets" in row
    assert "8×2" not in row
    assert row.endswith("Team quota used up")
    plain = {**job, "total_devices": 16, "pod_set_count": 1}
    assert "8×2" in job_table([plain]).splitlines()[1]
