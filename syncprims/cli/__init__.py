"""The ``syncprims`` command line (also ``python -m syncprims``): ``demo``, ``inspect``,
``unlock`` and ``bench``.

A command that cannot start prints one line on stderr and exits with status 2 (1 when a run
failed, 130 after Ctrl-C), without a traceback. SIGTERM and SIGHUP stop a command at once
through its cleanup (worker processes and embedded servers stopped, their folders removed),
with status 128 + the signal's number; a signal ignored when the command started (``nohup``'s
SIGHUP, SIGINT in a script's background job) stays ignored.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from syncprims.cli._common import CommandError

__all__ = ["build_parser", "main"]


class _FORMATTER(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every default; an option whose default is "not given" says so in its help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


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


def _url_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="Redis URL, any form syncprims.connect() takes: redis://, rediss://, unix://, "
        "redis+cluster://host:port,..., redis+sentinel://host:port,.../master, and the same "
        "with valkey in place of redis (valkey-py's client) (default: $REDIS_URL)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``syncprims`` command."""
    from syncprims import __version__
    from syncprims.bench import SCENARIOS
    from syncprims.bench.scenarios import RUN_TIMES
    from syncprims.cli.demo import PRIMITIVE_HELP, PRIMITIVES
    from syncprims.cli.inspection import KINDS, LOCK_KINDS

    parser = argparse.ArgumentParser(
        prog="syncprims",
        description="Distributed synchronization primitives on Redis.",
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"syncprims {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        formatter_class=_FORMATTER,
        help="processes x threads contend for a lock; mutual exclusion is verified",
        description=(
            "Worker processes contend for one lock; inside it each does a non-atomic "
            "read-increment-write of a Redis counter. Prints acquisitions/s, handoff "
            "latency and a mutual-exclusion verdict; exits 1 on a violation. Without --url "
            "or REDIS_URL it starts an embedded server (redis-server from PATH, else fakeredis). "
            "The server is checked once first: an unreachable one, refused credentials or a "
            "bad URL is one line on stderr and exit status 2. Ctrl-C stops the workers and "
            "prints what ran (exit status 130)."
        ),
    )
    demo.add_argument(
        "--url",
        action="append",
        help="Redis URL, any form syncprims.connect() takes (see `syncprims inspect --help`) "
        "(default: $REDIS_URL, else an embedded server); repeat it once per master for "
        "--primitive redlock",
    )
    demo.add_argument(
        "--masters",
        type=_positive_int,
        default=5,
        help="with --primitive redlock and no --url: how many embedded masters to start "
        "(a minority of them is killed half way through)",
    )
    demo.add_argument(
        "--primitive",
        choices=PRIMITIVES,
        default="lock",
        help="what the workers contend for: "
        + "; ".join(f"{name} ({text})" for name, text in PRIMITIVE_HELP.items()),
    )
    demo.add_argument("--processes", type=_positive_int, default=4, help="worker processes")
    demo.add_argument("--threads", type=_positive_int, default=2, help="threads per process")
    demo.add_argument(
        "--seconds", type=_positive_float, default=10.0, help="how long the workers contend"
    )
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
    demo.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON (default: do not)"
    )
    inspect = commands.add_parser(
        "inspect",
        formatter_class=_FORMATTER,
        help="show who holds a lock, semaphore or latch, and who waits (read-only)",
        description=(
            "Reads what NAME holds in Redis and prints it: its kind (detected from the keys "
            "Redisson's layout uses), the holders (client id, owner, hold count), the TTL, "
            "a fair lock's waiters and their deadlines, a read-write lock's mode and "
            "readers' leases, a fenced lock's token, a semaphore's permits and leases, a "
            "latch's count, and the subscribers of its channel. Writes nothing."
        ),
    )
    inspect.add_argument("name", metavar="NAME", help="the object's name (its Redis key)")
    _url_option(inspect)
    inspect.add_argument(
        "--kind",
        choices=list(KINDS),
        help="read NAME as this kind: rw is a read-write lock, pes a permit-expirable "
        "semaphore (default: detect it)",
    )
    inspect.add_argument(
        "--watch", action="store_true", help="refresh until Ctrl-C (default: print once)"
    )
    inspect.add_argument(
        "--interval", type=_positive_float, default=1.0, help="with --watch: seconds between reads"
    )
    inspect.add_argument(
        "--json",
        action="store_true",
        help="print JSON (with --watch: one object a line) (default: text)",
    )
    unlock = commands.add_parser(
        "unlock",
        formatter_class=_FORMATTER,
        help="free a lock whoever holds it (needs --force; asks first)",
        description=(
            "Releases the lock NAME whoever holds it and wakes its waiters, with the lock's "
            "force_unlock: for a lock whose holder is gone and whose lease does not run out "
            "(a watchdog that is still renewing it belongs to a live holder: stop that "
            "first). Shows the holders and asks for confirmation unless --yes."
        ),
    )
    unlock.add_argument("name", metavar="NAME", help="the lock's name (its Redis key)")
    _url_option(unlock)
    unlock.add_argument(
        "--force", action="store_true", help="required: you mean it (default: refuse)"
    )
    unlock.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (default: ask)"
    )
    unlock.add_argument(
        "--kind",
        choices=list(LOCK_KINDS),
        help="the lock's kind (default: detect it)",
    )
    bench = commands.add_parser(
        "bench",
        formatter_class=_FORMATTER,
        help="measure syncprims next to redis-py Lock, python-redis-lock and pottery",
        description=(
            "Runs the benchmark scenarios against the given server (or an embedded one), "
            "peers side by side in one run, prints a table and the targets, and writes "
            "results.json, table.md and chart.png under --out. Peers other than redis-py "
            "need the bench extra: pip install 'syncprims[bench]'."
        ),
    )
    bench.add_argument(
        "--url",
        help="Redis URL (default: $REDIS_URL, else an embedded server)",
    )
    bench.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        help="run only this scenario (repeatable; default: all)",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="every scenario and peer once, in shorter runs with fewer tasks ("
        f"{RUN_TIMES}) (default: off, the full run)",
    )
    bench.add_argument("--out", default="bench-results", help="results folder")
    return parser


_COMMANDS = {
    "demo": ("syncprims.cli.demo", "main"),
    "inspect": ("syncprims.cli.inspection", "main"),
    "unlock": ("syncprims.cli.inspection", "unlock_main"),
    "bench": ("syncprims.bench", "main"),
}
"""Each subcommand's module and function, imported when the subcommand runs."""


class _Stopped(SystemExit):
    """SIGTERM or SIGHUP arrived: the command unwinds through its cleanup."""


_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def _stop(signum: int, frame: object) -> None:
    for stopping in _STOP_SIGNALS:
        if signal.getsignal(stopping) is _stop:
            signal.signal(stopping, signal.SIG_IGN)  # one stop: the cleanup runs undisturbed
    raise _Stopped(128 + signum)


def _catch_stop_signals() -> dict[int, Any]:
    """Make SIGTERM and SIGHUP raise :class:`_Stopped` (in the main thread; not a signal
    ignored at start); returns the handlers to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {
        signum: signal.signal(signum, _stop)
        for signum in _STOP_SIGNALS
        if signal.getsignal(signum) is not signal.SIG_IGN
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    previous = _catch_stop_signals()
    try:
        module, function = _COMMANDS[args.command]
        status: int = getattr(importlib.import_module(module), function)(args)
        return status
    except CommandError as error:
        print(f"syncprims {args.command}: {error}", file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        print(f"syncprims {args.command}: interrupted", file=sys.stderr)
        return 130
    except _Stopped as stopped:
        status = int(stopped.code or 0)
        name = signal.Signals(status - 128).name
        print(f"syncprims {args.command}: stopped by {name}", file=sys.stderr)
        return status
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
