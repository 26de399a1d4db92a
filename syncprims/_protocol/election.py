"""What a leader election reports: :class:`Leader`, read from the election's lock hash
(``election_read.lua``). Pure."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs

__all__ = ["Leader", "parse_leader"]


@attrs.frozen
class Leader:
    """Who leads a [`LeaderElection`][syncprims.LeaderElection] now: what ``leader()`` returns
    and ``observe()`` yields (``None`` there when nobody leads).

    Attributes:
        value: what the leader shows others (its ``value=``, or its last ``proclaim()``).
        term: its leadership's term, a fencing token: strictly higher for every new
            leadership of the election (at least the server's clock in microseconds).
        since: when the leadership began, by the server's clock (UTC).
    """

    value: str
    term: int
    since: datetime


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_leader(reply: object) -> tuple[Leader | None, int]:
    """``election_read.lua``'s reply: the leader (``None``: nobody leads) and the PTTL of
    the election's lock, ms (negative: no lock, or no TTL)."""
    assert isinstance(reply, list) and len(reply) == 4, reply
    term, value, since, pttl = reply
    if term is None or since is None:
        return None, int(pttl)
    micros = int(since)
    moment = datetime.fromtimestamp(micros // 1_000_000, UTC).replace(
        microsecond=micros % 1_000_000
    )
    return Leader(_text(value or b""), int(term), moment), int(pttl)
