"""The chaos campaign's own tests: the nemesis's determinism, and the self-test that
deliberately broken locks are caught end to end, under the nemesis (the checker's verdicts
on hand-made histories are in ``test_checker.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos import checker
from tests.chaos.nemesis import CLASSES, Setup, plan
from tests.chaos.runner import main
from tests.chaos.workers import BROKEN

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


# -- the self-test: broken locks through the real pipeline, under the nemesis -----------------

# What each broken lock must be caught by (a fragment of one of its violations).
CAUGHT_BY = {
    "broken-lease": "overlaps",
    "broken-script": "overlaps",
    "broken-late-grant": "overlaps",
    "broken-silent": "notice",
    "broken-quorum": "",  # an overlap, or a grant on fewer masters than a majority
}


@pytest.mark.real
@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_campaign_catches_every_broken_lock_under_the_nemesis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each broken kind removes one safety mechanism inside its own worker processes
    # (tests/chaos/workers.py, BROKEN); all run at once for 30 s under the full nemesis, so
    # the excuses by cause are exercised and must not swallow any of them.
    status = main(
        ["--minutes", "0.5", "--kinds", ",".join(BROKEN), "--seed", "3", "--no-netns",
         "--out", str(tmp_path)]
    )  # fmt: skip
    out = capsys.readouterr().out
    report = checker.check_run(tmp_path)
    assert status == 1
    assert sum(report.faults.values()) >= 10, report.faults
    for kind in BROKEN:
        row = report.rows[kind]
        assert row.sections > 5, (kind, row)
        found = [v for v in report.violations if v.startswith(f"{kind}/")]
        assert [v for v in found if CAUGHT_BY[kind] in v], (kind, found[:3])
    assert out.splitlines()[-1].startswith(f"chaos: {report.sections} critical sections, ")
