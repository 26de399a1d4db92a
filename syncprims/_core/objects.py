"""``RObject`` and ``RExpirable``: operations every object has (redisson-spec.md 1.9).

An object owns one or more Redis keys (:meth:`ObjectCore.keys`); ``delete``, ``touch``,
``unlink``, ``expire`` and ``clear_expire`` act on all of them, ``is_exists`` and
``remain_time_to_live`` on the main key (the object's name), as in Redisson.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from syncprims._core.retry import with_retry
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Executor, ScriptCall
from syncprims._protocol.names import check_cluster_name, check_name
from syncprims._protocol.timing import lease_ms

__all__ = ["ExpirableCore", "ObjectCore"]


class ObjectCore:
    """Core of every named object."""

    kind = "object"

    def __init__(self, executor: Executor, name: str) -> None:
        self._ex = executor
        self.name = check_name(name)
        if executor.cluster:
            check_cluster_name(self.name)
        self.channel = ""  # set by objects that publish
        self._contexts: dict[str, str] = {}  # action -> context(action), made once

    @property
    def publish(self) -> str:
        """``PUBLISH``, or ``SPUBLISH`` where this object's channel is sharded (a cluster)."""
        return self._ex.publish_command_for(self.channel, self.name)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r}>"

    def context(self, action: str) -> str:
        """``"<action> <kind> '<name>'"``, for messages (every call passes one: made once
        per action)."""
        context = self._contexts.get(action)
        if context is None:
            context = self._contexts[action] = f"{action} {self.kind} {self.name!r}"
        return context

    def keys(self) -> list[str]:
        """Every Redis key of the object (the name first)."""
        return [self.name]

    async def read(self, *command: str | int, action: str) -> Any:
        """Run an idempotent command, with retries."""
        context = self.context(action)
        return await with_retry(
            self._ex,
            lambda: self._ex.command(*command, context=context, route=self.name),
            idempotent=True,
        )

    async def run_script(self, call: ScriptCall, *, action: str) -> Any:
        """Run an idempotent script, with retries."""
        context = self.context(action)
        return await with_retry(
            self._ex,
            lambda: self._ex.eval(call.script, call.keys, call.args, context=context),
            idempotent=True,
        )

    async def is_exists(self) -> bool:
        """``EXISTS name``."""
        return bool(await self.read("EXISTS", self.name, action="checking"))

    async def delete(self) -> bool:
        """``DEL`` every key; ``True`` if anything was deleted."""
        return bool(await self.read("DEL", *self.keys(), action="deleting"))

    async def unlink(self) -> bool:
        """``UNLINK`` every key; ``True`` if anything was removed."""
        return bool(await self.read("UNLINK", *self.keys(), action="unlinking"))

    async def touch(self) -> bool:
        """``TOUCH`` every key; ``True`` if any exists."""
        return bool(await self.read("TOUCH", *self.keys(), action="touching"))


class ExpirableCore(ObjectCore):
    """Core of objects whose keys can carry a TTL."""

    async def expire(self, ttl: object) -> bool:
        """``PEXPIRE`` every key; ``True`` if any key got the TTL.

        Raises:
            TypeError, ValueError: ``ttl`` is not a positive finite duration.
        """
        ms = lease_ms(ttl, "ttl")
        return bool(
            await self.run_script(
                ScriptCall(scripts.EXPIRE, self.keys(), ["pexpire", ms]), action="expiring"
            )
        )

    async def expire_at(self, when: object) -> bool:
        """``PEXPIREAT`` every key; ``True`` if any key got the expiry.

        Raises:
            TypeError: ``when`` is not a ``datetime``.
        """
        if not isinstance(when, datetime):
            raise TypeError(f"when must be a datetime, not {type(when).__name__}")
        epoch_ms = round(when.timestamp() * 1000)
        return bool(
            await self.run_script(
                ScriptCall(scripts.EXPIRE, self.keys(), ["pexpireat", epoch_ms]), action="expiring"
            )
        )

    async def clear_expire(self) -> bool:
        """``PERSIST`` every key; ``True`` if any key lost its TTL."""
        return bool(
            await self.run_script(
                ScriptCall(scripts.CLEAR_EXPIRE, self.keys(), []), action="persisting"
            )
        )

    async def remain_time_to_live(self) -> float | None:
        """The main key's TTL in seconds; ``None`` when it does not exist or has no TTL."""
        ms = await self.read("PTTL", self.name, action="reading the TTL of")
        return None if ms < 0 else ms / 1000
