"""``RObject`` and ``RExpirable``: operations every object has (redisson-spec.md 1.9).

An object owns one or more Redis keys (:meth:`ObjectCore.keys`); ``delete``, ``touch``,
``unlink``, ``expire`` and ``clear_expire`` act on all of them, ``is_exists`` and
``remain_time_to_live`` on the main key (the object's name), as in Redisson. So do
``add_listener`` and ``remove_listener`` (Redisson's ``RObservable``): Redis keyspace
notifications of the main key, delivered by ``syncprims._services.listeners``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from syncprims._core.retry import with_retry
from syncprims._protocol import scripts
from syncprims._protocol.contracts import Arg, Executor, ObjectCallback, Orphan, ScriptCall
from syncprims._protocol.keyspace import NEEDED_FLAGS, config_value, missing_flags
from syncprims._protocol.kinds import KINDS
from syncprims._protocol.names import check_cluster_name, check_name
from syncprims._protocol.scripts import Script
from syncprims._protocol.timing import lease_ms
from syncprims.errors import RedisTimeoutError, ServerReplyError

__all__ = ["ExpirableCore", "ObjectCore"]


class ObjectCore:
    """Core of every named object."""

    KIND = KINDS["object"]
    kind = KIND.display  # each subclass's is its own KIND's (``__init_subclass__``)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = cls.KIND.display

    def __init__(self, executor: Executor, name: str) -> None:
        self._ex = executor
        self.name = check_name(name)
        if executor.cluster:
            check_cluster_name(self.name)
        self.channel = ""  # set by objects that publish
        self._contexts: dict[str, str] = {}  # action -> context(action), made once

    @property
    def executor(self) -> Executor:
        """The executor of the client this object belongs to (the package's interface to
        it: a MultiLock reaches its sub-locks' clients through this)."""
        return self._ex

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

    async def read(self, *command: str | int, action: str, route: str | None = None) -> Any:
        """Run an idempotent command, with retries, on the node of ``route`` (a key; default:
        the object's name)."""
        context = self.context(action)
        where = self.name if route is None else route
        return await with_retry(
            self._ex,
            lambda: self._ex.command(*command, context=context, route=where),
            idempotent=True,
        )

    async def run_script(
        self,
        call: ScriptCall,
        *,
        action: str,
        idempotent: bool = True,
        on_orphan: Orphan | None = None,
    ) -> Any:
        """Run a script, with retries. ``idempotent=False`` for one that adds or takes
        (permits): retried only while it cannot have run, never re-sent after a lost reply,
        or it would count twice (issue 17). ``on_orphan``: what undoes a late reply whose
        caller went away."""
        context = self.context(action)
        ex = self._ex
        return await with_retry(
            ex, lambda: ex.eval(call, context=context, on_orphan=on_orphan), idempotent=idempotent
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

    async def add_listener(
        self,
        on_expired: ObjectCallback | None,
        on_deleted: ObjectCallback | None,
        *,
        configure: bool,
    ) -> int:
        """Call ``on_expired(name)`` / ``on_deleted(name)`` when the main key expires or is
        deleted (Redis keyspace notifications; ``syncprims._services.listeners``).

        Enables the notifications on the key's node first (``configure``), subscribes, and
        returns once Redis confirmed the subscription.

        Raises:
            TypeError: no callback, one not callable, or ``configure`` not a ``bool``.
            ServerReplyError: Redis refused ``CONFIG`` or the subscription.
            RedisTimeoutError: the subscription was not confirmed in time.
            TransportError: Redis could not be reached (after retries).
            ClientClosedError: the client is shut down.
        """
        for what, callback in (("on_expired", on_expired), ("on_deleted", on_deleted)):
            if callback is not None and not callable(callback):
                raise TypeError(f"{what} must be callable, not {type(callback).__name__}")
        if on_expired is None and on_deleted is None:
            raise TypeError("add_listener() needs on_expired or on_deleted")
        if not isinstance(configure, bool):
            raise TypeError(f"configure must be a bool, not {type(configure).__name__}")
        if configure:
            await self._enable_notifications()
        ex = self._ex
        registry = ex.listeners
        channel = registry.channel(self.name)
        sub = await ex.subscribe(channel, registry.policy(channel), self.name)
        try:
            listener_id = registry.register(self.name, sub, on_expired, on_deleted)
        except BaseException:
            ex.unsubscribe(sub)
            raise
        try:
            timeout = ex.config.subscription_timeout
            if not await ex.wait_ready(sub, timeout):
                raise RedisTimeoutError(
                    f"Redis did not confirm the subscription to {channel!r} within "
                    f"{timeout:g} s ({self.context('adding a listener to')})",
                    maybe_executed=True,
                )
        except BaseException:
            self.remove_listener(listener_id)
            raise
        return listener_id

    async def _enable_notifications(self) -> None:
        """Add the ``notify-keyspace-events`` flags listeners need (``K``, ``g``, ``x``) on
        the main key's node, keeping those set; nothing when they are set.

        Raises:
            ServerReplyError: Redis refused ``CONFIG`` (an ACL without ``+config``, a managed
                Redis), with Redis's error ``code``.
        """
        action = "enabling keyspace notifications for"
        parameter = "notify-keyspace-events"
        step = "GET"
        try:
            current = config_value(await self.read("CONFIG", step, parameter, action=action))
            missing = missing_flags(current)
            if missing:
                step = "SET"
                await self.read("CONFIG", step, parameter, current + missing, action=action)
        except ServerReplyError as error:
            reason = error.__cause__ if error.__cause__ is not None else error
            raise ServerReplyError(
                f"Redis refused CONFIG {step} ({self.context(action)}): {reason}; an operator "
                f"can enable them ({parameter} with {NEEDED_FLAGS!r}, on every master), then "
                "add the listener with configure=False",
                code=error.code,
            ) from error

    def remove_listener(self, listener_id: int) -> bool:
        """Remove a listener added by :meth:`add_listener` (never blocks, no Redis call).

        Returns:
            ``True`` if it was registered on this object.

        Raises:
            TypeError: ``listener_id`` is not an ``int``.
        """
        if isinstance(listener_id, bool) or not isinstance(listener_id, int):
            raise TypeError(f"listener_id must be an int, not {type(listener_id).__name__}")
        sub = self._ex.listeners.unregister(listener_id, self.name)
        if sub is None:
            return False
        self._ex.unsubscribe(sub)
        return True


class ExpirableCore(ObjectCore):
    """Core of objects whose keys can carry a TTL."""

    async def expire(self, ttl: object) -> bool:
        """``PEXPIRE`` every key; ``True`` if any key got the TTL.

        Raises:
            TypeError, ValueError: ``ttl`` is not a positive finite duration.
        """
        ms = lease_ms(ttl, "ttl")
        return await self._on_keys(scripts.EXPIRE, ["pexpire", ms], "expiring")

    async def expire_at(self, when: object) -> bool:
        """``PEXPIREAT`` every key; ``True`` if any key got the expiry.

        Raises:
            TypeError: ``when`` is not a ``datetime``.
        """
        if not isinstance(when, datetime):
            raise TypeError(f"when must be a datetime, not {type(when).__name__}")
        epoch_ms = round(when.timestamp() * 1000)
        return await self._on_keys(scripts.EXPIRE, ["pexpireat", epoch_ms], "expiring")

    async def clear_expire(self) -> bool:
        """``PERSIST`` every key; ``True`` if any key lost its TTL."""
        return await self._on_keys(scripts.CLEAR_EXPIRE, [], "persisting")

    async def _on_keys(self, script: Script, args: list[Arg], action: str) -> bool:
        """Run ``script`` on every key; whether it changed any."""
        return bool(await self.run_script(ScriptCall(script, self.keys(), args), action=action))

    async def remain_time_to_live(self) -> float | None:
        """The main key's TTL in seconds; ``None`` when it does not exist or has no TTL."""
        ms = await self.read("PTTL", self.name, action="reading the TTL of")
        return None if ms < 0 else ms / 1000
