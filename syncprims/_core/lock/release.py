"""A lock's release, and the late-release safety around it (``docs/locks.md``, "Exactly
once"; ``docs/design.md``, "Late calls"): an unlock is retried by its unlock key, one whose
outcome is unknown keeps its key, and the owner's next fresh hold may take a new field. A
lock object owns one :class:`Releases`; the counts it keeps are the client's
(``clientstate.py``). An acquisition that came past its lease (a process paused
mid-acquire) is given back here too (:meth:`Releases.give_back_late`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

import attrs

from syncprims import _observe
from syncprims._core.lock.holds import Holds
from syncprims._core.lock.view import LockView
from syncprims._core.retry import with_retry
from syncprims._protocol.contracts import PENDING, Call, Executor, ScriptCall
from syncprims._protocol.ids import new_request_id
from syncprims._protocol.names import unlock_key_name
from syncprims.errors import LockNotHeldError, ServerReplyError, SyncPrimsError, TransportError

__all__ = ["Release", "Releases", "past_lease", "release_on_exit"]

log = logging.getLogger("syncprims.lock")


@attrs.define(eq=False)
class Release:
    """One unlock call's retries, idempotent by its unlock key; remembers whether a copy of
    it was sent without its reply being read (:attr:`unknown`: it may still run later).
    Made only when the first attempt failed (``Releases.unlock_field`` makes that one
    itself) or for a retry of a fan-out's release."""

    _ex: Executor
    _context: str
    unknown: bool = attrs.field(default=False, kw_only=True)

    async def run(self, call: ScriptCall, failed: TransportError | None = None) -> Any:
        """Run ``call`` with retries (``failed``: the error the caller's own first attempt
        ended with; the retries go on from it). Raises as ``with_retry`` (and
        ``ServerReplyError``)."""
        return await with_retry(self._ex, lambda: self._once(call), idempotent=True, failed=failed)

    async def _once(self, call: ScriptCall) -> Any:
        try:
            return await self._ex.eval(call, context=self._context)
        except TransportError as error:
            self.unknown = self.unknown or error.maybe_executed
            raise
        except ServerReplyError:  # nothing ran
            raise
        except BaseException:  # cancelled in flight: it may run
            self.unknown = True
            raise


def past_lease(ex: Executor, lease: int, since: float) -> bool:
    """Whether an acquisition whose ``lease`` (ms) started no earlier than ``since``
    (monotonic seconds, on ``ex``'s clock) came past that lease: :meth:`Releases.
    give_back_late`'s test, without a coroutine (an acquire asks it first: [hot-2])."""
    return ex.monotonic() - since >= lease / 1000


class Releases:
    """One lock object's releases: the unlock call with its retries and ACL fall-back, the
    hold counts of its owners, and the new field after an unknown outcome."""

    __slots__ = ("_client", "_ex", "_holds", "_lock")

    def __init__(self, lock: LockView, holds: Holds) -> None:
        self._lock = lock
        self._ex = lock.executor
        self._client = lock.client_state
        self._holds = holds

    def count_hold(self, owner: int, delta: int) -> None:
        """Count a hold ``owner``'s callers took (+1) or gave back (-1, whatever the
        unlock's outcome)."""
        holds = self._client.holds
        key = (self._lock.name, owner)
        held = holds.get(key, 0) + delta
        if held > 0:
            holds[key] = held
        else:
            holds.pop(key, None)

    def fresh_field(self, owner: int) -> None:
        """Before ``owner`` acquires: if it holds nothing (or only a hold known lost: its
        lease ran out, or the watchdog saw it go, without an unlock) and a call of its field
        may still run (a release with an unknown outcome, an acquire whose reply is still
        to come, a renewal of its last hold: Redisson #7272's family,
        ``syncprims._services.watchdog``), give it a new field (module docstring)."""
        lock = self._lock
        client = self._client
        watchdog = self._ex.watchdog
        name = lock.name
        if not client.tainted and (
            not watchdog.renews_late() or not watchdog.may_renew_late(name, lock.field(owner))
        ):
            return
        key = (name, owner)
        if key in client.holds and self._holds.lost_reason(owner) is None:
            return  # held: its field stays (a hold known lost counts as none)
        fields = lock.owner_fields(owner)
        tainted = any((name, field) in client.tainted for field in fields)
        late = [field for field in fields if watchdog.may_renew_late(name, field)]
        if not tainted and not late:
            return
        for field in fields:
            client.tainted.discard((name, field))
            watchdog.forget_late(name, field)
        client.incarnations[key] = client.incarnations.get(key, 0) + 1
        log.log(
            logging.INFO if tainted else logging.DEBUG,
            "%s: a %s of owner %s may still run; its next hold uses the field %s",
            lock.context("acquiring"),
            "call with an unknown outcome" if tainted else "renewal of its last hold",
            owner,
            lock.field(owner),
        )

    def taint(self, field: str) -> None:
        """An acquire of ``field`` may have run and its reply is still to come: when it
        comes, ``on_abandoned_attempt`` undoes it by unlocking ``field``. The owner's next
        hold takes a new field (:meth:`fresh_field`), or that undo would release it (and
        another owner could then take the lock while the new hold is in use)."""
        self._client.tainted.add((self._lock.name, field))

    def settle(self, field: str, reply: Any, unlock_key: str, *, unknown: bool) -> None:
        """Book-keeping after a release call: ``reply`` (its reply, the error it ended with,
        or ``PENDING`` while a fan-out finishes it in the background); ``unknown``: a copy of
        it was sent and no reply read for it."""
        lock = self._lock
        if unknown:  # a copy may still run: keep the unlock key; maybe a new field (docstring)
            if reply != 0:
                self._client.tainted.add((lock.name, field))
        else:
            self._ex.janitor.discard(unlock_key)
        if reply is PENDING or isinstance(reply, BaseException):
            return  # no reply (yet): the outcome is booked when it comes
        since = self._holds.released(field, reply)
        _observe.released(lock.kind, lock.name, reply, since)

    async def unlock_field(self, field: str, lease: int) -> Any:
        """Release one hold of ``field`` (``lease``: ms, re-armed when holds are left); its
        reply: 1 released, 0 still held, else not held. A ``NOPERM`` on syncprims' own
        keys (nothing ran) falls back to Redisson's script (``ClientLocks.refuses_own_keys``).

        Raises:
            TransportError: Redis failed (after retries).
            ServerReplyError: Redis refused the script.
        """
        lock = self._lock
        ex = self._ex
        unlock_key = unlock_key_name(lock.name, new_request_id())
        tried = lock.uses_own_keys()
        context = lock.context("releasing")
        release: Release | None = None  # made if the first attempt fails (no object else)
        first_unknown = True  # whether the first attempt may run later: until its outcome
        call = lock.unlock_command(field, lease, unlock_key)
        try:
            try:
                try:
                    reply = await ex.eval(call, context=context)
                    first_unknown = False
                except TransportError as error:
                    release = Release(ex, context, unknown=error.maybe_executed)
                    reply = await release.run(call, error)
            except ServerReplyError as error:  # a NOPERM: nothing ran; Redisson's script then
                if release is None:
                    first_unknown = False  # refused: it did not run
                if not self._client.refuses_own_keys(error, tried=tried, where=lock.waiters_key):
                    raise
                if release is None:
                    release = Release(ex, context)
                reply = await release.run(lock.unlock_command(field, lease, unlock_key))
        except BaseException as error:
            unknown = first_unknown if release is None else release.unknown
            self.settle(field, error, unlock_key, unknown=unknown)
            raise
        self.settle(
            field, reply, unlock_key, unknown=first_unknown if release is None else release.unknown
        )
        return reply

    def call(self, field: str, command: ScriptCall, unlock_key: str) -> Call:
        """An unlock of ``field`` (``command``, unlock key ``unlock_key``) as a fan-out call; a
        reply that comes after the fan-out had its quorum is booked by :meth:`settle`."""
        lock = self._lock

        async def late(reply: Any) -> None:  # finished after the fan-out had its quorum
            self.settle(field, reply, unlock_key, unknown=False)

        return Call(self._ex, command, lock.context("releasing"), late)

    async def retry(self, call: Call) -> tuple[Any, bool]:
        """Retry a release call alone (idempotent: the same unlock key); its reply (or the
        transport error it ended with) and whether an attempt's outcome was unknown."""
        release = Release(self._ex, call.context)
        try:
            return await release.run(call.script_call), release.unknown
        except TransportError as error:
            return error, release.unknown

    async def give_back_late(self, field: str, lease: int, since: float) -> bool:
        """Whether an acquisition of ``field`` whose lease started no earlier than ``since``
        (monotonic seconds) came past that lease (:func:`past_lease`): then it is given back
        (the lock may be someone else's by now; a grant wait then goes on with a new
        registration, ``Grant.late``). A reentrant grant's give-back re-arms the lock with
        what is left of the owner's earlier holds (:meth:`Holds.left`), not with the late
        lease, which could end them early."""
        if not past_lease(self._ex, lease, since):
            return False
        lock = self._lock
        late = self._ex.monotonic() - since
        log.warning(
            "%s: the grant came %.3f s after it was asked for, past its %.3f s lease: not taken",
            lock.context("acquiring"),
            late,
            lease / 1000,
        )
        try:
            await self.unlock_field(field, self._holds.left(field))
        except SyncPrimsError as error:  # its lease bounds it
            log.debug("%s: giving back a late grant failed: %r", lock.name, error)
        return True


async def release_on_exit(release: Awaitable[None], *, raises: bool) -> None:
    """Await ``release``, the unlock that ends a ``with`` block; with ``raises`` off
    (``raise_on_release_error=False``), its ``LockNotHeldError`` (the hold ran out or was lost
    inside the block) becomes a WARNING on the ``syncprims.lock`` logger, naming the lock (as
    redis-py's ``Lock(raise_on_release_error=False)``)."""
    try:
        await release
    except LockNotHeldError as error:
        if raises:
            raise
        log.warning(
            "%r was no longer held when its with-block ended (its lease ran out or it was "
            "lost); not raising, as raise_on_release_error is off: %s",
            error.name,
            error,
        )
