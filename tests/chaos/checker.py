"""The chaos campaign's checker: reads a run's files and judges them.

It imports nothing from syncprims (``test_chaos.py`` enforces it), so a bug in the library
cannot hide itself by also being in the judge. Its inputs are plain files that the runner
and the workers wrote into the run's folder:

* ``history/*.jsonl``: one line per event of a client process (see :data:`EVENTS`), with
  ``time.monotonic()`` times; CLOCK_MONOTONIC is system-wide on Linux, so the times of
  different processes compare.
* ``nemesis.jsonl``: every fault the nemesis injected, with its start and end times and
  what it hit (pids, servers, the resource a slot migration moved, the eviction policy and
  the keys evicted, a clock's offset, whether a restart kept its data).
* ``meta.json``: the kinds, each kind's servers, and which server owns each resource at the
  start (a Cluster key's slot owner).
* ``store.json``: the store Redis's per-resource logs, in store order.
* ``final.json``: what the runner found held after every client had stopped.

What it verifies, per primitive and resource:

1. **Exclusion.** No two critical sections of a lock overlap (a write section overlaps no
   other section of its ReadWriteLock; a semaphore never has more than N holders) unless
   the earlier holder had been told of the loss first, or a fault is its *cause* (each
   overlap counts once per earlier section, however many later ones it overlapped; each
   unexcused pair is a violation). The causes, judged for that holder, not for its class:

   * ``client_pause``: a pause of the holder's own process outlasted its lease: the lease
     could have ended (see below) while the process was stopped, and before the other's
     grant. Either holder qualifies: the later-logged one may have read its grant before a
     pause and logged it after, its lease running out meanwhile.
   * ``restart_no_persistence``: a server restarted empty while the holder held the key on
     it: the resource's owner (the single server; the Cluster node that owned the key's
     slot then, slot migrations followed), and for a RedLock, restarts that left the holder
     fewer masters still holding its grant than a majority. The holder must then be told
     within ``bound`` of the server's return (or have ended its section by then).
   * ``eviction``: memory pressure on the owner evicted a key of that resource (the
     runner watches evictions through keyspace notifications) while the holder held it,
     and the holder was told within ``bound`` of the other's grant (or ended its section by
     then). An eviction that was never followed by a notice
     is a silent loss, which the library must not have once it reads ``maxmemory-policy``.
   * ``failover``: a Sentinel failover (or the master cut off from its replica and the
     sentinels) during the section: the documented caveat, for now (:data:`FAILOVER_MUST_TELL`
     makes it also require a notice within ``bound``).
   * ``clock``: PermitExpirableSemaphore permits are leases on the client's wall clock
     (``clock: client`` in the worker's start event): a permit may be taken over when the
     taker's clock minus the holder's is at least the lease left; the offsets the nemesis
     set make it so or they excuse nothing.
   * ``lease_overrun``: a section that the worker *planned* to outlive its explicit lease
     (the fenced kind's stale writers, ``overrun`` in the grant), overlapped only after that
     lease ended: the fence's job, judged by the store check below.

   A lease's earliest end: an explicit lease ends ``lease`` after the request; a watchdog
   lease ``lease`` after its last renewal, which ran at most a third of the lease (plus
   ``JITTER``) before the pause, or before the first fault on its servers that could have
   made renewals fail (the watchdog tells the holder itself when they fail until then).
   ``bound`` is a renewal period plus the client's operation timeout plus ``SLACK``.

   A loss notice counts for its own section only (``lost`` events name the section); for
   a RedLock, notices of sub-locks count per master, and the holder is told once the
   masters not yet lost are fewer than a majority (or a notice for the whole lock came).
2. **Told of every loss.** A release that said "not held" (or a reentrant acquire that was
   refused) must follow a notice for that section or one of the causes above (recent
   enough that the library could not have told it yet), or have taken long enough for the
   lease to run out while it was in flight (the watchdog stops at the release); a section
   on a server restarted empty (no replica, no persistence) must be told within ``bound``
   of the server's return if it was still running then.
3. **Store evidence.** Every lost update (a commit that found the counter moved since its
   read) belongs to an overlap found in 1, so the store and the clocks agree.
4. **Fencing.** Tokens are unique, accepted ones only grow in store order (an equal token
   only from the same section), and a section asked for after an earlier one ended has a
   higher token (one asked for before may be lower: its token was issued before its grant
   was read); for a FencedLock without durable tokens, a regression across an
   empty restart or an eviction of its keys is the documented caveat
   (``tokens_reset``).
5. **Quorum.** A RedLock grant names at least a majority of its masters (when the worker
   could read which).
6. **Bounded waits.** Every acquire returned within its wait time plus the client's
   operation timeout plus ``SLACK``, unless its process was paused.
7. **No hang.** Every thread of every process that was not killed finished.
8. **Nothing held afterwards.** After the clients stopped and the longest lease passed,
   no lock is held and every semaphore has the permits it started with (where its keys
   were evicted or its server restarted empty, a different count is a note).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CAUSES",
    "EVENTS",
    "Report",
    "Section",
    "check_run",
    "format_table",
    "summary_line",
]

EVENTS = {
    "start": "a client process started (pid, kind, op_timeout; durable, clock, mutant)",
    "req": "an acquire was called (th, res, wait)",
    "grant": "it returned held (sid, th, res, role, token or permit, t_req, lease, explicit, "
    "overrun, masters, depth)",
    "deny": "it returned not held within its wait (res, t_req)",
    "acq_err": "it raised (res, t_req, err)",
    "lost": "the library told this process a hold was lost (sid, res, reason, master, scope)",
    "reacq": "a reentrant acquire of a held lock returned (sid, ok)",
    "commit": "the section wrote the store (sid, read, cur, accepted)",
    "abort": "the section saw the loss and did not write (sid)",
    "rel": "the section ended; release called (sid)",
    "rel_done": "release returned (sid, outcome)",
    "thread_done": "a worker thread finished its loop (th)",
    "exit": "the process finished",
}

CAUSES = {
    "client_pause": "the holder's process was paused past its lease",
    "restart_no_persistence": "the holder's server (or a RedLock majority) restarted empty",
    "eviction": "memory pressure evicted keys on the holder's server, and it was told",
    "failover": "a failover lost a grant or a renewal",
    "clock": "a permit's lease ran out on the taker's wall clock (client-clock leases)",
    "lease_overrun": "a planned stale writer outlived its explicit lease (fenced)",
}

SLACK = 1.0  # scheduling slack on a loaded 2-core machine, seconds
JITTER = 0.25  # how late a watchdog renewal may run on a loaded machine, seconds
DEFAULT_LEASE = 2.0  # a grant that does not say its lease: the campaign's watchdog timeout
# A failover excuses an overlap as the documented caveat. Once renewals are synced to the
# replicas (issue 39, item 3), a holder whose renewals the promoted replica missed is told:
# set this, and a failover excuses only what was told within ``bound``.
FAILOVER_MUST_TELL = True
# Faults that cannot stop a renewal of another process's hold.
_NOT_RENEWAL = ("client_kill", "client_pause", "clock_skew")


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
    lease: float | None = DEFAULT_LEASE  # None: no lease (a plain semaphore's permit)
    explicit: bool = False  # an explicit lease (not renewed) rather than the watchdog's
    overrun: bool = False  # the worker means to outlive its explicit lease
    masters: list[str] | None = None  # a RedLock's masters that granted (None: unknown)
    end: float | None = None
    ended_by: str = "open"
    released: float | None = None  # when its release was called
    notices: list[tuple[float, str | None]] = field(default_factory=list)  # (t, master)
    evidence: list[tuple[float, str]] = field(default_factory=list)  # (t, "not held" ...)


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
    extra: dict[str, Any] = field(default_factory=dict)

    def empties(self) -> bool:
        """Whether it restarted its servers without their data."""
        return self.cls in ("server_restart", "redlock_majority_restart") and not self.persistent

    def evicts(self, kind: str, res: str) -> bool:
        """Whether memory pressure evicted a key of ``kind``'s resource ``res`` (the keys it
        evicted, where the runner could watch them; else whether it evicted any)."""
        if self.cls != "memory_pressure":
            return False
        lost = self.extra.get("lost")
        return int(self.extra.get("evicted", 1)) > 0 if lost is None else f"{kind}/{res}" in lost


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
        """Overlaps excused by a cause."""
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


_FAULT_FIELDS = ("ev", "cls", "target", "start", "end", "pids", "servers", "persistent")


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
                    extra={k: v for k, v in e.items() if k not in _FAULT_FIELDS},
                )
            )
    return sorted(out, key=lambda f: f.start)


def _overlaps(a0: float, a1: float, b0: float, b1: float) -> bool:
    return a0 <= b1 and b0 <= a1


class _History:
    def __init__(self, run: Path) -> None:
        self.sections: dict[str, Section] = {}
        self.events: list[dict[str, Any]] = []
        self.kinds: dict[int, str] = {}
        self.starts: dict[int, dict[str, Any]] = {}
        self.op_timeout: dict[int, float] = {}
        self.threads: dict[int, set[int]] = defaultdict(set)
        self.done: dict[int, set[int]] = defaultdict(set)
        self.exited: set[int] = set()
        self.notices: dict[int, int] = defaultdict(int)  # pid -> loss notices
        self.commits: dict[str, dict[str, Any]] = {}
        self.last_t = 0.0
        for path in sorted((run / "history").glob("*.jsonl")):
            for e in _read_jsonl(path):
                self._add(e)

    def _add(self, e: dict[str, Any]) -> None:
        ev, pid, t = e.get("ev"), int(e.get("pid", 0)), float(e.get("t", 0.0))
        self.last_t = max(self.last_t, t)
        self.events.append(e)
        s = self.sections.get(e.get("sid", ""))
        if ev == "start":
            self.kinds[pid] = e["kind"]
            self.starts[pid] = e
            self.op_timeout[pid] = float(e["op_timeout"])
        elif ev == "req":
            self.threads[pid].add(int(e["th"]))
        elif ev == "grant":
            lease = e.get("lease", DEFAULT_LEASE)
            masters = e.get("masters")
            self.sections[e["sid"]] = Section(
                sid=e["sid"],
                kind=e["kind"],
                res=e["res"],
                pid=pid,
                role=e.get("role", "w"),
                grant=t,
                t_req=float(e["t_req"]),
                token=int(e.get("token") or 0),
                lease=None if lease is None else float(lease),
                explicit=bool(e.get("explicit", False)),
                overrun=bool(e.get("overrun", False)),
                masters=None if masters is None else [str(m) for m in masters],
            )
        elif ev in ("rel", "abort"):
            if s is not None and ev == "rel":
                s.released = t
            if s is not None and (s.end is None or t < s.end):
                s.end, s.ended_by = t, ev
            if s is not None and ev == "abort":  # it aborted because it was told
                s.notices.append((t, None))
        elif ev == "lost":
            self.notices[pid] += 1
            if s is not None:
                master = e.get("master")
                s.notices.append((t, None if master is None else str(master)))
        elif ev == "rel_done":
            if s is not None and e.get("outcome") == "notheld":
                s.evidence.append((t, "its release said not held"))
        elif ev == "reacq":
            if s is not None and not e.get("ok", True):
                s.evidence.append((t, "a reentrant acquire was refused"))
        elif ev == "commit":
            self.commits[e["sid"]] = e
        elif ev == "thread_done":
            self.done[pid].add(int(e["th"]))
        elif ev == "exit":
            self.exited.add(pid)


def _majority(count: int) -> int:
    return count // 2 + 1


class _Judge:
    """The causes, for one run: which fault could have made which holder lose its hold."""

    def __init__(self, h: _History, faults: list[Fault], meta: dict[str, Any]) -> None:
        self.h = h
        self.faults = faults
        self.servers: dict[str, list[str]] = meta.get("servers", {})
        self.owners0: dict[str, dict[str, list[str]]] = meta.get("owners", {})
        self.pauses: dict[int, list[Fault]] = defaultdict(list)
        self.clocks: dict[int, list[Fault]] = defaultdict(list)
        for f in faults:
            if f.cls == "client_pause":
                for pid in f.pids:
                    self.pauses[pid].append(f)
            elif f.cls == "clock_skew":
                for pid in f.pids:
                    self.clocks[pid].append(f)
        self.migrations = [f for f in faults if f.cls == "slot_migration" and "res" in f.extra]
        self.empty = [f for f in faults if f.empties()]  # by start (faults are sorted)
        self.empty_starts = [f.start for f in self.empty]
        self._sorted: dict[str, tuple[list[float], list[Section]]] = {}

    # -- where a section's keys live -------------------------------------------------------

    def owners(self, s: Section, t0: float, t1: float) -> set[str]:
        """The servers that held ``s``'s key at some time in ``[t0, t1]``."""
        if s.masters is not None:
            return set(s.masters)
        start = self.owners0.get(s.kind, {}).get(s.res)
        if start is None:
            return set(self.servers.get(s.kind, []))
        now, seen = set(start), set()
        for f in self.migrations:
            if f.extra.get("res") != s.res or f.extra.get("kind", "cluster") != s.kind:
                continue
            if f.end < t0:
                now = {str(f.extra["dst"])}
            elif f.start <= t1:
                seen |= {str(f.extra["src"]), str(f.extra["dst"])}
        return now | seen

    def quorum(self, s: Section) -> int:
        """How many of its masters ``s`` needs (1 for a lock on one server)."""
        return _majority(len(self.servers.get(s.kind, []))) if s.masters is not None else 1

    # -- notices ---------------------------------------------------------------------------

    def told(self, s: Section, t: float) -> bool:
        """Whether ``s``'s process was told that ``s``'s hold was lost, by ``t``."""
        lost: set[str] = set()
        for at, master in s.notices:
            if at > t:
                continue
            if master is None or s.masters is None:
                return True
            lost.add(master)
        return s.masters is not None and len(set(s.masters) - lost) < self.quorum(s)

    def bound(self, s: Section) -> float:
        """How soon after a loss the watchdog tells: a renewal period plus a call."""
        lease = s.lease or DEFAULT_LEASE
        return lease / 3 + self.h.op_timeout.get(s.pid, 5.0) + SLACK

    def told_or_done(self, s: Section, t: float) -> bool:
        """Told by ``t``, or the section had ended by then (nothing more to tell)."""
        extra = sum(
            p.end - p.start
            for p in self.pauses.get(s.pid, [])
            if _overlaps(p.start, p.end, s.grant, t)
        )
        t += extra  # a paused process hears nothing until it resumes
        return self.told(s, t) or (s.end is not None and s.end <= t)

    # -- the causes --------------------------------------------------------------------------

    def _renewals_failing_since(self, s: Section, before: float, *, ongoing: bool) -> float:
        """The earliest start of a fault on ``s``'s servers in the lease before ``before``
        (renewals may have failed from then; ``ongoing``: only a fault still in force at
        ``before``); ``before`` when none."""
        lease = s.lease or DEFAULT_LEASE
        servers = self.owners(s, before - lease, before)
        since = before
        for f in self.faults:
            if f.start > before:
                break
            if f.cls in _NOT_RENEWAL or f.end < (before - JITTER if ongoing else before - lease):
                continue
            if servers & set(f.servers):
                since = min(since, f.start)
        for p in self.pauses.get(s.pid, []):  # its own earlier pause stopped renewals too
            if p.start < before and p.end >= before - lease:
                since = min(since, p.start)
        return since

    def lease_end(self, s: Section, paused_at: float, *, ongoing: bool = False) -> float:
        """The earliest time ``s``'s lease could have ended in Redis, for a pause of its
        process (or its release) that began at ``paused_at``; ``ongoing``: counting only
        faults still in force then (the lease was still alive, or its loss was due)."""
        assert s.lease is not None
        if s.explicit:
            return s.t_req + s.lease
        since = min(paused_at, self._renewals_failing_since(s, paused_at, ongoing=ongoing))
        return max(s.t_req, since - s.lease / 3 - JITTER) + s.lease

    def paused_out(self, s: Section, before: float) -> float | None:
        """When the pause of ``s``'s own process that ended ``s``'s lease before ``before``
        ended (``None``: no such pause)."""
        if s.lease is None:
            return None
        for p in self.pauses.get(s.pid, []):
            if p.start > before or p.end < s.t_req:
                continue
            end = self.lease_end(s, p.start)
            if not (p.start - JITTER <= end <= p.end and end <= before):
                continue
            if s.explicit and not s.overrun:  # it would have ended in time but for the pause
                stop = s.end if s.end is not None else before
                inside = max(0.0, min(p.end, stop) - max(p.start, s.grant))
                if stop - inside > end + JITTER:
                    continue
            return p.end
        return None

    def paused_and_told(self, s: Section, before: float) -> bool:
        """A pause of ``s``'s process ended its lease before ``before``, and (a watchdog
        hold) the library told it within ``bound`` of the resume, or it ended by then."""
        resumed = self.paused_out(s, before)
        if resumed is None:
            return False
        return s.explicit or self.told_or_done(s, resumed + self.bound(s))

    def restarts(self, s: Section, t1: float) -> list[Fault]:
        """Empty restarts of a server holding ``s``'s key, between its request and ``t1``."""
        lo = bisect.bisect_left(self.empty_starts, s.t_req)
        hi = bisect.bisect_right(self.empty_starts, t1)
        if lo >= hi:  # most sections: none at all (a bisection, not a scan)
            return []
        servers = self.owners(s, s.t_req, t1)
        return [f for f in self.empty[lo:hi] if servers & set(f.servers)]

    def restarted_out(self, s: Section, t1: float) -> list[Fault]:
        """The restarts that left ``s`` without its key (a RedLock: without a majority of
        masters still holding it, counting those already reported lost), else []."""
        hits = self.restarts(s, t1)
        if not hits or s.masters is None:
            return hits
        gone = {m for f in hits for m in f.servers} | {m for t, m in s.notices if t <= t1 and m}
        return hits if len(set(s.masters) - gone) < self.quorum(s) else []

    def evictions(self, s: Section, t0: float, t1: float) -> list[Fault]:
        """Memory pressure that evicted keys on ``s``'s servers during ``[t0, t1]``."""
        servers = self.owners(s, t0, t1)
        return [
            f
            for f in self.faults
            if f.evicts(s.kind, s.res)
            and _overlaps(f.start, f.end, t0, t1)
            and servers & set(f.servers)
        ]

    def failovers(self, s: Section, t0: float, t1: float) -> bool:
        """Whether a failover touched ``s``'s servers during ``[t0, t1]`` (and, with
        :data:`FAILOVER_MUST_TELL`, ``s`` was told within ``bound`` of its end)."""
        servers = self.owners(s, t0, t1)
        return any(
            f.cls in ("failover", "master_cut")
            and _overlaps(f.start, f.end, t0, t1)
            and servers & set(f.servers)
            and (not FAILOVER_MUST_TELL or self.told_or_done(s, f.end + self.bound(s)))
            for f in self.faults
        )

    def _offsets(self, pid: int, t: float) -> set[float]:
        """The wall-clock offsets ``pid`` may have had at ``t`` (a change takes a moment
        to reach the process: ``SLACK`` allowed)."""
        out = {0.0}
        for f in self.clocks.get(pid, []):
            if f.start <= t <= f.end + SLACK:
                out.add(float(f.extra.get("offset", 0.0)))
        return out

    def clock_out(self, a: Section, b: Section) -> bool:
        """Whether ``b`` could take ``a``'s client-clock permit as expired at its grant."""
        if a.lease is None or self.h.starts.get(b.pid, {}).get("clock") != "client":
            return False
        for off_a in self._offsets(a.pid, a.t_req):
            for off_b in self._offsets(b.pid, b.grant):
                if (off_a or off_b) and b.grant + off_b >= a.t_req + off_a + a.lease - JITTER:
                    return True
        return False

    def excuse(self, a: Section, b: Section) -> str | None:
        """The cause of ``b`` (logged later) overlapping ``a``, if any."""
        if a.lease is None:  # a plain semaphore's permit: nothing takes it away
            return None
        if self.paused_and_told(a, b.grant):
            return "client_pause"
        # ``b`` may have read its grant before a pause and logged it after: its lease ran
        # out while it was stopped, and ``a`` was granted after that.
        if (
            b.lease is not None
            and any(p.start <= b.grant and p.end >= b.t_req for p in self.pauses.get(b.pid, []))
            and self.paused_and_told(b, a.grant)
        ):
            return "client_pause"
        if a.overrun and a.explicit and b.grant >= a.t_req + a.lease:
            return "lease_overrun"
        gone = self.restarted_out(a, b.grant)
        if gone and self.told_or_done(a, max(f.end for f in gone) + self.bound(a)):
            return "restart_no_persistence"
        evicted = self.evictions(a, a.grant, b.grant)
        if evicted and (a.explicit or self.told_or_done(a, b.grant + self.bound(a))):
            return "eviction"
        if self.failovers(a, a.grant, b.grant):
            return "failover"
        if a.role == "s" and b.role == "s" and self.clock_out(a, b):
            return "clock"
        return None

    def loss_cause(self, s: Section, t: float) -> str | None:
        """What explains ``s``'s hold found gone at ``t`` with no notice before, if anything:
        a cause recent enough that the library could not have told it yet."""
        if s.lease is None:
            return None
        if s.explicit and t >= s.t_req + s.lease:
            return "its explicit lease ran out"
        # The watchdog stops at the release: a slow one may outlive the lease. (A lease
        # that ran out before it, in a fault that was over by then, had to be told.)
        released = s.released
        if (
            released is not None
            and released <= t
            and self.lease_end(s, released, ongoing=True) <= t
        ):
            return "its lease could run out while the release was in flight"
        late = self.bound(s)
        resumed = self.paused_out(s, t)
        if resumed is not None and (s.explicit or t <= resumed + late):
            return "client_pause"
        if any(s.explicit or t <= f.end + late for f in self.restarted_out(s, t)):
            return "restart_no_persistence"
        if any(s.explicit or t <= f.end + late for f in self.evictions(s, s.grant, t)):
            return "eviction"
        if self.failovers(s, s.grant, t):
            return "failover"
        if s.role == "s" and self.clocks:  # a taker, granted meanwhile, whose clock ran ahead
            grants, sections = self._by_grant(s.kind)
            lo, hi = bisect.bisect_left(grants, s.grant), bisect.bisect_right(grants, t)
            if any(x.pid != s.pid and self.clock_out(s, x) for x in sections[lo:hi]):
                return "clock"
        return None

    def _by_grant(self, kind: str) -> tuple[list[float], list[Section]]:
        """``kind``'s sections in grant order, and their grant times (made once)."""
        if kind not in self._sorted:
            ordered = sorted((x for x in self.h.sections.values() if x.kind == kind),
                             key=lambda x: x.grant)  # fmt: skip
            self._sorted[kind] = ([x.grant for x in ordered], ordered)
        return self._sorted[kind]


def _check_exclusion(
    h: _History,
    judge: _Judge,
    *,
    rows: dict[str, Row],
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
                causes = [judge.excuse(a, b) for a in rivals]
                involved.update([b.sid, *(a.sid for a in rivals)])
                if sum(c is None for c in causes) < limit:
                    row.excused[next(c for c in causes if c is not None)] += 1
                else:
                    row.violations += 1
                    violations.append(
                        f"{kind}/{res}: {len(rivals) + 1} holders > {limit} at t={b.grant:.3f} "
                        f"({b.sid} with {', '.join(a.sid for a in rivals)}), no cause"
                    )
                active.append(b)
                continue
            for a in active:
                if a.role == "r" and b.role == "r":
                    continue
                involved.update([a.sid, b.sid])
                first = a.sid not in counted
                counted.add(a.sid)
                if judge.told(a, b.grant):
                    row.notified_overlaps += first
                    continue
                why = judge.excuse(a, b)
                if why is not None:
                    row.excused[why] += first
                    continue
                row.violations += 1
                violations.append(
                    f"{kind}/{res}: {a.sid} [{a.grant:.3f}, "
                    f"{'open' if a.end is None else f'{a.end:.3f}'}] overlaps {b.sid} "
                    f"granted at {b.grant:.3f}, no loss notice for {a.sid} before it, no cause"
                )
            active.append(b)
    return involved


def _check_told(h: _History, judge: _Judge, rows: dict[str, Row], violations: list[str]) -> None:
    """Every hold that was found gone was told first, or a cause explains it; and a hold on
    a server that restarted empty was told in time."""
    for s in h.sections.values():
        for t, what in s.evidence[:1]:
            if judge.told(s, t) or judge.loss_cause(s, t) is not None:
                continue
            rows[s.kind].violations += 1
            violations.append(
                f"{s.kind}/{s.res}: {s.sid} (granted {s.grant:.3f}): {what} at {t:.3f}, with "
                "no loss notice before and no cause: a hold lost with no notice at all"
            )
        if s.role == "s" or s.lease is None or s.explicit:
            continue
        last = s.end if s.end is not None else h.last_t
        for f in judge.restarted_out(s, last):
            if any(srv == "sentinel" for srv in f.servers):  # a replica may have kept it
                continue
            deadline = f.end + judge.bound(s)
            if last > deadline and not judge.told_or_done(s, deadline):
                rows[s.kind].violations += 1
                violations.append(
                    f"{s.kind}/{s.res}: {s.sid} held on {', '.join(f.servers)}, restarted empty "
                    f"at {f.start:.3f} (back at {f.end:.3f}), was not told by {deadline:.3f}"
                )
                break


def _check_quorum(h: _History, judge: _Judge, rows: dict[str, Row], violations: list[str]) -> None:
    for s in h.sections.values():
        if s.masters is not None and len(s.masters) < judge.quorum(s):
            rows[s.kind].violations += 1
            violations.append(
                f"{s.kind}/{s.res}: {s.sid} granted on {len(s.masters)} masters "
                f"({', '.join(s.masters) or 'none'}), fewer than a majority of "
                f"{len(judge.servers.get(s.kind, []))}"
            )


def _resets(h: _History, judge: _Judge, first: Section, later: Section) -> bool:
    """Whether ``later``'s token may repeat or undercut ``first``'s by the documented
    caveat: tokens not durable, and the owner restarted empty or evicted (``allkeys``)."""
    if h.starts.get(later.pid, {}).get("durable", False):
        return False
    t0, t1 = min(first.t_req, later.t_req), max(first.grant, later.grant)
    servers = judge.owners(first, t0, t1)
    return any(
        (f.empties() or f.evicts(first.kind, first.res))
        and _overlaps(f.start, f.end, t0, t1)
        and servers & set(f.servers)
        for f in judge.faults
    )


def _check_store(
    store: dict[str, list[str]],
    judge: _Judge,
    *,
    rows: dict[str, Row],
    involved: set[str],
    violations: list[str],
) -> None:
    h = judge.h
    for key, entries in sorted(store.items()):
        kind = key.split("/", 1)[0]
        row = rows[kind]
        last_accepted, last_sid = 0, ""
        for line in entries:
            parts = line.split()
            if parts[0] in ("commit", "fcommit"):
                if parts[0] == "commit":
                    _, sid, read, cur, token_s, accepted = parts
                else:  # through fenced_set: its outcome is in the history
                    _, sid, read, token_s = parts
                    done = h.commits.get(sid)
                    if done is None:
                        continue  # killed before it could log the outcome
                    cur, accepted = str(done["cur"]), "1" if done["accepted"] else "0"
                token = int(token_s)
                if accepted == "0":
                    row.fenced_rejects += 1
                    continue
                if token:
                    stale = token < last_accepted or (token == last_accepted and sid != last_sid)
                    earlier, this = h.sections.get(last_sid), h.sections.get(sid)
                    if stale and not (earlier and this and _resets(h, judge, earlier, this)):
                        row.violations += 1
                        violations.append(
                            f"{key}: store accepted token {token} ({sid}) after "
                            f"{last_accepted} ({last_sid})"
                        )
                    last_accepted, last_sid = token, sid
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


def _check_tokens(h: _History, judge: _Judge, rows: dict[str, Row], violations: list[str]) -> None:
    by_res: dict[tuple[str, str], list[Section]] = defaultdict(list)
    for s in h.sections.values():
        if s.token and s.role == "w" and s.kind == "fenced":
            by_res[(s.kind, s.res)].append(s)
    for (kind, res), sections in by_res.items():
        seen: dict[int, Section] = {}
        for s in sorted(sections, key=lambda s: s.grant):
            first = seen.get(s.token)
            if first is not None and not _resets(h, judge, first, s):
                rows[kind].violations += 1
                violations.append(f"{kind}/{res}: token {s.token} given to {first.sid} and {s.sid}")
            seen[s.token] = s
        # Every section asked for after another ended must carry a higher token (a token is
        # issued in Redis between the request and the grant's reply, so one asked for
        # earlier may be lower though its grant was read later): sweep the sections by
        # request, keeping the highest token among those ended before it (O(n log n); each
        # later section is judged against that one).
        ended = sorted((s for s in sections if s.end is not None), key=lambda s: s.end or 0.0)
        highest: Section | None = None
        j = 0
        for b in sorted(sections, key=lambda s: s.t_req):
            while j < len(ended) and (ended[j].end or 0.0) < b.t_req:
                if highest is None or ended[j].token > highest.token:
                    highest = ended[j]
                j += 1
            if (
                highest is not None
                and highest.token >= b.token
                and not _resets(h, judge, highest, b)
            ):
                rows[kind].violations += 1
                violations.append(
                    f"{kind}/{res}: {b.sid} (token {b.token}) after {highest.sid} ended "
                    f"(token {highest.token})"
                )


def _paused(judge: _Judge, pid: int, t0: float, t1: float) -> bool:
    return any(_overlaps(f.start, f.end, t0, t1) for f in judge.pauses.get(pid, []))


def _check_waits(h: _History, judge: _Judge, rows: dict[str, Row], violations: list[str]) -> None:
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
        if e.get("stalled"):  # the worker stalled this acquire on purpose (a fault)
            bound += float(e["stalled"])
        if took > bound and not _paused(judge, pid, float(e["t_req"]), float(e["t"])):
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


def _check_final(
    final: dict[str, Any], judge: _Judge, rows: dict[str, Row], violations: list[str]
) -> list[str]:
    """Violations for what was left held; notes for a semaphore's count that its keys'
    eviction or an empty restart of its server explains."""
    notes = []
    for item in final.get("held", []):
        kind, res = item["kind"], item.get("res")
        lost = [
            f
            for f in judge.faults
            if res is not None
            and (
                f.evicts(kind, res)
                or (f.empties() and set(f.servers) & set(judge.servers.get(kind, [])))
            )
        ]
        if "permits" in item["what"] and lost:
            notes.append(f"{kind}: {item['what']} after every client stopped ({lost[0].cls})")
            continue
        rows[kind].violations += 1
        violations.append(f"{kind}: {item['what']} after every client stopped")
    return notes


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
    permits: dict[str, int] = meta.get("permits", {})
    rows: dict[str, Row] = {kind: Row() for kind in meta.get("kinds", [])}
    rows = defaultdict(Row, rows)
    violations: list[str] = []

    killed = {pid for f in faults if f.cls == "client_kill" for pid in f.pids}
    kill_time = {pid: f.start for f in faults if f.cls == "client_kill" for pid in f.pids}
    for s in h.sections.values():
        rows[s.kind].sections += 1
        if s.end is None and s.pid in kill_time and kill_time[s.pid] >= s.grant:
            s.end, s.ended_by = kill_time[s.pid], "killed"
        # else open to the end of the run: it overlaps everything after it
    for pid, count in h.notices.items():
        rows[h.kinds.get(pid, "?")].loss_notices += count

    judge = _Judge(h, faults, meta)
    involved = _check_exclusion(h, judge, rows=rows, permits=permits, violations=violations)
    _check_told(h, judge, rows, violations)
    _check_quorum(h, judge, rows, violations)
    _check_store(store, judge, rows=rows, involved=involved, violations=violations)
    _check_tokens(h, judge, rows, violations)
    _check_waits(h, judge, rows, violations)
    _check_hangs(h, killed, rows, violations)
    notes = _check_final(final, judge, rows, violations)
    fault_counts: dict[str, int] = defaultdict(int)
    for f in faults:
        fault_counts[f.cls] += 1
    return Report(
        rows=dict(rows),
        violations=violations,
        faults=dict(fault_counts),
        notes=[*meta.get("notes", []), *notes],
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
                "excused (cause)",
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
