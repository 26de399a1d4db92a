"""A silent network partition (nftables DROP) in a private network namespace.

The scenario runs in ``unshare --net`` (tests/faults/partition_scenario.py), so the rules
only see that namespace's loopback. Skipped, with the reason, where ``unshare`` (root or
user namespaces) or ``nft`` is missing.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import processes

pytestmark = [pytest.mark.real, pytest.mark.faults]

SCENARIO = Path(__file__).with_name("partition_scenario.py")


def _unavailable() -> str | None:
    for tool in ("unshare", "nft", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install util-linux nftables iproute2)"
    probe = processes.run(["unshare", "--net", "nft", "list", "ruleset"], timeout=30)
    if probe.returncode != 0:
        return f"cannot create a network namespace with nftables here: {probe.stderr.strip()}"
    return None


def test_a_partitioned_holder_is_told_before_anyone_else_gets_the_lock(
    record_property: Callable[[str, object], None],
) -> None:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(reason)
    done = processes.run(["unshare", "--net", sys.executable, str(SCENARIO)], timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for key in ("contender_acquired_after_s", "holder_told_lost_after_s", "holder_call_s"):
        record_property(f"partition_{key}", round(out[key], 3))
    # The holder (1 s watchdog lease, renewed 0.5 s before the cut) loses it within a lease.
    assert out["contender_acquired"] is True
    assert out["contender_acquired_after_s"] < 1.5
    # It is told no later than the lease ends in Redis, i.e. before anyone else can have it.
    assert out["holder_told_lost"] is True and out["holder_is_lost"] is True
    assert out["holder_told_lost_after_s"] <= out["contender_acquired_after_s"]
    # Its calls meanwhile fail within the operation bound, without hanging.
    assert out["holder_call"] == "RedisTimeoutError"
    assert out["holder_call_s"] <= out["holder_operation_timeout_s"]
    # After the partition heals, its unlock cannot release the new holder's lock.
    assert out["holder_unlock_after_heal"] == "LockNotHeldError"
    assert out["contender_still_holds"] is True
