"""The FastAPI pattern of docs/asyncio.md (``docs/examples/fastapi_locks.py``, which
``tests/test_docs_and_cli.py`` also runs), through Starlette's TestClient on a real server."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="FastAPI is not installed (pip install -e '.[dev]')")
pytest.importorskip("httpx2", reason="httpx2 is not installed (pip install -e '.[dev]')")

from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

import syncprims
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fastapi_locks.py"


@pytest.fixture(scope="module")
def example(redis_server: RedisServer) -> ModuleType:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REDIS_URL", redis_server.url)
        spec = importlib.util.spec_from_file_location("fastapi_locks", EXAMPLE)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

    hold = Depends(module.held("orders:{order_id}"))
    app: FastAPI = module.app

    @app.post("/orders/{order_id}/slow")
    async def slow(order_id: int, lock: Any = hold) -> str:  # held for half a second
        await asyncio.sleep(0.5)
        return "done"

    return module


@pytest.fixture(scope="module")
def http(example: ModuleType) -> Iterator[TestClient]:
    with TestClient(example.app) as client:  # runs the lifespan: one syncprims client
        yield client


@pytest.fixture(scope="module")
def other(redis_server: RedisServer) -> Iterator[syncprims.Client]:
    with syncprims.connect(redis_server.url) as client:  # another host
        yield client


@pytest.mark.parametrize(
    ("path", "order"),
    [
        # FastAPI's default dependency scope ("request"): released after the response
        ("/orders/1/ship", ["acquired", "handled", "response sent", "released"]),
        # Depends(..., scope="function"): released before the response is sent
        ("/orders/1/pack", ["acquired", "handled", "released", "response sent"]),
    ],
)
def test_the_lock_is_held_around_the_handler(
    example: ModuleType, http: TestClient, other: syncprims.Client, path: str, order: list[str]
) -> None:
    example.events.clear()
    answer = http.post(path)
    assert answer.status_code == 200
    assert example.events == order
    assert not other.get_lock("orders:1").is_locked()


@pytest.mark.parametrize("path", ["/orders/2/ship", "/orders/2/pack", "/reports/2"])
def test_a_taken_lock_answers_409_not_500(
    http: TestClient, other: syncprims.Client, path: str
) -> None:
    name = "reports:2" if "reports" in path else "orders:2"
    with other.get_lock(name):
        answer = http.post(path)
    assert answer.status_code == 409
    assert name in answer.json()["detail"]
    assert http.post(path).status_code == 200  # free again


def test_two_concurrent_requests_one_runs(http: TestClient) -> None:
    start = threading.Barrier(2)
    codes: list[int] = []

    def call() -> None:
        start.wait()
        codes.append(http.post("/orders/3/slow").status_code)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(codes) == [200, 409]
