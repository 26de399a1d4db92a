"""Views that one host of the fleet runs at a time."""

from __future__ import annotations

import asyncio

from django.http import HttpRequest, HttpResponse, JsonResponse

from syncprims.contrib.django import exclusive, get_client


@exclusive("orders:{order_id}")
def ship(request: HttpRequest, order_id: int) -> HttpResponse:
    held = get_client().get_lock(f"orders:{order_id}").is_locked()
    return HttpResponse(f"shipped {order_id}; locked meanwhile: {held}")


def busy(request: HttpRequest, order_id: int) -> HttpResponse:
    return JsonResponse({"busy": order_id}, status=423)


@exclusive("orders:{order_id}", on_taken=busy)
def ship_or_423(request: HttpRequest, order_id: int) -> HttpResponse:
    return HttpResponse(f"shipped {order_id}")


@exclusive("orders:{order_id}", wait_time=0.5)
async def ship_async(request: HttpRequest, order_id: int) -> HttpResponse:
    await asyncio.sleep(0)
    held = await asyncio.to_thread(get_client().get_lock(f"orders:{order_id}").is_locked)
    return HttpResponse(f"shipped {order_id}; locked meanwhile: {held}")
