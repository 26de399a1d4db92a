"""A client's record in Redis: which process it is, for ``info()`` and ``syncprims inspect``.

docs/locks.md, "Who holds it: info()" ("Which process"): ``syncprims_client:{<client id>}``
= ``{"host": ..., "pid": ..., "client_name": ..., "version": ...}`` (a JSON string, ``SET
... PX``), its lifetime (:data:`TTL`, :data:`REFRESH`), and why not ``CLIENT SETNAME``.
Decisions beyond that page:

* **Off the lock's hot path.** ``connect()`` writes it (:meth:`ClientRecord.first_command`);
  the first acquisition (its first ``refuse_if_closing``) only arms the refresh timer on the
  services loop, and later ones compare the client id with the one announced. No acquire
  script changes (a write at the first acquisition could hold a frozen master's kept
  connection, which a RedLock fan-out then waited out).
* The blocking face also deletes it at interpreter exit (``syncprims._runtime.sync``). A
  forked child has a new client id (``syncprims._runtime.base``) and announces anew.
* **Best effort.** A write that fails is logged at DEBUG and tried again at the next
  refresh (an outage), or never again (``NOPERM``: an ACL without ``~syncprims_client:*``,
  one ``ACL LOG`` entry per client); ``info()`` then reports the holder as having no record.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Protocol

from syncprims._protocol.info import record_key
from syncprims._services.loop import Scheduler
from syncprims.errors import ServerReplyError

__all__ = ["REFRESH", "TTL", "ClientRecord", "CommandRunner"]

log = logging.getLogger("syncprims.services")

TTL = 600.0
"""Seconds a record lives after its last write."""
REFRESH = 180.0
"""Seconds between writes of a live client's record."""


class CommandRunner(Protocol):
    """What the record and the janitor need from the transport: one plain command on the
    services loop."""

    async def command(self, *args: str | int, context: str, route: str | None = None) -> object: ...


class ClientRecord:
    """Writes and refreshes one client's record; no method blocks, and every one may be
    called from any thread.

    Args:
        services: the loop the writes run on.
        runner: runs one command there.
        client_id: the client's current id (it changes in a forked child).
        client_name: the application's client name for its connections, if any.
        enabled: ``False``: write nothing, ever (``Config.client_record``).
    """

    def __init__(
        self,
        services: Scheduler,
        runner: CommandRunner,
        client_id: Callable[[], str],
        client_name: str | None,
        *,
        enabled: bool = True,
    ) -> None:
        self._services = services
        self._runner = runner
        self._client_id = client_id
        self._client_name = client_name
        self._ms = round(TTL * 1000)
        self._enabled = enabled
        self._closed = not enabled  # no more writes (disabled, refused, or shut down)
        self._refused = False  # NOPERM: the user may not touch the key (no DEL either)
        self.forget()

    def forget(self) -> None:
        """The state a new record starts with; after ``os.fork()``, in the child: the
        parent's timer did not survive."""
        self._mutex = threading.Lock()
        self.announced: str | None = None
        """The client id whose record is kept (read without the lock: a stale read only
        makes :meth:`announce` look again)."""
        self._written: str | None = None  # the client id written at connect
        self._timer: asyncio.TimerHandle | None = None  # loop-only

    def announce(self) -> None:
        """Keep the record of the current client id, from now on (idempotent, cheap)."""
        client_id = self._client_id()
        if self.announced == client_id:
            return
        with self._mutex:
            if self.announced == client_id:
                return
            self.announced = client_id  # remembered even when nothing is written: no retry
            if self._closed:
                return
        self._services.call_soon(self._arm if self._written == client_id else self._refresh)

    def first_command(self) -> tuple[str | int, ...] | None:
        """At connect: the ``SET`` that writes the current client id's record, for the
        connecting caller to send (``None`` when written already or closed)."""
        client_id = self._client_id()
        with self._mutex:
            if self._written == client_id or self._closed:
                return None
            self._written = client_id
        return ("SET", record_key(client_id), self.value(), "PX", self._ms)

    def refused(self, error: BaseException) -> None:
        """The connect-time write failed: best effort (see the module docstring)."""
        if isinstance(error, ServerReplyError) and error.code == "NOPERM":
            self._closed = self._refused = True  # an ACL without the key: not again
        self._written = None  # else the refresh writes it
        log.debug("client record: SET at connect failed: %s", error)

    def _arm(self) -> None:
        """On the loop: the next write after :data:`REFRESH` (written at connect)."""
        if self._closed or self._timer is not None:
            return
        self._timer = asyncio.get_running_loop().call_later(REFRESH, self._refresh)

    def _refresh(self) -> None:
        """On the loop: write now, and again after :data:`REFRESH`."""
        if self._closed:
            return
        self._services.spawn(self._write())
        self._timer = asyncio.get_running_loop().call_later(REFRESH, self._refresh)

    def value(self) -> str:
        """The record's JSON text, for the current process."""
        return json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "client_name": self._client_name,
                "version": _version(),
            },
            separators=(",", ":"),
        )

    async def _write(self) -> None:
        client_id = self.announced
        if client_id is None:
            return
        key = record_key(client_id)
        try:
            await self._runner.command(
                "SET", key, self.value(), "PX", self._ms,
                context="writing the client record", route=key,
            )  # fmt: skip
        except ServerReplyError as error:
            if error.code == "NOPERM":  # an ACL without the key: not again (ACL LOG stays quiet)
                self._closed = self._refused = True
                if self._timer is not None:
                    self._timer.cancel()
            log.debug("client record %s: SET refused: %s", key, error)
        except Exception as error:  # best effort: info() then shows no record
            log.debug("client record %s: SET failed: %s", key, error)

    def withdrawn(self) -> list[str]:
        """At shutdown (or exit), after the services loop stopped or on it: write no more,
        and return the keys of the records written (or being written) for the caller to
        delete, each once; none when disabled or refused (best effort: a record not deleted
        expires by its TTL)."""
        with self._mutex:
            self._closed = True
            ids = {self.announced, self._written}
            self.announced = self._written = None
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if not self._enabled or self._refused:
            return []
        return [record_key(client_id) for client_id in ids if client_id is not None]


@functools.cache
def _version() -> str:
    """The installed syncprims version (read from the package metadata: this layer does not
    import the package's top)."""
    try:
        return importlib.metadata.version("syncprims")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
