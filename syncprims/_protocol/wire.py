"""Commands encoded once: the RESP bytes of a lock's hot calls, kept and reused.

An uncontended RLock pair sends two ``EVALSHA`` calls of 12 and 17 arguments, costly to
encode afresh each time (docs/measurements.md, "[hot-5]"). The acquire of one owner with one
lease is the same command every time: it is encoded once (:func:`wired`). The unlock differs
only in its unlock key, unique per call: the bytes before and after it are encoded once, and
the key is put between them (:class:`Splice`).

The encoding is RESP's array of bulk strings, as hiredis and redis-py write it: text as
UTF-8 (Redisson's ``StringCodec``, whatever the client's ``encoding``), numbers by their
``repr``, bytes as they are. Every command the transports send is packed here (:func:`pack`).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Splice", "Wired", "encode", "pack", "wired"]

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency, but stay usable without it
    _hiredis_pack = None


class Wired(tuple[Any, ...]):
    """A command (the tuple ``ScriptCall.command`` makes) with its encoding made already:
    :func:`pack` returns :attr:`wire` as it is."""

    wire: list[bytes]
    """The RESP bytes, as ``pack`` returns them (a list of one ``bytes``; never mutated)."""


def _bulk(arg: Any) -> bytes:
    """One argument as a bulk string, as redis-py's ``Encoder`` makes it (a number by its
    ``repr``; a bool refused)."""
    if isinstance(arg, str):
        data = arg.encode("utf-8")
    elif isinstance(arg, (bytes, memoryview, bytearray)):
        data = bytes(arg)
    elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
        data = repr(arg).encode()
    else:
        raise TypeError(
            f"a command argument must be str, bytes or a number, not {type(arg).__name__}"
        )
    return b"$%d\r\n%b\r\n" % (len(data), data)


def encode(command: Sequence[Any]) -> bytes:
    """The RESP encoding of ``command`` (text, bytes or numbers).

    Raises:
        TypeError: another type of argument (a bool, ``None``, a list, ...).
    """
    return b"*%d\r\n" % len(command) + b"".join([_bulk(arg) for arg in command])


def pack(command: tuple[Any, ...]) -> list[bytes]:
    """``command`` encoded for a connection's ``send_packed_command`` or a stream's
    ``writelines`` (a list: both iterate it), by hiredis' encoder, or :func:`encode` (the
    same bytes) without it. Text is UTF-8 whatever the client's ``encoding``, so names and
    owner fields are the same bytes for every client; a command encoded already
    (:class:`Wired`) is sent as it is."""
    if type(command) is Wired:
        return command.wire
    if _hiredis_pack is not None:
        return [_hiredis_pack(command)]
    return [encode(command)]


def wired(command: tuple[Any, ...]) -> Wired:
    """``command`` with its encoding made now (:class:`Wired`)."""
    out = Wired(command)
    out.wire = [encode(command)]
    return out


class Splice:
    """A command of which one argument, at ``at``, differs per call: :meth:`__call__` puts
    each call's value between the bytes before and after it, encoded once.

    Raises:
        TypeError: an argument of ``command`` that :func:`encode` refuses.
    """

    __slots__ = ("_after", "_after_bytes", "_before", "_head")

    def __init__(self, command: tuple[Any, ...], at: int) -> None:
        self._before = command[:at]
        self._after = command[at + 1 :]
        self._head = b"*%d\r\n" % len(command) + b"".join([_bulk(a) for a in self._before])
        self._after_bytes = b"".join([_bulk(a) for a in self._after])

    def __call__(self, value: str) -> Wired:
        """The command with ``value`` at ``at``, encoded."""
        out = Wired((*self._before, value, *self._after))
        data = value.encode("utf-8")
        out.wire = [b"%b$%d\r\n%b\r\n%b" % (self._head, len(data), data, self._after_bytes)]
        return out
