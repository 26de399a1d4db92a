"""Settings of the Django project the tests run (``python -m django test tests.contrib.djapp
--settings tests.contrib.django_settings``); Redis is the test's own server."""

from __future__ import annotations

import importlib.util
import os

SECRET_KEY = "syncprims-tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
DATABASES: dict[str, object] = {}
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "tests.contrib.djapp.urls"
INSTALLED_APPS = ["syncprims.contrib.django", "tests.contrib.djapp"]
SYNCPRIMS = {
    "URL": os.environ.get("SYNCPRIMS_TEST_DJANGO_URL", "redis://127.0.0.1:6379/0"),
    "OPTIONS": {"lock_watchdog_timeout": 5},
}

if importlib.util.find_spec("django.tasks"):  # Django 6
    TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
else:  # Django 5.2 and older: the django-tasks backport, the same API
    INSTALLED_APPS.append("django_tasks")
    TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
