"""Every build-it says what must hold, not which lines to type (issue 45).

Bug: several build-its were dictated: 02's route came as seven numbered steps that were its
lines, 01's client as its ``with`` statement and its ``print``, 11's ``open_upstream`` as the
request it sends, word for word. A learner who transcribes them learns to type; the strongest
exercises (07's ``next_item`` case table, 10's ``make_queue``, 12's ``BySentence``) say what
must hold, the cases and the failure they prevent, and leave the code to the learner.

Fix, and the rule kept here: for each solution region of a code cell (``labkit.regions``), its
*instructions* are the markdown cells between the previous code cell with a region (or the
section heading, ``#`` or ``##``, after it) and the region's cell. No logical line of the
solution may be in the code of its instructions (inline spans and fenced blocks), token for
token, apart from what the region must use anyway:

* tokens: Python's own for the solution (comments and layout dropped), the same rules by regex
  for the markdown; punctuation (brackets, dots, commas, ``=``, ``:``) is dropped on both sides,
  and a string literal is compared by its text, whatever its quotes;
* a *run* is a stretch of a solution line, at least ``MIN_RUN`` tokens long, that occurs in one
  code span of the instructions. A run counts only if it holds a token of the solution's own: a
  name the solution makes up (a local variable) or a literal (``"stream"``, ``True``, ``502``;
  not ``0``, ``1`` or ``""``). Names the region must use are never its own: the names of its
  cell outside the region (the signature, the given lines around it), its stand-in, what the
  notebook's code and, for a ``%%proxy_part`` cell, ``proxy.py``'s given code define or import,
  builtins, keywords, and library API (a name after a dot, a keyword argument's name). So
  "call ``asyncio.current_task()``" or "``await queue.put(item)``" is an idiom named, not a line
  dictated;
* a solution line is *dictated* when it has at least ``MIN_LINE`` tokens and runs cover at least
  ``DICTATED_SHARE`` of them. A build-it passes when none of its lines is dictated.

The failure names the notebook, the cell, the function and each dictated line with the part the
instructions hold. ``test_the_measure_*`` prove the measure's two sides on the strongest
exercises: a solution line pasted into their instructions is caught, the names they must use
listed there are not. The test reads the ``.ipynb`` files only.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import nbformat
import pytest

from labkit.regions import BEGIN, END, Region, part_cell_body, regions

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PROXY = ROOT / "solutions" / "proxy.py"

MIN_RUN = 2  # tokens in a run of the instructions that counts
MIN_LINE = 3  # tokens a solution line needs before it can be dictated
DICTATED_SHARE = 0.75  # of a line's tokens in runs: the line is in the instructions
IDIOM_LITERALS = {"0", "1", ""}  # literals every solution writes: no sign of dictation

Token = tuple[str, str]  # (kind, text): kind is "name", "literal" or "op"

PUNCTUATION = {"=", ":", ".", ",", ";", "(", ")", "[", "]", "{", "}", "...", "*", "**", "->", "@"}
LITERAL_NAMES = {"True", "False", "None"}
BUILTINS = set(dir(builtins)) - LITERAL_NAMES
MARKDOWN_TOKEN = re.compile(
    r"""(?P<string>[rbfuRBFU]{0,2}("([^"\\\n]|\\.)*"|'([^'\\\n]|\\.)*'))
    |(?P<number>\d+(?:\.\d+)?)
    |(?P<name>[A-Za-z_]\w*)
    |(?P<op>\*\*|//|==|!=|<=|>=|->|\+=|-=|\.\.\.|[-+*/%<>~@=:.,;()\[\]{}!&|^])""",
    re.VERBOSE,
)
CODE_IN_MARKDOWN = re.compile(r"```[^\n]*\n(?P<block>.*?)```|`(?P<span>[^`]+)`", re.DOTALL)
HEADING = re.compile(r"#{1,2} ")


def _string_text(literal: str) -> str:
    quote = re.match(r"[rbfuRBFU]{0,2}('''|\"\"\"|'|\")", literal)
    assert quote is not None, literal
    return literal[quote.end() : len(literal) - len(quote[1])]


def _named(text: str) -> Token:
    return ("literal" if text in LITERAL_NAMES else "name", text)


def markdown_tokens(code: str) -> list[Token]:
    """One span of the markdown's code, as tokens (punctuation dropped)."""
    found: list[Token] = []
    for match in MARKDOWN_TOKEN.finditer(code):
        if match["string"]:
            found.append(("literal", _string_text(match["string"])))
        elif match["number"]:
            found.append(("literal", match["number"]))
        elif match["name"]:
            found.append(_named(match["name"]))
        elif match["op"] not in PUNCTUATION:
            found.append(("op", match["op"]))
    return found


def instruction_spans(markdown: str) -> list[list[Token]]:
    """The code of the instructions: each inline span, and each line of a fenced block."""
    spans: list[list[Token]] = []
    for match in CODE_IN_MARKDOWN.finditer(markdown):
        if match["block"] is not None:
            spans += [markdown_tokens(line.split("#")[0]) for line in match["block"].split("\n")]
        else:
            spans.append(markdown_tokens(match["span"]))
    return spans


@dataclass(frozen=True)
class CodeToken:
    token: Token
    api: bool  # a name after a dot, or a keyword argument's name


def code_lines(lines: list[str] | tuple[str, ...]) -> list[list[CodeToken]]:
    """Each logical line of ``lines`` (dedented), as tokens without punctuation."""
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    source = "\n".join(line[indent:] for line in lines) + "\n"
    logical: list[list[tuple[Token, str]]] = [[]]
    before = ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NEWLINE:
            logical.append([])
            continue
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.type == tokenize.ENDMARKER:
            break
        if tok.type == tokenize.STRING:
            token: Token = ("literal", _string_text(tok.string))
        elif tok.type == tokenize.NUMBER:
            token = ("literal", tok.string)
        elif tok.type == tokenize.NAME:
            token = _named(tok.string)
        else:
            token = ("punctuation" if tok.string in PUNCTUATION else "op", tok.string)
        logical[-1].append((token, before))
        before = tok.string
    result = []
    for line in logical:
        kept = []
        for index, (token, previous) in enumerate(line):
            following = line[index + 1][0][1] if index + 1 < len(line) else ""
            keyword_argument = following == "=" and previous in ("(", ",")
            api = token[0] == "name" and (previous == "." or keyword_argument)
            if token[0] != "punctuation":
                kept.append(CodeToken(token, api))
        if kept:
            result.append(kept)
    return result


def _without_regions(source: str) -> str:
    """``source`` with each solution region replaced by ``pass`` (so that it still parses)."""
    out, inside = [], False
    for line in source.split("\n"):
        if line.strip() == BEGIN:
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + "pass")
        elif line.strip() == END:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def defined_names(source: str) -> set[str]:
    """What the given code of a cell (or file) defines or imports at its top level."""
    body = part_cell_body(source)
    code = _without_regions(source if body is None else body)
    code = "\n".join(line for line in code.split("\n") if not line.lstrip().startswith(("%", "!")))
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, "<cell>", "exec", flags=flags, dont_inherit=True)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


@cache
def _proxy_names() -> frozenset[str]:
    return frozenset(defined_names(PROXY.read_text()))


@dataclass(frozen=True)
class BuildIt:
    """One solution region and the instructions the learner reads for it."""

    notebook: str
    cell: int
    region: Region
    instructions: str
    given: frozenset[str] = field(repr=False)  # names the region must use: never its own

    @property
    def name(self) -> str:
        return f"{self.notebook[:2]}-{self.region.function}"


def _names(lines: list[str] | tuple[str, ...]) -> set[str]:
    return {t.token[1] for line in code_lines(lines) for t in line if t.token[0] == "name"}


def build_its(path: Path) -> Iterator[BuildIt]:
    cells = nbformat.read(path, as_version=4).cells
    notebook_names = set().union(
        *(defined_names(cell.source) for cell in cells if cell.cell_type == "code")
    )
    previous = -1
    for index, cell in enumerate(cells):
        found = regions(cell.source, where=path.stem) if cell.cell_type == "code" else []
        if not found:
            continue
        start = previous + 1
        for earlier in range(index - 1, previous, -1):
            if cells[earlier].cell_type == "markdown" and HEADING.match(cells[earlier].source):
                start = earlier
                break
        instructions = "\n\n".join(
            cells[n].source for n in range(start, index) if cells[n].cell_type == "markdown"
        )
        body = part_cell_body(cell.source)
        around = _names(_without_regions(cell.source if body is None else body).split("\n"))
        given = notebook_names | around | BUILTINS
        if body is not None:
            given |= _proxy_names()
        for region in found:
            names = frozenset(given | _names(region.stand_in))
            yield BuildIt(path.stem, index, region, instructions, names)
        previous = index


@dataclass(frozen=True)
class Line:
    text: str  # the solution's line, as tokens
    tokens: int
    covered: int  # tokens in runs the instructions hold
    runs: tuple[str, ...]  # the runs, as the instructions have them

    @property
    def dictated(self) -> bool:
        return self.tokens >= MIN_LINE and self.covered >= DICTATED_SHARE * self.tokens


def _shown(tokens: list[CodeToken]) -> str:
    return " ".join(repr(t.token[1]) if t.token[0] == "literal" else t.token[1] for t in tokens)


def _own(token: CodeToken, given: frozenset[str]) -> bool:
    """A token of the solution's own: a literal, or a name it makes up."""
    kind, text = token.token
    if kind == "literal":
        return text not in IDIOM_LITERALS
    if kind == "name":
        return not (token.api or text in given or keyword.iskeyword(text))
    return False


def dictation(build_it: BuildIt) -> list[Line]:
    """Each logical line of the solution (its stand-in's lines left out: they are given) with
    how much of it the instructions hold."""
    held = {
        tuple(span[a:b])
        for span in instruction_spans(build_it.instructions)
        for a in range(len(span))
        for b in range(a + MIN_RUN, len(span) + 1)
    }
    stand_in = {tuple(t.token for t in line) for line in code_lines(build_it.region.stand_in)}
    lines = []
    for tokens in code_lines(build_it.region.solution):
        plain = [t.token for t in tokens]
        if tuple(plain) in stand_in:
            continue
        covered = [False] * len(tokens)
        runs = []
        for a in range(len(tokens)):
            b = a + MIN_RUN
            while b <= len(tokens) and tuple(plain[a:b]) in held:
                b += 1
            run = tokens[a : b - 1]
            if len(run) >= MIN_RUN and any(_own(t, build_it.given) for t in run):
                if not all(covered[a : b - 1]):
                    runs.append(_shown(run))
                covered[a : b - 1] = [True] * len(run)
        lines.append(Line(_shown(tokens), len(tokens), sum(covered), tuple(runs)))
    return lines


def dictated_lines(build_it: BuildIt) -> list[Line]:
    return [line for line in dictation(build_it) if line.dictated]


ALL = [build_it for path in NOTEBOOKS for build_it in build_its(path)]


def _report(build_it: BuildIt, lines: list[Line]) -> str:
    shown = "\n".join(
        f"  {line.text}\n    the instructions hold: {' | '.join(line.runs)}" for line in lines
    )
    return (
        f"{build_it.notebook}, cell {build_it.cell}: the instructions for "
        f"{build_it.region.function} dictate {len(lines)} of its lines (each line below as "
        f"tokens, then the runs of it that the markdown's code holds):\n{shown}\n"
        "Say what must hold instead (a case table, the check's property, the failure it "
        "prevents) and leave the lines to the learner; a step that must be given goes in "
        "given code, not in prose to copy."
    )


@pytest.mark.parametrize("build_it", ALL, ids=[b.name for b in ALL])
def test_instructions_do_not_hold_the_solutions_lines(build_it: BuildIt) -> None:
    lines = dictated_lines(build_it)
    assert not lines, _report(build_it, lines)


STRONGEST = ["07-next_item", "10-make_queue", "12-feed"]


def _build_it(name: str) -> BuildIt:
    (found,) = [b for b in ALL if b.name == name]
    return found


@pytest.mark.parametrize("name", ["10-make_queue", "12-feed"])
def test_the_measure_catches_a_solution_line_pasted_into_the_instructions(name: str) -> None:
    """Each solution line with a token of its own (a local name, a literal), put in the
    instructions in backticks as a dictating step would, is caught. (07's ``next_item`` has no
    such line: every token of it is its parameter, an API or a keyword. Its design is in which
    of them it calls, and how, which no run of tokens shows.)"""
    build_it = _build_it(name)
    pasted = 0
    for source in build_it.region.solution:
        (tokens,) = code_lines([source.strip()]) or [[]]
        if len(tokens) < MIN_LINE or not any(_own(t, build_it.given) for t in tokens):
            continue
        told = replace(build_it, instructions=f"{build_it.instructions}\n\n`{source.strip()}`")
        assert dictated_lines(told), f"{name}: pasting {source.strip()!r} went unseen"
        pasted += 1
    assert pasted >= 5


@pytest.mark.parametrize("name", STRONGEST)
def test_the_measure_lets_instructions_name_what_the_solution_must_use(name: str) -> None:
    """The names the region must use, each in backticks and all in one span, dictate nothing:
    naming the API is not giving the lines."""
    build_it = _build_it(name)
    used = sorted({t.token[1] for line in code_lines(build_it.region.solution) for t in line})
    names = [name for name in used if name in build_it.given or keyword.iskeyword(name)]
    listed = "\n".join(f"- `{name}`" for name in names) + "\n\n`" + " ".join(names) + "`"
    told = replace(build_it, instructions=f"{build_it.instructions}\n\n{listed}")
    assert not dictated_lines(told)


# Bug (issue 45): two of the dictating instructions as they were, word for word.
DICTATED_BEFORE = {
    "02-chat_completions": """
2. a streamed answer is asked for with `"stream": true`, exactly (`body.get("stream") is True`).
4. send it with `await while_connected(request, client.send(upstream_request, stream=True))`.
   [...] raises `ClientGone` if it leaves: then call `log_usage(Usage(), "cancelled")`
""",
    "11-open_upstream": """
`open_upstream(client, body)` sends the request (`client.send(client.build_request("POST", CHAT,
json=body), stream=True)`, so that only the status line and headers are read)
""",
}


@pytest.mark.parametrize("name", sorted(DICTATED_BEFORE))
def test_the_measure_catches_the_dictated_steps_of_issue_45(name: str) -> None:
    build_it = replace(_build_it(name), instructions=DICTATED_BEFORE[name])
    assert dictated_lines(build_it)
