"""Client ids, owner fields and request ids (Redisson ``ServiceManager``).

Pure: uses only the OS random source.
"""

from __future__ import annotations

import secrets
import uuid

__all__ = ["new_client_id", "new_request_id", "owner_field"]


def new_client_id() -> str:
    """A random UUID4 in canonical lowercase text (122 random bits)."""
    return str(uuid.uuid4())


def new_request_id() -> str:
    """16 random bytes as 32 lowercase hex characters (Redisson ``generateId``)."""
    return secrets.token_hex(16)


def owner_field(client_id: str, owner: int) -> str:
    """The hash field that names a lock owner: ``"<client uuid>:<owner id>"``."""
    return f"{client_id}:{owner}"
