"""``syncprims inspect`` and ``syncprims unlock --force`` on a real redis-server (and a
cluster): each kind detected and read, the JSON output, unlock with and without confirmation."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import syncprims
from syncprims._embedded import RedisServer
from syncprims.cli import main
from syncprims.cli.inspection import Snapshot, read
from tests.harness import cli_process, end_process_group, raw_redis
from tests.server_groups import RedisClusterSet, SentinelSet

pytestmark = pytest.mark.real


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[syncprims.Client]:
    with syncprims.connect(redis_server.url) as made:
        yield made


def look(url: str, name: str, kind: str | None = None) -> Snapshot:
    r = raw_redis(url)
    try:
        with syncprims.connect(r, client_record=False) as client:  # a look writes nothing
            return read(client, name, kind)
    finally:
        r.close()


def look_until(
    url: str, name: str, ready: Callable[[Snapshot], bool], what: str, within: float = 5
) -> Snapshot:
    """Read ``name`` again until ``ready(snapshot)``; fail saying ``what`` did not happen."""
    deadline = time.monotonic() + within
    while not ready(shot := look(url, name)):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return shot


def queued_and_listening(shot: Snapshot) -> bool:
    """A fair lock's first waiter is queued and subscribed to its own channel (it queues
    first, then subscribes)."""
    if not shot.waiters:
        return False
    return (
        shot.subscribers.get(f"redisson_lock__channel:{{{shot.name}}}:{shot.waiters[0].field}") == 1
    )


def run_cli(
    capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = ""
) -> tuple[int, str, str]:
    """``syncprims ARGV`` in this process, with ``stdin`` as its standard input."""
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        status = main(list(argv))
    finally:
        sys.stdin = saved
    out, err = capsys.readouterr()
    return status, out, err


def test_held_lock_shows_owner_hold_count_and_ttl(
    client: syncprims.Client, real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = client.get_lock(name)
    lock.lock(lease_time=20)
    lock.lock(lease_time=20)
    shot = look(real_url, name)
    assert shot.kind == "lock"
    assert shot.held
    [holder] = shot.holders
    assert holder.client_id == client.id
    assert holder.owner.isdigit()
    assert holder.field == f"{client.id}:{holder.owner}"
    assert holder.hold_count == 2
    assert shot.ttl is not None and 15 < shot.ttl <= 20
    assert shot.subscribers == {f"redisson_lock__channel:{{{name}}}": 0}

    status, out, _ = run_cli(capsys, "inspect", name, "--url", real_url)
    assert status == 0
    assert f"{name!r}: lock (RLock), held" in out
    assert f"client {client.id}, owner {holder.owner}, hold count 2" in out
    assert "TTL" in out and " s" in out
    lock.unlock()
    lock.unlock()
    assert look(real_url, name).kind == "none"


def test_waiters_are_counted_as_subscribers(
    client: syncprims.Client, real_url: str, name: str
) -> None:
    lock = client.get_lock(name)
    lock.lock()
    with syncprims.connect(real_url) as other:
        waiter = threading.Thread(target=other.get_lock(name).try_lock, kwargs={"wait_time": 3})
        waiter.start()
        channel = f"redisson_lock__channel:{{{name}}}"
        look_until(real_url, name, lambda s: s.subscribers[channel] == 1, "no subscriber")
        lock.unlock()
        waiter.join()
        assert look(real_url, name).holders[0].client_id == other.id
        other.get_lock(name).force_unlock()


def test_fair_lock_queue_and_each_waiters_deadline(
    client: syncprims.Client, real_url: str, name: str
) -> None:
    fair = client.get_fair_lock(name)
    fair.lock()
    with syncprims.connect(real_url) as other:
        waiter = threading.Thread(
            target=other.get_fair_lock(name).try_lock, kwargs={"wait_time": 4}
        )
        waiter.start()
        shot = look_until(real_url, name, queued_and_listening, "the waiter never queued")
        assert shot.kind == "fair"
        assert shot.holders[0].client_id == client.id
        [queued] = shot.waiters
        assert queued.position == 1
        assert queued.field.startswith(f"{other.id}:")
        assert queued.deadline_in is not None and queued.deadline_in > 0
        # The waiter listens on its own channel; the lock's common channel has nobody.
        assert shot.subscribers[f"redisson_lock__channel:{{{name}}}:{queued.field}"] == 1
        fair.unlock()
        waiter.join()
    shot = look(real_url, name)
    assert shot.waiters == ()
    assert shot.holders[0].client_id == other.id


def test_read_write_lock_mode_readers_and_writer(
    client: syncprims.Client, real_url: str, name: str
) -> None:
    rw = client.get_read_write_lock(name)
    rw.read_lock().lock(lease_time=10)
    shot = look(real_url, name)
    assert shot.kind == "rw"
    assert shot.mode == "read"
    [reader] = shot.holders
    assert (reader.side, reader.client_id, reader.hold_count) == ("read", client.id, 1)
    assert reader.lease is not None and 5 < reader.lease <= 10
    assert f"redisson_rwlock:{{{name}}}" in shot.subscribers
    rw.read_lock().unlock()
    rw.write_lock().lock()
    shot = look(real_url, name)
    assert shot.mode == "write"
    assert [(h.side, h.client_id) for h in shot.holders] == [("write", client.id)]
    assert shot.holders[0].field.endswith(":write")
    rw.write_lock().unlock()


def test_fenced_lock_token_also_when_free(
    client: syncprims.Client, real_url: str, name: str
) -> None:
    fenced = client.get_fenced_lock(name)
    token = fenced.lock_and_get_token()
    shot = look(real_url, name)
    assert (shot.kind, shot.held, shot.token) == ("fenced", True, token)
    fenced.unlock()
    shot = look(real_url, name)  # the token counter outlives the hold
    assert (shot.kind, shot.held, shot.token) == ("fenced", False, token)


def test_semaphore_and_latch(client: syncprims.Client, real_url: str, name: str) -> None:
    semaphore = client.get_semaphore(name)
    assert semaphore.try_set_permits(3)
    semaphore.acquire(permits=2)
    shot = look(real_url, name)
    assert shot.kind == "semaphore-or-latch"  # a number alone does not say which
    assert shot.value == 1
    shot = look(real_url, name, "semaphore")
    assert (shot.kind, shot.value) == ("semaphore", 1)
    assert list(shot.subscribers) == [f"redisson_sc:{{{name}}}"]

    latch = client.get_count_down_latch(f"{name}:latch")
    assert latch.try_set_count(2)
    with syncprims.connect(real_url) as other:  # a waiter subscribes: the kind is known
        waiter = threading.Thread(
            target=other.get_count_down_latch(f"{name}:latch").await_, args=(3,)
        )
        waiter.start()
        shot = look_until(
            real_url, f"{name}:latch", lambda s: s.kind == "latch", "the waiter never subscribed"
        )
        assert shot.value == 2
        assert shot.subscribers == {f"redisson_countdownlatch__channel__{{{name}:latch}}": 1}
        latch.count_down()
        latch.count_down()
        waiter.join()


def test_permit_expirable_semaphore_leases(
    client: syncprims.Client, real_url: str, name: str
) -> None:
    semaphore = client.get_permit_expirable_semaphore(name)
    assert semaphore.try_set_permits(3)
    timed = semaphore.acquire(lease_time=10)
    forever = semaphore.acquire()
    assert timed is not None and forever is not None
    shot = look(real_url, name)
    assert shot.kind == "pes"
    assert shot.value == 1
    leases = {lease.permit_id: lease.expires_in for lease in shot.leases}
    assert set(leases) == {timed, forever}
    assert leases[forever] is None
    expires = leases[timed]
    assert expires is not None and 5 < expires <= 10


def test_nothing_and_other_types(real_url: str, name: str) -> None:
    assert look(real_url, name).kind == "none"
    r = raw_redis(real_url)
    r.rpush(name, "x")
    try:
        shot = look(real_url, name)
    finally:
        r.delete(name)
        r.close()
    assert (shot.kind, shot.redis_type) == ("other", "list")


def test_json_output(
    client: syncprims.Client, real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = client.get_lock(name)
    lock.lock(lease_time=30)
    status, out, _ = run_cli(capsys, "inspect", name, "--url", real_url, "--json")
    assert status == 0
    data = json.loads(out)
    assert data["name"] == name
    assert data["kind"] == "lock"
    assert data["held"] is True
    assert data["holders"][0]["client_id"] == client.id
    assert data["holders"][0]["hold_count"] == 1
    assert 25 < data["ttl"] <= 30
    lock.unlock()


def test_watch_refreshes_until_ctrl_c(real_url: str, name: str) -> None:
    watch = cli_process(
        "inspect", name, "--url", real_url, "--watch", "--json", "--interval", "0.2"
    )
    try:
        assert watch.stdout is not None
        lines = [watch.stdout.readline() for _ in range(3)]  # three reads, one a line
        os.killpg(watch.pid, signal.SIGINT)
        _, err = watch.communicate(timeout=10)
    finally:
        end_process_group(watch)
    assert [json.loads(line)["kind"] for line in lines] == ["none"] * 3
    assert watch.returncode == 0
    assert "Traceback" not in err


def test_unlock_needs_force_and_confirmation(
    client: syncprims.Client, real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = client.get_lock(name)
    lock.lock()
    status, _, err = run_cli(capsys, "unlock", name, "--url", real_url)
    assert status == 2
    assert "--force" in err
    status, out, _ = run_cli(capsys, "unlock", name, "--url", real_url, "--force", stdin="n\n")
    assert status == 1
    assert "Force-unlock" in out and "not unlocked" in out
    assert lock.is_locked()
    status, out, _ = run_cli(capsys, "unlock", name, "--url", real_url, "--force", stdin="")
    assert status == 1  # no answer (end of input) is no
    assert lock.is_locked()
    status, out, _ = run_cli(capsys, "unlock", name, "--url", real_url, "--force", stdin="y\n")
    assert status == 0
    assert f"force-unlocked lock (RLock) {name!r}" in out
    assert not lock.is_locked()
    status, out, _ = run_cli(capsys, "unlock", name, "--url", real_url, "--force", "--yes")
    assert status == 1
    assert "not locked" in out


def test_unlock_yes_frees_each_lock_kind(
    client: syncprims.Client, real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client.get_fair_lock(f"{name}:fair").lock()
    client.get_fenced_lock(f"{name}:fenced").lock()
    client.get_read_write_lock(f"{name}:rw").read_lock().lock()
    client.get_read_write_lock(f"{name}:w").write_lock().lock()
    for suffix in ("fair", "fenced", "rw", "w"):
        status, _, err = run_cli(
            capsys, "unlock", f"{name}:{suffix}", "--url", real_url, "--force", "--yes"
        )
        assert status == 0, err
        assert not look(real_url, f"{name}:{suffix}").held
    assert not client.get_read_write_lock(f"{name}:rw").read_lock().is_locked()
    assert not client.get_read_write_lock(f"{name}:w").write_lock().is_locked()


def test_unlock_refuses_what_is_not_a_lock(
    client: syncprims.Client, real_url: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    semaphore = client.get_permit_expirable_semaphore(name)
    semaphore.try_set_permits(2)
    semaphore.acquire()  # a lease: now its key set says what it is
    status, _, err = run_cli(capsys, "unlock", name, "--url", real_url, "--force", "--yes")
    assert status == 2
    assert "permit-expirable semaphore, not a lock" in err
    assert semaphore.available_permits() == 1
    bare = client.get_semaphore(f"{name}:plain")
    bare.try_set_permits(1)
    status, _, err = run_cli(
        capsys, "unlock", f"{name}:plain", "--url", real_url, "--force", "--yes"
    )
    assert status == 2
    assert "semaphore or count-down latch, not a lock" in err
    assert bare.available_permits() == 1


def test_unreachable_server_is_one_line(capsys: pytest.CaptureFixture[str], name: str) -> None:
    status, out, err = run_cli(capsys, "inspect", name, "--url", "redis://127.0.0.1:1")
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and "cannot reach Redis at redis://127.0.0.1:1" in err


@pytest.mark.cluster
def test_on_a_cluster(redis_cluster: RedisClusterSet, name: str) -> None:
    with syncprims.connect(redis_cluster.url) as client:
        fair = client.get_fair_lock(name)
        fair.lock()
        with syncprims.connect(redis_cluster.url) as other:
            waiter = threading.Thread(
                target=other.get_fair_lock(name).try_lock, kwargs={"wait_time": 4}
            )
            waiter.start()
            shot = look_until(
                redis_cluster.url, name, queued_and_listening, "the waiter never queued"
            )
            assert shot.kind == "fair"
            assert shot.holders[0].client_id == client.id
            # Sharded pub/sub (SSUBSCRIBE) on the channel's shard is counted.
            channel = f"redisson_lock__channel:{{{name}}}:{shot.waiters[0].field}"
            assert shot.subscribers[channel] == 1
            fair.unlock()
            waiter.join()
            other.get_fair_lock(name).force_unlock()


@pytest.mark.sentinel
def test_on_a_sentinel_master(
    sentinels: SentinelSet, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with syncprims.connect(sentinels.url) as client:
        lock = client.get_lock(name)
        lock.lock()
        status, out, _ = run_cli(capsys, "inspect", name, "--url", sentinels.url, "--json")
        assert status == 0
        assert json.loads(out)["holders"][0]["client_id"] == client.id
        status, _, _ = run_cli(capsys, "unlock", name, "--url", sentinels.url, "--force", "--yes")
        assert status == 0
        assert not lock.is_locked()


def test_inspect_writes_nothing(capsys: pytest.CaptureFixture[str], name: str) -> None:
    """docs/operations.md: inspect "reads, and never writes". Each command the server ran
    during the runs (its INFO commandstats) is asked for its flags: none writes, and no key
    (no client record) is left."""
    with RedisServer() as server, syncprims.connect(server.url) as client:
        lock = client.get_lock(name)
        lock.lock()
        raw = raw_redis(server.url)
        keys = set(raw.keys())
        before = raw.info("commandstats")
        for _ in range(3):
            assert run_cli(capsys, "inspect", name, "--url", server.url)[0] == 0
        assert run_cli(capsys, "inspect", name, "--url", server.url, "--json")[0] == 0
        after = raw.info("commandstats")
        ran = [
            stat.removeprefix("cmdstat_")
            for stat, counts in after.items()
            if counts["calls"] > before.get(stat, {"calls": 0})["calls"]
        ]
        assert "info" in ran and "hgetall" in ran  # it did read
        writes = []
        for command in ran:
            reply = raw.execute_command("COMMAND", "INFO", command)
            if "write" in next(iter(reply.values()))["flags"]:  # redis-py parses it
                writes.append(command)
        assert writes == []
        assert set(raw.keys()) == keys  # no record of the inspecting client
        raw.close()
        lock.unlock()
