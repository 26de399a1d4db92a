"""What a part of the RLock sees of its lock (:class:`LockView`): the parts (the one wake-up
per release, the one-hop grant, the release, the holds, replica sync) are handed this
Protocol, never the lock's class, so that none of them imports ``core.py`` nor reaches into
its private fields; a part that needs another part is handed that part (its peers), not the
lock that owns both.

``LockCore`` satisfies it, and each lock kind through it: its name and keys, its client's
executor and shared state, and the few hooks a kind overrides (its scripts, the fields of an
owner, what an acquisition books).
"""

from __future__ import annotations

from typing import Any, Protocol

from syncprims._core.lock.clientstate import ClientLocks
from syncprims._protocol.contracts import Executor, RenewalKind, ScriptCall

__all__ = ["LockView"]


class LockView(Protocol):
    """A lock, as its parts see it."""

    # -- identity and keys (``syncprims._protocol.names``) --------------------------------------

    name: str
    kind: str
    channel: str
    waiters_key: str
    herald: str
    reservation: str
    grant_marker: str
    grant_prefix: str
    handoff_prefix: str

    @property
    def executor(self) -> Executor:
        """The client's executor (a part keeps it: the lock's never changes)."""

    @property
    def client_state(self) -> ClientLocks:
        """What the client's locks share (``clientstate.py``)."""

    def context(self, action: str) -> str:
        """``"<action> <kind> '<name>'"``, for messages."""

    # -- owners and leases -----------------------------------------------------------------

    def field(self, owner: int) -> str:
        """The hash field that names ``owner`` of this client now."""

    def owner_fields(self, owner: int) -> list[str]:
        """Every field ``owner`` can hold the lock's hash with."""

    renewal: RenewalKind
    """How the watchdog renews this kind's holds."""
    own_lease: float | None
    """The kind's own watchdog lease, seconds (``None``: the client's)."""

    def watchdog_ms(self) -> int:
        """The watchdog's lease, ms."""

    # -- the hooks a kind overrides ------------------------------------------------------------

    def uses_own_keys(self) -> bool:
        """Whether the lock's scripts use syncprims' own keys now (the ACL fall-back)."""

    def unlock_command(self, field: str, lease: int, unlock_key: str) -> ScriptCall:
        """The unlock script call of ``field``."""

    def grant_acquire_command(
        self, field: str, lease: int, wait: float, *, waits: str, member: str, fresh: str
    ) -> ScriptCall:
        """An attempt of a grant wait (``grant.py``)."""

    def acquired(self, field: str, lease: int, watchdog: bool, reply: Any, since: float) -> None:
        """Book an acquisition (the holds' memory, the watchdog)."""
