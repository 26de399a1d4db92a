"""The suite's child processes: each ends with its process group when its test ends, however
the test ends, and none outlives the run.

* :func:`child` and :func:`run`: a subprocess in a process group of its own, killed with its
  whole group (and reaped, its pipes closed) when the block or the call ends, so that a
  timed-out child never lingers into another test (an unreaped ``Popen`` fails whichever
  test is running when it is collected, with pytest's unraisable ``ResourceWarning``).
* :func:`ending`: the same for ``multiprocessing`` processes.
* :func:`outliving`: the processes of the run still there after it (``tests/conftest.py``
  fails the run on any): those whose environment carries :data:`RUN_MARKER` with the run's
  value (exported at the start of the run, inherited by every process the suite starts,
  however far down and whatever its session), and this process's descendants.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["RUN_MARKER", "child", "end_all", "ending", "outliving", "run"]

RUN_MARKER = "SYNCPRIMS_TEST_RUN"
"""The environment variable that marks the processes of one test run (a fresh value each run)."""

# multiprocessing's helpers live as long as the process that started them, not a test
_INFRASTRUCTURE = (b"multiprocessing.resource_tracker", b"multiprocessing.forkserver")


@contextlib.contextmanager
def child(args: Sequence[str], **options: Any) -> Iterator[subprocess.Popen[str]]:
    """``subprocess.Popen(args, text=True, **options)`` in a session and process group of its
    own; when the block ends, however it ends, the whole group is killed (SIGKILL, which ends
    a stopped process too), the child reaped and its pipes closed."""
    proc = subprocess.Popen(args, text=True, start_new_session=True, **options)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the child and whatever it started
        proc.wait(10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def run(args: Sequence[str], *, timeout: float, **options: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, capture_output=True, text=True, timeout=timeout)`` in a process
    group of its own (:func:`child`), killed with the child when it ends or times out
    (``subprocess.TimeoutExpired`` then, as from ``subprocess.run``)."""
    with child(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options) as proc:
        out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)


@contextlib.contextmanager
def ending(procs: Sequence[BaseProcess]) -> Iterator[None]:
    """When the block ends, however it ends, kill those of the ``multiprocessing`` processes
    ``procs`` (a list the block may still add to) that were started and still run, and join
    them (10 s at most each)."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.pid is not None:  # started
                if proc.is_alive():
                    proc.kill()
                proc.join(10)


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _run_processes(marker: str) -> dict[int, str]:
    """The processes (pid: command line) other than this one that carry ``marker`` or
    descend from this one."""
    me = os.getpid()
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    marked: set[int] = set()
    needle = f"{RUN_MARKER}={marker}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            stat = _read(f"/proc/{pid}/stat")
            commands[pid] = _read(f"/proc/{pid}/cmdline")
            environ = _read(f"/proc/{pid}/environ")
        except OSError:  # gone meanwhile, or another user's
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue  # a zombie is not running
        parents[pid] = int(fields[1])
        if needle in environ.split(b"\0"):
            marked.add(pid)
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor != me:
            ancestor = parents.get(ancestor)
        if ancestor == me:
            marked.add(pid)

    def helper(pid: int) -> bool:  # multiprocessing's, not a process it forked
        return any(name in commands.get(pid, b"") for name in _INFRASTRUCTURE)

    return {
        pid: commands[pid].replace(b"\0", b" ").decode(errors="replace").strip()
        for pid in sorted(marked)
        if not (helper(pid) and not helper(parents[pid]))
    }


def outliving(marker: str, grace: float) -> dict[int, str]:
    """The processes of the run marked ``marker`` (and this process's descendants) still
    running ``grace`` seconds from now, or as soon as there are none (pid: command line);
    empty where there is no ``/proc``."""
    if not os.path.isdir("/proc/self"):
        return {}
    deadline = time.monotonic() + grace
    while (left := _run_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def end_all(pids: Sequence[int]) -> None:
    """SIGKILL ``pids`` (processes of this run found by :func:`outliving`)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
