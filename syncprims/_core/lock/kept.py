"""A client's lock calls encoded once (:mod:`syncprims._protocol.wire`): an owner's acquire,
the same command each time, and an unlock but for its unlock key.

Kept per client (``ClientLocks.kept``), keyed by the lock's name and everything else a call
is made from, so that lock objects made per use (``client.get_lock(name)`` in a request
handler) share them ([hot-4]). A call is encoded from its second time on: its first time is
only noted, so that a name used once (``f"order:{id}"``) encodes nothing (encoding in
Python costs more than hiredis' packing once). At most :data:`KEPT` of each kind, then all
are dropped; dict reads and writes are atomic, and a race makes one twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from syncprims._protocol.contracts import Arg, ScriptCall, WiredCall
from syncprims._protocol.scripts import Script
from syncprims._protocol.wire import Splice

__all__ = ["KeptCalls"]

KEPT = 512
"""Calls kept (encoded, or noted once) per client, of each of the two kinds."""

Key = tuple[object, ...]


class KeptCalls:
    """One client's encoded calls; the key of a call names everything it is made from (first
    a name of its script, a ``str``: a ``Script``'s hash is computed at each look; then the
    lock's name)."""

    __slots__ = ("_spliced", "_whole", "get")

    def __init__(self) -> None:
        self._whole: dict[Key, WiredCall | None] = {}
        self._spliced: dict[Key, Splice | None] = {}
        # The encoded call of a key, if it is kept (the dict's own method: no Python call).
        self.get: Callable[[Key], WiredCall | None] = self._whole.get

    def keep(self, key: Key, call: ScriptCall) -> ScriptCall:
        """``call``, made for ``key`` (not kept): noted the first time, encoded and kept
        the second."""
        whole = self._whole
        if len(whole) >= KEPT:
            whole.clear()
        whole[key] = WiredCall.of(call) if key in whole else None
        return call

    def spliced(
        self, key: Key, script: Script, keys: Sequence[str], args: Sequence[Arg], at: int
    ) -> ScriptCall:
        """The call of ``script``, ``keys`` and ``args``, which differs from the others of
        ``key`` only in its key at ``at`` (an unlock key): encoded around it when kept."""
        spliced = self._spliced
        splice = spliced.get(key)
        if splice is not None:
            return WiredCall(script, keys, args, splice(keys[at]))
        call = ScriptCall(script, keys, args)
        if len(spliced) >= KEPT:
            spliced.clear()
        # The command is (EVALSHA, sha, count, *keys, *args): the key at ``at`` is item 3 + at.
        spliced[key] = Splice(call.command(), 3 + at) if key in spliced else None
        return call
