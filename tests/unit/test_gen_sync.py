"""The sync-face generator's token rules (scripts/gen_sync.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sync", ROOT / "scripts" / "gen_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_sync"] = module
    spec.loader.exec_module(module)
    return module


gen = _load()

SOURCE = '''from __future__ import annotations

from collections.abc import Awaitable, Callable

from syncprims._core.owners import current_task_owner as _owner
from syncprims.asyncio._objects import RObject


class Thing(RObject):
    """Owned by the current task."""

    async def lock(self) -> None:
        # a comment that stays
        await self._core.lock(_owner())  # and this one

    async def twice(self) -> None:
        await self.lock()

    # unasync: remove (asyncio only)
    @property
    async def only_async(self) -> Awaitable[int]:
        return await self._core.x()

    def wrap(self, f: Callable[[], Awaitable[int]]) -> None:
        pass
'''


def test_rewrite_keeps_comments_and_applies_the_rules() -> None:
    fired: Counter[str] = Counter()
    text = gen.rewrite(gen.remove_marked(SOURCE, fired), fired)
    text = gen.tidy_imports(text, uses_run=True)
    assert "# a comment that stays" in text and "# and this one" in text
    assert "_run(self._core.lock(_owner()))" in text
    assert "        self.lock()\n" in text
    assert "only_async" not in text and "unasync" not in text
    assert "Callable[[], int]" in text
    assert "from collections.abc import Callable\n" in text  # Awaitable is unused now
    assert "current_thread_owner as _owner" in text
    assert "from syncprims._sync._objects import RObject" in text
    assert "the current thread" in text
    assert "async" not in text and "await" not in text
    assert text.index("stepping import run as _run") < text.index("syncprims._sync._objects")
    assert fired[gen.REMOVE_MARKER] == 1
    assert fired["await -> _run"] == 1
    assert fired["await -> call"] == 1


def test_every_rule_fires_on_the_real_face() -> None:
    fired: Counter[str] = Counter()
    for path in sorted(gen.SOURCE.glob(gen.PATTERN)):
        gen.generate(path, fired)
    assert [rule for rule in gen.rules() if not fired[rule]] == []


def test_a_rule_that_never_fires_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gen, "PHRASES", [*gen.PHRASES, ("no such phrase anywhere", "x")])
    monkeypatch.setattr(sys, "argv", ["gen_sync.py", "--check"])
    assert gen.main() == 1
