"""The blocking fan-out's hand-off of a call queued behind a server's late lane."""

from __future__ import annotations

import time
from typing import Any

from syncprims._protocol.contracts import PENDING, Call, ScriptCall
from syncprims._protocol.scripts import LOCK_ACQUIRE
from syncprims._transport.blocking import fanout
from syncprims._transport.blocking.fanout import Handoff, LateLane, fan_out


def test_a_reply_delivered_before_the_fan_out_stops_waiting_is_the_fan_outs() -> None:
    handoff = Handoff(time.monotonic() + 1)
    assert handoff.set(25)  # a refusal (the TTL), delivered while the fan-out still waited
    assert handoff.abandon() == 25  # ...so the fan-out has it: nobody else does


def test_a_reply_delivered_after_the_fan_out_stopped_waiting_goes_elsewhere() -> None:
    handoff = Handoff(time.monotonic() + 1)
    assert handoff.abandon() is PENDING
    assert not handoff.set(None)  # the lane gives it to the call's on_orphan


class _DeliveredLane(LateLane):
    """A lane that is busy and has delivered a queued call's reply at once."""

    def __init__(self, reply: Any) -> None:
        self._reply = reply

    def busy(self) -> bool:
        return True

    def holds_skippable(self) -> bool:
        return False

    def call(self, call: Call, deadline: float) -> Handoff:
        handoff = Handoff(deadline)
        handoff.set(self._reply)
        return handoff


class _Server:
    timeout = 1.0
    address = "127.0.0.1:1"

    def __init__(self, lane: LateLane) -> None:
        self.lane = lane


def test_a_fan_out_that_stops_early_keeps_a_queued_calls_delivered_reply() -> None:
    """A RedLock attempt queued behind a busy lane was granted, and the lane handed the
    grant to the fan-out; the fan-out, settled (no quorum possible), then stopped waiting
    and dropped it: the grant was never given back and blocked a RedLock whose other
    masters were dead for its whole lease (a loaded run's demo with 2 of 5 masters killed).
    Now the fan-out returns it, and the attempt gives it back."""
    server: Any = _Server(_DeliveredLane(None))
    executor: Any = None  # not used by the fan-out
    call = Call(executor, ScriptCall(LOCK_ACQUIRE, ["k"], [30000, "f"]), "acquiring", None, True)
    assert fanout.lane_of(server) is server.lane
    assert fan_out([(server, call)], lambda replies: True) == [None]
