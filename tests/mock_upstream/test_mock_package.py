"""The mock's package surface: ``from mock_upstream import ...`` names, loaded on first use."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import mock_upstream


def test_every_public_name_loads_from_the_module_it_is_written_in() -> None:
    assert mock_upstream.__all__ == sorted(mock_upstream._WHERE)
    for name, module in mock_upstream._WHERE.items():
        assert getattr(mock_upstream, name) is getattr(importlib.import_module(module), name)
    assert set(mock_upstream.__all__) <= set(dir(mock_upstream))


def test_type_checkers_see_the_names_that_load_at_run_time() -> None:
    source = Path(mock_upstream.__file__ or "").read_text()
    found = {
        alias.name: inner.module
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING"
        for inner in node.body
        if isinstance(inner, ast.ImportFrom)
        for alias in inner.names
    }
    assert found == mock_upstream._WHERE, (
        "mock_upstream/__init__.py's `if typing.TYPE_CHECKING:` block and `_WHERE` differ"
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'mock_upstream' has no attribute 'serve'"):
        mock_upstream.serve  # type: ignore[attr-defined]  # noqa: B018
