"""syncprims.contrib.django: Django's own test runner (``manage.py test``, here
``python -m django test``) runs ``tests/contrib/djapp/tests.py`` against a redis-server of
this test's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("django", reason="Django is not installed (pip install -e '.[dev]')")

from syncprims._embedded import RedisServer

pytestmark = [pytest.mark.real, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def test_django_test_runner_passes() -> None:
    with RedisServer() as server:
        env = {
            **os.environ,
            "SYNCPRIMS_TEST_DJANGO_URL": server.url,
            "DJANGO_SETTINGS_MODULE": "tests.contrib.django_settings",
            "PYTHONPATH": str(ROOT),
        }
        done = subprocess.run(
            [sys.executable, "-m", "django", "test", "tests.contrib.djapp", "-v", "2"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=110, check=False,
        )  # fmt: skip
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    ran = re.search(r"^Ran (\d+) tests? ", report, re.MULTILINE)
    assert ran and int(ran.group(1)) >= 14, report
    assert re.search(r"^OK$", report, re.MULTILINE), report
