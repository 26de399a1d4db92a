"""The grant wait's state machine against its own table (``syncprims._protocol.grantwait``),
as h11 tests its state table: every row of the table in the module docstring (event,
from-state, to-state) is checked here, with its effect, and no row is checked that the
table does not have."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from syncprims._protocol import grantwait
from syncprims._protocol.grantwait import GrantState, GrantWait

WAITING, GRANTED, CLAIMED, ENDED = GrantState


def _table() -> list[tuple[str, GrantState, GrantState]]:
    """(event, from, to) of every row of the module docstring's table."""
    doc = grantwait.__doc__ or ""
    lines = doc.split("Transitions")[1].splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip().startswith("====")]
    rows = []
    for line in lines[rules[1] + 1 : rules[2]]:
        cells = line.split()
        if line[:8].strip() and cells[0] != "event":  # a continuation line has no event
            rows.append((cells[0], GrantState[cells[1]], GrantState[cells[2]]))
    return rows


def _wait(state: GrantState) -> GrantWait:
    """A wait in ``state``: registered (its first attempt's reply kept its member), then
    granted, claimed or ended as the state says."""
    wait = GrantWait(30_000, "client:1", 7)
    fresh = wait.next_member()
    wait.attempt_sent(fresh, 1.0)
    wait.attempt_failed(False, wait.member, fresh, 1.0)
    if state in (GRANTED, CLAIMED):
        assert wait.grant_announced(wait.member)
    if state is CLAIMED:
        wait.grant_claimed()
    if state is ENDED:
        wait.ended()
    assert wait.state is state
    return wait


def _sent(wait: GrantWait) -> None:
    member, fresh = wait.member, wait.next_member()
    assert wait.attempt_sent(fresh, 2.0) == (member, fresh)
    assert (wait.next, wait.next_sent) == (fresh, 2.0)
    assert {member, fresh} <= wait.members


def _failed_kept(wait: GrantWait) -> None:
    member, fresh = wait.member, wait.next_member()
    wait.attempt_sent(fresh, 2.0)
    assert wait.attempt_failed(False, member, fresh, 2.0) == fresh  # to forget
    assert (wait.member, wait.next, wait.floor) == (member, "", 2.0)
    assert fresh not in wait.members


def _failed_moved(wait: GrantWait) -> None:
    member, fresh = wait.member, wait.next_member()
    wait.attempt_sent(fresh, 2.0)
    assert wait.attempt_failed(True, member, fresh, 2.0) == member  # to forget
    assert (wait.member, wait.next, wait.floor) == (fresh, "", 2.0)
    assert member not in wait.members
    if wait.state is WAITING:
        assert wait.granted is None


def _granted_to_fresh(state: GrantState) -> GrantWait:
    """A wait granted to the member its attempt in flight registers (``next``)."""
    wait = _wait(WAITING)
    fresh = wait.next_member()
    wait.attempt_sent(fresh, 2.0)
    assert wait.grant_announced(fresh) and wait.since == 2.0  # ``next``'s send time
    assert wait.state is state
    return wait


def _failed_moved_granted_fresh(wait: GrantWait) -> None:
    member, fresh = wait.member, wait.next
    assert wait.attempt_failed(True, member, fresh, 3.0) == member
    assert (wait.granted, wait.member) == (fresh, fresh)


def _announced_ours(wait: GrantWait) -> None:
    start = wait.state
    assert wait.grant_announced(wait.member) is (start in (WAITING, GRANTED))
    if start in (WAITING, GRANTED):
        assert (wait.granted, wait.since) == (wait.member, wait.floor)


def _announced_other(wait: GrantWait) -> None:
    assert not wait.grant_announced("g|30000|7.99|client:1")
    assert wait.granted is None


def _taken(wait: GrantWait) -> None:
    start, since = wait.state, wait.since
    assert wait.grant_taken() == (since if start is GRANTED else None)


def _given_back_late(wait: GrantWait) -> None:
    member = wait.member
    wait.given_back_late()
    assert wait.member != member and wait.granted is None


def _armed(wait: GrantWait) -> None:
    def waker() -> None:
        pass

    start = wait.state
    assert wait.armed(waker) is (start is GRANTED)
    assert wait.waker is (None if start is GRANTED else waker)


def _disarmed(wait: GrantWait) -> None:
    wait.waker = lambda: None
    wait.disarmed()
    assert wait.waker is None


def _ended(wait: GrantWait) -> None:
    start, granted = wait.state, wait.granted
    assert wait.ended() == (granted if start is GRANTED else None)


CHECKS: dict[tuple[str, GrantState], Callable[[GrantWait], None]] = {
    ("attempt_sent", WAITING): _sent,
    ("attempt_sent", GRANTED): _sent,
    ("attempt_failed(kept)", WAITING): _failed_kept,
    ("attempt_failed(kept)", GRANTED): _failed_kept,
    ("attempt_failed(moved)", WAITING): _failed_moved,
    ("attempt_failed(moved)", GRANTED): _failed_moved,  # the two rows: to WAITING ...
    ("grant_announced(ours)", WAITING): _announced_ours,
    ("grant_announced(ours)", GRANTED): _announced_ours,
    ("grant_announced(other)", WAITING): _announced_other,
    ("grant_announced(ours)", CLAIMED): _announced_ours,
    ("grant_announced(ours)", ENDED): _announced_ours,
    ("grant_claimed", WAITING): lambda wait: wait.grant_claimed(),
    ("grant_claimed", GRANTED): lambda wait: wait.grant_claimed(),
    ("grant_taken", GRANTED): _taken,
    ("grant_taken", WAITING): _taken,
    ("grant_taken", CLAIMED): _taken,
    ("given_back_late", CLAIMED): _given_back_late,
    ("given_back_late", WAITING): _given_back_late,
    ("armed", WAITING): _armed,
    ("armed", GRANTED): _armed,
    ("disarmed", GRANTED): _disarmed,
    ("ended", WAITING): _ended,
    ("ended", GRANTED): _ended,
    ("ended", CLAIMED): _ended,
}
"""The check of each (event, from) of the table; ``attempt_failed(moved)`` from
``GRANTED`` has two rows, told apart by whom the grant is to (:data:`SPECIAL`)."""

SPECIAL = {
    ("attempt_failed(moved)", GRANTED, GRANTED): (_granted_to_fresh, _failed_moved_granted_fresh)
}
"""A row whose wait is made otherwise: (its setup, its check)."""


def test_the_table_is_read_whole() -> None:
    rows = _table()
    assert len(rows) == 25
    assert {(event, start) for event, start, _ in rows} == set(CHECKS)


@pytest.mark.parametrize(("event", "start", "end"), _table())
def test_every_row_of_the_table(event: str, start: GrantState, end: GrantState) -> None:
    setup, check = SPECIAL.get((event, start, end), (_wait, CHECKS[(event, start)]))
    wait = setup(start)
    check(wait)
    assert wait.state is end


def test_a_grant_to_the_member_an_attempt_in_flight_registers_started_with_it() -> None:
    wait = _wait(WAITING)
    fresh = wait.next_member()
    wait.attempt_sent(fresh, 5.0)
    assert wait.grant_announced(fresh)
    assert wait.since == 5.0  # that attempt's send time, not ``floor``
    assert wait.grant_taken() == 5.0


def test_a_direct_wait_has_its_own_list() -> None:
    direct = GrantWait(30_000, "client:1", 3, "syncprims_lock_handoff:{x}:")
    assert direct.direct and direct.key == "syncprims_lock_handoff:{x}:3|client:1"
    assert direct.member == "b|30000|3.0|client:1"
    plain = GrantWait(30_000, "client:1", 4)
    assert not plain.direct and plain.member == "g|30000|4.0|client:1"
    assert plain.next_member() == "g|30000|4.1|client:1"
