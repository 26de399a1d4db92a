"""Client configuration: frozen attrs value classes, validated at construction.

A bad value fails when the :class:`Config` is built, not deep inside a call. Durations are
seconds (``int``/``float``) or :class:`datetime.timedelta`, stored as ``float`` seconds.
Defaults follow Redisson's ``Config`` where a Redisson setting exists
(``lockWatchdogTimeout`` 30 s, ``subscriptionTimeout`` 7.5 s, ``fairLockWaitTimeout`` 300 s,
``lockWatchdogBatchSize`` 100); the command ``timeout`` and retry delays are ours.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import attrs

from syncprims._protocol.timing import MAX_LEASE_SECONDS

__all__ = ["ClusterServers", "Config", "SentinelServers", "SingleServer", "TLS", "parse_url"]

_SCHEMES = ("redis", "rediss", "unix")


def _seconds(value: object) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"expected seconds (int or float) or a timedelta, not {type(value).__name__}")


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if math.isnan(value) or value <= 0 or math.isinf(value):
        raise ValueError(
            f"{attribute.name} must be a positive finite number of seconds, got {value!r}"
        )


def _non_negative_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


def _at_most_max_lease(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value > MAX_LEASE_SECONDS:
        raise ValueError(f"{attribute.name} must be at most {MAX_LEASE_SECONDS:g} s, got {value!r}")


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    _non_negative_int(instance, attribute, value)
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


def _delay_pair(value: object) -> tuple[float, float]:
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise TypeError("retry_delay must be a (base, cap) pair of seconds")
    base, cap = _seconds(value[0]), _seconds(value[1])
    if not (0 < base <= cap) or math.isinf(cap):
        raise ValueError(f"retry_delay must satisfy 0 < base <= cap < inf, got {value!r}")
    return (base, cap)


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _check_url(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"url must be a str, not {type(value).__name__}")
    scheme = urlsplit(value).scheme
    if scheme not in _SCHEMES:
        raise ValueError(
            f"url must start with one of {', '.join(s + '://' for s in _SCHEMES)}, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class TLS:
    """TLS settings for ``rediss://`` URLs. Certificates and host names are verified by default.

    Attributes:
        ca_certs: path of a CA bundle (PEM) to trust; ``None`` uses the system store.
        certfile: client certificate (PEM) for mutual TLS, or ``None``.
        keyfile: the client certificate's private key (PEM), or ``None``.
        verify: verify the server certificate (``"required"``); ``False`` disables it, for
            tests only.
        check_hostname: check that the certificate names the host.
    """

    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify: bool = True
    check_hostname: bool = True


@attrs.frozen(kw_only=True)
class SingleServer:
    """One Redis server.

    Attributes:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS) or
            ``unix:///path/to/socket[?db=N]``.
        username: ACL user name (overrides the URL's).
        password: password (overrides the URL's). Never shown in ``repr``.
        db: database number (overrides the URL's).
        tls: TLS options; used with ``rediss://``.
    """

    url: str = attrs.field(default="redis://127.0.0.1:6379", validator=_check_url, repr=redact)
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    db: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_non_negative_int)
    )
    tls: TLS = attrs.field(factory=TLS)

    def __attrs_post_init__(self) -> None:
        if urlsplit(self.url).scheme == "rediss" and not isinstance(self.tls, TLS):
            raise TypeError("tls must be a syncprims.TLS")

    def redacted_url(self) -> str:
        """The URL with any password replaced by ``***`` (for logs and messages)."""
        return redact(self.url)


def _node_urls(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"give a list of URLs, not {type(value).__name__}")
    urls = tuple(value)
    if not urls:
        raise ValueError("at least one node URL is needed")
    for url in urls:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss"):
            raise ValueError(f"node URLs must be redis:// or rediss:// URLs, got {url!r}")
    return urls


@attrs.frozen(kw_only=True)
class ClusterServers:
    """A Redis Cluster, reached through any of its nodes.

    Attributes:
        nodes: seed node URLs (``redis://host:port`` or ``rediss://``); the others are
            discovered with ``CLUSTER SLOTS``.
        username, password: ACL credentials for every node (override the URLs').
        tls: TLS options, used with ``rediss://`` seeds.
    """

    nodes: tuple[str, ...] = attrs.field(converter=_node_urls)
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    tls: TLS = attrs.field(factory=TLS)

    def redacted_url(self) -> str:
        """``redis+cluster://host:port,...`` without passwords."""
        hosts = ",".join(urlsplit(url).netloc.rsplit("@", 1)[-1] for url in self.nodes)
        return f"redis+cluster://{hosts}"


@attrs.frozen(kw_only=True)
class SentinelServers:
    """A master and its replicas managed by Redis Sentinel.

    Attributes:
        master_name: the name the sentinels know the master by.
        sentinels: sentinel URLs (``redis://host:port``).
        username, password: ACL credentials of the master (not of the sentinels).
        sentinel_password: the sentinels' password, if they have one.
        db: database number.
        tls: TLS options for the master and its replicas.
    """

    master_name: str
    sentinels: tuple[str, ...] = attrs.field(converter=_node_urls)
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    sentinel_password: str | None = attrs.field(default=None, repr=False)
    db: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_non_negative_int)
    )
    tls: TLS = attrs.field(factory=TLS)

    def redacted_url(self) -> str:
        """``redis+sentinel://host:port,.../master_name`` without passwords."""
        hosts = ",".join(urlsplit(url).netloc.rsplit("@", 1)[-1] for url in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.master_name}"


Servers = SingleServer | ClusterServers | SentinelServers


def parse_url(url: str) -> Servers:
    """Where Redis is, from a URL.

    ``redis://`` / ``rediss://`` / ``unix://``: one server. ``redis+cluster://h1:p1,h2:p2``
    (or ``rediss+cluster://``): a cluster, seeded by those nodes. ``redis+sentinel://h1:p1,
    h2:p2/master_name`` (or ``rediss+sentinel://``): a sentinel-managed master; a password
    in the URL is the master's.

    Raises:
        ValueError: an unknown scheme, or a cluster/sentinel URL without hosts.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme in ("redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"):
        base = parts.scheme.split("+")[0]
        credentials, _, hosts = parts.netloc.rpartition("@")
        if not hosts:
            raise ValueError(f"no hosts in {redact(url)!r}")
        auth = f"{credentials}@" if credentials else ""
        urls = tuple(f"{base}://{auth}{host}" for host in hosts.split(","))
        if parts.scheme.endswith("+cluster"):
            return ClusterServers(nodes=urls)
        master = parts.path.strip("/")
        if not master:
            raise ValueError(f"a sentinel URL needs the master name as its path: {redact(url)!r}")
        sentinels = tuple(f"{base}://{host}" for host in hosts.split(","))
        return SentinelServers(
            master_name=master,
            sentinels=sentinels,
            username=parts.username or None,
            password=parts.password,
        )
    return SingleServer(url=url)


@attrs.frozen(kw_only=True)
class Config:
    """Everything a client needs: where Redis is, and how locks and waits behave.

    Build one with :meth:`single_server` (or construct it directly); a bad value raises
    ``ValueError``/``TypeError`` here.

    Attributes:
        server: where Redis is.
        lock_watchdog_timeout: the lease, seconds, of a lock taken without ``lease_time``;
            the watchdog renews it every third of this while it is held (Redisson
            ``lockWatchdogTimeout``, default 30 s).
        watchdog_batch_size: most locks renewed by one script call (Redisson
            ``lockWatchdogBatchSize``).
        timeout: the longest wait, seconds, for one reply from Redis; a command whose reply
            does not come in time fails with ``RedisTimeoutError``.
        connect_timeout: the longest wait, seconds, to open a connection.
        retry_attempts: how many times an operation is retried after a connection error or
            timeout (Redisson ``retryAttempts``, 4). Idempotent operations (reads, unlock,
            renewals) are retried after any such error; acquire scripts only when they
            certainly did not reach Redis, never after they may have run.
        retry_delay: the back-off between retries, seconds: equal jitter growing from
            ``retry_delay[0]`` up to ``retry_delay[1]`` (Redisson ``EqualJitterDelay``
            1..2 s); the defaults ride out about 1.5 s of unavailability.
        subscription_timeout: the longest wait, seconds, for Redis to confirm a pub/sub
            subscription (Redisson ``subscriptionTimeout``).
        wait_recheck_interval: the longest a waiter sleeps, seconds, before it re-checks
            the lock even without a pub/sub message (a lost message cannot stall it longer).
        fair_lock_wait_timeout: a fair-lock waiter's slot, seconds (Redisson
            ``fairLockWaitTimeout``).
        max_connections: most command connections per client and event loop; ``None`` for
            no limit. When the limit is reached a command waits up to ``timeout``.
        client_name: sent with ``CLIENT SETNAME`` on every connection, or ``None``.
        lock_synced_replicas: after each lock acquisition, wait (``WAIT``) until this many
            replicas have the lock; if fewer acknowledge within ``replica_sync_timeout``, the
            acquisition is undone and ``ReplicaSyncError`` raised (Redisson
            ``checkLockSyncedSlaves``). 0 (default): do not wait. It narrows, but cannot
            close, the window in which a failover loses a granted lock (replication stays
            asynchronous). It costs one more round trip per acquisition.
        replica_sync_timeout: seconds to wait for those replicas (Redisson
            ``slavesSyncTimeout``, 1 s).
    """

    server: Servers = attrs.field(factory=SingleServer)
    lock_watchdog_timeout: float = attrs.field(
        default=30.0, converter=_seconds, validator=[_positive, _at_most_max_lease]
    )
    watchdog_batch_size: int = attrs.field(default=100, validator=_positive_int)
    timeout: float = attrs.field(default=3.0, converter=_seconds, validator=_positive)
    connect_timeout: float = attrs.field(default=5.0, converter=_seconds, validator=_positive)
    retry_attempts: int = attrs.field(default=4, validator=_non_negative_int)
    retry_delay: tuple[float, float] = attrs.field(default=(0.1, 2.0), converter=_delay_pair)
    subscription_timeout: float = attrs.field(default=7.5, converter=_seconds, validator=_positive)
    wait_recheck_interval: float = attrs.field(default=5.0, converter=_seconds, validator=_positive)
    fair_lock_wait_timeout: float = attrs.field(
        default=300.0, converter=_seconds, validator=_positive
    )
    max_connections: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive_int)
    )
    client_name: str | None = None
    lock_synced_replicas: int = attrs.field(default=0, validator=_non_negative_int)
    replica_sync_timeout: float = attrs.field(default=1.0, converter=_seconds, validator=_positive)

    @classmethod
    def single_server(
        cls,
        url: str = "redis://127.0.0.1:6379",
        *,
        username: str | None = None,
        password: str | None = None,
        db: int | None = None,
        tls: TLS | None = None,
        **options: Any,
    ) -> Config:
        """A configuration for one Redis server.

        Args:
            url: see :class:`SingleServer`.
            username: ACL user name; overrides the URL's.
            password: password; overrides the URL's.
            db: database number; overrides the URL's.
            tls: TLS options for ``rediss://`` URLs.
            **options: any other :class:`Config` attribute (``lock_watchdog_timeout=10``...).

        Raises:
            ValueError, TypeError: a bad value.
        """
        server = SingleServer(
            url=url, username=username, password=password, db=db, tls=tls or TLS()
        )
        return cls(server=server, **options)

    @property
    def watchdog_period(self) -> float:
        """Seconds between two renewals of a held lock: a third of the watchdog timeout."""
        return self.lock_watchdog_timeout / 3

    @property
    def operation_timeout(self) -> float:
        """The longest one operation can take, seconds, retries included.

        Each attempt waits at most ``connect_timeout + timeout``, and at most
        ``retry_delay[1]`` separates two attempts: ``(connect_timeout + timeout +
        retry_delay[1]) * (retry_attempts + 1)``. No retry starts that could end later. (A
        wait, as in ``lock()`` or ``try_lock(wait_time=...)``, is bounded by its wait time,
        each Redis call within it by this.)
        """
        per_attempt = self.connect_timeout + self.timeout + self.retry_delay[1]
        return per_attempt * (self.retry_attempts + 1)

    @property
    def unlock_latch_ttl_ms(self) -> int:
        """How long an unlock's idempotency key lives, milliseconds.

        Longer than every retry of one unlock call can take (:attr:`operation_timeout`;
        Redisson: ``(timeout + retryDelay) * retryAttempts``).
        """
        return max(1, math.ceil(self.operation_timeout * 1000))

    @classmethod
    def cluster(
        cls,
        nodes: list[str] | tuple[str, ...],
        *,
        username: str | None = None,
        password: str | None = None,
        tls: TLS | None = None,
        **options: Any,
    ) -> Config:
        """A configuration for a Redis Cluster.

        Args:
            nodes: seed node URLs (``redis://host:port``); the others are discovered.
            username: ACL user name for every node.
            password: password for every node.
            tls: TLS options for ``rediss://`` seeds.
            **options: any other :class:`Config` attribute.

        Raises:
            ValueError, TypeError: a bad value.
        """
        servers = ClusterServers(
            nodes=nodes, username=username, password=password, tls=tls or TLS()
        )
        return cls(server=servers, **options)

    @classmethod
    def sentinel(
        cls,
        master_name: str,
        sentinels: list[str] | tuple[str, ...],
        *,
        username: str | None = None,
        password: str | None = None,
        sentinel_password: str | None = None,
        db: int | None = None,
        tls: TLS | None = None,
        **options: Any,
    ) -> Config:
        """A configuration for a sentinel-managed master.

        Args:
            master_name: the master's name at the sentinels.
            sentinels: sentinel URLs (``redis://host:port``).
            username: ACL user name of the master.
            password: password of the master.
            sentinel_password: password of the sentinels.
            db: database number.
            tls: TLS options for the master and replicas.
            **options: any other :class:`Config` attribute.

        Raises:
            ValueError, TypeError: a bad value.
        """
        servers = SentinelServers(
            master_name=master_name,
            sentinels=sentinels,
            username=username,
            password=password,
            sentinel_password=sentinel_password,
            db=db,
            tls=tls or TLS(),
        )
        return cls(server=servers, **options)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Config:
        """A configuration from any URL form of :func:`parse_url`, plus options.

        Raises:
            ValueError, TypeError: a bad URL or option.
        """
        servers = parse_url(url)
        overrides: dict[str, Any] = {
            k: options.pop(k) for k in ("username", "password", "tls") if k in options
        }
        if "db" in options and not isinstance(servers, ClusterServers):
            overrides["db"] = options.pop("db")
        if overrides:
            servers = attrs.evolve(servers, **{k: v for k, v in overrides.items() if v is not None})
        return cls(server=servers, **options)

    def describe(self) -> str:
        """A one-line description without secrets, for logs."""
        return self.server.redacted_url()
