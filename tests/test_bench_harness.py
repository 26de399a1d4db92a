"""The benchmark harness runs and measures what it says (tiny settings; no speed asserted)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
import redis as redis_py

from syncprims._embedded import RedisServer
from syncprims.bench import charts, run, targets
from syncprims.bench.peers import open_peer
from syncprims.bench.scale import _one as _scale_one
from syncprims.bench.scale import _red_lock
from syncprims.bench.scenarios import Row, Settings, contended, handoff, uncontended, watchdog_scale

TINY = Settings(
    quick=True,
    repeats=1,
    seconds=0.1,
    rounds=5,
    polling_rounds=2,
    contended_seconds=0.5,
    watchdog_locks=50,
    watchdog_seconds=1.5,
    watchdog_timeout=0.6,
)


def _rows_by_peer(rows: list[Row]) -> dict[tuple[str, str], Row]:
    return {(r.peer, r.metric): r for r in rows}


@pytest.mark.slow
def test_scenarios_produce_rows(redis_server: RedisServer) -> None:
    urls = [redis_server.url]
    lines: list[str] = []
    rows = uncontended(urls, TINY, lines.append)
    found = _rows_by_peer(rows)
    for peer in ("syncprims", "syncprims (asyncio)", "raw EVALSHA floor", "redis-py Lock"):
        assert found[(peer, "pairs/s")].median > 0
        assert found[(peer, "CPU per pair")].median > 0  # us of the process's CPU
    rows = handoff(urls, TINY, lines.append)
    found = _rows_by_peer(rows)
    assert found[("syncprims", "p50")].median > 0
    assert found[("BLPOP floor", "p99")].median > 0
    rows = contended(urls, TINY, lines.append)
    found = _rows_by_peer(rows)
    assert max(found[("syncprims", "overlaps")].runs) == 0
    assert found[("syncprims", "acquisitions/s")].median > 0
    rows = watchdog_scale(urls, TINY, lines.append)
    found = _rows_by_peer(rows)
    assert found[("syncprims", "still held at the end")].median == 50
    assert found[("syncprims", "leases lost")].median == 0
    assert found[("syncprims", "renewals")].median >= 50
    assert any("pairs/s" in line for line in lines)


def test_run_writes_results_and_evaluates_targets(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    sink = io.StringIO()
    result = run(
        [redis_server.url],
        ["uncontended"],
        TINY,
        out_dir=tmp_path,
        stream=sink,
        servers=redis_server.description,
    )
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["rows"] == result["rows"]
    assert (tmp_path / "table.md").read_text().startswith("| scenario |")
    by_name = {t["target"]: t for t in data["targets"]}
    assert by_name["asyncio face >= 0.8 x sync face"]["holds"] in (True, False)
    assert by_name["handoff p50 < python-redis-lock"]["holds"] is None  # not measured here
    assert "pairs/s" in sink.getvalue()
    assert targets([]) and all(t["holds"] is None for t in targets([]))


@pytest.mark.parametrize(
    "peer", ["raw EVALSHA floor", "raw EVALSHA fan-out x1", "raw EVALSHA fan-out x5"]
)
def test_the_floors_release_what_they_acquire(redis_server: RedisServer, peer: str) -> None:
    """A floor does a real unlock each time: a new latch per release, the lock key gone after
    it (one fixed latch key once turned most of a floor's releases into no-ops)."""
    urls = [f"{redis_server.url}/{db}" for db in range(5)]  # 5 databases as 5 masters
    session = open_peer(peer, urls)
    admins = [redis_py.Redis.from_url(url) for url in urls[: 5 if "x5" in peer else 1]]
    name = f"floor-{peer.replace(' ', '-')}"
    try:
        lock = session.lock(name)
        for _ in range(20):
            lock.acquire()
            for admin in admins:
                assert admin.hgetall(name) == {b"floor:1": b"1"}
            lock.release()
            for admin in admins:
                assert admin.exists(name) == 0
        for admin in admins:
            latches = list(admin.scan_iter(match=f"redisson_unlock_latch:{{{name}}}:*"))
            assert len(latches) == 20
            assert 0 < admin.pttl(latches[0]) <= 13_500
    finally:
        session.close()
        for admin in admins:
            admin.close()


def test_an_embedded_server_starts_once() -> None:
    """``start()`` on a running server keeps that server (a second process could not bind
    its port, and the first one would be left running after ``stop()``)."""
    server = RedisServer()
    try:
        first = server.process
        assert first is not None
        server.start()
        assert server.process is first and first.poll() is None
        server.kill()
        server.start()  # after a kill: a new process on the same port
        assert server.process is not first
    finally:
        server.stop()
    assert server.process is not None and server.process.poll() is not None
    assert first.poll() is not None


@pytest.mark.parametrize("peer", ["syncprims", "syncprims-pooled", "redis-py", "script-pair"])
def test_the_scale_scenario_measures_each_peer(redis_server: RedisServer, peer: str) -> None:
    # redis-py's Lock polls every 0.1 s on the hot names: a window of several polls, so that
    # a loaded machine still sees pairs finish in it (0.3 s failed once under load).
    window = 1.0 if peer == "redis-py" else 0.3
    result = asyncio.run(_scale_one(redis_server.url, peer, 8, peer != "script-pair", window))
    assert result["errors"] == 0
    assert result["pairs"] > 0 and result["p99"] >= result["p50"] > 0
    assert result["connections"] >= 1


@pytest.mark.parametrize("shared", [1, 0])
def test_the_scale_scenarios_red_lock_part(five: list[RedisServer], shared: int) -> None:
    result = asyncio.run(_red_lock([server.url for server in five], shared, 16, 0.3))
    assert result["errors"] == 0 and result["pairs"] > 0


def test_a_chart_per_scenario(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [
        Row("uncontended", "syncprims", "pairs/s", "1/s", (10.0, 12.0)),
        Row("uncontended", "redis-py Lock", "pairs/s", "1/s", (8.0, 9.0)),
        Row("scale distinct 1", "syncprims", "pairs/s", "pairs/s", (5.0,)),
        Row("scale distinct 256", "syncprims", "pairs/s", "pairs/s", (50.0,)),
        Row("scale distinct 256", "redis-py", "pairs/s", "pairs/s", (10.0,)),
    ]
    written = {path.name for path in charts(rows, tmp_path)}
    assert {"chart.png", "chart-uncontended.png", "chart-scale.png"} <= written
    assert all((tmp_path / name).stat().st_size > 0 for name in written)
