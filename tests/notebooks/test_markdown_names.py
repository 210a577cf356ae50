"""The names a notebook's prose puts in backticks exist in the code the learner runs.

Bug: the backpressure notebook's deliverable (then 09) asked for `bounded_relay`, a function no
notebook defined (the function was `relay`); prose and code had drifted apart and nothing
noticed. Fix: two rules over every inline code span of every Markdown cell (fenced blocks,
such as diagrams, are left out):

* a call, `name(...)` with no dot before the name, must name something this notebook's code
  binds (a def, class, import, assignment or parameter) or calls as a method, a function of the
  proxy the notebooks grow (``solutions/proxy.py``), a public ``labkit`` name or a builtin; the
  code includes the fenced ```python blocks of the Markdown (a worked solution may define a
  function and then call it in the prose);
* a bare snake_case name, `like_this`, must occur somewhere: in this notebook's code or outputs,
  in ``labkit``, ``mock_upstream`` or ``solutions/proxy.py``, or in ``OTHER_SYSTEMS`` below (names
  that belong to nginx, vLLM or httpx, which the prose names on purpose).

Dotted names (`client.send(...)`) are not checked: their first part says where they come from.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import labkit

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PROXY = ROOT / "solutions" / "proxy.py"

INLINE_CODE = re.compile(r"`([^`\n]+)`")
FENCED_BLOCK = re.compile(r"```.*?```", re.DOTALL)
FENCED_PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)
CALL = re.compile(r"^([A-Za-z_]\w*)\(.*\)$")
SNAKE_CASE = re.compile(r"^[a-z_][a-z0-9]*(?:_[a-z0-9]+)+$")
WORD = re.compile(r"[A-Za-z_]\w*")

#: Names of other systems that the prose names on purpose, each with whose it is.
OTHER_SYSTEMS = {
    "num_requests_running": "vLLM's gauge of running requests",
    "proxy_buffers": "an nginx directive",
    "proxy_cache": "an nginx directive",
    "send_timeout": "an nginx directive",
    "max_keepalive_connections": "an httpx.Limits argument",
    "mock_tokens_generated_total": "the mock's counter as Prometheus exposes it (_total added)",
    "estimated_completion_tokens": "a log field that exercise 2 of notebook 05 asks for",
}


def _code(source: str) -> str:
    """A code cell's Python: IPython magics and shell lines blanked, line numbers kept."""
    lines = source.split("\n")
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def _bound(tree: ast.AST) -> set[str]:
    """Names a cell defines, imports, assigns, takes as a parameter or uses as an attribute."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def _source(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else str(source)


def _outputs(cell: dict[str, Any]) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        parts.append("".join(output.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def _project_words() -> set[str]:
    files = [*ROOT.joinpath("labkit").rglob("*.py"), *ROOT.joinpath("mock_upstream").glob("*.py")]
    return {word for path in [*files, PROXY] for word in WORD.findall(path.read_text())}


def _proxy_functions() -> set[str]:
    tree = ast.parse(PROXY.read_text())
    kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    return {node.name for node in tree.body if isinstance(node, kinds)}


def unknown_names(nb: dict[str, Any], *, reachable: set[str], known_words: set[str]) -> list[str]:
    """What the notebook's Markdown names in backticks that its code cannot account for."""
    defined: set[str] = set()
    seen: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        code = _code(_source(cell))
        flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        defined |= _bound(compile(code, "<cell>", "exec", flags=flags))
        seen.update(WORD.findall(code + "\n" + _outputs(cell)))
    prose = "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    for block in FENCED_PYTHON.findall(prose):
        defined |= _bound(ast.parse(textwrap.dedent(block)))
    problems = []
    for span in INLINE_CODE.findall(FENCED_BLOCK.sub("", prose)):
        span = span.strip()
        if call := CALL.match(span):
            name = call[1]
            if name not in defined and name not in reachable and not hasattr(builtins, name):
                problems.append(f"`{span}` calls {name}, which this notebook's code never defines")
        elif SNAKE_CASE.match(span):
            if span not in seen and span not in known_words and span not in OTHER_SYSTEMS:
                problems.append(f"`{span}` is named nowhere in this notebook's code or the lab")
    return problems


@pytest.fixture(scope="module")
def reachable() -> set[str]:
    return _proxy_functions() | set(labkit.__all__)


@pytest.fixture(scope="module")
def known_words() -> set[str]:
    return _project_words()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_markdown_names_only_what_the_code_defines(
    path: Path, reachable: set[str], known_words: set[str]
) -> None:
    nb = json.loads(path.read_text())
    problems = unknown_names(nb, reachable=reachable, known_words=known_words)
    assert not problems, (
        f"{path.name}: the prose names what its code does not have. Rename it in the Markdown "
        "to what the code defines (or, for another system's name, add it to OTHER_SYSTEMS "
        "with whose it is):\n  " + "\n  ".join(problems)
    )


def _notebook(markdown: str, code: str) -> dict[str, Any]:
    return {
        "cells": [
            {"cell_type": "markdown", "source": markdown},
            {"cell_type": "code", "source": code, "outputs": []},
        ]
    }


def test_a_deliverable_that_names_a_function_nobody_wrote_is_caught() -> None:
    nb = _notebook(
        "Hand in `bounded_relay` and call `bounded_relay(queue)`; `relay(x)` is fine.",
        "%%proxy_part\nasync def relay(queue):\n    return await queue.get()\n",
    )
    assert unknown_names(nb, reachable=set(), known_words=set()) == [
        "`bounded_relay` is named nowhere in this notebook's code or the lab",
        "`bounded_relay(queue)` calls bounded_relay, which this notebook's code never defines",
    ]


def test_a_function_defined_in_a_worked_solution_may_be_called_in_the_prose() -> None:
    nb = _notebook("```python\ndef parse(body):\n    return body\n```\nThen `parse(raw)`.", "")
    assert unknown_names(nb, reachable=set(), known_words=set()) == []


def test_methods_fields_and_diagrams_are_not_mistaken_for_functions() -> None:
    nb = _notebook(
        "Leave with `response.aclose()` or `close()`; read `finish_reason`.\n"
        '```mermaid\nflowchart LR\n  a["made_up_name()"] --> b\n```',
        'response.close()\nreason = chunk["finish_reason"]\n',
    )
    assert unknown_names(nb, reachable=set(), known_words=set()) == []
