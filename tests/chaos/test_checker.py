"""The chaos checker's verdicts on small hand-made histories (no servers): overlaps are
excused by their cause, never by a fault of the right class that happened nearby."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

from tests import processes
from tests.chaos import checker

CHECKER = Path(checker.__file__)
MASTERS = [f"m{i}" for i in range(5)]


def test_the_checker_imports_nothing_from_syncprims() -> None:
    tree = ast.parse(CHECKER.read_text(encoding="utf-8"))
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] in ("syncprims", "redis", "tests")]
    # And at run time: importing it loads no syncprims module, even indirectly.
    probe = (
        "import sys, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('checker', {str(CHECKER)!r})\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['checker'] = module\n"
        "spec.loader.exec_module(module)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('syncprims', 'redis')))\n"
    )
    done = processes.run([sys.executable, "-c", probe], timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class Run:
    """A run folder written by hand."""

    def __init__(
        self,
        path: Path,
        kind: str = "rlock",
        *,
        permits: int = 0,
        servers: list[str] | None = None,
        owners: dict[str, list[str]] | None = None,
    ) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.kind = kind
        (path / "history").mkdir()
        self.meta: dict[str, Any] = {
            "kinds": [kind],
            "servers": {kind: servers or ["single"]},
            "end": 100.0,
        }
        if permits:
            self.meta["permits"] = {kind: permits}
        if owners:
            self.meta["owners"] = {kind: owners}
        self.store: dict[str, list[str]] = {}
        self.events: dict[int, list[dict[str, Any]]] = {}
        self.faults: list[dict[str, Any]] = []

    def start(self, pid: int, **fields: Any) -> list[dict[str, Any]]:
        """The pid's event list (its start event first)."""
        return self.events.setdefault(
            pid,
            [{"ev": "start", "pid": pid, "t": 0.0, "kind": self.kind, "op_timeout": 0.5,
              **fields}],
        )  # fmt: skip

    def section(
        self,
        pid: int,
        grant: float,
        end: float,
        role: str = "w",
        *,
        th: int = 0,
        lost: float | None = None,
        t_req: float | None = None,
        outcome: str = "ok",
        **grant_fields: Any,
    ) -> str:
        """Log one section; its sid."""
        ev = self.start(pid)
        sid = f"{pid}-{th}-{len(ev)}"
        asked = grant - 0.01 if t_req is None else t_req
        ev += [
            {"ev": "req", "pid": pid, "t": asked, "th": th, "res": "r0", "wait": 2.0},
            {"ev": "grant", "pid": pid, "t": grant, "t_req": asked, "sid": sid, "th": th,
             "kind": self.kind, "res": "r0", "role": role, "wait": 2.0, "lease": 2.0,
             **grant_fields},
        ]  # fmt: skip
        if lost is not None:
            self.lost(pid, sid, lost)
        ev.append({"ev": "rel", "pid": pid, "t": end, "sid": sid})
        ev.append({"ev": "rel_done", "pid": pid, "t": end + 0.001, "sid": sid, "outcome": outcome})
        return sid

    def lost(self, pid: int, sid: str, t: float, master: str | None = None) -> None:
        """A loss notice for section ``sid``."""
        self.start(pid).append(
            {"ev": "lost", "pid": pid, "t": t, "sid": sid, "res": "r0", "reason": "x",
             "master": master}
        )  # fmt: skip

    def fault(self, cls: str, start: float, end: float, **fields: Any) -> None:
        self.faults.append({"ev": "fault", "cls": cls, "target": "x", "start": start,
                            "end": end, **fields})  # fmt: skip

    def check(self) -> checker.Report:
        for pid, events in self.events.items():
            tail = [{"ev": "thread_done", "pid": pid, "t": 50.0, "th": th}
                    for th in {e["th"] for e in events if e["ev"] == "req"}]  # fmt: skip
            lines = "".join(json.dumps(e) + "\n" for e in [*events, *tail])
            lines += json.dumps({"ev": "exit", "pid": pid, "t": 50.0}) + "\n"
            (self.path / "history" / f"{pid}.jsonl").write_text(lines)
        lines = "".join(json.dumps(f) + "\n" for f in self.faults)
        (self.path / "nemesis.jsonl").write_text(lines)
        (self.path / "meta.json").write_text(json.dumps(self.meta))
        (self.path / "store.json").write_text(json.dumps(self.store))
        return checker.check_run(self.path)


def _excused(report: checker.Report, kind: str = "rlock") -> dict[str, int]:
    assert report.violations == []
    return dict(report.rows[kind].excused)


# -- the basics ---------------------------------------------------------------------------------


def test_disjoint_sections_pass(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0)
    run.section(2, 2.001, 3.0)
    report = run.check()
    assert report.violations == [] and report.sections == 2
    assert checker.summary_line(report) == (
        "chaos: 2 critical sections, 0 violations, 0 loss notices, 0 excused"
    )


def test_an_overlap_is_a_violation(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0)
    run.section(2, 1.5, 3.0)
    assert len(run.check().violations) == 1


def test_an_overlap_after_its_own_loss_notice_is_not(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0, lost=1.4, outcome="notheld")
    run.section(2, 1.5, 3.0)
    report = run.check()
    assert report.violations == [] and report.loss_notices == 1
    assert report.rows["rlock"].notified_overlaps == 1


def test_a_loss_notice_after_the_next_grant_is_too_late(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0, lost=1.6)
    run.section(2, 1.5, 3.0)
    assert len(run.check().violations) == 1


def test_readers_share_and_writers_do_not(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="rw")
    run.section(1, 1.0, 2.0, role="r")
    run.section(2, 1.5, 3.0, role="r")
    assert run.check().violations == []
    run.section(3, 2.5, 3.5)
    assert len(run.check().violations) == 1  # the writer overlaps reader 2


def test_a_semaphore_may_have_n_holders_not_more(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="semaphore", permits=2)
    run.section(1, 1.0, 2.0, role="s", lease=None)
    run.section(2, 1.1, 2.0, role="s", lease=None)
    report = run.check()
    assert report.violations == [] and report.rows["semaphore"].max_holders == 2
    run.section(3, 1.2, 2.0, role="s", lease=None)
    run.fault("server_restart", 1.05, 1.1, servers=["single"], persistent=False)
    report = run.check()  # a plain semaphore's permits do not expire: nothing excuses
    assert len(report.violations) == 1 and report.rows["semaphore"].max_holders == 3


def test_a_wait_past_its_bound_and_a_hang_are_violations(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 10.0, 11.0)
    run.events[1][2]["t_req"] = 1.0  # granted 9 s after a 2 s wait began (bound 2 + 0.5 + 1)
    (tmp_path / "history").mkdir(exist_ok=True)
    hung = [
        {"ev": "start", "pid": 2, "t": 0.0, "kind": "rlock", "op_timeout": 3.0},
        {"ev": "req", "pid": 2, "t": 1.0, "th": 0, "res": "r0", "wait": 2.0},
    ]
    run.check()
    (tmp_path / "history" / "2.jsonl").write_text("".join(json.dumps(e) + "\n" for e in hung))
    violations = checker.check_run(tmp_path).violations
    assert len(violations) == 2
    assert "waited 9.00 s" in violations[0] and "did not finish" in violations[1]


# -- the six histories the class-based checker excused (issue 39): each is flagged ---------------


def test_a_grant_read_after_its_lease_is_not_excused_by_a_short_pause(tmp_path: Path) -> None:
    # Pid 2 asked at 0.0 and logged its grant at 2.6, after pid 1's at 2.1: a grant read
    # after its 2 s lease. A 0.5 s pause of pid 2 at 0.5 cannot have outlasted that lease.
    run = Run(tmp_path)
    run.section(1, 2.1, 3.0)
    run.section(2, 2.6, 2.7, t_req=0.0)
    run.fault("client_pause", 0.5, 1.0, pids=[2])
    report = run.check()
    assert len(report.violations) == 1 and "no cause" in report.violations[0]
    # Nor by a 0.5 s pause of the holder itself under its 2 s watchdog lease.
    other = Run(tmp_path / "b")
    other.section(1, 1.0, 3.0)
    other.section(2, 1.9, 2.5)
    other.fault("client_pause", 1.3, 1.8, pids=[1])
    assert len(other.check().violations) == 1


def test_a_cluster_overlap_is_not_excused_by_another_node_restarting(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="cluster", servers=["c0", "c1", "c2"], owners={"r0": ["c1"]})
    a = run.section(1, 1.0, 4.0)
    run.lost(1, a, 3.5)
    run.section(2, 3.0, 3.2)
    run.fault("server_restart", 2.0, 2.5, servers=["c0"], persistent=False)
    report = run.check()
    assert len(report.violations) == 1 and "overlaps" in report.violations[0]


def test_a_redlock_overlap_is_not_excused_by_one_master_of_five(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="redlock", servers=MASTERS)
    a = run.section(1, 1.0, 4.0, masters=MASTERS)
    run.lost(1, a, 3.5, master="m0")
    run.section(2, 3.0, 3.2, masters=["m0", "m1", "m2"])
    run.fault("server_restart", 2.0, 2.5, servers=["m0"], persistent=False)
    report = run.check()
    assert len(report.violations) == 1 and "overlaps" in report.violations[0]


def test_another_threads_loss_notice_excuses_nothing(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 3.0, th=0)
    other_thread = run.section(1, 0.2, 0.5, th=1)
    run.lost(1, other_thread, 1.2)  # pid 1's thread 1 was told: not thread 0's hold
    run.section(2, 1.5, 2.0)
    report = run.check()
    assert len(report.violations) == 1 and "1-0-" in report.violations[0]


def test_a_hold_lost_with_no_notice_at_all_is_flagged(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0, outcome="notheld")
    report = run.check()
    assert len(report.violations) == 1
    assert "a hold lost with no notice at all" in report.violations[0]


def test_an_eviction_never_told_excuses_nothing(tmp_path: Path) -> None:
    # Memory pressure evicted keys on the owner; the holder went on for 5 s untold.
    run = Run(tmp_path)
    run.section(1, 1.0, 8.0, outcome="notheld")
    run.section(2, 2.0, 2.1)
    run.fault("memory_pressure", 1.5, 2.5, servers=["single"], policy="volatile-ttl", evicted=3)
    report = run.check()
    assert len(report.violations) == 2
    assert "overlaps" in report.violations[0] and "no notice at all" in report.violations[1]
    # Memory pressure that evicted nothing is no cause either, told or not.
    run.faults[0]["evicted"] = 0
    run.lost(1, "1-0-1", 2.5)
    assert len(run.check().violations) == 1


def test_an_empty_restart_must_be_told_in_time(tmp_path: Path) -> None:
    # No overlap and no release yet: the section was still running 6 s after the restart.
    run = Run(tmp_path)
    run.section(1, 1.0, 9.0)
    run.fault("server_restart", 2.0, 2.5, servers=["single"], persistent=False)
    report = run.check()
    assert len(report.violations) == 1 and "was not told by" in report.violations[0]
    run.lost(1, "1-0-1", 3.3)
    assert run.check().violations == []


# -- what a cause still excuses -----------------------------------------------------------------


def test_a_pause_longer_than_the_lease_excuses(tmp_path: Path) -> None:
    run = Run(tmp_path)
    a = run.section(1, 1.0, 4.5, outcome="notheld")
    run.lost(1, a, 4.3)  # told at the first renewal after the resume
    run.section(2, 3.8, 4.0)
    run.fault("client_pause", 1.2, 4.2, pids=[1])
    assert _excused(run.check()) == {"client_pause": 1}


def test_a_pause_between_request_and_logged_grant_excuses_when_long_enough(
    tmp_path: Path,
) -> None:
    # Pid 2 read its grant before a 3 s pause, and logged it after the resume: its lease ran
    # out while it was stopped, and pid 1 was granted then.
    run = Run(tmp_path)
    run.section(1, 2.8, 3.8)
    run.section(2, 3.6, 3.7, t_req=0.5, lost=3.65)
    run.fault("client_pause", 0.55, 3.55, pids=[2])
    assert _excused(run.check()) == {"client_pause": 1}
    # ... but not a pause of that process outside its acquire
    other = Run(tmp_path / "b")
    other.section(1, 1.0, 2.0)
    other.section(2, 1.5, 2.5, t_req=0.5)
    other.fault("client_pause", 2.6, 2.8, pids=[2])
    assert len(other.check().violations) == 1


def test_a_restart_of_the_slots_owner_excuses(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="cluster", servers=["c0", "c1", "c2"], owners={"r0": ["c1"]})
    a = run.section(1, 1.0, 4.0, outcome="notheld")
    run.lost(1, a, 3.1)
    run.section(2, 3.0, 3.2)
    run.fault("server_restart", 2.0, 2.5, servers=["c1"], persistent=False)
    assert _excused(run.check(), "cluster") == {"restart_no_persistence": 1}
    # With persistence the key survived: nothing is excused.
    run.faults[0]["persistent"] = True
    assert len(run.check().violations) == 1  # the overlap ("not held" came after its notice)


def test_a_slot_migration_moves_the_owner(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="cluster", servers=["c0", "c1", "c2"], owners={"r0": ["c1"]})
    a = run.section(1, 1.0, 4.0)
    run.lost(1, a, 3.1)
    run.section(2, 3.0, 3.2)
    run.fault("slot_migration", 0.2, 0.6, servers=["c0", "c1", "c2"], kind="cluster", res="r0",
              src="c1", dst="c0")  # fmt: skip
    run.fault("server_restart", 2.0, 2.5, servers=["c0"], persistent=False)
    assert _excused(run.check(), "cluster") == {"restart_no_persistence": 1}


def test_three_of_five_redlock_masters_restarted_excuse(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="redlock", servers=MASTERS)
    a = run.section(1, 1.0, 3.4, masters=MASTERS)
    run.lost(1, a, 3.3, master="m0")
    run.section(2, 3.0, 3.2, masters=["m0", "m1", "m2"])
    run.fault("redlock_majority_restart", 2.0, 2.5, servers=["m0", "m1", "m2"])
    assert _excused(run.check(), "redlock") == {"restart_no_persistence": 1}


def test_a_redlock_granted_by_a_minority_is_flagged(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="redlock", servers=MASTERS)
    run.section(1, 1.0, 2.0, masters=["m3", "m4"])
    report = run.check()
    assert len(report.violations) == 1 and "fewer than a majority" in report.violations[0]


def test_an_eviction_told_in_time_excuses(tmp_path: Path) -> None:
    run = Run(tmp_path)
    a = run.section(1, 1.0, 4.0, outcome="notheld")
    run.lost(1, a, 2.6)
    run.section(2, 2.0, 2.1)
    run.fault("memory_pressure", 1.5, 2.5, servers=["single"], policy="allkeys-lru", evicted=7)
    assert _excused(run.check()) == {"eviction": 1}
    run.faults[0]["lost"] = ["rlock/r1"]  # the keys it evicted were another resource's
    assert len(run.check().violations) == 1


def test_a_client_clock_offset_excuses_only_what_it_can_explain(tmp_path: Path) -> None:
    # Pid 2's clock ran 5 s ahead: pid 1's 2 s permit looked expired to it at once.
    run = Run(tmp_path, kind="pexpirable", permits=1)
    run.start(2, clock="client")
    run.section(1, 1.0, 1.8, role="s", explicit=True)
    run.section(2, 1.5, 1.6, role="s", explicit=True)
    run.fault("clock_skew", 0.5, 3.0, pids=[2], offset=5.0)
    assert _excused(run.check(), "pexpirable") == {"clock": 1}
    run.faults[0]["offset"] = 0.3  # 0.3 s cannot take over a permit with 1.5 s left
    assert len(run.check().violations) == 1
    run.faults[0]["offset"] = 5.0  # server-time leases: no client clock excuses anything
    run.events[2][0]["clock"] = "server"
    assert len(run.check().violations) == 1


def test_a_planned_overrun_is_the_fences_job(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="fenced")
    run.section(1, 1.0, 1.5, explicit=True, lease=0.25, overrun=True, token=1)
    run.section(2, 1.3, 1.31, token=2)
    run.store["fenced/r0"] = ["fcommit 2-0-1 0 2", "fcommit 1-0-1 0 1"]
    run.events[2].append({"ev": "commit", "pid": 2, "t": 1.305, "sid": "2-0-1", "read": 0,
                          "cur": 0, "accepted": True})  # fmt: skip
    run.events[1].append({"ev": "commit", "pid": 1, "t": 1.45, "sid": "1-0-1", "read": 0,
                          "cur": 1, "accepted": False})  # fmt: skip
    report = run.check()
    assert _excused(report, "fenced") == {"lease_overrun": 1}
    assert report.rows["fenced"].fenced_rejects == 1
    # Granted to another before the overrun's lease ended: no excuse.
    run.events[2][2]["t"] = 1.2
    assert len(run.check().violations) == 1


def test_tokens_may_restart_after_an_empty_restart_only_when_not_durable(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="fenced")
    run.section(1, 1.0, 1.1, token=5)
    run.section(2, 3.0, 3.1, token=1)
    run.fault("server_restart", 2.0, 2.5, servers=["single"], persistent=False)
    assert run.check().violations == []
    run.events[2][0]["durable"] = True
    assert "after 1-0-1 ended" in run.check().violations[0]


def test_a_token_is_ordered_by_its_request_not_by_when_its_grant_was_read(
    tmp_path: Path,
) -> None:
    """A token is issued in Redis between the request and the grant's reply: a section
    that asked before another one ended may carry a lower token, read after that one
    ended (the 30-minute campaign: a grant read 20 ms late on a loaded host, its key
    evicted meanwhile, another holder in and out; its write was refused by the fence).
    Asked after the other ended, a lower token is a violation."""
    run = Run(tmp_path, kind="fenced")
    run.section(1, 1.0, 1.1, token=7)
    run.section(2, 1.2, 1.3, token=5, t_req=0.5)
    assert run.check().violations == []
    run = Run(tmp_path / "after", kind="fenced")
    run.section(1, 1.0, 1.1, token=7)
    run.section(2, 1.2, 1.3, token=5, t_req=1.15)
    assert "after 1-0-1 ended" in run.check().violations[0]


def test_an_equal_token_from_another_writer_is_a_stale_write(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="fenced")
    run.section(1, 1.0, 1.1, token=3)
    run.section(2, 2.0, 2.1, token=4)
    run.store["fenced/r0"] = ["commit 1-0-1 0 0 3 1", "commit 2-0-1 1 1 4 1", "commit x 2 2 4 1"]
    report = run.check()
    assert len(report.violations) == 1 and "accepted token 4 (x) after 4" in report.violations[0]


def test_a_semaphore_count_off_at_the_end_needs_a_cause(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="pexpirable", permits=2)
    run.section(1, 1.0, 1.1, role="s", explicit=True)
    held = [{"kind": "pexpirable", "res": "r0", "what": "x has 1 permits, not 2"}]
    (tmp_path / "final.json").write_text(json.dumps({"held": held}))
    assert len(run.check().violations) == 1
    run.fault("memory_pressure", 1.5, 2.5, servers=["single"], lost=["pexpirable/r0"])
    report = run.check()
    assert report.violations == [] and "(memory_pressure)" in report.notes[-1]
