"""The learner bundle: what a class gets instead of this repository.

``make_bundle(notebooks, solution, out)`` writes a self-contained folder::

    out/README.md          the learner's path: set up, work through the notebooks, grade
    out/Makefile           make lab (JupyterLab on the notebooks); make grade (what the learner
                           hands in, graded as Gradescope's autograder grades it: below)
    out/pyproject.toml     installs labkit and mock_upstream, copied in below, with their pins
    out/proxy.py           the file the learner grows and submits: every solution region stubbed
    out/notebooks/         the learner notebooks: solution regions stubbed, outputs cleared
    out/labkit/, out/mock_upstream/   the helper packages (no solution in either)
    out/binder/            environment.yml and postBuild for repo2docker (mybinder.org)
    out/.github/workflows/classroom.yml   GitHub Classroom autograding: one graded step per check,
                                          by a grader checked against digests of its files
    out/.github/classroom/rubric.toml     the instructor's rubric: what that workflow and
                                          ``make grade`` grade with

``make grade`` zips what the learner hands in (``make submit``) and runs on it the command
Gradescope's ``run_autograder`` runs (``labkit.grading.gradescope``), with the rubric above and
the course planned into ``out/labkit/bundle_files/course.json`` (the notebook parts' graded
cells, planned as ``labkit autograder gradescope`` plans them): the same checks, parts, rubric,
score and feedback as the instructor's grading, ``autograder/results/results.json`` and
``autograder/feedback.md`` as Gradescope's results and the feedback it shows.

A region in ``proxy.py`` is stubbed with the name of the notebook whose ``%%proxy_part`` cell
writes that function, so a stub tells the learner (and the grader's verdicts) where to go.
See :mod:`labkit.regions` for the stubs themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from labkit.errors import BundleError
from labkit.grading.classroom import RUBRIC_FILE, WORKFLOW_FILE, digests, step_points, workflow
from labkit.grading.notebook_parts import write_course
from labkit.grading.rubric import Rubric
from labkit.packaging import RUNTIME_LOCK, copy_packages, locked_requirements, pyproject, render
from labkit.proxy_file import part_functions
from labkit.regions import (
    BEGIN,
    END,
    SolutionRegionError,
    part_cell_body,
    regions,
    strip_solutions,
)

__all__ = [
    "BEGIN",
    "END",
    "Bundle",
    "SolutionRegionError",
    "StudentCopy",
    "make_bundle",
    "make_student_copies",
    "part_cells",
    "part_owners",
    "strip_solutions",
]

BINDER_PLACEHOLDER = "YOUR-ORG/YOUR-REPO"


@dataclass(frozen=True)
class StudentCopy:
    """One learner notebook written by :func:`make_student_copies`."""

    source: Path
    target: Path
    regions: int


@dataclass(frozen=True)
class Bundle:
    """What :func:`make_bundle` wrote."""

    root: Path
    notebooks: list[StudentCopy]
    proxy: Path
    proxy_regions: int


def _notebooks(source_dir: Path) -> list[Path]:
    found = sorted(source_dir.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise BundleError(
            f"No notebooks found in {source_dir}: expected files named NN_topic.ipynb. "
            "Pass the folder that holds the instructor notebooks (e.g. notebooks/)."
        )
    return found


def part_cells(nb: nbformat.NotebookNode) -> list[str]:
    """The bodies (magic line removed) of a notebook's ``%%proxy_part`` cells, in order."""
    found = (part_cell_body(cell.source) for cell in nb.cells if cell.cell_type == "code")
    return [body for body in found if body is not None]


def part_owners(source_dir: Path) -> dict[str, str]:
    """Which notebook (by stem) writes each function of ``proxy.py``."""
    owners: dict[str, str] = {}
    for path in _notebooks(source_dir):
        for body in part_cells(nbformat.read(path, as_version=4)):
            for name in part_functions(body):
                if name in owners and owners[name] != path.stem:
                    raise BundleError(
                        f"{name} is written by both {owners[name]} and {path.stem}: one "
                        "function of proxy.py belongs to one notebook."
                    )
                owners[name] = path.stem
    return owners


def make_student_copies(source_dir: Path, out_dir: Path) -> list[StudentCopy]:
    """Write a learner copy of every ``NN_topic.ipynb`` in *source_dir* into *out_dir*:
    solution regions stubbed, outputs and execution counts cleared."""
    out_dir.mkdir(parents=True, exist_ok=True)
    copies: list[StudentCopy] = []
    for path in _notebooks(source_dir):
        nb = nbformat.read(path, as_version=4)
        total = 0
        for cell in nb.cells:
            cell.source, count = strip_solutions(
                cell.source,
                kind=cell.cell_type,
                notebook=path.stem,
                importable=cell.cell_type == "code" and part_cell_body(cell.source) is not None,
            )
            total += count
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        target = out_dir / path.name
        nbformat.write(nb, target)
        copies.append(StudentCopy(source=path, target=target, regions=total))
    return copies


_SECTION = re.compile(r"^# (?P<step>\d\d) · ", re.MULTILINE)


def _section_owners(solution: str, notebooks: list[Path]) -> dict[int, str]:
    """For each line of ``solution``, the notebook named by the ``# NN · ...`` section above it."""
    stems = {path.stem[:2]: path.stem for path in notebooks}
    owners: dict[int, str] = {}
    current = ""
    for number, line in enumerate(solution.split("\n"), start=1):
        match = _SECTION.match(line)
        if match:
            current = stems.get(match["step"], "")
        owners[number] = current
    return owners


def stub_proxy(solution: str, notebooks_dir: Path) -> tuple[str, int]:
    """``solution`` with each region stubbed in the name of the notebook that writes it: the
    notebook whose ``%%proxy_part`` cell holds the function, else the one its ``# NN ·``
    section names."""
    owners = part_owners(notebooks_dir)
    by_section = _section_owners(solution, _notebooks(notebooks_dir))
    found = regions(solution, where="solutions/proxy.py")
    orphans = sorted(
        {r.function for r in found if r.function not in owners and not by_section[r.line]}
    )
    if orphans:
        raise BundleError(
            f"solutions/proxy.py has solution regions in {', '.join(orphans)}, which no "
            "notebook writes: add a %%proxy_part cell for each to the notebook that teaches "
            "it, or put it under that notebook's '# NN · ...' section."
        )
    return strip_solutions(
        solution,
        kind="code",
        notebook="solutions/proxy.py",
        owner=lambda r: owners.get(r.function) or by_section[r.line],
        importable=True,
    )


def make_bundle(
    notebooks: Path,
    solution: Path,
    out: Path,
    *,
    binder_repo: str = BINDER_PLACEHOLDER,
    rubric: Rubric | None = None,
) -> Bundle:
    """Write the learner bundle into ``out`` (see the module docstring). ``out`` must not exist
    or be empty; nothing of ``solution`` but its given code reaches it. ``rubric`` (default:
    the defaults) is what the bundle's Classroom workflow grades with; its digests are taken
    of the files as written here, so the workflow is written last."""
    rubric = rubric or Rubric()
    step_points(rubric)  # a rubric Classroom cannot use stops here, before anything is written
    if out.exists() and any(out.iterdir()):
        raise BundleError(
            f"{out} already exists and is not empty: the bundle is written into a new folder. "
            f"Remove it or pick another, e.g. {out}-2."
        )
    if not solution.is_file():
        raise BundleError(
            f"There is no {solution}: the bundle's proxy.py is made from the instructor's "
            "solutions/proxy.py. Run this from the repository, or pass the solution's path."
        )
    proxy_source, proxy_regions = stub_proxy(solution.read_text(encoding="utf-8"), notebooks)

    out.mkdir(parents=True, exist_ok=True)
    copies = make_student_copies(notebooks, out / "notebooks")
    proxy = out / "proxy.py"
    proxy.write_text(proxy_source, encoding="utf-8")
    copy_packages(out)
    # the in-notebook parts' graded cells (solutions stubbed), for `make grade` and the
    # workflow's part steps: what the Gradescope autograder's grader carries too
    course = write_course(notebooks, out / "labkit" / "bundle_files", solution)

    conda_pip = "\n".join(f"      - {r}" for r in locked_requirements())
    files = {
        "README.md": render("README.md", BINDER_REPO=binder_repo),
        "Makefile": render("Makefile"),
        "requirements.txt": RUNTIME_LOCK.read_text(encoding="utf-8"),
        "pyproject.toml": pyproject(
            "streaming-proxy-lab-learner",
            "The Streaming Proxy Lab, learner bundle: notebooks, helpers, a mock upstream.",
        ),
        "binder/environment.yml": render("environment.yml", PIP_DEPENDENCIES=conda_pip),
        "binder/postBuild": render("postBuild"),
        ".gitignore": render("gitignore"),
        RUBRIC_FILE: rubric.to_toml(),
    }
    for name, text in files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    (out / "binder" / "postBuild").chmod(0o755)
    classroom = out / WORKFLOW_FILE
    classroom.parent.mkdir(parents=True, exist_ok=True)
    parts = [part.id for nb in course for part in nb.parts]
    classroom.write_text(workflow(rubric, digests(out), parts), encoding="utf-8")
    return Bundle(out, copies, proxy, proxy_regions)
