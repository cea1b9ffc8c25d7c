"""Loopback ports for one testbed: a block of free ports from a configured range, chosen under a lock.

Several testbeds (parallel test workers, a developer's and CI's) share a machine: each takes the first block
of ``len(COMPONENT_PORTS)`` consecutive ports in the range whose ports are all free, holding a file lock on
that block while its components start and bind them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from testbed.errors import TestbedError

#: Every port a testbed listens on (all on 127.0.0.1), in block order.
COMPONENT_PORTS = (
    "etcd",
    "etcd-peer",
    "kube-apiserver",
    "kueue-webhook",
    "kueue-metrics",
    "kueue-health",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "jobset-webhook",
    "jobset-metrics",
    "jobset-health",
)
BLOCK = len(COMPONENT_PORTS)
DEFAULT_RANGE = "18400-18499"
LOCK_DIR = Path(tempfile.gettempdir()) / "gpu-pool-portal-testbed-ports"


def parse_range(text: str) -> tuple[int, int]:
    """``"18400-18499"`` → (18400, 18499); a clear error naming the setting otherwise."""
    try:
        low_text, high_text = text.split("-", 1)
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise TestbedError(
            f"TESTBED_PORTS / --ports: expected FIRST-LAST (e.g. {DEFAULT_RANGE}), got {text!r}"
        ) from None
    if not (1024 <= low <= high <= 65535):
        raise TestbedError(f"TESTBED_PORTS / --ports: {text!r} must lie within 1024-65535, first <= last")
    if high - low + 1 < BLOCK:
        raise TestbedError(f"TESTBED_PORTS / --ports: {text!r} has {high - low + 1} ports; a testbed needs {BLOCK}")
    return low, high


def port_is_free(port: int) -> bool:
    """Whether a server could bind 127.0.0.1:port now (SO_REUSEADDR, as Go's listeners set it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def holder_of(port: int) -> str:
    """Who listens on 127.0.0.1:port, as far as /proc tells (``"pid 123 (etcd)"``), or ``""``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                    inodes.add(fields[9])
    if not inodes:
        return ""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        name = Path(f"/proc/{pid}/comm").read_text().strip()
                        return f"pid {pid} ({name})"
    return "another process"


@contextlib.contextmanager
def allocate(port_range: str, *, base: int | None = None) -> Iterator[dict[str, int]]:
    """Yield ``{component: port}`` for a block of free ports, holding the block's lock while the caller starts.

    With ``base`` the block is exactly ``base..base+BLOCK-1`` and a taken port is an error naming it and its
    holder; otherwise the first free block of ``port_range``.
    """
    low, high = parse_range(port_range)
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    starts = [base] if base is not None else list(range(low, high - BLOCK + 2, BLOCK))
    for start in starts:
        lock = open(LOCK_DIR / f"{start}.lock", "w")  # held until the with-block below ends
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            if base is not None:
                raise TestbedError(f"ports {start}-{start + BLOCK - 1}: another testbed is starting on them") from None
            continue
        ports = dict(zip(COMPONENT_PORTS, range(start, start + BLOCK), strict=True))
        taken = [(name, port) for name, port in ports.items() if not port_is_free(port)]
        if taken and base is None:
            lock.close()
            continue
        if taken:
            lock.close()
            detail = ", ".join(
                f"{port} ({name}) is taken by {holder_of(port) or 'another process'}" for name, port in taken
            )
            raise TestbedError(f"port {detail}: stop it or choose another --port-base")
        try:
            yield ports
        finally:
            lock.close()
        return
    raise TestbedError(
        f"no block of {BLOCK} free ports in {port_range}: stop other testbeds (scripts/testbed status) "
        "or widen TESTBED_PORTS / --ports"
    )
