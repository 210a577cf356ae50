"""The adapted build-its are the solutions' own code.

Notebooks 08, 09, 11 and 12 build parts that do not go into ``proxy.py`` (an adapter, a turn's
accumulator, a reconciled bill, a validation buffer); ``solutions/`` holds the same parts as
modules, which ``tests/solutions/`` runs over real sockets against the real mock, uvicorn and
SDKs. Each notebook function and its module function are compared as code: their syntax trees
must be equal once docstrings and type annotations are dropped (the module is typed for mypy,
the notebook is not; neither changes what the code does). So the behavioural tests of a module
are tests of the notebook's code too, and fixing one side without the other fails here.

A learner's copy of these cells is stubbed (``labkit student``); the instructor copy, the one
compared here, is what the stored outputs were executed with.
"""

from __future__ import annotations

import ast
import copy
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from solutions import billing

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
SOLUTIONS = ROOT / "solutions"


@dataclass(frozen=True)
class Tie:
    """A notebook and the module that holds its build-it code: the functions and classes that
    must be the same code, the literal tables that must hold the same values, and a one-line
    change on each side that the comparison must catch (``(old, new)`` in that definition)."""

    notebook: str
    module: str
    names: tuple[str, ...]
    constants: tuple[str, ...]
    notebook_mutation: tuple[str, str, str]  # (definition, old, new)
    module_mutation: tuple[str, str, str]


TIES = [
    Tie(
        "08_providers_and_normalisation",
        "responses_adapter",
        ("chunk", "responses_usage", "responses_to_chat"),
        ("INCOMPLETE",),
        ("responses_to_chat", '"content_filter" if', '"stop" if'),
        ("responses_usage", '"total_tokens": usage["input_tokens"] +', '"total_tokens": 0 +'),
    ),
    Tie(
        "08_providers_and_normalisation",
        "anthropic_adapter",
        ("to_openai",),
        ("FINISH",),
        ("to_openai", "+ cached + written", "+ cached"),
        ("to_openai", "FINISH.get(reason, reason)", 'FINISH.get(reason, "stop")'),
    ),
    Tie(
        "09_tool_calls_and_partial_json",
        "accumulate",
        ("accumulate_blocks", "blocks"),
        ("PAYLOAD",),
        ("accumulate_blocks", 'buffers.get(key, "") +', '"" +'),
        ("blocks", '"name": start["name"]', '"name": start["type"]'),
    ),
    Tie(
        "11_metrics_billing_and_retries",
        "billing",
        ("reconciled_bill",),
        (),
        ("reconciled_bill", 'record["tokens_generated"]), "provider"', '0), "provider"'),
        ("reconciled_bill", "< 400}", "< 500}"),
    ),
    Tie(
        "11_metrics_billing_and_retries",
        "retries",
        ("gateway_error", "retry_after_s", "open_upstream"),
        ("CHAT", "RETRYABLE", "MAX_ATTEMPTS", "RETRY_BUDGET_S"),
        ("open_upstream", "return gateway_error(504, exc)", "return gateway_error(502, exc)"),
        ("retry_after_s", "max(0.0, ", "abs("),
    ),
    Tie(
        "12_client_states_and_release",
        "release",
        ("validate", "BySentence"),
        (),
        ("BySentence", "if self.rejected or not rest:", "if not rest:"),
        ("BySentence", 'self.held.endswith(".")', 'self.held.endswith("!")'),
    ),
]
IDS = [f"{tie.notebook[:2]}-{tie.module}" for tie in TIES]

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign


class _Normalise(ast.NodeTransformer):
    """Drop what does not change behaviour: docstrings and type annotations."""

    def _body(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> ast.AST:
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            node.body = node.body[1:] or [ast.Pass()]
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self._body(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        node.returns = None
        return self._body(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self._body(node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None  # a bare declaration: no code
        return ast.Assign(targets=[node.target], value=self.visit(node.value), lineno=0)


def normalised(node: ast.AST) -> str:
    return ast.dump(_Normalise().visit(copy.deepcopy(node)), include_attributes=False)


def _target(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def definitions(sources: list[str], where: str) -> dict[str, list[ast.stmt]]:
    """Every top-level definition in ``sources`` (a module's text, or a notebook's code cells),
    by name; a cell that starts with a magic is not Python and is skipped."""
    found: dict[str, list[ast.stmt]] = {}
    for source in sources:
        if source.lstrip().startswith("%"):
            continue
        for node in ast.parse(source, filename=where).body:
            name = _target(node)
            if name is not None:
                found.setdefault(name, []).append(node)
    return found


def notebook_sources(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def differences(tie: Tie, notebook: list[str], module: str) -> list[str]:
    """What differs between the notebook's code cells and the module's text, name by name."""
    ours = definitions(notebook, tie.notebook)
    theirs = definitions([module], f"solutions/{tie.module}.py")
    problems = []
    for name in (*tie.names, *tie.constants):
        if len(ours.get(name, [])) != 1 or len(theirs.get(name, [])) != 1:
            problems.append(
                f"{name}: defined {len(ours.get(name, []))} time(s) in notebook {tie.notebook} "
                f"and {len(theirs.get(name, []))} in solutions/{tie.module}.py; expected once in "
                "each"
            )
            continue
        mine, reference = ours[name][0], theirs[name][0]
        if name in tie.constants:
            assert isinstance(mine, ast.Assign | ast.AnnAssign) and mine.value is not None
            assert isinstance(reference, ast.Assign | ast.AnnAssign) and reference.value
            same = ast.literal_eval(mine.value) == ast.literal_eval(reference.value)
        else:
            same = normalised(mine) == normalised(reference)
        if not same:
            problems.append(
                f"{name}: notebook {tie.notebook} and solutions/{tie.module}.py differ. Make "
                "them the same code (docstrings and type hints may differ), run "
                f"tests/solutions/, and re-execute the notebook."
            )
    return problems


def _module_text(tie: Tie) -> str:
    return (SOLUTIONS / f"{tie.module}.py").read_text()


@pytest.mark.parametrize("tie", TIES, ids=IDS)
def test_the_notebooks_build_it_code_is_the_modules_code(tie: Tie) -> None:
    problems = differences(
        tie, notebook_sources(NOTEBOOK_DIR / f"{tie.notebook}.ipynb"), _module_text(tie)
    )
    assert not problems, "\n".join(problems)


def _mutate(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"the mutation's text {old!r} is not in the source once"
    return source.replace(old, new)


@pytest.mark.parametrize("tie", TIES, ids=IDS)
def test_a_one_line_change_in_the_notebook_alone_is_caught(tie: Tie, tmp_path: Path) -> None:
    """Mutate a copy of the notebook (the build-it cell's instructor code): the tie breaks."""
    copy_path = tmp_path / f"{tie.notebook}.ipynb"
    shutil.copyfile(NOTEBOOK_DIR / f"{tie.notebook}.ipynb", copy_path)
    nb = nbformat.read(copy_path, as_version=4)
    name, old, new = tie.notebook_mutation
    [cell] = [
        c
        for c in nb.cells
        if c.cell_type == "code"
        and not c.source.lstrip().startswith("%")
        and name in definitions([c.source], tie.notebook)
    ]
    cell.source = _mutate(cell.source, old, new)
    nbformat.write(nb, copy_path)
    problems = differences(tie, notebook_sources(copy_path), _module_text(tie))
    assert [p.split(":")[0] for p in problems] == [name]


@pytest.mark.parametrize("tie", TIES, ids=IDS)
def test_a_one_line_change_in_the_module_alone_is_caught(tie: Tie, tmp_path: Path) -> None:
    """Mutate a copy of the module: the tie breaks, and only for that definition."""
    name, old, new = tie.module_mutation
    mutated = tmp_path / f"{tie.module}.py"
    mutated.write_text(_mutate(_module_text(tie), old, new))
    notebook = notebook_sources(NOTEBOOK_DIR / f"{tie.notebook}.ipynb")
    problems = differences(tie, notebook, mutated.read_text())
    assert [p.split(":")[0] for p in problems] == [name]


def test_the_notebooks_prices_are_the_modules() -> None:
    """Notebook 11's ``reconciled_bill`` reads its own ``PRICES``: each of its models costs
    what the module's table says."""
    [cell] = [
        s
        for s in notebook_sources(NOTEBOOK_DIR / "11_metrics_billing_and_retries.ipynb")
        if "def reconciled_bill" in s
    ]
    [prices] = definitions([cell], "11")["PRICES"]
    assert isinstance(prices, ast.Assign)
    table = ast.literal_eval(prices.value)
    assert table and {model: dict(billing.PRICES[model]) for model in table} == table


def test_docstrings_and_type_hints_do_not_count_and_code_does() -> None:
    typed = ast.parse(
        'def f(x: int, y: str = "a") -> list[str]:\n'
        '    """Doc."""\n'
        "    out: list[str] = []\n"
        "    return out + [y] * x\n"
    ).body[0]
    plain = ast.parse('def f(x, y="a"):\n    out = []\n    return out + [y] * x\n').body[0]
    changed = ast.parse('def f(x, y="b"):\n    out = []\n    return out + [y] * x\n').body[0]
    assert normalised(typed) == normalised(plain) != normalised(changed)
