"""syncprims.contrib.django, run by Django's own test runner against a real redis-server
(``tests/test_contrib_django.py`` starts both)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.test import SimpleTestCase, override_settings

import syncprims
from syncprims.contrib.django import get_client
from syncprims.contrib.django.apps import check_redis
from tests.contrib.djapp.tasks import report

ROOT = Path(__file__).resolve().parents[3]
URL = settings.SYNCPRIMS["URL"]


@contextmanager
def held_elsewhere(name: str) -> Iterator[None]:
    """The lock ``name`` held by another client: another host of the fleet."""
    with syncprims.connect(URL) as other, other.get_lock(name):
        yield


class ClientTests(SimpleTestCase):
    def test_one_client_per_process(self) -> None:
        client = get_client()
        assert get_client() is client
        assert client.config.lock_watchdog_timeout == 5

    def test_a_forked_child_makes_its_own_client(self) -> None:
        parent = get_client()
        parent.get_lock("fork:parent").lock()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a prefork worker
            try:
                child = get_client()
                ok = child is not parent and child.id != parent.id
                lock = child.get_lock("fork:child")
                ok = ok and lock.try_lock(0) and not child.get_lock("fork:parent").try_lock(0)
                lock.unlock()
                os.write(write, b"ok" if ok else b"shared")
            finally:
                os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert (os.read(read, 16), status) == (b"ok", 0)
        os.close(read)
        assert get_client() is parent  # the parent keeps its own
        parent.get_lock("fork:parent").unlock()

    def test_a_changed_setting_makes_a_new_client(self) -> None:
        before = get_client()
        with override_settings(SYNCPRIMS={"URL": URL, "OPTIONS": {"lock_watchdog_timeout": 7}}):
            assert get_client().config.lock_watchdog_timeout == 7
        assert get_client() is not before
        assert get_client().config.lock_watchdog_timeout == 5


class ExclusiveTests(SimpleTestCase):
    def test_a_view_runs_holding_its_lock(self) -> None:
        response = self.client.get("/ship/1/")
        assert response.status_code == 200
        assert response.content == b"shipped 1; locked meanwhile: True"
        assert not get_client().get_lock("orders:1").is_locked()  # released

    def test_a_view_whose_lock_is_taken_answers_409(self) -> None:
        with held_elsewhere("orders:2"):
            response = self.client.get("/ship/2/")
        assert response.status_code == 409
        assert b"held elsewhere" in response.content

    def test_on_taken_gives_the_response(self) -> None:
        with held_elsewhere("orders:3"):
            response = self.client.get("/ship-or-423/3/")
        assert (response.status_code, response.json()) == (423, {"busy": 3})
        assert self.client.get("/ship-or-423/3/").status_code == 200

    def test_an_async_view(self) -> None:
        response = self.client.get("/ship-async/4/")
        assert response.content == b"shipped 4; locked meanwhile: True"
        with held_elsewhere("orders:4"), self.assertLogs("syncprims.django", "INFO") as logs:
            response = self.client.get("/ship-async/4/")  # after a wait of 0.5 s
        assert response.status_code == 409
        assert "skipped: lock 'orders:4' is held elsewhere" in logs.output[0]

    def test_a_management_command_skips_cleanly(self) -> None:
        out = io.StringIO()
        call_command("nightly", stdout=out)
        assert out.getvalue() == "nightly ran\n"
        out = io.StringIO()
        with held_elsewhere("nightly"):
            call_command("nightly", stdout=out)  # no exception
        assert out.getvalue() == "skipped: lock 'nightly' is held elsewhere\n"

    def test_a_skipped_command_exits_0(self) -> None:
        command = [sys.executable, "-m", "django", "nightly"]
        with held_elsewhere("nightly"):
            done = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
            )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "skipped: lock 'nightly' is held elsewhere\n"

    def test_a_long_running_command_under_a_leader_election(self) -> None:
        out = io.StringIO()
        call_command("scheduler", "--rounds", "2", stdout=out)
        assert out.getvalue().count("round as leader, term ") == 2
        with syncprims.connect(URL) as other:
            leader = other.get_leader_election("scheduler", value="another host")
            assert leader.campaign()
            out = io.StringIO()
            call_command("scheduler", "--wait", "0.2", stdout=out)
            assert out.getvalue() == "not the leader: standing down\n"
            observed = leader.leader()
            assert observed is not None and observed.value == "another host"

    def test_a_django_task(self) -> None:
        assert report.enqueue("monday").return_value == "report of monday"
        with held_elsewhere("reports:tuesday"):
            result = report.enqueue("tuesday")
        assert result.status == "SUCCESSFUL"
        assert result.return_value is None  # skipped


class CheckTests(SimpleTestCase):
    def test_a_sound_setting_and_a_live_redis_pass(self) -> None:
        assert check_redis() == []
        call_command("check", "--tag", "syncprims", "--fail-level", "WARNING", stdout=io.StringIO())

    def test_a_missing_setting(self) -> None:
        values: list[object] = [None, {"OPTIONS": {}}, "redis://x", {"URL": URL, "TIMEOUT": 1}]
        for value in values:
            with override_settings(SYNCPRIMS=value):
                assert [m.id for m in check_redis()] == ["syncprims.E001"], value

    def test_bad_options(self) -> None:
        for options in ({"lock_watchdog_timeout": -1}, {"host": "x"}):
            with override_settings(SYNCPRIMS={"URL": URL, "OPTIONS": options}):
                assert [m.id for m in check_redis()] == ["syncprims.E002"], options

    def test_an_unreachable_redis(self) -> None:
        dead = "redis://127.0.0.1:1/0"  # nothing listens on port 1
        with override_settings(SYNCPRIMS={"URL": dead, "OPTIONS": {"retry_attempts": 0}}):
            messages = check_redis()
        assert [m.id for m in messages] == ["syncprims.W001"]
        assert "Redis is unreachable" in messages[0].msg
