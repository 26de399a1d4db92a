"""The sync face refuses a process monkey-patched by gevent (or eventlet) when it connects.

Under ``gevent.monkey.patch_all()`` the services thread becomes a greenlet whose asyncio loop
every greenlet sees as running (asyncio keeps it per OS thread): the application's own
``asyncio.run()`` fails, and a second client's services loop never starts, so its watchdog
never renews and a held lock expires under its holder. ``patch_all(thread=False)`` makes
every greenlet one owner (no exclusion between them). So ``connect`` refuses, with a message
saying what to do, before it opens a connection (``syncprims/_gevent.py``). Each program runs
in a subprocess: monkey-patching cannot be undone in the test process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import syncprims
from syncprims._gevent import refuse_if_monkey_patched
from syncprims.errors import MonkeyPatchedError
from tests import processes
from tests.harness import raw_redis

ROOT = Path(__file__).resolve().parent.parent

REFUSED = textwrap.dedent(
    """
    import sys
    from gevent import monkey
    monkey.patch_all(thread=sys.argv[3] == "threads")
    import syncprims

    url, name = sys.argv[1], sys.argv[2]
    for target in (url, "redis://127.0.0.1:1"):  # port 1: a connection attempt would fail
        try:
            client = syncprims.connect(target)
        except syncprims.SyncPrimsError as error:
            assert isinstance(error, RuntimeError), type(error).__mro__
            print(type(error).__name__, error, sep=": ")
        else:  # not refused: show it, and leave the key behind for the test to find
            client.get_lock(name).lock()
            sys.exit(3)
    sys.exit(4)
    """
)

IMPORTED_ONLY = textwrap.dedent(
    """
    import sys
    import gevent.monkey  # imported, nothing patched
    import syncprims

    url, name = sys.argv[1], sys.argv[2]
    with syncprims.connect(url, lock_watchdog_timeout=1) as client:
        with client.get_lock(name):
            print("locked")
    """
)


def run(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return processes.run([sys.executable, "-c", program, *args], timeout=30, cwd=ROOT, env=env)


@pytest.mark.real
@pytest.mark.parametrize("patched", ["threads", "sockets-only"])
def test_connect_refuses_a_gevent_patched_process(real_url: str, name: str, patched: str) -> None:
    pytest.importorskip("gevent", reason="gevent is not installed (pip install gevent)")
    result = run(REFUSED, real_url, name, patched)
    assert result.returncode == 4, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout
    modules = "socket, threading" if patched == "threads" else "socket"
    for line in lines:  # the same refusal for the reachable and the unreachable server
        assert line.startswith(
            f"MonkeyPatchedError: this process is monkey-patched by gevent ({modules}): "
            "the sync face of syncprims needs real threads and blocking sockets; run it in a "
            "process that is not monkey-patched"
        ), line
        assert "syncprims.asyncio" in line
        assert "docs/asyncio.md" in line
    assert raw_redis(real_url).keys(f"{name}*") == []  # nothing was written


@pytest.mark.real
def test_gevent_imported_but_not_patched_is_accepted(real_url: str, name: str) -> None:
    pytest.importorskip("gevent", reason="gevent is not installed (pip install gevent)")
    result = run(IMPORTED_ONLY, real_url, name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["locked"]
    assert raw_redis(real_url).exists(name) == 0


def test_an_eventlet_patched_process_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """eventlet is looked at only when imported; a stand-in ``eventlet.patcher`` here."""
    patcher = types.ModuleType("eventlet.patcher")
    patched = {"socket", "thread"}
    setattr(patcher, "is_monkey_patched", lambda module: module in patched)  # noqa: B010
    monkeypatch.setitem(sys.modules, "eventlet.patcher", patcher)
    with pytest.raises(MonkeyPatchedError, match=r"monkey-patched by eventlet \(socket, thread\)"):
        refuse_if_monkey_patched()
    with pytest.raises(RuntimeError, match="monkey-patched by eventlet"):
        syncprims.connect("redis://127.0.0.1:1")  # refused before a connection is tried
    patched.clear()
    refuse_if_monkey_patched()  # imported but not patched: accepted


PATCHED_AFTER_CONNECT = textwrap.dedent(
    """
    import sys
    import syncprims

    url, name = sys.argv[1], sys.argv[2]
    client = syncprims.connect(url)  # before the patching: accepted
    from gevent import monkey
    monkey.patch_all()
    try:
        client.get_lock(name).lock()
    except syncprims.MonkeyPatchedError as error:
        print(type(error).__name__, error, sep=": ")
        sys.exit(0)
    sys.exit(3)
    """
)


@pytest.mark.real
def test_a_client_connected_before_the_patching_is_refused_at_its_next_acquisition(
    real_url: str, name: str
) -> None:
    pytest.importorskip("gevent", reason="gevent is not installed (pip install gevent)")
    result = run(PATCHED_AFTER_CONNECT, real_url, name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("MonkeyPatchedError: this process is monkey-patched by gevent")
    assert raw_redis(real_url).keys(f"{name}*") == []  # nothing was written
