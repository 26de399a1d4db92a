from __future__ import annotations

from django.urls import path

from tests.contrib.djapp import views

urlpatterns = [
    path("ship/<int:order_id>/", views.ship),
    path("ship-or-423/<int:order_id>/", views.ship_or_423),
    path("ship-async/<int:order_id>/", views.ship_async),
]
