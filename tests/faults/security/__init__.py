"""Security: a least-privilege ACL user, failed authentication, TLS, unguessable owner ids,
and scripts that take every key from ``KEYS``.

The ACL rules in ``helpers`` (:data:`ACL_KEYS`, :data:`ACL_CHANNELS`, :data:`ACL_COMMANDS`) are the
smallest set found that lets every primitive work, waits included, for objects named
``app:...``; ``test_acl.test_least_privilege_user_runs_every_primitive`` proves both halves
(everything works, and Redis used every command granted). Replace ``app:`` by your own
prefix. Names that already hold a hash tag (``{app}:x``) derive other key names (see
``redisson-spec.md`` 1.1) and need other patterns.
"""
