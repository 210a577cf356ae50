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

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import labkit.errors
import labkit.proxy_file  # its errors (ProxyFileError) are the lab's own too
from labkit.student import BEGIN, END, make_bundle

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 60


def _subclasses(cls: type) -> set[str]:
    return {cls.__name__}.union(*(_subclasses(sub) for sub in cls.__subclasses__()))


LAB_ERRORS = _subclasses(labkit.errors.LabkitError)
NAMES_NOTEBOOK = re.compile(r"notebook \d\d_\w+")
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


def error_names_its_part(ename: str, evalue: str) -> bool:
    """What a learner may meet before writing a part: the part's own stub, or the lab's own
    error, in either case naming the notebook to go to."""
    ours = ename == "NotImplementedError" or ename in LAB_ERRORS
    return ours and NAMES_NOTEBOOK.search(evalue) is not None


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
@pytest.mark.sockets
def test_learner_copy_runs_to_its_checks_with_errors_that_name_their_part(
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

    for number, cell in enumerate(learner.cells):
        for error in _errors(cell):
            assert error_names_its_part(error.ename, error.evalue), (
                f"{source.name}, cell {number}: with nothing written, a learner meets "
                f"{error.ename}: {error.evalue}\nAn error before the learner writes a part must "
                "be the part's NotImplementedError (or the lab's own error) naming the part and "
                "its notebook; a cell that needs an unwritten part says so in one line, and the "
                "cells after it do not fail because of it."
            )
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


def test_only_errors_that_name_a_part_and_its_notebook_are_allowed() -> None:
    stub = "Write this part yourself: relay, in notebook 04_cancel_on_disconnect."
    assert error_names_its_part("NotImplementedError", stub)
    assert error_names_its_part("ProxyFileError", "relay is not written yet (notebook 04_cancel)")
    assert not error_names_its_part("NameError", "name 'relay' is not defined")
    assert not error_names_its_part("NotImplementedError", "")
    assert not error_names_its_part(
        "TypeError", "Invalid type for url. Expected str or httpx.URL, got NoneType"
    )
