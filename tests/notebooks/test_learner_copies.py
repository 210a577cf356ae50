"""Learner copies: solutions gone, outputs cleared, and the checks fail helpfully until written.

The committed notebooks are the instructor copies. ``labkit student`` writes the learner bundle:
each solution region becomes a stub, in the notebooks and in the bundle's ``proxy.py``. Executed
top to bottom in the bundle (where ``find_proxy()`` finds the stubbed ``proxy.py``), a learner
copy must reach its check cells and show a verdict (``FAIL ...``) or the stub's own message, never
a ``NameError`` or some other traceback. In the instructor copies the stored check outputs pass
(nbval re-runs them; here we read what is committed).

A check cell is a code cell tagged ``check``; in a notebook without such tags, any cell that calls
``run_checks(proxy.url, ...)``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from labkit.student import BEGIN, END, make_bundle

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 60
CHECK_TAG = "check"
FALLBACK_CALL = "run_checks(proxy.url"


def _check_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    tagged = [cell for cell in code if CHECK_TAG in cell.metadata.get("tags", [])]
    return tagged or [cell for cell in code if FALLBACK_CALL in cell.source]


def _text(cell: nbformat.NotebookNode) -> str:
    """Everything a cell showed: streams, results, and errors with their tracebacks."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(str(output.get("data", {}).get("text/plain", "")))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}\n" + "\n".join(output.traceback))
    return "\n".join(parts)


def _errors(cell: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [o for o in cell.get("outputs", []) if o.output_type == "error"]


def _ids(paths: list[Path]) -> list[str]:
    return [path.stem for path in paths]


@pytest.fixture(scope="module")
def learner_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The learner notebooks, inside a learner bundle (``../proxy.py`` is the stubbed one)."""
    out = tmp_path_factory.mktemp("student") / "bundle"
    make_bundle(NOTEBOOK_DIR, ROOT / "solutions" / "proxy.py", out)
    return out / "notebooks"


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no NN_topic.ipynb notebooks in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("source", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_learner_copy_has_no_solutions_and_no_outputs(source: Path, learner_dir: Path) -> None:
    learner = nbformat.read(learner_dir / source.name, as_version=4)
    for number, cell in enumerate(learner.cells):
        assert BEGIN not in cell.source and END not in cell.source, f"cell {number}: solution left"
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {number} still has outputs"
            assert cell.execution_count is None, f"cell {number} still has an execution count"


@pytest.mark.parametrize("source", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_solution_notebook_stored_checks_pass(source: Path) -> None:
    checks = _check_cells(nbformat.read(source, as_version=4))
    if not checks:
        pytest.skip(f"{source.name} has no check cell (tag it '{CHECK_TAG}')")
    for cell in checks:
        shown = _text(cell)
        verdicts = [line for line in shown.splitlines() if line.startswith(("PASS", "FAIL"))]
        assert verdicts, f"{source.name}: a check cell shows no verdict:\n{shown}"
        assert all(line.startswith("PASS") for line in verdicts), f"{source.name}:\n{shown}"
        assert not _errors(cell), f"{source.name}: a check cell raised:\n{shown}"


@pytest.mark.slow
@pytest.mark.parametrize("source", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_learner_copy_check_cells_fail_helpfully(
    source: Path, learner_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAB_PROXY", raising=False)
    path = learner_dir / source.name
    learner = nbformat.read(path, as_version=4)
    if not _check_cells(learner):
        pytest.skip(f"{source.name} has no check cell (tag it '{CHECK_TAG}')")
    client = NotebookClient(
        learner,
        timeout=CELL_TIMEOUT_S,
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(learner_dir)}},
    )
    client.execute()

    for cell in _check_cells(learner):
        shown = _text(cell)
        assert not _errors(cell), (
            f"{source.name}: a check cell raised instead of showing a verdict:\n{shown}"
        )
        verdicts = [line for line in shown.splitlines() if line.startswith(("PASS", "FAIL"))]
        assert verdicts, f"{source.name}: a check cell shows no verdict:\n{shown}"
    fails = [
        line
        for cell in _check_cells(learner)
        for line in _text(cell).splitlines()
        if line.startswith("FAIL")
    ]
    assert any("not written yet" in line for line in fails), (
        f"{source.name}: no check cell names a part that is not written yet:\n" + "\n".join(fails)
    )
