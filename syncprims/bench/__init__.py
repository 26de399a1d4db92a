"""``syncprims bench``: syncprims next to the libraries users would pick instead, in one run.

Scenarios (each repeated; medians and min..max spread):

1. ``uncontended``: acquire+release pairs/s from one thread (also 7: asyncio vs sync face);
2. ``handoff``: release start in one process to acquire return in another, p50/p99;
3. ``contended``: 4 processes x 2 threads on one lock: handoffs between workers per second;
4. ``rw``: 8 readers cycling on a read-write lock: how long a writer waits (FairLock figures
   are rows of scenarios 1-3);
5. ``redlock``: RedLock on 5 masters vs 1 (acquire latency, pairs/s), next to pottery on the
   same masters (4 more embedded servers are started for it);
6. ``watchdog``: many locks held with the watchdog: CPU, renewals per round trip, leases kept;
8. ``redlock-frozen``: RedLock x5 (default configuration) with 0, 1 and 2 masters frozen by
   SIGSTOP: the median acquire+release pair (five embedded servers of its own);
9. ``scale``: 1 to 10,000 asyncio tasks on one client (distinct and hot names): pairs/s,
   p50/p99, connections, failed calls, next to redis-py's asyncio ``Lock`` and a plain
   ``Script`` pair (``syncprims.bench.scale``).

Results go to a folder (``results.json``, ``table.md`` and, with matplotlib, ``chart.png``).
Speed is reported, never asserted.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import attrs

from syncprims.bench.quorum import redlock, redlock_frozen
from syncprims.bench.scenarios import (
    RUN_TIMES,
    Progress,
    Row,
    Settings,
    contended,
    handoff,
    rw_writer_wait,
    uncontended,
    watchdog_scale,
)

__all__ = ["SCENARIOS", "main", "run"]

_Panel = TypeVar("_Panel")


def scale(urls: list[str], settings: Settings, progress: Progress) -> list[Row]:
    """:func:`syncprims.bench.scale.scale`, imported when run (it needs the asyncio face,
    which the command line's other commands do not)."""
    from syncprims.bench.scale import scale as run_scale

    return run_scale(urls, settings, progress)


SCENARIOS: dict[str, Callable[[list[str], Settings, Callable[[str], None]], list[Row]]] = {
    "uncontended": uncontended,
    "handoff": handoff,
    "contended": contended,
    "rw": rw_writer_wait,
    "redlock": redlock,
    "watchdog": watchdog_scale,
    "redlock-frozen": redlock_frozen,
    "scale": scale,
}


def _find(rows: list[Row], scenario: str, peer: str, metric: str) -> float | None:
    for row in rows:
        if (row.scenario, row.peer, row.metric) == (scenario, peer, metric):
            return row.median
    return None


# The targets: (target, scenario, metric, peer, reference peer, op, factor): the peer's
# median ``op`` factor x the reference's, or with no reference peer ``op`` the factor itself.
_TARGETS: list[tuple[str, str, str, str, str | None, str, float]] = [
    ("uncontended >= 0.95 x raw EVALSHA floor",
     "uncontended", "pairs/s", "syncprims", "raw EVALSHA floor", ">=", 0.95),
    ("uncontended >= 1.05 x redis-py Lock",
     "uncontended", "pairs/s", "syncprims", "redis-py Lock", ">=", 1.05),
    ("asyncio face >= 0.8 x sync face",
     "uncontended", "pairs/s", "syncprims (asyncio)", "syncprims", ">=", 0.8),
    ("handoff p50 < python-redis-lock",
     "handoff", "p50", "syncprims", "python-redis-lock", "<", 1.0),
    ("handoff p99 < python-redis-lock",
     "handoff", "p99", "syncprims", "python-redis-lock", "<", 1.0),
    ("handoff p50 <= 1.4 x BLPOP floor",
     "handoff", "p50", "syncprims", "BLPOP floor", "<=", 1.4),
    ("uncontended >= 1.05 x raw EVALSHA floor",
     "uncontended", "pairs/s", "syncprims", "raw EVALSHA floor", ">=", 1.05),
    ("handoff p50 <= 0.8 x python-redis-lock",
     "handoff", "p50", "syncprims", "python-redis-lock", "<=", 0.8),
    ("handoff p50 <= 1.3 x BLPOP floor",
     "handoff", "p50", "syncprims", "BLPOP floor", "<=", 1.3),
    ("RedLock x5 pairs/s >= 0.8 x RedLock on 1 master",
     "redlock", "pairs/s", "syncprims RedLock x5", "syncprims RedLock", ">=", 0.8),
    ("RedLock x5 pairs/s >= 4 x pottery on the same 5 masters",
     "redlock", "pairs/s", "syncprims RedLock x5", "pottery Redlock x5", ">=", 4.0),
    ("RedLock x5 acquire p50 < 1.5 x on 1 master",
     "redlock", "acquire p50", "syncprims RedLock x5", "syncprims RedLock", "<", 1.5),
    ("RedLock x5 pair <= 1.3 x the raw 5-node EVALSHA fan-out (pairs/s)",
     "redlock", "pairs/s", "syncprims RedLock x5", "raw EVALSHA fan-out x5", ">=", 1 / 1.3),
    ("1-master MultiLock (RedLock on 1 master) pair <= 1.15 x its raw pair (pairs/s)",
     "redlock", "pairs/s", "syncprims RedLock", "raw EVALSHA fan-out x1", ">=", 1 / 1.15),
    ("RedLock x5, 1 of 5 frozen: pair p50 <= 2 x healthy", "redlock-frozen", "pair p50",
     "syncprims RedLock x5, 1 frozen", "syncprims RedLock x5, 0 frozen", "<=", 2.0),
    ("RedLock x5, 2 of 5 frozen: pair p50 <= 2 x healthy", "redlock-frozen", "pair p50",
     "syncprims RedLock x5, 2 frozen", "syncprims RedLock x5, 0 frozen", "<=", 2.0),
    ("rw, writer preference, readers back to back: writer wait max <= 50 ms", "rw",
     "writer wait max", "ReadWriteLock, readers back to back, writer preference", None, "<=", 50.0),
    ("contended acquisitions/s >= 1.3 x python-redis-lock",
     "contended", "acquisitions/s", "syncprims", "python-redis-lock", ">=", 1.3),
    ("contended FairLock acquisitions/s >= 1.0 x python-redis-lock",
     "contended", "acquisitions/s", "syncprims FairLock", "python-redis-lock", ">=", 1.0),
    ("contended: Jain fairness >= 0.9 (RLock)",
     "contended", "Jain fairness", "syncprims", None, ">=", 0.9),
    ("scale 256 tasks: pairs/s >= 3 x redis-py asyncio Lock",
     "scale distinct 256", "pairs/s", "syncprims", "redis-py", ">=", 3.0),
    ("scale 2,000 tasks: pairs/s >= 3 x redis-py asyncio Lock",
     "scale distinct 2000", "pairs/s", "syncprims", "redis-py", ">=", 3.0),
    ("scale 256 tasks: pairs/s >= 2 x per-call pooled (before)",
     "scale distinct 256", "pairs/s", "syncprims", "syncprims-pooled", ">=", 2.0),
    ("scale 2,000 tasks: pairs/s >= 2 x per-call pooled (before)",
     "scale distinct 2000", "pairs/s", "syncprims", "syncprims-pooled", ">=", 2.0),
    ("scale 1 task: pair p50 within 5 % of per-call pooled",
     "scale distinct 1", "pair p50", "syncprims", "syncprims-pooled", "<=", 1.05),
    ("scale RedLock x5, 256 tasks: pairs/s >= 3 x per-call pooled (before)", "scale redlock x5 256",
     "pairs/s", "syncprims RedLock x5", "syncprims-pooled RedLock x5", ">=", 3.0),
]  # fmt: skip


def _target(
    rows: list[Row], goal: tuple[str, str, str, str, str | None, str, float]
) -> dict[str, Any]:
    """One of :data:`_TARGETS`: whether it holds and the figures that say so."""
    name, scenario, metric, peer, reference, op, factor = goal
    value = _find(rows, scenario, peer, metric)
    base = 1.0 if reference is None else _find(rows, scenario, reference, metric)
    if value is None or base is None:
        return {"target": name, "holds": None, "detail": "not measured"}
    bound = base * factor
    holds = value >= bound if op == ">=" else value <= bound if op == "<=" else value < bound
    detail = f"{value:,.3f} vs {bound:,.3f}"
    if reference is not None:
        detail += f" (ratio {value / base if base else float('inf'):.2f})"
    return {"target": name, "holds": holds, "detail": detail}


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The issue's targets, each with whether it holds in this run."""
    out = [_target(rows, goal) for goal in _TARGETS]
    for layout in ("distinct", "hot"):
        for tasks in (2000, 10_000):
            failed = _find(rows, f"scale {layout} {tasks}", "syncprims", "failed calls")
            held = _find(rows, f"scale {layout} {tasks}", "syncprims", "connections")
            if failed is not None and held is not None:
                out.append(
                    {
                        "target": f"scale {layout} {tasks:,} tasks: 0 failed calls, <= 4 "
                        "connections for commands (+ pub/sub)",
                        "holds": failed == 0 and held <= 5,
                        "detail": f"{failed:.0f} failed, {held:.0f} connections",
                    }
                )
    overlaps = [r for r in rows if r.metric == "overlaps" and r.peer == "syncprims"]
    if overlaps:
        out.append(
            {
                "target": "contended: no overlapping holds",
                "holds": all(v == 0 for v in overlaps[0].runs),
                "detail": f"overlaps per run: {list(overlaps[0].runs)}",
            }
        )
    cpu = _find(rows, "watchdog", "syncprims", "services thread CPU")
    if cpu is not None:
        lost = _find(rows, "watchdog", "syncprims", "leases lost") or 0
        held = _find(rows, "watchdog", "syncprims", "locks held")
        alive = _find(rows, "watchdog", "syncprims", "still held at the end")
        out.append(
            {
                "target": "watchdog: renewals on time with < 5% of one core, no lease lost",
                "holds": cpu < 5 and lost == 0 and alive == held,
                "detail": f"{cpu:.2f}% of a core; {alive:,.0f}/{held:,.0f} held; {lost:.0f} lost",
            }
        )
    return out


def _fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.3f}"
    if unit in ("ratio", "% of a core"):
        return f"{value:.2f}"
    return f"{value:,.0f}"


def table(rows: list[Row]) -> str:
    """A Markdown table of every row."""
    lines = ["| scenario | peer | metric | median | min..max | runs |", "|---|---|---|---|---|---|"]
    for row in rows:
        lo, hi = row.spread
        lines.append(
            f"| {row.scenario} | {row.peer} | {row.metric} ({row.unit}) | "
            f"{_fmt(row.median, row.unit)} | {_fmt(lo, row.unit)}..{_fmt(hi, row.unit)} | "
            f"{len(row.runs)} |"
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Facts about this machine, for the report."""
    import redis

    from syncprims import __version__

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "redis-py": redis.__version__,
        "syncprims": __version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def charts(rows: list[Row], out_dir: Path) -> list[Path]:
    """:func:`chart` of the main figures (``chart.png``), one bar chart per scenario
    (``chart-<scenario>.png``: each metric a panel, the peers side by side), and for the
    scale scenario lines over the number of tasks, one panel per metric and layout
    (``chart-scale.png``). Empty without matplotlib."""
    written: list[Path] = []
    if chart(rows, out_dir / "chart.png"):
        written.append(out_dir / "chart.png")
    by_scenario: dict[str, list[Row]] = {}
    for row in rows:
        if not row.scenario.startswith("scale"):
            by_scenario.setdefault(row.scenario, []).append(row)
    for scenario, chosen in by_scenario.items():
        path = out_dir / f"chart-{scenario.replace(' ', '-')}.png"
        if _scenario_chart(chosen, path):
            written.append(path)
    if _scale_chart(rows, out_dir / "chart-scale.png"):
        written.append(out_dir / "chart-scale.png")
    return written


def _draw(
    path: Path,
    panels: list[_Panel],
    draw: Callable[[Any, _Panel], None],
    size: tuple[float, float],
    dpi: int = 100,
) -> bool:
    """Draw ``draw(axes, panel)`` for every panel, one under the other, into a PNG (``size``:
    inches per panel) on matplotlib's Agg backend; ``False`` without matplotlib or panels."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not panels:
        return False
    width, height = size
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, height * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        draw(ax, panel)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return True


def _bars(ax: Any, rows: list[Row], scenario: str, metric: str) -> list[Row]:
    """One bar per peer of the rows of ``scenario`` and ``metric``: the median, the runs'
    spread as error bars, syncprims in blue, the first on top. Returns those rows."""
    chosen = [r for r in rows if (r.scenario, r.metric) == (scenario, metric)]
    names = [r.peer for r in chosen]
    medians = [r.median for r in chosen]
    errors = [
        [r.median - r.spread[0] for r in chosen],
        [r.spread[1] - r.median for r in chosen],
    ]
    colors = ["tab:blue" if n.startswith("syncprims") else "tab:gray" for n in names]
    ax.barh(names, medians, xerr=errors, color=colors)
    ax.invert_yaxis()
    return chosen


def _scale_chart(rows: list[Row], path: Path) -> bool:
    """Pairs/s, p99 and connections over the number of tasks, a line per peer."""
    points: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for row in rows:
        parts = row.scenario.split(" ")
        if len(parts) != 3 or parts[0] != "scale" or not parts[2].isdigit():
            continue
        key = (parts[1], row.metric, row.peer)
        points.setdefault(key, []).append((int(parts[2]), row.median))
    panels = [
        (layout, metric)
        for layout in ("distinct", "hot")
        for metric in ("pairs/s", "pair p99", "connections")
        if any(k[:2] == (layout, metric) for k in points)
    ]

    def draw(ax: Any, panel: tuple[str, str]) -> None:
        layout, metric = panel
        for (lay, met, peer), series in sorted(points.items()):
            if (lay, met) != (layout, metric):
                continue
            series.sort()
            ax.plot([x for x, _ in series], [y for _, y in series], marker="o", label=peer)
        ax.set_xscale("log")
        if metric == "pair p99":
            ax.set_yscale("log")
        ax.set_title(f"scale, {layout} names: {metric} by tasks", fontsize=9)
        ax.legend(fontsize=7)

    return _draw(path, panels, draw, (8, 2.6))


def _scenario_chart(rows: list[Row], path: Path) -> bool:
    panels: list[tuple[str, str]] = []
    for row in rows:
        if (row.scenario, row.metric) not in panels:
            panels.append((row.scenario, row.metric))

    def draw(ax: Any, panel: tuple[str, str]) -> None:
        scenario, metric = panel
        unit = _bars(ax, rows, scenario, metric)[0].unit
        ax.set_title(f"{scenario}: {metric} ({unit})", fontsize=9)

    return _draw(path, panels, draw, (9, 2.4))


def chart(rows: list[Row], path: Path) -> bool:
    """Draw the main figures into a PNG; ``False`` when matplotlib is missing."""
    panels = [
        ("uncontended", "pairs/s", "uncontended acquire+release pairs/s (higher is better)"),
        ("handoff", "p50", "handoff p50, ms (lower is better)"),
        ("handoff", "p99", "handoff p99, ms (lower is better)"),
        ("contended", "handoffs/s", "contended: handoffs between workers/s (higher is better)"),
    ]
    panels = [p for p in panels if any((r.scenario, r.metric) == p[:2] for r in rows)]

    def draw(ax: Any, panel: tuple[str, str, str]) -> None:
        scenario, metric, title = panel
        _bars(ax, rows, scenario, metric)
        if metric in ("p50", "p99"):
            ax.set_xscale("log")
        ax.set_title(title, fontsize=10)

    return _draw(path, panels, draw, (9, 3.2), dpi=110)


def _verdict(holds: bool | None) -> str:
    return "not measured" if holds is None else "holds" if holds else "DOES NOT HOLD"


def run(
    urls: list[str],
    scenarios: list[str],
    settings: Settings,
    *,
    out_dir: Path,
    stream: TextIO,
    servers: str,
) -> dict[str, Any]:
    """Run the scenarios and write the results; returns what was written to JSON."""

    def progress(line: str) -> None:
        print(line, file=stream, flush=True)

    rows: list[Row] = []
    started = time.monotonic()
    for name in scenarios:
        progress(f"[{time.monotonic() - started:6.1f} s] scenario {name}")
        rows += SCENARIOS[name](urls, settings, progress)
    goals = targets(rows)
    result = {
        "command": "syncprims bench " + " ".join(sys.argv[2:]),
        "machine": machine(),
        "servers": servers,
        "settings": attrs.asdict(settings),
        "seconds": time.monotonic() - started,
        "rows": [r.as_dict() for r in rows],
        "targets": goals,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(result, indent=2), "utf-8")
    text = table(rows)
    verdicts = "\n".join(f"- {_verdict(t['holds'])}: {t['target']} ({t['detail']})" for t in goals)
    (out_dir / "table.md").write_text(f"{text}\n\nTargets:\n\n{verdicts}\n", "utf-8")
    drawn = charts(rows, out_dir)
    print(f"\n{text}\n\nTargets:\n{verdicts}\n", file=stream)
    print(
        f"wrote {out_dir / 'results.json'}, {out_dir / 'table.md'}"
        + (f" and {len(drawn)} charts" if drawn else " (no chart: matplotlib is not installed)")
        + f" in {result['seconds']:.0f} s",
        file=stream,
    )
    return result


def main(args: Any) -> int:
    """The ``bench`` subcommand."""
    from syncprims._embedded import FakeServer, start_embedded

    settings = Settings.fast() if args.quick else Settings.full()
    scenarios = args.scenario or list(SCENARIOS)
    embedded: list[Any] = []
    url = args.url or os.environ.get("REDIS_URL")
    try:
        if url:
            urls, servers = [url], url
        else:
            server = start_embedded()
            embedded.append(server)
            urls, servers = [server.url], f"embedded {server.description}"
        if embedded and isinstance(embedded[0], FakeServer):
            print("note: fakeredis is far slower than Redis: these figures say little")
        print(f"syncprims bench on {servers}; scenarios: {', '.join(scenarios)}", flush=True)
        print(f"how long: {RUN_TIMES}", flush=True)
        if "redlock" in scenarios or "scale" in scenarios:  # 5 independent masters
            while len(urls) < 5:
                embedded.append(start_embedded())
                urls.append(embedded[-1].url)
        out_dir = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
        run(urls, scenarios, settings, out_dir=out_dir, stream=sys.stdout, servers=servers)
    finally:
        for server in embedded:
            server.stop()
    return 0
