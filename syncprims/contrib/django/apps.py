"""The Django app ``syncprims.contrib.django``: its system check, and a fresh client when
the ``SYNCPRIMS`` setting changes."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig, apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

import syncprims
from syncprims.contrib.django import client_settings, reset_client
from syncprims.errors import SyncPrimsError

__all__ = ["SyncPrimsConfig", "check_redis"]


class SyncPrimsConfig(AppConfig):
    """Add ``"syncprims.contrib.django"`` to ``INSTALLED_APPS`` for the system check."""

    name = "syncprims.contrib.django"
    label = "syncprims"
    verbose_name = "syncprims"

    def ready(self) -> None:
        checks.register(check_redis, "syncprims")
        setting_changed.connect(_changed, dispatch_uid="syncprims.contrib.django")


def _changed(setting: str, **_: Any) -> None:
    if setting == "SYNCPRIMS":
        reset_client()


def check_redis(app_configs: Any = None, **_: Any) -> list[checks.CheckMessage]:
    """The system check: the ``SYNCPRIMS`` setting is sound, and its Redis answers.

    * ``syncprims.E001`` (error): the setting is missing or malformed (no ``URL``).
    * ``syncprims.E002`` (error): its ``OPTIONS`` are not ``syncprims.connect``'s.
    * ``syncprims.W001`` (warning): Redis could not be reached, or refused the
      credentials (a warning, so that ``migrate`` or ``collectstatic`` in a build without
      Redis still run; ``manage.py check --fail-level WARNING`` makes it fail).

    Connects a client of its own (bounded by the client's connect and reply timeouts) and
    shuts it down; the process's own client is not made here.
    """
    if app_configs is not None and apps.get_app_config("syncprims") not in app_configs:
        return []
    try:
        url, options = client_settings()
    except ImproperlyConfigured as error:
        return [checks.Error(str(error), id="syncprims.E001")]
    try:
        syncprims.Config.from_options(options)
    except (TypeError, ValueError) as error:
        return [checks.Error(f"SYNCPRIMS['OPTIONS']: {error}", id="syncprims.E002")]
    try:
        client = syncprims.connect(url, **options)
    except (SyncPrimsError, ValueError) as error:
        hint = "Start Redis, or fix SYNCPRIMS['URL'] (locks cannot be taken until it answers)."
        return [checks.Warning(f"Redis is unreachable: {error}", hint=hint, id="syncprims.W001")]
    client.shutdown()
    return []
