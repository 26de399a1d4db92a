"""Lock names per call, by the rules of ``Client.synchronized`` (public, for integrations).

``syncprims.contrib``'s Celery and Django integrations name their locks with it, and an
integration of your own can too: a ``str.format`` template over the function's parameters, or
a callable, checked once when the function is decorated. Both faces use the same rules
(``syncprims.Client.synchronized``, ``syncprims.asyncio.Client.synchronized``).

Example:
    ```python
    from syncprims.naming import lock_namer

    def ship(order_id: int, carrier: str = "ups") -> None: ...

    name_of = lock_namer("orders:{order_id}", ship)   # TypeError here for a bad template
    assert name_of((42,), {}) == "orders:42"           # one call's (args, kwargs)
    ```
"""

from __future__ import annotations

from syncprims._protocol.templates import Namer, lock_namer

__all__ = ["Namer", "lock_namer"]
