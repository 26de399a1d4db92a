"""A lock's release, and the late-release safety around it (``syncprims._core.lock``'s
module docstring; found by the chaos campaign, ``tests/faults/test_late_release.py``).

An unlock carries a request id (its latch key) and is retried: a retry returns the first
run's result (Redisson 3.24+). A release whose outcome is unknown (a copy was sent and no
reply read) may still run later, so its latch is kept for its whole TTL and, when it may
have ended the owner's last hold, the owner's next fresh hold takes a new field
(``<client uuid>:<owner id>.<n>``) that the late copy does not name. A lock object owns one
:class:`Releases`; the counts it keeps are the client's (``syncprims._core.clientstate``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from syncprims import _observe
from syncprims._core.retry import with_retry
from syncprims._protocol.contracts import PENDING, Call, Executor, ScriptCall
from syncprims._protocol.ids import new_request_id
from syncprims._protocol.names import unlock_latch_key
from syncprims.errors import LockNotHeldError, ServerReplyError, TransportError

if TYPE_CHECKING:
    from syncprims._core.lock import LockCore

__all__ = ["AttemptUndo", "Release", "Releases", "release_on_exit"]

log = logging.getLogger("syncprims.lock")


class Release:
    """One unlock call's retries, idempotent by its latch key; remembers whether a copy of
    it was sent without its reply being read (:attr:`unknown`: it may still run later).
    Made only when the first attempt failed (``Releases.unlock_field`` makes that one
    itself) or for a retry of a fan-out's release."""

    __slots__ = ("_context", "_ex", "unknown")

    def __init__(self, ex: Executor, context: str, *, unknown: bool = False) -> None:
        self._ex = ex
        self._context = context
        self.unknown = unknown

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


class AttemptUndo:
    """An acquire attempt's ``on_orphan``: its late reply, after its caller went away, goes
    to the lock's ``on_abandoned_attempt`` (which releases what it took). One object per
    call, where a closure made five (a function, its cell tuple and three cells), each
    collected under thousands of tasks."""

    __slots__ = ("field", "lock", "wait")

    def __init__(self, lock: LockCore, field: str, wait: float) -> None:
        self.lock = lock
        self.field = field
        self.wait = wait

    def __call__(self, late: Any) -> Awaitable[None]:
        return self.lock.on_abandoned_attempt(self.field, self.wait, late)


class Releases:
    """One lock object's releases: the unlock call with its retries and ACL fall-back, the
    hold counts of its owners, and the new field after an unknown outcome."""

    __slots__ = ("_lock",)

    def __init__(self, lock: LockCore) -> None:
        self._lock = lock

    def count_hold(self, owner: int, delta: int) -> None:
        """Count a hold ``owner``'s callers took (+1) or gave back (-1, whatever the
        unlock's outcome)."""
        lock = self._lock
        holds = lock._client.holds
        key = (lock.name, owner)
        held = holds.get(key, 0) + delta
        if held > 0:
            holds[key] = held
        else:
            holds.pop(key, None)

    def fresh_field(self, owner: int) -> None:
        """Before ``owner`` acquires: if it holds nothing and a release of its field had an
        unknown outcome, or a renewal of its last hold may still run (Redisson #7272's
        family: ``syncprims._services.watchdog``), give it a new field (module docstring)."""
        lock = self._lock
        client = lock._client
        watchdog = lock._ex.watchdog
        name = lock.name
        if not client.tainted and (
            not watchdog.renews_late() or not watchdog.may_renew_late(name, lock.field(owner))
        ):
            return
        key = (name, owner)
        if key in client.holds:
            return
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
        hold takes a new field (:meth:`fresh_field`), or that undo would release it (found
        by the chaos campaign's asyncio kind: a task re-acquired after its attempt timed
        out on a black-holed shared connection, and the late reply's undo freed the new
        hold: two tasks held the lock)."""
        lock = self._lock
        lock._client.tainted.add((lock.name, field))

    def settle(self, field: str, reply: Any, latch: str, *, unknown: bool) -> None:
        """Book-keeping after a release call: ``reply`` (its reply, the error it ended with,
        or ``PENDING`` while a fan-out finishes it in the background); ``unknown``: a copy of
        it was sent and no reply read for it."""
        lock = self._lock
        if unknown:  # a copy may still run: keep the latch; maybe a new field (docstring)
            if reply != 0:
                lock._client.tainted.add((lock.name, field))
        else:
            lock._ex.janitor.discard(latch)
        if reply is PENDING or isinstance(reply, BaseException):
            return  # no reply (yet): the outcome is booked when it comes
        since = lock.holds.released(field, reply)
        _observe.released(lock.kind, lock.name, reply, since)

    async def unlock_field(self, field: str, lease: int) -> Any:
        """Release one hold of ``field`` (``lease``: ms, re-armed when holds are left); its
        reply: 1 released, 0 still held, else not held. A ``NOPERM`` on syncprims' own
        keys (nothing ran) falls back to Redisson's script (``ClientLocks``).

        Raises:
            TransportError: Redis failed (after retries).
            ServerReplyError: Redis refused the script.
        """
        lock = self._lock
        ex = lock._ex
        latch = unlock_latch_key(lock.name, new_request_id())
        tried = lock.uses_own_keys()
        context = lock.context("releasing")
        release: Release | None = None  # made if the first attempt fails (no object else)
        first_unknown = True  # whether the first attempt may run later: until its outcome
        call = lock.unlock_command(field, lease, latch)
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
                if not lock.refuses_own_keys(error, tried=tried):
                    raise
                if release is None:
                    release = Release(ex, context)
                reply = await release.run(lock.unlock_command(field, lease, latch))
        except BaseException as error:
            unknown = first_unknown if release is None else release.unknown
            self.settle(field, error, latch, unknown=unknown)
            raise
        self.settle(
            field, reply, latch, unknown=first_unknown if release is None else release.unknown
        )
        return reply

    def call(self, field: str, command: ScriptCall, latch: str) -> Call:
        """An unlock of ``field`` (``command``, latch key ``latch``) as a fan-out call; a
        reply that comes after the fan-out had its quorum is booked by :meth:`settle`."""
        lock = self._lock

        async def late(reply: Any) -> None:  # finished after the fan-out had its quorum
            self.settle(field, reply, latch, unknown=False)

        return Call(lock._ex, command, lock.context("releasing"), late)

    def raises_on_error(self) -> bool:
        """Whether leaving ``with lock:`` raises when the hold was gone: the lock's
        ``raise_on_release_error``, else the client's."""
        own = self._lock.raise_on_release_error
        return self._lock._ex.config.raise_on_release_error if own is None else own

    async def on_exit(self, owner: int) -> None:
        """The release that ends ``with lock:``: the lock's unlock, whose
        ``LockNotHeldError`` is logged instead of raised when :meth:`raises_on_error` is off.

        Raises:
            LockNotHeldError: the hold was gone (its lease ran out, or it was lost), unless
                ``raise_on_release_error`` is off.
            TransportError: Redis failed (after retries); the lock expires by its lease.
        """
        await release_on_exit(self._lock.unlock(owner), raises=self.raises_on_error())

    async def retry(self, call: Call) -> tuple[Any, bool]:
        """Retry a release call alone (idempotent: the same latch key); its reply (or the
        transport error it ended with) and whether an attempt's outcome was unknown."""
        release = Release(self._lock._ex, call.context)
        try:
            return await release.run(call.call), release.unknown
        except TransportError as error:
            return error, release.unknown


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
