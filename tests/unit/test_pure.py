"""Scripts, ids, stepping, errors and the generated sync face."""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import sys
from importlib import resources
from pathlib import Path

import pytest
import redis.exceptions

import syncprims
import syncprims.asyncio
from syncprims import errors
from syncprims._protocol import scripts
from syncprims._protocol.ids import new_client_id, new_request_id, owner_field
from syncprims._protocol.stepping import run
from tests import processes

ROOT = Path(__file__).resolve().parents[2]
LUA = sorted(p.name for p in resources.files("syncprims._protocol").joinpath("lua").iterdir())


@pytest.mark.parametrize("filename", LUA)
def test_every_script_names_its_keys_argv_and_reply(filename: str) -> None:
    source = resources.files("syncprims._protocol").joinpath("lua", filename).read_text("utf-8")
    if source.startswith("-- Included by"):
        return  # a helper spliced into scripts by `-- @include`
    header = "\n".join(line for line in source.splitlines() if line.startswith("--"))
    assert source.startswith("--")
    assert "KEYS[" in header and "Reply" in header
    for argv in set(re.findall(r"ARGV\[(\d+)\]", source.split("\n", 1)[1])):
        if "ARGV[i" not in header:
            assert f"ARGV[{argv}]" in header, f"{filename}: ARGV[{argv}] is not described"


def test_script_sha_is_the_evalsha_digest() -> None:
    script = scripts.LOCK_ACQUIRE
    assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()


def test_ids() -> None:
    client = new_client_id()
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", client
    )
    assert re.fullmatch(r"[0-9a-f]{32}", new_request_id())
    assert new_request_id() != new_request_id()
    assert owner_field(client, 42) == f"{client}:42"


def test_stepping_returns_and_raises() -> None:
    async def ok() -> int:
        return 7

    async def boom() -> None:
        raise KeyError("x")

    assert run(ok()) == 7
    with pytest.raises(KeyError):
        run(boom())


def test_stepping_refuses_a_suspending_coroutine() -> None:
    import asyncio

    async def suspends() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="internal error"):
        run(suspends())


def test_error_tree() -> None:
    assert issubclass(errors.LockNotHeldError, errors.LockError)
    assert issubclass(errors.LockNotHeldError, RuntimeError)
    assert issubclass(errors.RedisTimeoutError, TimeoutError)
    assert issubclass(errors.RedisConnectionError, ConnectionError)
    assert issubclass(errors.ClientClosedError, RuntimeError)
    # Failures to reach Redis are also redis-py's own: ``except redis.RedisError`` catches them.
    assert issubclass(errors.RedisTimeoutError, redis.exceptions.TimeoutError)
    assert issubclass(errors.RedisConnectionError, redis.exceptions.ConnectionError)
    error = errors.RedisConnectionError("refused", maybe_executed=False)
    assert repr(error) == "RedisConnectionError('refused')"
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.SyncPrimsError)


def test_generated_sync_face_is_fresh() -> None:
    result = processes.run(
        [sys.executable, str(ROOT / "scripts" / "gen_sync.py"), "--check"], timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _public_methods(cls: type) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if callable(value) and (
                not name.startswith("_") or name in ("__enter__", "__aenter__")
            ):
                out.setdefault(name, list(inspect.signature(value).parameters))
    if "__enter__" in out:
        out["__aenter__"] = out.pop("__enter__")
    out.pop("hold_or_cancel", None)  # asyncio only: a thread cannot be cancelled
    out.pop("lead_or_cancel", None)  # the same, for a leader election
    return out


FACE_CLASSES = sorted(
    name
    for name in syncprims.__all__
    if isinstance(getattr(syncprims, name), type)
    and getattr(syncprims, name) is not getattr(syncprims.asyncio, name, None)
)
"""Every public class that each face defines for itself (errors and ``Config`` are shared)."""


def test_both_faces_export_the_same_names() -> None:
    assert set(syncprims.__all__) - {"__version__"} == set(syncprims.asyncio.__all__)
    assert len(FACE_CLASSES) >= 15


@pytest.mark.parametrize("name", FACE_CLASSES)
def test_both_faces_have_the_same_names_and_signatures(name: str) -> None:
    sync_cls, async_cls = getattr(syncprims, name), getattr(syncprims.asyncio, name)
    assert sync_cls.__module__.removeprefix(
        "syncprims._sync."
    ) == async_cls.__module__.removeprefix("syncprims.asyncio.")
    assert _public_methods(sync_cls) == _public_methods(async_cls)


def test_core_and_leaves_never_import_asyncio_directly() -> None:
    # The core awaits executor operations only; the leaves import neither asyncio nor redis.
    for folder, banned in (("_core", {"asyncio"}), ("_protocol", {"asyncio", "redis"})):
        for path in (ROOT / "syncprims" / folder).rglob("*.py"):
            if path.name == "owners.py":
                continue  # the asyncio face's owner capture reads the current task
            tree = ast.parse(path.read_text("utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = {node.module.split(".")[0]}
                else:
                    continue
                assert not names & banned, f"{path.name} imports {names & banned}"


def test_one_face_module_per_core_module() -> None:
    """``asyncio/_<name>.py`` (and the generated ``_sync/_<name>.py``) holds the classes of
    ``_core/<name>.py``; only the client and the decorator helper have no core module."""
    faces = {p.stem.removeprefix("_") for p in (ROOT / "syncprims" / "asyncio").glob("_[!_]*.py")}
    core = {p.stem for p in (ROOT / "syncprims" / "_core").glob("[!_]*.py")}
    core |= {p.parent.name for p in (ROOT / "syncprims" / "_core").glob("[!_]*/__init__.py")}
    assert faces - core == {"client", "decorate"}
    for name in faces:
        assert (ROOT / "syncprims" / "_sync" / f"_{name}.py").exists()


@pytest.mark.parametrize("name", FACE_CLASSES)
def test_leaf_classes_are_final(name: str) -> None:
    """A public class that no other public class extends is ``@final`` in both faces."""
    for face in (syncprims, syncprims.asyncio):
        cls = getattr(face, name)
        extended = any(cls in getattr(face, other).__mro__[1:] for other in FACE_CLASSES)
        assert getattr(cls, "__final__", False) is not extended, name
