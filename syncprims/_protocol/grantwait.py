"""The grant wait's states and transitions (the one-hop grant; docs/grants.md, "The one-hop
grant"): everything that decides what a wait that a release may hand the lock to does with a
grant lives here, as h11's ``_state.py`` keeps a connection's. Pure: no I/O, no clock (the
times are passed in), no locking (the caller serialises the events: the client's grant
registry, ``syncprims._core.lock.grant``).

A :class:`GrantWait` is one owner's wait. It is registered in the lock's waiters' registry as
``member`` (``g|<lease ms>|<wait id>.<n>|<owner field>``); a release that grants it writes the
owner's hold, sets the lock's grant marker to ``member`` and announces ``member`` (a message on
the client's grant channel, or a push on the wait's own list, :attr:`GrantWait.key`, for a
``direct`` wait, ``b|...``, whose waiting thread pops it). An attempt that finds the marker
naming its member claims the grant instead (the announcement was lost, or is late).

Each attempt keeps the wait registered: it is sent naming ``member`` and a fresh member
(``next``), which the script registers if ``member`` is gone (a release popped it, or it
expired); a grant to a member not in use any more is over (its marker was replaced) and is
never taken, only given back.

When a grant's lease started (``floor``, or ``next_sent`` for a member registered by the
attempt still in flight): docs/grants.md, "The one-hop grant", its last point.

States (:class:`GrantState`): ``WAITING``, no grant announced for a member in use;
``GRANTED``, a grant was announced and not taken yet (the waiter takes it without a script);
``CLAIMED``, the wait took a grant (by its announcement or by an attempt); ``ENDED``, the wait
is over (a grant announced from now on is given back).

Transitions (one method per event; ``tests/unit/test_grantwait.py`` checks every row)::

    =========================  ========  ========  ==========================================
    event                      from      to        effect
    =========================  ========  ========  ==========================================
    attempt_sent               WAITING   WAITING   ``next``, ``next_sent`` set; returns the
                                                   members to map to the wait
    attempt_sent               GRANTED   GRANTED   as above
    attempt_failed(kept)       WAITING   WAITING   ``floor`` = its send time; returns the
                                                   fresh member, to forget
    attempt_failed(kept)       GRANTED   GRANTED   as above
    attempt_failed(moved)      WAITING   WAITING   ``member`` = the fresh one; returns the
                                                   old member, to forget; ``floor`` set
    attempt_failed(moved)      GRANTED   WAITING   as above, the grant was to the old member:
                                                   it is over
    attempt_failed(moved)      GRANTED   GRANTED   as above, the grant is to the fresh member
    grant_announced(ours)      WAITING   GRANTED   ``granted``, ``since``; returns True
    grant_announced(ours)      GRANTED   GRANTED   as above (the newer announcement)
    grant_announced(other)     WAITING   WAITING   returns False: give it back
    grant_announced(ours)      CLAIMED   CLAIMED   returns False: give it back
    grant_announced(ours)      ENDED     ENDED     returns False: give it back
    grant_claimed              WAITING   CLAIMED   an attempt's reply claimed a grant
    grant_claimed              GRANTED   CLAIMED   as above
    grant_taken                GRANTED   CLAIMED   returns ``since``
    grant_taken                WAITING   WAITING   returns None
    grant_taken                CLAIMED   CLAIMED   returns None
    given_back_late            CLAIMED   WAITING   ``member`` = a fresh one, ``granted`` None
    given_back_late            WAITING   WAITING   as above
    armed                      WAITING   WAITING   ``waker`` kept; returns False
    armed                      GRANTED   GRANTED   returns True: wake at once, not kept
    disarmed                   GRANTED   GRANTED   ``waker`` None
    ended                      WAITING   ENDED     returns None
    ended                      GRANTED   ENDED     returns ``granted``: give it back
    ended                      CLAIMED   ENDED     returns None
    =========================  ========  ========  ==========================================

``grant_announced(ours)`` names a member in use (``member`` or ``next``); ``since`` is then
``next_sent`` for ``next``, else ``floor``. ``attempt_failed(kept)`` is a reply that kept
``member`` registered, ``(moved)`` one that registered the fresh member instead.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable

__all__ = ["GrantState", "GrantWait"]


class GrantState(enum.Enum):
    """Where a grant wait is (module docstring)."""

    WAITING = "waiting"
    GRANTED = "granted"
    CLAIMED = "claimed"
    ENDED = "ended"


WAITING, GRANTED, CLAIMED, ENDED = GrantState


class GrantWait:
    """One owner's wait that a release may hand the lock to (module docstring).

    Args:
        lease: the lease asked for, ms (a grant writes it).
        field: the owner's field.
        wait_id: unique among the client's waits.
        direct_prefix: for a direct wait (the waiting thread pops its grant), the prefix of
            the lock's grant lists; ``None`` for a wait woken by the grant channel.
    """

    __slots__ = (
        "field",
        "floor",
        "granted",
        "ids",
        "key",
        "member",
        "members",
        "next",
        "next_sent",
        "prefix",
        "since",
        "state",
        "waker",
    )

    def __init__(
        self, lease: int, field: str, wait_id: int, direct_prefix: str | None = None
    ) -> None:
        direct = direct_prefix is not None
        self.prefix = f"{'b' if direct else 'g'}|{lease}|{wait_id}."
        self.key = f"{direct_prefix}{wait_id}|{field}" if direct else ""  # its list, if direct
        self.field = field
        self.ids = itertools.count()
        self.state = WAITING
        self.member = self.next_member()  # not registered until the first attempt
        self.next = ""  # the member an attempt in flight may register instead of ``member``
        self.next_sent = 0.0  # when that attempt was sent (at the earliest)
        self.members: set[str] = set()  # the members mapped to it (that it may have registered)
        self.floor = 0.0
        self.granted: str | None = None  # the member whose grant was announced
        self.since = 0.0  # ``floor`` when it was
        self.waker: Callable[[], None] | None = None  # wakes the waiter alone while blocked

    @property
    def direct(self) -> bool:
        """Whether the waiting thread pops its grant from its own list, :attr:`key`."""
        return bool(self.key)

    def next_member(self) -> str:
        """A member name this wait has not used yet."""
        return f"{self.prefix}{next(self.ids)}|{self.field}"

    # -- the events (module docstring, "Transitions") ----------------------------------------

    def attempt_sent(self, fresh: str, at: float) -> tuple[str, str]:
        """An attempt that keeps the wait registered is sent at ``at`` (monotonic seconds),
        naming :attr:`member` and ``fresh``: a grant to either may come before its reply.
        Returns both, to map to this wait."""
        self.next, self.next_sent = fresh, at
        member = self.member
        self.members.update((member, fresh))
        return member, fresh

    def attempt_failed(self, moved: bool, member: str, fresh: str, sent: float) -> str:
        """The reply of an attempt sent at ``sent`` naming ``member`` and ``fresh`` that did
        not acquire: ``moved`` when ``member`` was gone and ``fresh`` was registered instead.
        Returns the member no longer in use, to forget (an announcement for it then finds no
        wait)."""
        unused = fresh
        if moved:
            if self.granted == member:  # that grant is over (never claimed)
                self.granted = None
                if self.state is GRANTED:
                    self.state = WAITING
            self.member, unused = fresh, member
        self.members.discard(unused)
        self.next = ""
        self.floor = sent  # registered when it ran: no grant before it
        return unused

    def grant_announced(self, member: str) -> bool:
        """A release's grant to ``member`` was announced (its message, or its direct push).
        ``True`` when this wait takes it (its waiter is then woken); ``False`` when it is to
        be given back (the wait ended, took a grant already, or moved on to a newer
        registration)."""
        live = self.state in (WAITING, GRANTED) and member in (self.member, self.next)
        if live:
            self.state = GRANTED
            self.granted = member
            self.since = self.next_sent if member == self.next else self.floor
        return live

    def grant_claimed(self) -> None:
        """An attempt's reply claimed a grant (``GRANTED``)."""
        self.state = CLAIMED

    def grant_taken(self) -> float | None:
        """The waiter takes an announced grant: when its lease started, at the latest
        (``None``: no grant to take)."""
        if self.state is not GRANTED:
            return None
        self.state = CLAIMED
        return self.since

    def given_back_late(self) -> None:
        """The acquisition came past its lease and was given back: the wait goes on, for a
        new grant, under a new member."""
        self.state = WAITING
        self.granted = None
        self.member = self.next_member()

    def armed(self, waker: Callable[[], None]) -> bool:
        """The waiter blocks, woken alone by ``waker``; ``True`` when a grant is there to
        take already (the waiter then wakes at once, and ``waker`` is not kept)."""
        if self.state is GRANTED:
            return True
        self.waker = waker
        return False

    def disarmed(self) -> None:
        """The waiter stopped blocking."""
        self.waker = None

    def ended(self) -> str | None:
        """The wait is over: the member of a grant it did not take (to give back), if any."""
        pending = self.granted if self.state is GRANTED else None
        self.state = ENDED
        return pending
