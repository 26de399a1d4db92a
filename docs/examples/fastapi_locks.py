"""FastAPI: the lifespan owns the asyncio client; a dependency yields a held lock; a lock
that is taken answers 409 Conflict, not 500."""

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import redis.asyncio
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

import syncprims
import syncprims.asyncio
from syncprims.asyncio import Client, RLock

URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
events: list[str] = []  # what happened, in order (printed below, checked by the tests)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    # The redis-py client may come from another lifespan (fastapi-redis-sdk's, your own):
    # syncprims uses its pool, and leaves it open at shutdown.
    r = redis.asyncio.Redis.from_url(URL)
    async with await syncprims.asyncio.connect(r) as client:  # on the server's event loop
        yield {"locks": client}  # request.state.locks; shut down when the app stops
    await r.aclose()


def held(name: str, wait_time: float = 0) -> Callable[[Request], AsyncIterator[RLock]]:
    """A dependency that holds the lock ``name`` (formatted with the path parameters) for
    the request, or answers 409 when it is not acquired within ``wait_time`` seconds."""

    async def hold(request: Request) -> AsyncIterator[RLock]:
        client: Client = request.state.locks
        lock = client.get_lock(name.format(**request.path_params))
        owner = client.new_owner()  # entry and exit may run in different tasks
        if not await lock.try_lock(wait_time, owner=owner):
            raise HTTPException(409, f"{lock.name} is held by another request")
        events.append("acquired")
        try:
            yield lock
        finally:
            try:
                await lock.unlock(owner=owner)
                events.append("released")
            except syncprims.LockNotHeldError:  # lost meanwhile (its lease ran out)
                logging.getLogger(__name__).warning("%s was lost during the request", lock.name)

    return hold


app = FastAPI(lifespan=lifespan)


@app.exception_handler(syncprims.LockTimeoutError)
async def lock_taken(request: Request, error: syncprims.LockTimeoutError) -> JSONResponse:
    # client.synchronized(..., wait_time=...) raises LockTimeoutError: 409, not 500
    return JSONResponse({"detail": str(error)}, status_code=409)


@app.post("/orders/{order_id}/ship")
async def ship(order_id: int, lock: Annotated[RLock, Depends(held("orders:{order_id}"))]) -> str:
    events.append("handled")
    return f"shipped {order_id}"


@app.post("/orders/{order_id}/pack")  # scope="function": released before the response
async def pack(
    order_id: int,
    lock: Annotated[RLock, Depends(held("orders:{order_id}"), scope="function")],
) -> str:
    events.append("handled")
    return f"packed {order_id}"


@app.post("/reports/{day}")
async def report(request: Request, day: str) -> str:
    client: Client = request.state.locks

    @client.synchronized("reports:{day}", wait_time=0.1)
    async def build(day: str) -> str:
        return f"report of {day}"

    return await build(day)


class ResponseSent:
    """ASGI middleware that notes when the response's last byte has been handed over."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                events.append("response sent")

        await self.app(scope, receive, sending)


app.add_middleware(ResponseSent)

if __name__ == "__main__":
    with TestClient(app) as http, syncprims.connect(URL) as other:
        for path in ("/orders/1/ship", "/orders/1/pack"):
            events.clear()
            answer = http.post(path)
            print(path, answer.status_code, answer.json(), "; then:", ", ".join(events))
        with other.get_lock("orders:2"):  # another host holds order 2
            print("/orders/2/ship while held:", http.post("/orders/2/ship").status_code)
        with other.get_lock("reports:monday"):
            print("/reports/monday while held:", http.post("/reports/monday").status_code)
