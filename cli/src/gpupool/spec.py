"""A submission body for ``POST /api/jobs/`` from a small YAML file and command-line flags (flags win).

The keys are the API's field names (``resource_class``, ``devices_per_pod``, ``max_runtime_seconds``…) or their
short forms (``class``, ``gpus``, ``pods``, ``priority``, ``max_runtime: 2h``…). Durations are written as the
portal's form takes them: ``90m``, ``2h``, ``1h30m``, ``1d``, ``45s``; a bare number is minutes. A ``*_seconds``
key takes seconds, as the API does. Command lines are a list or a string split like a shell line. Types and
limits are left to the portal, which reports every problem by field.

A file that cannot be a submission — not UTF-8 text (binary garbage), larger than ``MAX_FILE_BYTES``, not YAML,
nested deeper than ``MAX_DEPTH``, YAML aliases, not a mapping, an unknown key — is refused in one line that names the
file and what is wrong (:class:`SpecFileError`), before any request.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

#: The API's submission fields (queues.api.serializers.JobSubmitSerializer).
FIELDS = (
    "team",
    "name",
    "image",
    "kind",
    "pod_sets",
    "command",
    "args",
    "env",
    "resource_class",
    "devices_per_pod",
    "pod_count",
    "topology_mode",
    "topology_level",
    "priority_class",
    "max_runtime_seconds",
    "checkpoint_path",
    "checkpoint_signal",
    "checkpoint_command",
    "checkpoint_interval_seconds",
    "protect_min_runtime_seconds",
    "protect_finishing_seconds",
    "preempt_after_checkpoint",
    "sim_runtime_seconds",
)
#: Short names a file may use instead.
ALIASES = {"class": "resource_class", "gpus": "devices_per_pod", "pods": "pod_count", "priority": "priority_class"}
#: Duration keys (the portal's duration syntax) and the seconds field each fills.
DURATIONS = {
    "max_runtime": "max_runtime_seconds",
    "checkpoint_interval": "checkpoint_interval_seconds",
    "sim_runtime": "sim_runtime_seconds",
    "min_runtime": "protect_min_runtime_seconds",
    "finishing_protection": "protect_finishing_seconds",
}
COMMAND_LINES = ("command", "args", "checkpoint_command")
#: The flag of ``gpupool submit`` that sets each field, where its name differs (to name it in a refusal).
FLAGS = {
    "resource_class": "--class",
    "devices_per_pod": "--gpus",
    "pod_count": "--pods",
    "priority_class": "--priority",
    "topology_mode": "--topology",
    "max_runtime_seconds": "--max-runtime",
    "checkpoint_interval_seconds": "--checkpoint-interval",
    "sim_runtime_seconds": "--sim-runtime",
    "protect_min_runtime_seconds": "--min-runtime",
    "protect_finishing_seconds": "--finishing-protection",
    "preempt_after_checkpoint": "--preempt-after-checkpoint",
    "pod_sets": "--pod-set",
}

_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


#: A submission is a few hundred bytes; a file past this is not one.
MAX_FILE_BYTES = 1024 * 1024
#: No submission nests deeper than a few levels (pod sets, their fields); past this the file is refused unread.
MAX_DEPTH = 32


class SpecError(ValueError):
    """A submission file or flag that cannot be read; names the key."""


class SpecFileError(SpecError):
    """A submission file that cannot be read: ``str()`` is one line, the file's name first."""


class _Loader(yaml.SafeLoader):
    """The safe loader refusing aliases (an alias bomb) and nesting deeper than ``MAX_DEPTH`` (a recursion crash)."""

    depth = 0

    def compose_node(self, parent, index):
        """Count the nesting on the way down; refuse aliases and excessive depth before building anything."""
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("anchors and aliases (*name) are not accepted")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (line and column, counted from 1)."""
    if isinstance(exc, yaml.reader.ReaderError):
        return f"not valid YAML: character U+{exc.character:04X} at offset {exc.position} is not allowed in YAML text"
    if isinstance(exc, yaml.MarkedYAMLError):
        what = " ".join(str(part) for part in (exc.context, exc.problem) if part) or "not valid YAML"
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"not valid YAML: {' '.join(what.split())}{where}"
    return " ".join(str(exc).split())


def parse_duration(text: str | int, *, key: str) -> int:
    """``90m``, ``2h``, ``1h30m``, ``1d``, ``45s`` → seconds; a bare number is minutes (as the submit form)."""
    if isinstance(text, bool):
        raise SpecError(f"{key}: {text!r} is not a duration such as 90m, 2h, 1h30m or 1d")
    if isinstance(text, int):
        return text * 60
    value = str(text).strip().lower().replace(" ", "")
    if value.isdigit():
        return int(value) * 60
    match = _DURATION.match(value)
    if not value or not match:
        raise SpecError(f"{key}: {text!r} is not a duration such as 90m, 2h, 1h30m or 1d")
    parts = {k: int(v or 0) for k, v in match.groupdict().items()}
    return parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]


def command_line(value: Any, *, key: str) -> list[str]:
    """A command line from a list of words or a shell-like string."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise SpecError(f"{key}: {exc} in {value!r}") from exc
    if isinstance(value, list) and all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise SpecError(f"{key}: give a list of words or one string, not {value!r}")


def environment(value: Any, *, key: str = "env") -> dict[str, str]:
    """Environment variables from a mapping or from ``KEY=VALUE`` strings."""
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        out: dict[str, str] = {}
        for item in value:
            name, sep, val = str(item).partition("=")
            if not sep or not name:
                raise SpecError(f"{key}: {item!r} is not KEY=VALUE")
            out[name] = val
        return out
    raise SpecError(f"{key}: give a mapping or a list of KEY=VALUE, not {value!r}")


def pod_set(text: str) -> dict[str, Any]:
    """``--pod-set NAME=COUNT[:DEVICES][,cpu=Q][,memory=Q]`` as the API's pod set: ``head=1:0,cpu=16,memory=64Gi``."""
    name, sep, rest = text.partition("=")
    head, *extras = rest.split(",")
    count, _, devices = head.partition(":")
    out: dict[str, Any] = {"name": name.strip()}
    try:
        if count.strip():
            out["count"] = int(count)
        if devices.strip():
            out["devices_per_pod"] = int(devices)
    except ValueError:
        raise SpecError(f"--pod-set: {text!r} is not NAME=COUNT[:DEVICES][,cpu=Q][,memory=Q]") from None
    for extra in extras:
        key, eq, value = extra.partition("=")
        if not sep or not eq or key.strip() not in ("cpu", "memory") or not value.strip():
            raise SpecError(f"--pod-set: {text!r} is not NAME=COUNT[:DEVICES][,cpu=Q][,memory=Q]")
        out[key.strip()] = value.strip()
    if not sep or not out["name"]:
        raise SpecError(f"--pod-set: {text!r} is not NAME=COUNT[:DEVICES][,cpu=Q][,memory=Q]")
    return out


def with_flags(fields: dict[str, list[str]]) -> dict[str, list[str]]:
    """A refusal's fields named with the flag that sets each too: ``devices_per_pod (--gpus)``."""
    out = {}
    for name, problems in fields.items():
        base = name.split("[", 1)[0]
        out[f"{name} ({FLAGS[base]})" if base in FLAGS else name] = problems
    return out


def normalise(values: dict[str, Any], *, where: str) -> dict[str, Any]:
    """Keys of a file or of the flags as the API's fields, durations in seconds, command lines as lists."""
    body: dict[str, Any] = {}
    for raw_key, value in values.items():
        key = str(raw_key)
        if key in DURATIONS:
            body[DURATIONS[key]] = None if value is None else parse_duration(value, key=key)
            continue
        name = ALIASES.get(key, key)
        if name not in FIELDS:
            known = ", ".join(sorted({*FIELDS, *ALIASES, *DURATIONS}))
            raise SpecError(f"{where}: unknown key {key!r} (known keys: {known})")
        if name in COMMAND_LINES:
            value = command_line(value, key=key)
        elif name == "env":
            value = environment(value, key=key)
        body[name] = value
    return body


def _read_text(path: Path) -> str:
    """The file's text: UTF-8, no NUL byte, at most ``MAX_FILE_BYTES``."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SpecFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecFileError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB: not a job file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecFileError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): is it a binary file?"
        ) from None
    if "\x00" in text:
        raise SpecFileError(f"{path}: contains a NUL byte at offset {text.index(chr(0))}: is it a binary file?")
    return text


def load_file(path: str | Path) -> dict[str, Any]:
    """A submission file (YAML mapping) as API fields; any problem is a :class:`SpecFileError` naming the file."""
    path = Path(path)
    text = _read_text(path)
    loader = None
    try:
        loader = _Loader(text)
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise SpecFileError(f"{path}: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise SpecFileError(f"{path}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecFileError(f"{path}: expected a mapping of fields (name: …, image: …), not {type(data).__name__}")
    try:
        return normalise(data, where=str(path))
    except SpecError as exc:
        message = str(exc)
        raise SpecFileError(message if message.startswith(f"{path}: ") else f"{path}: {message}") from None


def submission(file: str | Path | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The body to POST: the file's fields, overridden by the flags that were given (None: not given)."""
    body = load_file(file) if file else {}
    given = normalise({k: v for k, v in flags.items() if v is not None and v != () and v != []}, where="flags")
    if "env" in given:  # variables add to the file's (a flag wins over the same name)
        given["env"] = {**body.get("env", {}), **given["env"]}
    if "pod_sets" in given:  # pod sets add to the file's (a flag wins over the same pod set)
        named = {ps["name"]: ps for ps in body.get("pod_sets") or [] if isinstance(ps, dict) and "name" in ps}
        given["pod_sets"] = list({**named, **{ps["name"]: ps for ps in given["pod_sets"]}}.values())
    body.update(given)
    return body
