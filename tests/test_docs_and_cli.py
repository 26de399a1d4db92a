"""The docs examples run, and the demo command works end to end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from syncprims._embedded import RedisServer
from syncprims.bench.history import Hold, analyse
from syncprims.cli import build_parser
from tests import processes

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_docs_example_runs(example: Path, redis_server: RedisServer) -> None:
    env = {**os.environ, "REDIS_URL": redis_server.url}
    result = processes.run([sys.executable, str(example)], env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_demo_on_a_real_server(redis_server: RedisServer, tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    result = processes.run(
        [sys.executable, "-m", "syncprims", "demo", "--url", redis_server.url,
         "--processes", "2", "--threads", "2", "--seconds", "2", "--json", str(out)],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mutual exclusion: OK" in result.stdout
    data = json.loads(out.read_text())
    assert data["ok"]
    assert data["acquisitions"] > 0
    assert data["counter"] == data["acquisitions"]
    assert data["overlaps"] == 0


def test_demo_starts_an_embedded_fakeredis_when_asked(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["SYNCPRIMS_FORCE_FAKEREDIS"] = "1"
    result = processes.run(
        [sys.executable, "-m", "syncprims", "demo", "--processes", "1", "--threads", "2",
         "--seconds", "1"],
        timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "embedded fakeredis" in result.stdout
    assert "mutual exclusion: OK" in result.stdout


def test_analyse_counts_overlaps_and_handoffs() -> None:
    holds = [
        Hold(0, 0, 0, 10),
        Hold(1, 0, 15, 20),  # handoff 5 ns
        Hold(1, 0, 25, 40),  # same worker: not a handoff
        Hold(0, 1, 35, 50),  # starts before the previous one ended: overlap
    ]
    overlaps, handoffs = analyse(holds)
    assert overlaps == 1
    assert handoffs == [5 / 1e6]


@pytest.mark.parametrize(
    "argv",
    [["demo", "--processes", "0"], ["demo", "--seconds", "-1"], ["demo", "--primitive", "x"]],
)
def test_demo_rejects_bad_arguments(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
