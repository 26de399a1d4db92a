"""Replies parsed as the bytes arrive: an asyncio connection read without a reader task.

A reader task costs one more turn of the event loop per read (the loop wakes the task, the
task parses and wakes the caller): the multiplexer's shared connections
(:mod:`~syncprims._transport.aio.mux`) and the asyncio subscriber connection
(``syncprims._services.pubsub``) have their replies parsed in the event loop's protocol
callback instead ([hot-9]), where the connection reads with redis-py's asyncio hiredis
parser in a form :func:`direct_replies` knows (redis-py 5.3 to 8: a hiredis ``Reader`` that
returns ``NOT_ENOUGH_DATA`` and error replies as exceptions, the connection's stream, no
reply held back by ``can_read``). Any other parser (pure Python, fakeredis') is read by a
task with :func:`~syncprims._transport.compat.aread`. Like :mod:`~syncprims._transport.compat`,
this decides from what the connection and its parser are, never from a version number.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["DirectReplies", "direct_replies", "read_in_callback"]

log = logging.getLogger("syncprims.transport")


class DirectReplies:
    """The replies of an asyncio connection read through its hiredis reader and stream
    directly (see :func:`direct_replies`): what ``read_response`` does for one reply, less
    its four coroutine layers and the address it formats, per reply."""

    __slots__ = ("_broken", "_gets", "_handle_push", "_none", "_push", "_size", "_stream", "feed")

    def __init__(
        self, parser: Any, none: object, push: type | None, broken: type[BaseException]
    ) -> None:
        reader = parser._reader
        self._broken = broken  # the library's ConnectionError: raised, as read_response does
        self._gets = reader.gets
        self.feed = reader.feed
        self._stream = parser._stream
        self._size = getattr(parser, "_read_size", 65536)
        self._none = none
        self._push = push
        self._handle_push = parser.handle_push_response if push is not None else None

    async def next(self) -> Any:
        """The next reply as bytes (an error reply as its exception, not raised); a RESP3
        push message goes to the library's push handler and the read goes on.

        Raises:
            ConnectionError: the server closed the connection, or reading failed.
            The parser's protocol error: the stream is out of step.
        """
        while True:
            reply = self.parsed()
            if reply is self._none:
                try:
                    data = await self._stream.read(self._size)
                except OSError as error:
                    raise ConnectionError(f"error while reading: {error}") from error
                if not data:
                    raise ConnectionError("the server closed the connection")
                self.feed(data)
                continue
            if self.is_push(reply):
                assert self._handle_push is not None
                await self._handle_push(reply)
                continue
            return reply

    def parsed(self) -> Any:
        """The next reply the reader holds whole, or ``NOT_ENOUGH_DATA`` (``_none``); an
        error reply as its exception value (not raised).

        Raises:
            ConnectionError: the library's, as a reply (e.g. LOADING): read_response raises it.
        """
        reply = self._gets(False)
        if isinstance(reply, self._broken):
            raise reply
        return reply

    def is_push(self, reply: Any) -> bool:
        """Whether ``reply`` is a RESP3 push message (not a reply)."""
        return self._push is not None and isinstance(reply, self._push)


def direct_replies(conn: Any) -> DirectReplies | None:
    """A :class:`DirectReplies` for ``conn`` (connected) when its parser is redis-py's
    asyncio hiredis parser in the form the module docstring names, and a RESP3 push message
    can be told apart from a reply (hiredis >= 3.2) or none can come (RESP2); else ``None``
    (read it with :func:`~syncprims._transport.compat.aread`)."""
    parser = getattr(conn, "_parser", None)
    if type(parser).__name__ != "_AsyncHiredisParser":
        return None
    reads = next((c for c in type(conn).__mro__ if "read_response" in vars(c)), None)
    if reads is None or reads.__module__ != "redis.asyncio.connection":
        return None  # a connection that reads its own way (fakeredis's)
    module = sys.modules.get(type(parser).__module__)
    none = getattr(module, "NOT_ENOUGH_DATA", None)
    broken = getattr(module, "ConnectionError", None)
    reader = getattr(parser, "_reader", None)
    if none is None or reader is None:
        return None
    if not (isinstance(broken, type) and issubclass(broken, BaseException)):
        return None
    if getattr(parser, "_stream", None) is None:
        return None
    if getattr(parser, "_next_response", none) is not none:
        return None
    push = getattr(parser, "_hiredis_PushNotificationType", None)
    if push is None and str(getattr(conn, "protocol", 2)) not in ("2", "None"):
        return None  # RESP3 with a hiredis that cannot mark push messages
    return DirectReplies(parser, none, push, broken)


@attrs.define(eq=False)
class _ReplyProtocol(asyncio.Protocol):
    """The protocol of a connection whose replies are parsed as the bytes arrive (see
    :func:`read_in_callback`); everything but the bytes still reaches the library's own
    protocol, so that its stream sees the end of the connection and ``disconnect()`` (which
    waits for the close) works as before."""

    _replies: DirectReplies
    _original: Any
    _on_reply: Callable[[Any], None] = attrs.field(kw_only=True)
    _on_lost: Callable[[BaseException], None] = attrs.field(kw_only=True)
    _spawn: Callable[[Any], None] = attrs.field(kw_only=True)
    _push_replies: frozenset[bytes] = attrs.field(kw_only=True)
    _lost: bool = attrs.field(default=False, init=False)

    def data_received(self, data: bytes) -> None:
        if self._lost:
            return
        replies = self._replies
        replies.feed(data)
        none, on_reply = replies._none, self._on_reply
        try:
            while True:
                reply = replies.parsed()
                if reply is none:
                    return
                if replies.is_push(reply) and not self._is_reply(reply):
                    assert replies._handle_push is not None
                    self._spawn(_handle_push(replies._handle_push, reply))  # not a reply
                    continue
                on_reply(reply)
        except Exception as error:  # out of step, or a reply nobody asked for
            self._lose(error)

    def _is_reply(self, message: Any) -> bool:
        """Whether a RESP3 push message is a reply to this connection's user (its kind is
        in ``push_replies``)."""
        return bool(message) and message[0] in self._push_replies

    def eof_received(self) -> bool | None:
        keep: bool | None = self._original.eof_received()
        self._lose(ConnectionError("the server closed the connection"))
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        self._original.connection_lost(exc)
        if exc is None:
            self._lose(ConnectionError("the connection closed"))
        else:
            error = ConnectionError(f"error while reading: {exc!r}")
            error.__cause__ = exc
            self._lose(error)

    def pause_writing(self) -> None:
        self._original.pause_writing()

    def resume_writing(self) -> None:
        self._original.resume_writing()

    def _lose(self, error: BaseException) -> None:
        if not self._lost:
            self._lost = True
            self._on_lost(error)


async def _handle_push(handler: Callable[[Any], Any], message: Any) -> None:
    """Run the library's handler of a RESP3 push message that is not a reply (a
    notification), logging a failure: it runs on its own, after the replies around it."""
    try:
        await handler(message)
    except Exception:
        log.exception("the client library's handler of a push message failed")


def read_in_callback(
    conn: Any,
    on_reply: Callable[[Any], None],
    on_lost: Callable[[BaseException], None],
    spawn: Callable[[Any], None],
    push_replies: frozenset[bytes] = frozenset(),
) -> bool:
    """Have a connected asyncio connection's replies parsed by the event loop's own callback
    as the bytes arrive, each handed to ``on_reply`` (an error reply as its exception value),
    and ``on_lost(error)`` called once when the connection ends or its stream is out of step
    (then nothing more is handed over, and an exception ``on_reply`` raises counts as
    that); a RESP3 push message goes to the library's push handler, run by
    ``spawn(coroutine)``, but for the kinds in ``push_replies`` (``b"message"``...: a
    subscriber's), which go to ``on_reply``. Where the connection reads with redis-py's
    hiredis parser in a form :func:`direct_replies` knows and nothing is left unread:
    ``True``; else ``False`` (nothing changed; read with a task). The connection must be
    read no other way afterwards."""
    replies = direct_replies(conn)
    if replies is None:
        return False
    has_data = getattr(conn._parser._reader, "has_data", None)
    if has_data is None or has_data():  # bytes the reader holds would wait for the next
        return False
    writer = getattr(conn, "_writer", None)
    transport = getattr(writer, "transport", None)
    stream = getattr(conn, "_reader", None)
    unread: Any = getattr(stream, "_buffer", b"?")
    if transport is None or stream is None or unread:
        return False
    get_protocol = getattr(transport, "get_protocol", None)
    set_protocol = getattr(transport, "set_protocol", None)
    if get_protocol is None or set_protocol is None or transport.is_closing():
        return False
    protocol = _ReplyProtocol(
        replies,
        get_protocol(),
        on_reply=on_reply,
        on_lost=on_lost,
        spawn=spawn,
        push_replies=push_replies,
    )
    set_protocol(protocol)
    return True
