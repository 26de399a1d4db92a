"""The chaos campaign's own tests: the checker's independence and verdicts, the nemesis's
determinism, and the self-test that a deliberately broken lock is caught end to end."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import checker
from tests.chaos.nemesis import CLASSES, Setup, plan
from tests.chaos.runner import main

CHECKER = Path(checker.__file__)
ROOT = CHECKER.parents[2]


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
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert done.stdout.strip() == "[]"


SETUP = Setup(
    kinds=("rlock", "semaphore", "redlock", "sentinel", "cluster"),
    servers=("single", "m0", "m1", "m2", "m3", "m4", "c0", "c1", "c2", "sentinel"),
    proxied=("single", "m0", "m1", "m2", "m3", "m4"),
    classes=tuple(c for c in CLASSES if c != "redlock_majority_restart"),
)


def test_the_same_seed_gives_the_same_schedule() -> None:
    first = plan(7, 600, SETUP)
    assert first == plan(7, 600, SETUP)
    assert first != plan(8, 600, SETUP)
    assert {p.cls for p in first} == set(SETUP.classes)
    assert all(p.at >= 2.0 and p.at + p.duration <= 597 for p in first)


def test_at_most_two_redlock_masters_are_faulted_at_once() -> None:
    for seed in range(20):
        schedule = [p for p in plan(seed, 300, SETUP) if p.target.startswith("m")]
        assert not [p for p in schedule if p.cls == "redlock_majority_restart"]
        for p in schedule:
            at_once = {q.target for q in schedule if q.at <= p.at < q.at + q.duration + 0.5}
            assert len(at_once) <= 2, (seed, p)


def test_the_majority_mode_restarts_three_masters_alone() -> None:
    setup = Setup(SETUP.kinds, SETUP.servers, SETUP.proxied, CLASSES)
    majority = [p for s in range(5) for p in plan(s, 600, setup)]
    assert any(p.cls == "redlock_majority_restart" for p in majority)


# -- the checker's verdicts on small hand-made histories --------------------------------------


class Run:
    """A run folder written by hand."""

    def __init__(self, path: Path, kind: str = "rlock", permits: int = 0) -> None:
        self.path = path
        self.kind = kind
        (path / "history").mkdir()
        meta: dict[str, Any] = {"kinds": [kind], "servers": {kind: ["single"]}, "end": 100.0}
        if permits:
            meta["permits"] = {kind: permits}
        (path / "meta.json").write_text(json.dumps(meta))
        (path / "store.json").write_text("{}")
        self.events: dict[int, list[dict[str, Any]]] = {}
        self.faults: list[dict[str, Any]] = []

    def section(
        self,
        pid: int,
        grant: float,
        end: float,
        role: str = "w",
        *,
        lost: float | None = None,
        t_req: float | None = None,
    ) -> None:
        ev = self.events.setdefault(
            pid, [{"ev": "start", "pid": pid, "t": 0.0, "kind": self.kind, "op_timeout": 3.0}]
        )
        sid = f"{pid}-0-{len(ev)}"
        asked = grant - 0.01 if t_req is None else t_req
        ev += [
            {"ev": "req", "pid": pid, "t": asked, "th": 0, "res": "r0", "wait": 2.0},
            {"ev": "grant", "pid": pid, "t": grant, "t_req": asked, "sid": sid,
             "kind": self.kind, "res": "r0", "role": role, "wait": 2.0},
        ]  # fmt: skip
        if lost is not None:
            ev.append({"ev": "lost", "pid": pid, "t": lost, "res": "r0", "reason": "x"})
        ev.append({"ev": "rel", "pid": pid, "t": end, "sid": sid})

    def fault(self, cls: str, start: float, end: float, **fields: Any) -> None:
        self.faults.append({"ev": "fault", "cls": cls, "target": "x", "start": start,
                            "end": end, **fields})  # fmt: skip

    def check(self) -> checker.Report:
        for pid, events in self.events.items():
            events += [{"ev": "thread_done", "pid": pid, "t": 50.0, "th": 0},
                       {"ev": "exit", "pid": pid, "t": 50.0}]  # fmt: skip
            lines = "".join(json.dumps(e) + "\n" for e in events)
            (self.path / "history" / f"{pid}.jsonl").write_text(lines)
        lines = "".join(json.dumps(f) + "\n" for f in self.faults)
        (self.path / "nemesis.jsonl").write_text(lines)
        return checker.check_run(self.path)


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


def test_an_overlap_after_a_loss_notice_is_not(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0, lost=1.4)
    run.section(2, 1.5, 3.0)
    report = run.check()
    assert report.violations == [] and report.loss_notices == 1
    assert report.rows["rlock"].notified_overlaps == 1


def test_a_loss_notice_after_the_next_grant_is_too_late(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0, lost=1.6)
    run.section(2, 1.5, 3.0)
    assert len(run.check().violations) == 1


def test_documented_faults_excuse_an_overlap_by_class(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0)
    run.section(2, 1.5, 3.0)
    run.fault("client_pause", 1.1, 1.9, pids=[1])
    report = run.check()
    assert report.violations == [] and report.excused == 1
    assert dict(report.rows["rlock"].excused) == {"client_pause": 1}


def test_a_pause_between_request_and_grant_excuses_the_later_logged_section(
    tmp_path: Path,
) -> None:
    # The paused process may have read its grant before the pause (its lease then ran out
    # while it was stopped): its section is logged after the other's grant, but was first.
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0)
    run.section(2, 1.5, 2.5, t_req=0.5)
    run.fault("client_pause", 0.6, 1.45, pids=[2])
    report = run.check()
    assert report.violations == [] and dict(report.rows["rlock"].excused) == {"client_pause": 1}
    # ... but not a pause of that process outside its acquire
    other = tmp_path / "other"
    other.mkdir()
    run = Run(other)
    run.section(1, 1.0, 2.0)
    run.section(2, 1.5, 2.5, t_req=0.5)
    run.fault("client_pause", 2.6, 2.8, pids=[2])
    assert len(run.check().violations) == 1


def test_a_restart_with_persistence_excuses_nothing(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 1.0, 2.0)
    run.section(2, 1.5, 3.0)
    run.fault("server_restart", 1.1, 1.2, servers=["single"], persistent=True)
    assert len(run.check().violations) == 1
    run.faults[0]["persistent"] = False
    report = run.check()
    assert report.violations == [] and report.excused == 1


def test_readers_share_and_writers_do_not(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="rw")
    run.section(1, 1.0, 2.0, role="r")
    run.section(2, 1.5, 3.0, role="r")
    assert run.check().violations == []
    run.section(3, 2.5, 3.5)
    assert len(run.check().violations) == 1  # the writer overlaps reader 2


def test_a_semaphore_may_have_n_holders_not_more(tmp_path: Path) -> None:
    run = Run(tmp_path, kind="semaphore", permits=2)
    run.section(1, 1.0, 2.0, role="s")
    run.section(2, 1.1, 2.0, role="s")
    report = run.check()
    assert report.violations == [] and report.rows["semaphore"].max_holders == 2
    run.section(3, 1.2, 2.0, role="s")
    report = run.check()
    assert len(report.violations) == 1 and report.rows["semaphore"].max_holders == 3


def test_a_wait_past_its_bound_and_a_hang_are_violations(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.section(1, 10.0, 11.0)
    run.events[1][2]["t_req"] = 1.0  # granted 9 s after a 2 s wait began (bound 2 + 3 + 1)
    run.events[2] = [
        {"ev": "start", "pid": 2, "t": 0.0, "kind": "rlock", "op_timeout": 3.0},
        {"ev": "req", "pid": 2, "t": 1.0, "th": 0, "res": "r0", "wait": 2.0},
    ]
    (tmp_path / "history" / "2.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in run.events.pop(2))
    )
    violations = run.check().violations
    assert len(violations) == 2
    assert "waited 9.00 s" in violations[0] and "did not finish" in violations[1]


# -- the self-test: a broken lock through the real pipeline -----------------------------------


@pytest.mark.real
@pytest.mark.faults
@pytest.mark.parametrize("kind", ["broken-lease", "broken-script"])
def test_the_campaign_catches_a_broken_lock(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (a) a 50 ms lease, no watchdog, 60-150 ms critical sections; (b) an acquire script
    # without the existence check. No nemesis: the lock alone must be caught.
    status = main(
        ["--minutes", "0.1", "--kinds", kind, "--faults", "", "--no-netns",
         "--out", str(tmp_path)]
    )  # fmt: skip
    out = capsys.readouterr().out
    report = checker.check_run(tmp_path)
    assert status == 1
    assert report.sections > 10
    assert report.rows[kind].violations > 0
    assert "overlaps" in "\n".join(report.violations)
    assert out.splitlines()[-1].startswith(f"chaos: {report.sections} critical sections, ")
