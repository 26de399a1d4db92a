"""The command line fails well: one line and a non-zero status for a server it cannot use,
a clean stop with a summary on Ctrl-C, nothing left running when it is stopped from outside
(SIGTERM, SIGKILL), defaults in ``--help``, wording that fits the primitive, every URL form
``connect()`` takes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import syncprims
from syncprims._embedded import RedisServer
from syncprims.cli import build_parser
from tests import processes
from tests.harness import cli_process, end_process_group

pytestmark = pytest.mark.real


def syncprims_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m syncprims ARGS`` with ``REDIS_URL`` unset unless ``env`` sets it."""
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return processes.run(
        [sys.executable, "-m", "syncprims", *args], timeout=timeout, env={**base, **(env or {})}
    )


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0]
    assert result.stdout == ""  # nothing started


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:1", "cannot reach Redis at redis://127.0.0.1:1"),
        ("http://x", "bad Redis URL 'http://x'"),
        ("redis+cluster://127.0.0.1:1,127.0.0.1:2", "cannot reach Redis"),
        ("valkey://127.0.0.1:1", "cannot reach Redis at valkey://127.0.0.1:1"),
    ],
)
def test_demo_without_a_usable_server_is_one_line(url: str, expected: str) -> None:
    started = time.monotonic()
    result = syncprims_cli("demo", "--url", url, "--seconds", "1")
    assert_one_line_failure(result, "syncprims demo:", expected)
    assert time.monotonic() - started < 10


def test_demo_with_refused_credentials_is_one_line() -> None:
    with RedisServer(args=["--requirepass", "s3cret"]) as server:
        wrong = f"redis://:wrong@127.0.0.1:{server.port}"
        result = syncprims_cli("demo", "--url", wrong, "--seconds", "1")
        assert_one_line_failure(result, "refused the credentials", "redis://:***@127.0.0.1")
        assert "wrong" not in result.stderr  # the password is never printed
        result = syncprims_cli("demo", "--url", server.url, "--seconds", "1")
        assert_one_line_failure(result, "wants a password and the URL gives none")


def test_demo_without_redis_server_or_fakeredis_gives_a_hint(tmp_path: Path) -> None:
    blocker = tmp_path / "fakeredis"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('fakeredis is blocked here')\n")
    result = syncprims_cli(
        "demo",
        "--seconds",
        "1",
        env={"PATH": str(tmp_path), "PYTHONPATH": str(tmp_path)},  # no redis-server either
    )
    assert_one_line_failure(result, "cannot start an embedded server", "syncprims[cli]")


def test_ctrl_c_stops_the_demo_with_a_summary(redis_server: RedisServer) -> None:
    demo = cli_process(
        "demo", "--url", redis_server.url, "--processes", "2", "--threads", "2", "--seconds", "60"
    )
    try:
        assert demo.stdout is not None
        line = ""
        while "acquisitions" not in line:  # the first progress line: the workers run
            line = demo.stdout.readline()
            assert line, "the demo ended before its first progress line"
        stopped = time.monotonic()
        os.killpg(demo.pid, signal.SIGINT)  # as a terminal's Ctrl-C: every process of the group
        out, err = demo.communicate(timeout=30)
    finally:
        end_process_group(demo)
    assert time.monotonic() - stopped < 15
    assert demo.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted after" in out
    assert "(interrupted)" in out
    assert "mutual exclusion: OK" in out


def _processes() -> dict[int, tuple[str, int, str]]:
    """Every process of the machine: pid -> (state, parent pid, command line), from /proc."""
    found: dict[int, tuple[str, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
        found[int(entry)] = (state, int(parent), command)
    return found


def _family(root: int) -> dict[int, str]:
    """The running processes descended from ``root``: pid -> command line."""
    processes = _processes()
    family: dict[int, str] = {}
    grew = True
    while grew:
        grew = False
        for pid, (state, parent, command) in processes.items():
            if pid not in family and state != "Z" and (parent == root or parent in family):
                family[pid] = command
                grew = True
    return family


def _still_running(pids: dict[int, str], within: float) -> dict[int, str]:
    """Those of ``pids`` still running (a zombie has ended) after at most ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        processes = _processes()
        left = {p: c for p, c in pids.items() if p in processes and processes[p][0] != "Z"}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("redis-server") is None,
    reason="reads /proc, and the servers' parent-death signal is Linux's; needs redis-server",
)


@LINUX_ONLY
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "SIGTERM"])
def test_a_demo_stopped_from_outside_leaves_no_process(stop: int, tmp_path: Path) -> None:
    demo = cli_process(
        "demo", "--processes", "2", "--threads", "1", "--seconds", "60",
        env={"TMPDIR": str(tmp_path)},  # the embedded server's folder goes here
    )  # fmt: skip
    family: dict[int, str] = {}
    try:
        assert demo.stdout is not None
        line = ""
        while "acquisitions" not in line:  # the first progress line: the workers run
            line = demo.stdout.readline()
            assert line, "the demo ended before its first progress line"
        family = _family(demo.pid)
        commands = list(family.values())
        assert sum("spawn_main" in c for c in commands) == 2, commands  # the workers
        assert sum("redis-server" in c for c in commands) == 1, commands  # the embedded one
        demo.send_signal(stop)  # to the parent alone, as `kill` and `timeout` do
        assert _still_running(family, 10) == {}
        assert demo.wait(10) == (-9 if stop == signal.SIGKILL else 128 + stop)
        if stop == signal.SIGTERM:  # its cleanup ran
            assert list(tmp_path.glob("syncprims-redis-*")) == []
            assert demo.stderr is not None
            assert demo.stderr.read().strip() == "syncprims demo: stopped by SIGTERM"
    finally:
        end_process_group(demo, family)


@LINUX_ONLY
@pytest.mark.timeout(240)
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "SIGTERM"])
def test_a_bench_stopped_from_outside_leaves_no_process(
    stop: int, redis_server: RedisServer, tmp_path: Path
) -> None:
    # The workers run on the test's server, which outlives the bench: they end by themselves.
    bench = cli_process(
        "bench", "--quick", "--url", redis_server.url, "--scenario", "contended",
        "--scenario", "redlock", "--out", str(tmp_path / "results"),
        env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    family: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 180
        while True:  # its 4 more masters, and the fork server and 4 workers of a contended run
            family = _family(bench.pid)
            commands = list(family.values())
            forked = sum("multiprocessing.forkserver" in c for c in commands)
            if forked == 5 and sum("redis-server" in c for c in commands) == 4:
                break
            assert bench.poll() is None, "the bench ended before its contended run"
            assert time.monotonic() < deadline, commands
            time.sleep(0.1)
        assert len(list(tmp_path.glob("syncprims-redis-*"))) == 4
        bench.send_signal(stop)
        assert _still_running(family, 10) == {}
        assert bench.wait(10) == (-9 if stop == signal.SIGKILL else 128 + stop)
        if stop == signal.SIGTERM:  # its cleanup ran
            assert list(tmp_path.glob("syncprims-redis-*")) == []
            assert bench.stderr is not None
            assert "syncprims bench: stopped by SIGTERM" in bench.stderr.read()
    finally:
        end_process_group(bench, family)


def test_inspect_takes_a_valkey_url(redis_server: RedisServer) -> None:
    pytest.importorskip("valkey")
    with syncprims.connect(redis_server.url) as client:
        lock = client.get_lock("syncprims-cli-valkey")
        lock.lock()
        valkey_url = "valkey" + redis_server.url.removeprefix("redis")
        result = syncprims_cli("inspect", lock.name, "--url", valkey_url, "--json")
        lock.unlock()
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert (data["kind"], data["held"]) == ("lock", True)
    assert data["holders"][0]["client_id"] == client.id


def test_semaphore_run_speaks_of_permits(redis_server: RedisServer) -> None:
    result = syncprims_cli(
        "demo", "--url", redis_server.url, "--primitive", "semaphore", "--permits", "2",
        "--processes", "1", "--threads", "3", "--seconds", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "contend for the 2 permits of semaphore" in result.stdout
    assert "a permit passed between different workers" in result.stdout
    assert "lock" not in result.stdout.lower()
    assert "at most N holders, permits conserved: OK" in result.stdout


def test_spin_lock_run_keeps_mutual_exclusion(redis_server: RedisServer) -> None:
    result = syncprims_cli(
        "demo", "--url", redis_server.url, "--primitive", "spin",
        "--processes", "1", "--threads", "3", "--seconds", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mutual exclusion: OK" in result.stdout


def test_redlock_on_given_masters_names_every_master_and_no_kill(
    five: list[RedisServer], tmp_path: Path
) -> None:
    urls = [arg for server in five for arg in ("--url", server.url)]
    out = tmp_path / "demo.json"
    result = syncprims_cli(
        "demo", "--primitive", "redlock", *urls, "--processes", "1", "--threads", "2",
        "--seconds", "1", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    for server in five:
        assert server.url in result.stdout
    assert "killed" not in result.stdout
    assert "0 unlocks could not release a majority\n" in result.stdout
    data = json.loads(out.read_text())
    assert data["masters"] == 5
    assert data["masters_killed"] == 0


def test_bare_command_prints_help() -> None:
    result = syncprims_cli()
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: syncprims")
    for command in ("demo", "inspect", "unlock", "bench"):
        assert command in result.stderr


def test_version() -> None:
    result = syncprims_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"syncprims {syncprims.__version__}"


def test_every_option_shows_its_default() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert commands.choices is not None
    for name, sub in dict(commands.choices).items():
        text = sub.format_help()
        for action in sub._actions:
            if action.dest == "help" or not action.option_strings:
                continue
            if action.default is None or action.default is False:
                assert action.help is not None
                assert "default" in action.help, (name, action.option_strings)
            else:
                assert f"(default: {action.default})" in " ".join(text.split()), (
                    name,
                    action.option_strings,
                )
    demo_help = " ".join(syncprims_cli("demo", "--help").stdout.split())
    assert "lock (RLock, one holder at a time)" in demo_help  # --primitive explains each choice
