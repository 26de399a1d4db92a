"""The chaos campaign's checker: reads a run's files and judges them.

It imports nothing from syncprims (``tests/chaos/test_checker.py`` enforces it), so a bug in
the library cannot hide itself by also being in the judge. Its inputs are plain files that
the runner and the workers wrote into the run's folder:

* ``history/*.jsonl``: one line per event of a client process (see :data:`EVENTS`), with
  ``time.monotonic()`` times; CLOCK_MONOTONIC is system-wide on Linux, so the times of
  different processes compare.
* ``nemesis.jsonl``: every fault the nemesis injected, with its start and end times.
* ``store.json``: the store Redis's per-resource logs, in store order.
* ``final.json``: what the runner found held after every client had stopped.

What it verifies, per primitive and resource:

1. **Exclusion.** No two critical sections of a lock overlap (a write section overlaps no
   other section of its ReadWriteLock; a semaphore never has more than N holders) unless the
   earlier holder had been told of the loss first, or a fault excused by
   ``docs/guarantees.md`` hit it (counted by class: a paused client, a server restarted
   without persistence, a failover). Excused and notified overlaps count once per earlier
   section, however many later sections it overlapped; each unexcused pair is a violation.
2. **Store evidence.** Every lost update (a commit that found the counter moved since its
   read) belongs to an overlap found in 1, so the store and the clocks agree.
3. **Fencing.** Tokens are unique, accepted ones only grow in store order, and a later
   section that did not overlap an earlier one has a higher token.
4. **Bounded waits.** Every acquire returned within its wait time plus the stated bound
   (the client's operation timeout, plus scheduling slack), unless its process was paused.
5. **No hang.** Every thread of every process that was not killed finished.
6. **Nothing held afterwards.** After the clients stopped and the longest lease passed,
   no lock is held and no semaphore has more permits than it started with.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EVENTS",
    "EXCUSED_CLASSES",
    "Report",
    "Section",
    "check_run",
    "format_table",
    "summary_line",
]

EVENTS = {
    "start": "a client process started (pid, kind, op_timeout)",
    "req": "an acquire was called (th, res, wait)",
    "grant": "it returned held (sid, res, token or permit, t_req)",
    "deny": "it returned not held within its wait (res, t_req)",
    "acq_err": "it raised (res, t_req, err)",
    "lost": "the library told this process a hold was lost (res, reason)",
    "commit": "the section wrote the store (sid, read, cur, accepted)",
    "abort": "the section saw the loss and did not write (sid)",
    "rel": "the section ended; release called (sid)",
    "rel_done": "release returned (sid, outcome)",
    "thread_done": "a worker thread finished its loop (th)",
    "exit": "the process finished",
}

# Faults that docs/guarantees.md lists under "What is not guaranteed".
EXCUSED_CLASSES = {
    "client_pause": "a holder paused past its lease (Pauses)",
    "restart_no_persistence": "a server restarted empty (RedLock restarts / lease safety)",
    "failover": "a failover lost a grant or a renewal (Failover)",
}

SLACK = 1.0  # scheduling slack on a loaded 2-core machine, seconds


@dataclass
class Section:
    """One critical section, from the history."""

    sid: str
    kind: str
    res: str
    pid: int
    role: str  # "w" (exclusive), "r" (reader), "s" (semaphore permit)
    grant: float
    t_req: float
    token: int = 0
    end: float | None = None
    ended_by: str = "open"
    lost_at: float | None = None


@dataclass
class Fault:
    """One nemesis fault, from nemesis.jsonl."""

    cls: str
    target: str
    start: float
    end: float
    pids: list[int] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)
    persistent: bool = False


@dataclass
class Row:
    """Counts for one primitive."""

    sections: int = 0
    violations: int = 0
    loss_notices: int = 0
    excused: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    notified_overlaps: int = 0
    denied: int = 0
    errors: int = 0
    fenced_rejects: int = 0
    max_holders: int = 0


@dataclass
class Report:
    """The checker's verdict on a run."""

    rows: dict[str, Row]
    violations: list[str]
    faults: dict[str, int]
    notes: list[str]

    @property
    def sections(self) -> int:
        """Critical sections in the run."""
        return sum(r.sections for r in self.rows.values())

    @property
    def loss_notices(self) -> int:
        """Loss notices the clients received."""
        return sum(r.loss_notices for r in self.rows.values())

    @property
    def excused(self) -> int:
        """Overlaps excused by a documented fault class."""
        return sum(sum(r.excused.values()) for r in self.rows.values())


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by SIGKILL


def _faults(run: Path, end_of_run: float) -> list[Fault]:
    path = run / "nemesis.jsonl"
    out = []
    if path.exists():
        for e in _read_jsonl(path):
            if e.get("ev") != "fault":
                continue
            out.append(
                Fault(
                    cls=e["cls"],
                    target=e["target"],
                    start=e["start"],
                    end=e.get("end") or end_of_run,
                    pids=list(e.get("pids", [])),
                    servers=list(e.get("servers", [])),
                    persistent=bool(e.get("persistent", False)),
                )
            )
    return out


def _overlaps(a0: float, a1: float, b0: float, b1: float) -> bool:
    return a0 <= b1 and b0 <= a1


class _History:
    def __init__(self, run: Path) -> None:
        self.sections: dict[str, Section] = {}
        self.events: list[dict[str, Any]] = []
        self.kinds: dict[int, str] = {}
        self.op_timeout: dict[int, float] = {}
        self.threads: dict[int, set[int]] = defaultdict(set)
        self.done: dict[int, set[int]] = defaultdict(set)
        self.exited: set[int] = set()
        self.lost: dict[tuple[int, str], list[float]] = defaultdict(list)
        self.last_t = 0.0
        for path in sorted((run / "history").glob("*.jsonl")):
            for e in _read_jsonl(path):
                self._add(e)

    def _add(self, e: dict[str, Any]) -> None:
        ev, pid, t = e.get("ev"), int(e.get("pid", 0)), float(e.get("t", 0.0))
        self.last_t = max(self.last_t, t)
        self.events.append(e)
        if ev == "start":
            self.kinds[pid] = e["kind"]
            self.op_timeout[pid] = float(e["op_timeout"])
        elif ev == "req":
            self.threads[pid].add(int(e["th"]))
        elif ev == "grant":
            self.sections[e["sid"]] = Section(
                sid=e["sid"],
                kind=e["kind"],
                res=e["res"],
                pid=pid,
                role=e.get("role", "w"),
                grant=t,
                t_req=float(e["t_req"]),
                token=int(e.get("token") or 0),
            )
        elif ev in ("rel", "abort"):
            s = self.sections.get(e["sid"])
            if s is not None and (s.end is None or t < s.end):
                s.end, s.ended_by = t, ev
        elif ev == "lost":
            self.lost[(pid, e["res"])].append(t)
        elif ev == "thread_done":
            self.done[pid].add(int(e["th"]))
        elif ev == "exit":
            self.exited.add(pid)


def _excuse(
    a: Section, b: Section, faults: list[Fault], servers: dict[str, list[str]]
) -> str | None:
    """The documented fault class that excuses ``a`` (earlier) overlapping ``b``, if any."""
    window = (a.grant, b.grant)
    for f in faults:  # a paused from its request on (it may have read its grant before)
        if (
            f.cls == "client_pause"
            and a.pid in f.pids
            and _overlaps(f.start, f.end, a.t_req, b.grant)
        ):
            return "client_pause"
    mine = set(servers.get(a.kind, []))
    for f in faults:
        if not _overlaps(f.start, f.end + 1.0, *window) or not (mine & set(f.servers)):
            continue
        if f.cls in ("server_restart", "redlock_majority_restart") and not f.persistent:
            return "restart_no_persistence"
        if f.cls in ("failover", "server_restart_failover"):
            return "failover"
    return None


def _paused_acquire(b: Section, faults: list[Fault]) -> str | None:
    """``client_pause`` when ``b``'s process was paused between its request and its logged
    grant: the grant may have been read before the pause (the lock then really was ``b``'s
    first, and its lease ran out during the pause: the documented caveat), and the history
    cannot tell when. A grant *read* after its lease is refused by the library
    (``tests/faults/test_network.py``), which the checker cannot see either way."""
    for f in faults:
        if (
            f.cls == "client_pause"
            and b.pid in f.pids
            and _overlaps(f.start, f.end, b.t_req, b.grant)
        ):
            return "client_pause"
    return None


def _check_exclusion(
    h: _History,
    *,
    rows: dict[str, Row],
    faults: list[Fault],
    servers: dict[str, list[str]],
    permits: dict[str, int],
    violations: list[str],
) -> set[str]:
    """Overlap analysis; returns the sids that take part in an overlap (any verdict)."""
    involved: set[str] = set()
    by_res: dict[tuple[str, str], list[Section]] = defaultdict(list)
    for s in h.sections.values():
        by_res[(s.kind, s.res)].append(s)
    for (kind, res), sections in sorted(by_res.items()):
        sections.sort(key=lambda s: s.grant)
        row = rows[kind]
        limit = permits.get(kind, 1)
        active: list[Section] = []
        counted: set[str] = set()  # an earlier section counts once, however many it overlaps
        for b in sections:
            active = [a for a in active if a.end is None or a.end > b.grant]
            if b.role == "s":
                rivals = [a for a in active if a.role == "s"]
                row.max_holders = max(row.max_holders, len(rivals) + 1)
                if len(rivals) < limit:
                    active.append(b)
                    continue
                # N + 1 holders: excuse the newcomer if enough of the others are excused.
                unexcused = [a for a in rivals if _excuse(a, b, faults, servers) is None]
                involved.update([b.sid, *(a.sid for a in rivals)])
                if len(unexcused) < limit:
                    cls = next(
                        c for a in rivals if (c := _excuse(a, b, faults, servers)) is not None
                    )
                    row.excused[cls] += 1
                else:
                    row.violations += 1
                    violations.append(
                        f"{kind}/{res}: {len(rivals) + 1} holders > {limit} at t={b.grant:.3f} "
                        f"({b.sid} with {', '.join(a.sid for a in rivals)})"
                    )
                active.append(b)
                continue
            for a in active:
                if a.role == "r" and b.role == "r":
                    continue
                involved.update([a.sid, b.sid])
                first = a.sid not in counted
                counted.add(a.sid)
                notices = [t for t in h.lost.get((a.pid, a.res), []) if a.grant <= t <= b.grant]
                if notices:
                    row.notified_overlaps += first
                    continue
                why = _excuse(a, b, faults, servers) or _paused_acquire(b, faults)
                if why is not None:
                    row.excused[why] += first
                    continue
                row.violations += 1
                violations.append(
                    f"{kind}/{res}: {a.sid} [{a.grant:.3f}, "
                    f"{'open' if a.end is None else f'{a.end:.3f}'}] overlaps {b.sid} "
                    f"granted at {b.grant:.3f}, no loss notice, no excusing fault"
                )
            active.append(b)
    return involved


def _check_store(
    store: dict[str, list[str]],
    h: _History,
    rows: dict[str, Row],
    involved: set[str],
    violations: list[str],
) -> None:
    for key, entries in sorted(store.items()):
        kind = key.split("/", 1)[0]
        row = rows[kind]
        last_accepted = 0
        for line in entries:
            parts = line.split()
            if parts[0] == "commit":
                _, sid, read, cur, token_s, accepted = parts
                token = int(token_s)
                if accepted == "0":
                    row.fenced_rejects += 1
                    continue
                if token:
                    if token <= last_accepted:
                        row.violations += 1
                        violations.append(
                            f"{key}: store accepted token {token} after {last_accepted}"
                        )
                    last_accepted = token
                if read != cur and sid not in involved:
                    row.violations += 1
                    violations.append(
                        f"{key}: lost update by {sid} (read {read}, found {cur}) with no "
                        "overlap in the history"
                    )
            elif parts[0] == "read_changed":
                _, sid, before, after = parts
                if sid not in involved:
                    row.violations += 1
                    violations.append(
                        f"{key}: reader {sid} saw the counter move {before} -> {after} with "
                        "no overlap in the history"
                    )


def _check_tokens(h: _History, rows: dict[str, Row], violations: list[str]) -> None:
    by_res: dict[tuple[str, str], list[Section]] = defaultdict(list)
    for s in h.sections.values():
        if s.token and s.role == "w" and s.kind == "fenced":
            by_res[(s.kind, s.res)].append(s)
    for (kind, res), sections in by_res.items():
        seen: dict[int, str] = {}
        for s in sections:
            if s.token in seen:
                rows[kind].violations += 1
                violations.append(
                    f"{kind}/{res}: token {s.token} given to {seen[s.token]} and {s.sid}"
                )
            seen[s.token] = s.sid
        # Every section granted after another ended must carry a higher token: sweep the
        # sections by grant, keeping the highest token among those ended before it
        # (O(n log n); each later section is judged against that one).
        ended = sorted((s for s in sections if s.end is not None), key=lambda s: s.end or 0.0)
        highest: Section | None = None
        j = 0
        for b in sorted(sections, key=lambda s: s.grant):
            while j < len(ended) and (ended[j].end or 0.0) < b.grant:
                if highest is None or ended[j].token > highest.token:
                    highest = ended[j]
                j += 1
            if highest is not None and highest.token >= b.token:
                rows[kind].violations += 1
                violations.append(
                    f"{kind}/{res}: {b.sid} (token {b.token}) after {highest.sid} ended "
                    f"(token {highest.token})"
                )


def _paused(pid: int, t0: float, t1: float, faults: list[Fault]) -> bool:
    return any(
        f.cls in ("client_pause",) and pid in f.pids and _overlaps(f.start, f.end, t0, t1)
        for f in faults
    )


def _check_waits(
    h: _History, rows: dict[str, Row], faults: list[Fault], violations: list[str]
) -> None:
    for e in h.events:
        if e.get("ev") not in ("grant", "deny", "acq_err"):
            continue
        pid = int(e["pid"])
        kind = h.kinds.get(pid, e.get("kind", "?"))
        if e["ev"] == "deny":
            rows[kind].denied += 1
        elif e["ev"] == "acq_err":
            rows[kind].errors += 1
        took = float(e["t"]) - float(e["t_req"])
        bound = float(e.get("wait", 0)) + h.op_timeout.get(pid, 5.0) + SLACK
        if took > bound and not _paused(pid, float(e["t_req"]), float(e["t"]), faults):
            rows[kind].violations += 1
            violations.append(
                f"{kind}: pid {pid} waited {took:.2f} s (> wait + bound = {bound:.2f} s), "
                f"ended with {e['ev']} at {float(e['t']):.3f}"
            )


def _check_hangs(
    h: _History, killed: set[int], rows: dict[str, Row], violations: list[str]
) -> None:
    for pid, threads in sorted(h.threads.items()):
        if pid in killed:
            continue
        missing = threads - h.done[pid]
        if missing or pid not in h.exited:
            kind = h.kinds.get(pid, "?")
            rows[kind].violations += 1
            violations.append(f"{kind}: pid {pid} did not finish (threads {sorted(missing)} hang)")


def _check_final(final: dict[str, Any], rows: dict[str, Row], violations: list[str]) -> None:
    for item in final.get("held", []):
        rows[item["kind"]].violations += 1
        violations.append(f"{item['kind']}: {item['what']} after every client stopped")


def check_run(run: Path | str) -> Report:
    """Judge the run in folder ``run``.

    Returns:
        The :class:`Report`; ``report.violations`` lists each violation in one sentence.
    """
    run = Path(run)
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    h = _History(run)
    end_of_run = max(h.last_t, float(meta.get("end", 0.0)))
    faults = _faults(run, end_of_run)
    store = json.loads((run / "store.json").read_text(encoding="utf-8"))
    final_path = run / "final.json"
    final = json.loads(final_path.read_text(encoding="utf-8")) if final_path.exists() else {}
    servers: dict[str, list[str]] = meta.get("servers", {})
    permits: dict[str, int] = meta.get("permits", {})
    rows: dict[str, Row] = {kind: Row() for kind in meta.get("kinds", [])}
    rows = defaultdict(Row, rows)
    violations: list[str] = []

    killed = {pid for f in faults if f.cls == "client_kill" for pid in f.pids}
    kill_time = {pid: f.start for f in faults if f.cls == "client_kill" for pid in f.pids}
    for s in h.sections.values():
        rows[s.kind].sections += 1
        if s.end is None:
            if s.pid in kill_time and kill_time[s.pid] >= s.grant:
                s.end, s.ended_by = kill_time[s.pid], "killed"
            else:
                s.end = None  # open to the end of the run: overlaps everything after it
    for (_pid, _res), times in h.lost.items():
        rows[h.kinds.get(_pid, "?")].loss_notices += len(times)

    involved = _check_exclusion(
        h, rows=rows, faults=faults, servers=servers, permits=permits, violations=violations
    )
    _check_store(store, h, rows, involved, violations)
    _check_tokens(h, rows, violations)
    _check_waits(h, rows, faults, violations)
    _check_hangs(h, killed, rows, violations)
    _check_final(final, rows, violations)
    fault_counts: dict[str, int] = defaultdict(int)
    for f in faults:
        fault_counts[f.cls] += 1
    return Report(
        rows=dict(rows),
        violations=violations,
        faults=dict(fault_counts),
        notes=meta.get("notes", []),
    )


def _cells(values: Iterable[object]) -> str:
    return "| " + " | ".join(str(v) for v in values) + " |"


def format_table(report: Report) -> str:
    """The per-primitive table and the per-fault-class table, as markdown."""
    lines = [
        _cells(
            [
                "primitive",
                "critical sections",
                "violations",
                "loss notices",
                "overlaps after notice",
                "excused (class)",
                "timed out",
                "errors",
                "fence rejects",
            ]
        ),
        _cells(["---"] * 9),
    ]
    for kind, row in sorted(report.rows.items()):
        excused = ", ".join(f"{n} {c}" for c, n in sorted(row.excused.items())) or "0"
        holders = f" (max {row.max_holders} holders)" if row.max_holders else ""
        lines.append(
            _cells(
                [
                    kind + holders,
                    f"{row.sections:,}",
                    row.violations,
                    row.loss_notices,
                    row.notified_overlaps,
                    excused,
                    row.denied,
                    row.errors,
                    row.fenced_rejects,
                ]
            )
        )
    lines += ["", _cells(["fault class", "injected"]), _cells(["---", "---"])]
    for cls, n in sorted(report.faults.items()):
        lines.append(_cells([cls, n]))
    return "\n".join(lines)


def summary_line(report: Report) -> str:
    """``chaos: N critical sections, V violations, L loss notices, X excused``."""
    return (
        f"chaos: {report.sections} critical sections, {len(report.violations)} violations, "
        f"{report.loss_notices} loss notices, {report.excused} excused"
    )
