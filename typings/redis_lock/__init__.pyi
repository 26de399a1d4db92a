# Stub for python-redis-lock (no inline types, no py.typed): only what syncprims' benchmarks
# use, so that `mypy --strict syncprims` can check the benchmark adapters.
from redis import Redis

class Lock:
    def __init__(
        self,
        redis_client: Redis,
        name: str,
        expire: int | None = ...,
        id: str | None = ...,
        auto_renewal: bool = ...,
        strict: bool = ...,
        signal_expire: int = ...,
        blocking: bool = ...,
    ) -> None: ...
    def acquire(self, blocking: bool = ..., timeout: float | None = ...) -> bool: ...
    def release(self) -> None: ...
