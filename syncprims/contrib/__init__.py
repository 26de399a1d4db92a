"""Integrations with frameworks, on syncprims' public API only.

* [`syncprims.contrib.celery`](../celery.md): a task base class that runs a task at most
  once at a time per key (``pip install "syncprims[celery]"``).
* [`syncprims.contrib.django`](../django.md): a settings-driven client per process, a
  decorator for views, management commands and tasks ("one host of the fleet runs this"),
  and a system check (``pip install "syncprims[django]"``).

FastAPI and Starlette need no module: the pattern (the lifespan owns the client, a
dependency yields a held lock) is in the asyncio guide.
"""
