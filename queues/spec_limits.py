"""The size limits of a submission: one table shared by the Job model, ``job_spec_errors``, the form and the API.

Every limit here is also what the model can store (its ``max_length`` or validators), so the page, the
feasibility check and the API refuse the same values with the same message, naming the field and the limit,
and no value that passed can fail at the database (which would be a 500).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kernel.quantity import MAX_NODE_DEVICE_UNITS

#: Longest job a submission may ask for; also the longest simulated runtime and checkpoint interval.
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
MIN_RUNTIME_SECONDS = 60
MIN_CHECKPOINT_INTERVAL_SECONDS = 60
MAX_IMAGE = 500
MAX_CHECKPOINT_PATH = 500
MAX_CHECKPOINT_SIGNAL = 20
MAX_TOPOLOGY_LEVEL = 253
MAX_PODS = 512
#: Devices one pod may ask for: no node has more units of one resource (kernel.quantity).
MAX_DEVICES_PER_POD = MAX_NODE_DEVICE_UNITS
#: CPU and memory one pod of a companion pod set (a launcher, a Ray head) may ask for: beyond any node made.
MAX_POD_CPU = "1024"
MAX_POD_MEMORY = "16Ti"
MAX_ENV_VARS = 200
MAX_ENV_NAME = 256
MAX_ENV_VALUE = 32 * 1024
#: Words of a command, its arguments or the checkpoint command, and characters of one word.
MAX_WORDS = 256
MAX_WORD = 8 * 1024

Err = Callable[[str, str], None]


def _seconds(err: Err, field: str, value: int | None, low: int, what: str) -> None:
    """A duration in seconds within [low, MAX_RUNTIME_SECONDS]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_RUNTIME_SECONDS:
        err(field, f"{what} must be between {low} s and {MAX_RUNTIME_SECONDS // 86400} days, got {value}")


def _words(err: Err, field: str, words: Iterable[str]) -> None:
    """A list of command-line words: bounded count and length, no NUL character."""
    words = list(words or ())
    if len(words) > MAX_WORDS:
        err(field, f"at most {MAX_WORDS} words, got {len(words)}")
    for word in words:
        if not isinstance(word, str):
            err(field, f"every word must be text, got {type(word).__name__}")
            return
        if len(word) > MAX_WORD:
            err(field, f"a word may have at most {MAX_WORD} characters, one has {len(word)}")
            return
        if "\x00" in word:
            err(field, "must not contain a NUL character")
            return


def _text(err: Err, field: str, value: str, limit: int) -> None:
    """A text field: at most ``limit`` characters, no NUL, no line break."""
    if len(value) > limit:
        err(field, f"at most {limit} characters, got {len(value)}")
    elif "\x00" in value or "\n" in value or "\r" in value:
        err(field, "must not contain a NUL character or a line break")


def spec_limit_errors(spec, err: Err) -> None:
    """Report every size or range limit ``spec`` (a ``JobSpec``) breaks through ``err(field, message)``."""
    _text(err, "checkpoint_path", spec.checkpoint_path or "", MAX_CHECKPOINT_PATH)
    _text(err, "checkpoint_signal", spec.checkpoint_signal or "", MAX_CHECKPOINT_SIGNAL)
    _text(err, "topology_level", spec.topology_level or "", MAX_TOPOLOGY_LEVEL)
    if not 1 <= spec.devices_per_pod <= MAX_DEVICES_PER_POD:
        err(
            "devices_per_pod",
            f"devices per pod must be between 1 and {MAX_DEVICES_PER_POD}, got {spec.devices_per_pod}",
        )
    if not 1 <= spec.pod_count <= MAX_PODS:
        err("pod_count", f"pods must be between 1 and {MAX_PODS}, got {spec.pod_count}")
    _seconds(err, "max_runtime_seconds", spec.max_runtime_seconds, MIN_RUNTIME_SECONDS, "the maximum runtime")
    _seconds(
        err,
        "checkpoint_interval_seconds",
        spec.checkpoint_interval_seconds,
        MIN_CHECKPOINT_INTERVAL_SECONDS,
        "the checkpoint interval (at most once a minute)",
    )
    _seconds(err, "sim_runtime_seconds", spec.sim_runtime_seconds, 0, "the simulated runtime")
    for field in ("command", "args", "checkpoint_command"):
        _words(err, field, getattr(spec, field))
    _env(err, spec.env or {})


def _env(err: Err, env: Mapping[str, str]) -> None:
    """Environment variables: bounded count, name and value lengths, no NUL."""
    if len(env) > MAX_ENV_VARS:
        err("env", f"at most {MAX_ENV_VARS} environment variables, got {len(env)}")
        return
    for key, value in env.items():
        if len(key) > MAX_ENV_NAME:
            err("env", f"a variable name may have at most {MAX_ENV_NAME} characters, one has {len(key)}")
        if not isinstance(value, str):
            err("env", f"the value of {key[:40]!r} must be text")
        elif len(value) > MAX_ENV_VALUE:
            err("env", f"the value of {key[:40]!r} has {len(value)} characters, at most {MAX_ENV_VALUE}")
        elif "\x00" in value:
            err("env", f"the value of {key[:40]!r} must not contain a NUL character")
