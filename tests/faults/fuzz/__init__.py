"""Bad input to every public primitive: a typed error and nothing written, or a documented result.

Every call runs against a dedicated ``redis-server`` (one for the package, flushed before each
example, so nothing else writes there). Each hypothesis example builds a known state, takes a
full dump of the keyspace (type, value, TTL of every key), makes one call with generated
arguments and checks it against an oracle written from the documentation (``docs/errors.md``,
the docstrings): bad arguments raise exactly the builtin ``TypeError`` or ``ValueError`` and the
dump is unchanged; good ones give the documented result (a hold with the documented TTL, the
documented count...). Valid waits never block: the resource is free (or held by the caller)
whenever a generated wait is valid.

Both faces run the same bodies: the sync face's calls block inside the example's coroutine,
the asyncio face's are awaited in one task (one owner per example).

``test_limits`` pins inputs beyond the documented limits (leases and TTLs above
``MAX_LEASE_SECONDS``, counts above ``MAX_COUNT``, ints beyond any float, tiny MultiLock
leases): this fuzz found each accepted and then corrupting Redis or hanging; now each is
refused with ``ValueError`` and nothing written.
"""

# The package: helpers.py (driver, dumps, oracles, strategies), conftest.py (the server and
# the faces), one test module per theme (names, durations, counts, misuse, limits).
