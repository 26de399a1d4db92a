"""Lock names per call, by the rules of ``Client.synchronized`` (public, for integrations).

``syncprims.contrib``'s Celery and Django integrations name their locks with it, and an
integration of your own can too: a ``str.format`` template over the function's parameters, or
a callable, checked once when the function is decorated.
"""

from __future__ import annotations

from syncprims._protocol.templates import Namer, lock_namer

__all__ = ["Namer", "lock_namer"]
