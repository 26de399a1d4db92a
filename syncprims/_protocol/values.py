"""Validation of counts given by users (permits, latch counts). Pure."""

from __future__ import annotations

__all__ = ["check_count", "parse_permit_id"]


MAX_COUNT = 2**31 - 1
"""The largest permit or latch count: Redisson's are Java ``int``s (and the scripts count in
Lua numbers, exact only below 2**53)."""


def check_count(value: object, what: str, minimum: int = 0) -> int:
    """Validate an integer count and return it.

    Raises:
        TypeError: ``value`` is not an ``int`` (``bool`` is refused).
        ValueError: ``value`` is below ``minimum`` or its size above :data:`MAX_COUNT`.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    if abs(value) > MAX_COUNT:
        raise ValueError(f"{what} must be at most {MAX_COUNT} (a Java int), got {value}")
    return value


def parse_permit_id(value: object) -> bytes:
    """A permit id as shown to users (32 hex characters) to its 16 raw bytes.

    Raises:
        TypeError: not a ``str``.
        ValueError: not 32 hexadecimal characters.
    """
    if not isinstance(value, str):
        raise TypeError(f"permit_id must be a str, not {type(value).__name__}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ValueError(f"permit_id must be 32 hexadecimal characters, got {value!r}")
    return raw
