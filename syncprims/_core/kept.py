"""A lock object's calls encoded once (:mod:`syncprims._protocol.wire`): an owner's acquire,
the same command each time, and an unlock but for its latch key.

A call is encoded from its second time on: its first time is only noted, so that a lock
object made per use (``client.get_lock(f"order:{id}")`` in a request handler) encodes
nothing (encoding in Python costs more than hiredis' packing once). A few are kept per
lock object (owners and leases come and go); dict reads and writes are atomic, and a race
makes one twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from syncprims._protocol.contracts import Arg, ScriptCall, WiredCall
from syncprims._protocol.scripts import Script
from syncprims._protocol.wire import Splice

__all__ = ["KeptCalls"]

KEPT = 16
"""Encoded calls kept per lock object, of each of the two kinds."""

Key = tuple[object, ...]


class KeptCalls:
    """One lock object's encoded calls; the key of a call names everything it is made from
    (first a name of its script, a ``str``: a ``Script``'s hash is computed at each look)."""

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
        ``key`` only in its key at ``at`` (a latch key): encoded around it when kept."""
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
