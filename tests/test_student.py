"""Learner copies: solution regions become stubs, outputs are cleared."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from labkit.cli import main
from labkit.student import SolutionRegionError, make_student_copies, strip_solutions

ROUTE = """\
async def forward(request):
    body = await request.json()
    ### BEGIN SOLUTION
    return await relay(body)
    ### END SOLUTION
"""


def test_code_region_becomes_a_stub_at_the_region_indentation() -> None:
    source, regions = strip_solutions(ROUTE, kind="code", notebook="02_forwarding_proxy.ipynb")
    assert regions == 1
    assert "relay" not in source
    assert "    # YOUR CODE HERE\n    raise NotImplementedError(" in source
    assert "02_forwarding_proxy.ipynb" in source
    compile(source, "<cell>", "exec")  # the stub keeps the cell valid Python


def test_markdown_answer_becomes_a_prompt() -> None:
    source, regions = strip_solutions(
        "**Answer.**\n### BEGIN SOLUTION\nBecause zlib holds it.\n### END SOLUTION",
        kind="markdown",
    )
    assert regions == 1
    assert source == "**Answer.**\n_Write your answer here._"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("### BEGIN SOLUTION\nx = 1\n", "a solution region is never closed"),
        ("x = 1\n### END SOLUTION\n", "line 2 closes a solution region that was never opened"),
        (
            "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION",
            "line 2 opens a solution region inside another one",
        ),
    ],
)
def test_unpaired_delimiters_are_reported_with_the_line(source: str, message: str) -> None:
    with pytest.raises(SolutionRegionError, match=message):
        strip_solutions(source, kind="code", notebook="nb.ipynb")


def test_student_copies_clear_outputs_and_keep_other_cells(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell(ROUTE, execution_count=3)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), code]
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(nb, src / "02_forwarding_proxy.ipynb")

    (copy,) = make_student_copies(src, tmp_path / "out")

    assert copy.regions == 1
    learner = nbformat.read(copy.target, as_version=4)
    assert learner.cells[0].source == "# Title"
    assert learner.cells[1].outputs == []
    assert learner.cells[1].execution_count is None
    assert "NotImplementedError" in learner.cells[1].source


def test_student_command_writes_copies_and_names_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "notebooks"
    src.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(ROUTE)]
    nbformat.write(nb, src / "02_forwarding_proxy.ipynb")

    assert main(["student", str(src), "--out", str(tmp_path / "student")]) == 0

    out = capsys.readouterr().out
    assert "02_forwarding_proxy.ipynb  (1 solution regions stubbed)" in out
    assert (tmp_path / "student" / "02_forwarding_proxy.ipynb").exists()


def test_student_command_refuses_to_overwrite_the_instructor_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["student", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "would overwrite the solutions" in capsys.readouterr().err


def test_student_command_says_what_to_pass_when_the_folder_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["student", str(tmp_path / "nope"), "--out", str(tmp_path / "s")]) == 2
    assert "pass the folder that holds the instructor notebooks" in capsys.readouterr().err
