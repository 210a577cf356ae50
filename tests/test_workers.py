"""How ``make test``'s workers are given the tests (tests/workers.py): the modules that hold a
slow test go first, and nothing else moves."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from tests import workers


@dataclass
class FakeItem:
    path: Path
    name: str
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_modules_with_a_slow_test_are_dealt_first_and_keep_their_order() -> None:
    quick, slow, quick_too = Path("a.py"), Path("b.py"), Path("c.py")
    fakes = [
        FakeItem(quick, "a1"),
        FakeItem(slow, "b1"),
        FakeItem(slow, "b2", {workers.SLOW}),
        FakeItem(quick_too, "c1"),
        FakeItem(quick, "a2"),
    ]
    items = cast(list[pytest.Item], fakes)
    workers.slow_modules_first(items)
    assert [cast(FakeItem, item).name for item in items] == ["b1", "b2", "a1", "c1", "a2"]
