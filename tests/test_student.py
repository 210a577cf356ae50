"""Solution regions become stubs; ``labkit student`` writes a learner bundle."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from labkit.cli import main
from labkit.regions import (
    PART_MAGIC,
    PART_MAGIC_NAME,
    SolutionRegionError,
    Unwritten,
    part_cell_body,
    regions,
    strip_solutions,
    unwritten,
)
from labkit.student import make_student_copies, part_cells

ROUTE = """\
async def forward(request):
    body = await request.json()
    ### BEGIN SOLUTION
    return await relay(body)
    ### END SOLUTION
"""

QUEUE = """\
def make_queue():
    \"\"\"The queue.\"\"\"
    ### BEGIN SOLUTION
    ### STAND-IN: return asyncio.Queue()
    return asyncio.Queue(maxsize=64)
    ### END SOLUTION
"""

BODY = """\
async def relay(upstream):
    ### BEGIN SOLUTION
    ### STAND-IN: async for piece in upstream.aiter_bytes():
    ### STAND-IN:     yield piece
    async for event in events(upstream):
        yield event
    ### END SOLUTION
"""


def test_code_region_becomes_a_stub_that_names_the_function_and_the_notebook() -> None:
    source, count = strip_solutions(ROUTE, kind="code", notebook="02_forwarding_proxy")
    assert count == 1
    assert "relay(body)" not in source
    assert "    # YOUR CODE HERE: forward, notebook 02_forwarding_proxy\n" in source
    assert (
        '    raise NotImplementedError("Write this part yourself: forward, in notebook '
        '02_forwarding_proxy.")'
    ) in source
    compile(source, "<cell>", "exec")  # the stub keeps the cell valid Python


def test_a_stand_in_replaces_the_region_and_keeps_its_indentation() -> None:
    source, _ = strip_solutions(QUEUE, kind="code", notebook="10_backpressure")
    assert "maxsize" not in source
    assert source.endswith(
        "    # YOUR CODE HERE: make_queue, notebook 10_backpressure. Until then, this stand-in "
        "runs:\n    return asyncio.Queue()\n"
    )
    body, _ = strip_solutions(BODY, kind="code", notebook="04_cancel")
    assert "    async for piece in upstream.aiter_bytes():\n        yield piece\n" in body
    assert "events(upstream)" not in body
    compile(body, "<cell>", "exec")


def test_regions_report_function_solution_and_stand_in() -> None:
    (region,) = regions(BODY)
    assert region.function == "relay"
    assert region.stand_in == ("async for piece in upstream.aiter_bytes():", "    yield piece")
    assert region.solution == ("    async for event in events(upstream):", "        yield event")


def test_unwritten_finds_the_stubs_again() -> None:
    stubbed = strip_solutions(ROUTE + "\n" + QUEUE, kind="code", notebook="02_x")[0]
    assert unwritten(stubbed) == [Unwritten("forward", "02_x"), Unwritten("make_queue", "02_x")]
    assert unwritten(ROUTE) == []


def test_an_owner_names_each_region_s_notebook() -> None:
    owners = {"forward": "02_forwarding_proxy", "make_queue": "10_backpressure"}
    stubbed, _ = strip_solutions(
        ROUTE + "\n" + QUEUE, kind="code", owner=lambda r: owners[r.function]
    )
    assert [u.notebook for u in unwritten(stubbed)] == ["02_forwarding_proxy", "10_backpressure"]


def test_markdown_answer_becomes_a_prompt() -> None:
    source, count = strip_solutions(
        "**Answer.**\n### BEGIN SOLUTION\nBecause zlib holds it.\n### END SOLUTION",
        kind="markdown",
    )
    assert count == 1
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
        strip_solutions(source, kind="code", notebook="nb")


def _notebook(folder: Path, name: str, *cells: nbformat.NotebookNode) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    nbformat.write(nb, folder / name)
    return folder / name


PART_CELLS = [
    ("%%proxy_part\nasync def relay(q):\n    pass\n", "async def relay(q):\n    pass\n"),
    ("%%proxy_part proxy.py\ndef f():\n    pass\n", "def f():\n    pass\n"),
    ("%%proxy_part   \ndef f(): pass\n", "def f(): pass\n"),
    ("\n \n%%proxy_part\ndef f(): pass\n", "def f(): pass\n"),
    ("%%proxy_part", ""),
    ("%%proxy_partial\ndef f(): pass\n", None),
    ("# %%proxy_part\ndef f(): pass\n", None),
    ("  %%proxy_part\ndef f(): pass\n", None),
    ("%%proxy_part\tproxy.py\ndef f(): pass\n", None),
    ("x = 1\n%%proxy_part\n", None),
    ("%%timeit\nf()\n", None),
]


@pytest.mark.parametrize(("source", "body"), PART_CELLS)
def test_a_part_cell_is_recognised_as_ipython_runs_it(source: str, body: str | None) -> None:
    """Bug: ``%%proxy_part`` was defined in proxy_file.py and again in notebook_parts.py, and
    recognised three ways: the bundle maker missed a part cell after a blank line (IPython
    runs it), the notebook grader took ``%%proxy_partial`` for one. Fix: one recogniser,
    ``regions.part_cell_body``, checked here against IPython's own reading of the cell."""
    from IPython.core.inputtransformer2 import TransformerManager

    assert part_cell_body(source) == body
    ran = TransformerManager().transform_cell(source)
    call = f"get_ipython().run_cell_magic({PART_MAGIC_NAME!r}, "
    assert ran.startswith(call) == (body is not None), ran
    if body is not None:
        assert ran.endswith(f"{body!r})\n"), ran


def test_the_bundle_maker_takes_the_cells_ipython_runs_as_parts() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source, _ in PART_CELLS]
    nb.cells.append(nbformat.v4.new_markdown_cell(PART_CELLS[0][0]))  # prose about a part
    assert part_cells(nb) == [body for _, body in PART_CELLS if body is not None]


def test_only_regions_py_spells_the_part_magic() -> None:
    """One home for the marker: every other module imports it (or ``part_cell_body``)."""
    import ast

    import labkit

    package = Path(labkit.__file__).parent
    spelled = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in (PART_MAGIC, PART_MAGIC_NAME)
    )
    assert spelled == ["regions.py"], (
        "import PART_MAGIC, PART_MAGIC_NAME or part_cell_body from labkit.regions"
    )


def test_student_copies_clear_outputs_and_keep_other_cells(tmp_path: Path) -> None:
    code = nbformat.v4.new_code_cell(ROUTE, execution_count=3)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    _notebook(
        tmp_path / "src", "02_forwarding_proxy.ipynb", nbformat.v4.new_markdown_cell("# T"), code
    )

    (copy,) = make_student_copies(tmp_path / "src", tmp_path / "out")

    assert copy.regions == 1
    learner = nbformat.read(copy.target, as_version=4)
    assert learner.cells[0].source == "# T"
    assert learner.cells[1].outputs == []
    assert learner.cells[1].execution_count is None
    assert "notebook 02_forwarding_proxy" in learner.cells[1].source


SOLUTION = """\
import asyncio


# 02 · The route


def forward(request):
    ### BEGIN SOLUTION
    return relay(request)
    ### END SOLUTION


# 10 · Backpressure


def make_queue():
    ### BEGIN SOLUTION
    ### STAND-IN: return asyncio.Queue()
    return asyncio.Queue(maxsize=64)
    ### END SOLUTION
"""


def _course(tmp_path: Path) -> tuple[Path, Path]:
    notebooks = tmp_path / "course" / "notebooks"
    part = "%%proxy_part\n" + SOLUTION[SOLUTION.index("def forward") : SOLUTION.index("\n\n\n# 10")]
    _notebook(notebooks, "02_forwarding_proxy.ipynb", nbformat.v4.new_code_cell(part))
    _notebook(notebooks, "10_backpressure.ipynb", nbformat.v4.new_markdown_cell("# 10"))
    solution = tmp_path / "course" / "solutions" / "proxy.py"
    solution.parent.mkdir()
    solution.write_text(SOLUTION)
    return notebooks, solution


def test_student_command_writes_a_bundle_with_the_stubbed_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebooks, _ = _course(tmp_path)
    out = tmp_path / "bundle"

    assert main(["student", str(notebooks), "--out", str(out)]) == 0

    shown = capsys.readouterr().out
    assert "02_forwarding_proxy.ipynb  (1 solution regions stubbed)" in shown
    assert "proxy.py  (2 solution regions stubbed)" in shown
    proxy = (out / "proxy.py").read_text()
    assert unwritten(proxy) == [
        Unwritten("forward", "02_forwarding_proxy"),  # from the notebook's %%proxy_part cell
        Unwritten("make_queue", "10_backpressure"),  # from its "# 10 ·" section
    ]
    assert "maxsize" not in proxy and "relay(request)" not in proxy
    for name in ("README.md", "Makefile", "pyproject.toml", "binder/environment.yml"):
        assert (out / name).is_file(), name
    assert (out / "binder" / "postBuild").stat().st_mode & 0o111
    assert (out / "labkit" / "__init__.py").is_file()
    assert (out / "mock_upstream" / "__init__.py").is_file()
    assert not list(out.rglob("__pycache__"))


def test_student_command_refuses_a_folder_that_is_not_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebooks, _ = _course(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    assert main(["student", str(notebooks), "--out", str(tmp_path / "taken")]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err


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


def test_student_command_says_where_the_solution_should_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebooks, solution = _course(tmp_path)
    solution.unlink()
    assert main(["student", str(notebooks), "--out", str(tmp_path / "s")]) == 2
    assert "solutions/proxy.py. Run this from the repository, or pass --solution" in (
        capsys.readouterr().err
    )


def test_only_stubs_the_named_functions_and_keeps_the_other_solutions() -> None:
    source, count = strip_solutions(
        ROUTE + "\n" + QUEUE, kind="code", notebook="nb", only={"make_queue"}
    )
    assert count == 1
    assert "return await relay(body)" in source and "### BEGIN SOLUTION" in source
    assert unwritten(source) == [Unwritten("make_queue", "nb")]
