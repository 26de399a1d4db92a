"""The ``syncprims`` command line: ``syncprims demo`` (and ``python -m syncprims demo``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``syncprims`` command."""
    from syncprims import __version__
    from syncprims.cli.demo import PRIMITIVES

    parser = argparse.ArgumentParser(
        prog="syncprims", description="Distributed synchronization primitives on Redis."
    )
    parser.add_argument("--version", action="version", version=f"syncprims {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="processes x threads contend for a lock; mutual exclusion is verified",
        description=(
            "Worker processes contend for one lock; inside it each does a non-atomic "
            "read-increment-write of a Redis counter. Prints acquisitions/s, handoff "
            "latency and a mutual-exclusion verdict; exits 1 on a violation. Without --url "
            "or REDIS_URL it starts an embedded server (redis-server from PATH, else fakeredis)."
        ),
    )
    demo.add_argument(
        "--url",
        action="append",
        help="Redis URL (default: $REDIS_URL, else an embedded server); "
        "repeat it once per master for --primitive redlock",
    )
    demo.add_argument(
        "--masters",
        type=_positive_int,
        default=5,
        help="with --primitive redlock and no --url: how many embedded masters to start "
        "(a minority of them is killed half way through)",
    )
    demo.add_argument("--primitive", choices=PRIMITIVES, default="lock")
    demo.add_argument("--processes", type=_positive_int, default=4)
    demo.add_argument("--threads", type=_positive_int, default=2, help="threads per process")
    demo.add_argument("--seconds", type=_positive_float, default=10.0)
    demo.add_argument(
        "--read-ratio",
        type=_ratio,
        default=0.9,
        help="with --primitive rw: the share of critical sections that only read",
    )
    demo.add_argument(
        "--permits",
        type=_positive_int,
        default=3,
        help="with --primitive semaphore: the semaphore's permits",
    )
    demo.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench = commands.add_parser(
        "bench",
        help="measure syncprims next to redis-py Lock, python-redis-lock and pottery",
        description=(
            "Runs the benchmark scenarios against the given server (or an embedded one), "
            "peers side by side in one run, prints a table and the targets, and writes "
            "results.json, table.md and chart.png under --out. Peers other than redis-py "
            "need the bench extra: pip install 'syncprims[bench]'."
        ),
    )
    bench.add_argument("--url", help="Redis URL (default: $REDIS_URL, else an embedded server)")
    bench.add_argument(
        "--scenario",
        action="append",
        choices=["uncontended", "handoff", "contended", "rw", "redlock", "watchdog"],
        help="run only this scenario (repeatable; default: all)",
    )
    bench.add_argument("--quick", action="store_true", help="fewer, shorter runs (~2 minutes)")
    bench.add_argument(
        "--out", default="bench-results", help="results folder (default: %(default)s)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from syncprims.cli import demo

        return demo.main(args)
    if args.command == "bench":
        from syncprims import bench

        return bench.main(args)
    return 2  # pragma: no cover - argparse enforces the choices


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
