"""``scripts/testbed build|up|down|status``: a real Kubernetes API server, etcd, Kueue and KWOK nodes on loopback.

Exit status: 0 done, 1 a component is down (status), 2 an error (printed, with the component's log tail).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from testbed import build, kueue, layout, ports
from testbed.cluster import Testbed
from testbed.errors import TestbedError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/testbed", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    b = commands.add_parser("build", help="build the binaries into var/testbed/bin (Go's build cache is reused)")
    b.add_argument(
        "components", nargs="*", metavar="COMPONENT", help=f"only these (default: all of {', '.join(layout.BY_NAME)})"
    )
    b.add_argument(
        "--minimal", action="store_true", help="only what `up` without --nodes runs: etcd, kube-apiserver, kueue"
    )
    b.add_argument("--force", action="store_true", help="build again even what is up to date")

    run_dir = argparse.ArgumentParser(add_help=False)
    run_dir.add_argument(
        "--run-dir",
        type=Path,
        default=Path(os.environ.get("TESTBED_RUN_DIR", layout.DEFAULT_RUN_DIR)),
        help="where the testbed keeps its state, kubeconfig, certificates and logs (default %(default)s)",
    )

    u = commands.add_parser("up", parents=[run_dir], help="start a testbed and write its kubeconfig")
    u.add_argument(
        "--nodes",
        type=int,
        default=0,
        help="add kube-controller-manager, kube-scheduler and KWOK with N fake GPU nodes",
    )
    u.add_argument(
        "--ports",
        default=os.environ.get("TESTBED_PORTS", ports.DEFAULT_RANGE),
        help=f"loopback ports to take a free block of {ports.BLOCK} from (TESTBED_PORTS; default %(default)s)",
    )
    u.add_argument(
        "--port-base", type=int, help=f"use exactly the ports BASE..BASE+{ports.BLOCK - 1} (an error if one is taken)"
    )
    u.add_argument(
        "--framework",
        action="append",
        choices=sorted(kueue.FRAMEWORK_RESOURCES),
        help="Kueue integrations to enable (repeatable; default batch/job)",
    )
    u.add_argument("--fair-sharing", action="store_true", help="turn Kueue's fair sharing on")

    commands.add_parser("down", parents=[run_dir], help="stop the testbed started in --run-dir")
    commands.add_parser("status", parents=[run_dir], help="say which components of the testbed run and answer")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            unknown = [n for n in args.components if n not in layout.BY_NAME]
            if unknown:
                raise TestbedError(f"unknown component {', '.join(unknown)}: choose from {', '.join(layout.BY_NAME)}")
            names = ["etcd", "kube-apiserver", "kueue"] if args.minimal else (args.components or None)
            build.build(names, force=args.force)
            return 0
        if args.command == "up":
            if args.nodes < 0:
                raise TestbedError(f"--nodes must be 0 or more, got {args.nodes}")
            testbed = Testbed(
                run_dir=args.run_dir.resolve(),
                port_range=args.ports,
                port_base=args.port_base,
                nodes=args.nodes,
                frameworks=tuple(args.framework or kueue.DEFAULT_FRAMEWORKS),
                fair_sharing=args.fair_sharing,
            )
            print(f"starting a testbed in {testbed.run_dir}")
            state = testbed.up()
            print(f"up in {state['seconds']['total']:.1f} s: {testbed.server}")
            print(f"export KUBECONFIG={testbed.kubeconfig}")
            return 0
        testbed = Testbed(run_dir=args.run_dir.resolve())
        if args.command == "down":
            testbed.down()
            return 0
        states = testbed.status()
        if not states:
            print(f"no testbed was started in {testbed.run_dir}")
            return 1
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(testbed.state["started_at"]))
        print(f"testbed in {testbed.run_dir} (started {since}), API server {testbed.server}")
        for name, state in states.items():
            port = testbed.state["ports"].get(name) or testbed.state["ports"].get(f"{name}-webhook", "")
            print(f"  {name:<24} {state:<10} pid {testbed.state['pids'].get(name, '-')!s:<8} port {port}")
        return 0 if all(s == "up" for s in states.values()) else 1
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
