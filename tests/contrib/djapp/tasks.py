"""A ``django.tasks`` task (Django 6; the django-tasks backport before it) that one host
runs at a time."""

from __future__ import annotations

from syncprims.contrib.django import exclusive

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # type: ignore[no-redef]


@task()
@exclusive("reports:{day}")
def report(day: str) -> str:
    return f"report of {day}"
