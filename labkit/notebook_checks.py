"""A notebook's own check cell: one verdict line per property, and the parts not written yet.

Notebooks judge the build-its a learner writes in the notebook itself (an adapter, a scanner, a
release policy, an nginx location, and a ``%%proxy_part`` cell's function such as notebook 05's
``pass_on``), beside the grader's checks of ``proxy.py``. This is their harness, made once per
notebook::

    from labkit import NotebookChecks

    checks = NotebookChecks()

    proxy = checks.attempt(lambda: start_proxy("proxy"))   # the value, or the exception it raised
    if checks.needs(proxy, release):                       # else one line: "skipped: needs ..."
        ...                                                # the experiment

    checks.check("release", "held-back text of a refused answer is never shown",
                 judge_release, refused, needs=(release,), servers=(proxy,))

``check(name, verdict, judge, value, needs=..., servers=...)`` prints one verdict.
``judge(value)`` (or ``judge()`` when no value is given) returns ``(passed, what it saw)``. It
prints ``PASS name: verdict``; or ``FAIL name: verdict`` and ``    saw: ...`` (what the judge
saw, or the exception it met, by type and message); or, when a part is missing,
``FAIL name: not written yet: a, b (notebook NN_x)``. A part is missing when one of ``needs`` (a
function, a class, a ``proxy.py`` path, a value from :meth:`attempt`) still holds its learner
stub, or when the exception, what the judge saw or the logs of ``servers`` say "Write this part
yourself: ...". A function or class also holds its stub while it runs a stand-in (a
``%%proxy_part`` cell's naive version, :mod:`labkit.regions`): its source still says ``# YOUR
CODE HERE: name, notebook NN_x``, so a check of ``pass_on`` says "not written yet" rather than
judging the stand-in. A path does not: ``proxy.py`` runs the stand-ins of later notebooks while
the learner works on earlier ones. ``needs(*parts)`` is the same test for an experiment cell:
``True``, or one ``skipped: ...`` line and ``False``, so that the cells after a missing part say
so in one line instead of raising ``NameError`` after ``NameError``.

This module prints (through ``say``, ``print`` by default): a check cell's output is its whole
purpose, and nbval compares that output. Every printed line is deterministic text; numbers
belong in what the judge saw, which is printed only on a failure.

When the environment names a file in ``LABKIT_NOTEBOOK_VERDICTS``, each verdict is also
appended to it as one JSON line (``name``, ``passed``, ``verdict``, ``saw``, ``missing``: the
parts not written yet, each ``{"part", "notebook"}``), the same verdict the cell prints: the
grader reads the notebooks' checks this way (``labkit.grading.notebook_parts``).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from labkit.regions import unwritten
from labkit.settings import NOTEBOOK_VERDICTS

__all__ = ["VERDICTS_ENV", "Missing", "NotebookChecks", "Verdict", "missing_parts"]

T = TypeVar("T")

#: What a learner stub raises (see :mod:`labkit.regions`): the part and the notebook that writes it.
_STUB_MESSAGE: Final = re.compile(r"Write this part yourself: ([\w.]+), in notebook (\w+)")
_NOT_GIVEN: Final = object()
#: A file to append each verdict to as a JSON line, for the grader (see the module docstring).
VERDICTS_ENV: Final = NOTEBOOK_VERDICTS.name


@dataclass(frozen=True)
class Missing:
    """A part still to write: its name (``to_openai``, ``ArgumentScanner.feed``) and notebook."""

    part: str
    notebook: str


def _say_missing(found: Iterable[Missing]) -> str:
    """``a, b (notebook 08_x); c (notebook 02_y)``: the parts grouped by notebook, in order."""
    by_notebook: dict[str, list[str]] = {}
    for item in found:
        names = by_notebook.setdefault(item.notebook, [])
        if item.part not in names:
            names.append(item.part)
    return "; ".join(f"{', '.join(names)} (notebook {nb})" for nb, names in by_notebook.items())


def _in_text(text: str) -> list[Missing]:
    return [Missing(m[1], m[2]) for m in _STUB_MESSAGE.finditer(text)]


def _in_source(source: str, qualified: Callable[[str], str]) -> list[Missing]:
    """The stubs in a function's (or class's) source, each once: the raising stub's message,
    or the mark above a stub or a stand-in (``# YOUR CODE HERE: name, notebook NN_x``)."""
    marks = [(m[1], m[2]) for m in _STUB_MESSAGE.finditer(source)]
    marks += [(stub.function, stub.notebook) for stub in unwritten(source)]
    return [Missing(qualified(part), notebook) for part, notebook in dict.fromkeys(marks)]


def _method_namer(cls: type) -> Callable[[str], str]:
    """``feed`` -> ``Scanner.feed`` for a method of ``cls``; any other name as it is."""
    methods = {name for name, member in vars(cls).items() if inspect.isfunction(member)}

    def name_of(function: str) -> str:
        return f"{cls.__name__}.{function}" if function in methods else function

    return name_of


def _source_of(part: Any) -> str:
    """The source text of a function, a method or a class (its methods, one by one)."""
    if inspect.isclass(part):
        members = [m for m in vars(part).values() if inspect.isfunction(m)]
        return "\n".join(_source_of(member) for member in members)
    try:
        return inspect.getsource(part)
    except (OSError, TypeError):
        return ""


def missing_parts(*parts: Any) -> list[Missing]:
    """The parts among ``parts`` that still hold a learner stub, in order.

    A part is a function or method (its source is read), a class (each of its methods), a
    :class:`~pathlib.Path` (the file, e.g. ``proxy.py``), a string (text that may quote a stub's
    message, such as a log), or an exception (its message: a server that did not start says
    which part raised). Anything else is taken as written.
    """
    found: list[Missing] = []
    for part in parts:
        if isinstance(part, BaseException):
            found += _in_text(f"{part}")
        elif isinstance(part, str):
            found += _in_text(part)
        elif isinstance(part, Path):
            found += _in_text(part.read_text(encoding="utf-8")) if part.is_file() else []
        elif inspect.isclass(part):
            found += _in_source(_source_of(part), _method_namer(part))
        elif inspect.isfunction(part) or inspect.ismethod(part):
            qualname = part.__qualname__

            def qualified(name: str, qualname: str = qualname) -> str:
                return qualname if qualname.split(".")[-1] == name else name

            found += _in_source(_source_of(part), qualified)
    return found


@dataclass(frozen=True)
class Verdict:
    """One check's outcome, as its cell shows it (``str(verdict)``)."""

    name: str
    passed: bool
    verdict: str
    saw: str = ""
    missing: tuple[Missing, ...] = field(default_factory=tuple)

    @property
    def lines(self) -> list[str]:
        if self.missing:
            return [f"FAIL {self.name}: not written yet: {_say_missing(self.missing)}"]
        lines = [f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.verdict}"]
        if not self.passed:
            lines.append(f"    saw: {self.saw}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "verdict": self.verdict,
            "saw": self.saw,
            "missing": [{"part": m.part, "notebook": m.notebook} for m in self.missing],
        }


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class NotebookChecks:
    """The check harness of one notebook: made once, in its setup cell.

    ``say`` receives each printed line (``print`` by default; a test passes a list's
    ``append``).
    """

    def __init__(self, *, say: Callable[[str], object] = print) -> None:
        self.say = say

    def attempt(self, compute: Callable[[], T], *needs: object) -> T | Exception:
        """``compute()``; or the exception it raised; or, without running it, the first
        exception among ``needs`` (values an earlier :meth:`attempt` returned): something it
        needs did not work out. A check given that exception fails with it."""
        for value in needs:
            if isinstance(value, Exception):
                return value
        try:
            return compute()
        except Exception as exc:
            return exc

    def needs(self, *parts: Any) -> bool:
        """``True`` when every part is written and every value is not an exception; else one
        line saying what is missing first, and ``False`` (the cell skips its experiment: write
        the part, run its cell, then this one again)."""
        missing = missing_parts(*parts)
        if missing:
            more = len({(m.part, m.notebook) for m in missing}) - 1
            others = f" and {more} more part{'s' if more > 1 else ''}" if more else ""
            first = missing[0]
            self.say(
                f"skipped: needs {first.part} (notebook {first.notebook}){others}, not written yet"
            )
            return False
        failed = next((part for part in parts if isinstance(part, BaseException)), None)
        if failed is not None:
            self.say(f"skipped: a step before this one failed: {_described(failed)}")
            return False
        return True

    def check(
        self,
        name: str,
        verdict: str,
        judge: Callable[..., tuple[bool, object]],
        value: Any = _NOT_GIVEN,
        *,
        needs: Iterable[Any] = (),
        servers: Iterable[Any] = (),
    ) -> None:
        """Judge one property and print its verdict (see the module's docstring); nothing is
        returned, so that a cell ending in a check shows only its verdict lines.

        ``needs`` are the parts this check judges: while one is not written, the judge does not
        run and the verdict names it. ``servers`` are servers the check ran (anything with
        ``logs``): a stub's message in their logs names a part missing in the served code.
        """
        missing = missing_parts(*needs)
        if missing:
            self._show(Verdict(name, False, verdict, missing=tuple(missing)))
            return
        try:
            if isinstance(value, Exception):
                raise value
            passed, seen = judge() if value is _NOT_GIVEN else judge(value)
            saw = f"{seen}"
        except Exception as exc:
            passed, saw = False, _described(exc)
        if not passed:
            logs = "\n".join(line for server in servers for line in _logs(server))
            missing = _in_text(saw) + _in_text(logs)
        self._show(Verdict(name, bool(passed), verdict, saw, tuple(missing)))

    def _show(self, result: Verdict) -> None:
        for line in result.lines:
            self.say(line)
        if record := NOTEBOOK_VERDICTS.read():
            with open(record, "a", encoding="utf-8") as out:
                out.write(json.dumps({"event": "verdict", **result.to_json()}) + "\n")


def _logs(server: Any) -> list[str]:
    if isinstance(server, BaseException):
        return []
    try:
        return list(getattr(server, "logs", []))
    except Exception:  # a server that has gone away has no logs to read
        return []
