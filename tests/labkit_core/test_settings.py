"""``labkit.settings``: every ``LABKIT_*`` variable named once, read when used, and a bad value
refused in words that name the variable, its value and what it must be.

Issue 46: the variables were read in eight modules, each with its own default. The tests below
keep them in one: a ``LABKIT_`` name written anywhere in the packages must be one of
``SETTINGS`` (read from the files, so a new one cannot slip in), and no module but
``labkit.settings`` reads one from ``os.environ`` itself.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import labkit.settings as settings
from labkit.errors import SettingError
from labkit.grading.isolation import choose
from labkit.servers import ExternalServer, start_mock_upstream
from labkit.settings import (
    ENGINE_CACHE,
    NETWORK,
    SANDBOX,
    SETTINGS,
    UPSTREAM_URL,
    Setting,
)

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = tuple(ROOT / name for name in ("labkit", "mock_upstream", "bench"))
SETTINGS_FILE = Path(settings.__file__)
LABKIT_NAME = re.compile(r"\bLABKIT_[A-Z0-9][A-Z0-9_]*")  # not the pattern `LABKIT_*`
NAMES = {setting.name for setting in SETTINGS}
CONSTANTS = {name for name, value in vars(settings).items() if isinstance(value, Setting)}


def _files(suffix: str = "") -> Iterator[Path]:
    for folder in FOLDERS:
        for path in sorted(folder.rglob(f"*{suffix}")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def test_every_labkit_name_in_the_packages_is_a_setting() -> None:
    """Every file, not only Python: the learner bundle's README and the setup scripts name
    variables too."""
    found = {
        f"{name} ({path.relative_to(ROOT)})"
        for path in _files()
        for name in LABKIT_NAME.findall(path.read_text(encoding="utf-8", errors="ignore"))
        if name not in NAMES
    }
    assert not found, (
        "LABKIT_ names that labkit.settings does not define: add each to it (with what a value "
        "must be, its default and what it is for) and read it there:\n" + "\n".join(sorted(found))
    )


def test_every_setting_is_read_somewhere() -> None:
    sources = "\n".join(
        path.read_text(encoding="utf-8") for path in _files(".py") if path != SETTINGS_FILE
    )
    unread = [
        setting.name
        for constant, setting in vars(settings).items()
        if isinstance(setting, Setting) and not re.search(rf"\b{constant}\.read\(\)", sources)
    ]
    assert not unread, f"settings no module reads: {unread}; remove them from labkit.settings"


def _aliases(trees: list[ast.AST]) -> set[str]:
    """The names bound to a setting's name (``CHROMIUM_ENV = CHROMIUM.name``)."""
    found = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                value = ast.unparse(node.value)
                if value.strip("'\"") in NAMES or value.removesuffix(".name") in CONSTANTS:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    found.update(t.id for t in targets if isinstance(t, ast.Name))
    return found


def environ_reads(tree: ast.AST, aliases: set[str]) -> Iterator[str]:
    """Each read of a ``LABKIT_*`` variable from the environment in ``tree``: by its name, by
    an alias, or by a setting's ``.name``. Writing one (the notebook runner sets
    ``LABKIT_NOTEBOOK_VERDICTS`` for its kernel) is not a read."""

    def names_a_setting(arg: ast.expr) -> bool:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value.startswith("LABKIT_")
        if isinstance(arg, ast.Name):
            return arg.id in aliases
        if isinstance(arg, ast.Attribute):
            return arg.attr in aliases or (
                arg.attr == "name" and isinstance(arg.value, ast.Name) and arg.value.id in CONSTANTS
            )
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            function = ast.unparse(node.func)
            if function.endswith(("environ.get", "getenv")) and names_a_setting(node.args[0]):
                yield ast.unparse(node)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and ast.unparse(node.value).endswith("environ")
            and names_a_setting(node.slice)
        ):
            yield ast.unparse(node)


def test_no_module_but_settings_reads_a_labkit_variable() -> None:
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in _files(".py")}
    aliases = _aliases(list(trees.values()))
    assert {"CHROMIUM_ENV", "NETWORK_ENV", "UPSTREAM_URL_ENV"} <= aliases
    found = [
        f"{path.relative_to(ROOT)}: {read}"
        for path, tree in trees.items()
        if path != SETTINGS_FILE
        for read in environ_reads(tree, aliases)
    ]
    assert not found, (
        "read these with labkit.settings (SETTING.read()), which parses them in one place:\n"
        + "\n".join(found)
    )


def test_a_read_by_name_alias_or_setting_is_caught() -> None:
    source = (
        "import os\n"
        "a = os.environ.get('LABKIT_SANDBOX')\n"
        "b = os.environ[NETWORK_ENV]\n"
        "c = os.getenv(SANDBOX.name, '')\n"
        "os.environ[VERDICTS_ENV] = 'out.jsonl'\n"
        "d = os.environ.get('HOME')\n"
    )
    assert list(environ_reads(ast.parse(source), {"NETWORK_ENV", "VERDICTS_ENV"})) == [
        "os.environ.get('LABKIT_SANDBOX')",
        "os.environ[NETWORK_ENV]",
        "os.getenv(SANDBOX.name, '')",
    ]


BAD: list[tuple[Setting[Any], str, str]] = [
    (
        NETWORK,
        "none",
        "LABKIT_NETWORK='none', but it must be one of 'own', 'shared'. Fix it, or unset "
        "LABKIT_NETWORK for the default: own.",
    ),
    (
        SANDBOX,
        "bwrap",
        "LABKIT_SANDBOX='bwrap', but it must be one of 'bubblewrap', 'none'. Fix it, or unset "
        "LABKIT_SANDBOX for the default: the strongest sandbox this machine allows (each report "
        "names it).",
    ),
    (
        UPSTREAM_URL,
        "127.0.0.1:8001",
        "LABKIT_UPSTREAM_URL='127.0.0.1:8001', but it must be an http:// or https:// URL with a "
        "host, such as http://127.0.0.1:8001 (no /v1). Fix it, or unset LABKIT_UPSTREAM_URL for "
        "the default: start_mock_upstream() starts a mock upstream on a thread.",
    ),
    (
        settings.ENGINE_URL,
        "http://127.0.0.1:port",
        "LABKIT_ENGINE_URL='http://127.0.0.1:port', but it must be an http:// or https:// URL "
        "with a host, such as http://127.0.0.1:8000 (no /v1). Fix it, or unset "
        "LABKIT_ENGINE_URL for the default: the lab's own engine, built once with "
        "`make engine`.",
    ),
]


@pytest.mark.parametrize(("setting", "value", "message"), BAD, ids=lambda v: str(v)[:20])
def test_a_bad_value_names_the_variable_and_what_it_must_be(
    setting: Setting[Any], value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(setting.name, value)
    with pytest.raises(SettingError) as info:
        setting.read()
    assert str(info.value) == message
    assert (info.value.name, info.value.value) == (setting.name, value)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_unset_and_empty_are_the_default(
    setting: Setting[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(setting.name, raising=False)
    unset = setting.read()
    monkeypatch.setenv(setting.name, "")
    assert setting.read() == unset == setting.unset()


def test_good_values_parse_as_the_readers_used_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UPSTREAM_URL.name, "http://127.0.0.1:8001/")
    assert UPSTREAM_URL.read() == "http://127.0.0.1:8001/"  # as given: the readers strip it
    monkeypatch.setenv(ENGINE_CACHE.name, "~/engines")
    assert ENGINE_CACHE.read() == Path.home() / "engines"
    monkeypatch.delenv(ENGINE_CACHE.name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ENGINE_CACHE.read() == tmp_path / "streaming-proxy-lab" / "engine"
    monkeypatch.setenv(NETWORK.name, "shared")
    assert NETWORK.read() == "shared"
    monkeypatch.delenv(NETWORK.name)
    assert NETWORK.read() == "own"


def test_a_setting_is_read_when_it_is_used_not_when_labkit_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Set after every module is imported, as a notebook cell or a test sets it."""
    monkeypatch.setenv(UPSTREAM_URL.name, "http://127.0.0.1:8001/")
    server = start_mock_upstream()
    assert isinstance(server, ExternalServer) and server.url == "http://127.0.0.1:8001"
    monkeypatch.setenv(SANDBOX.name, "none")
    assert choose().kind == "none"


def test_a_reader_raises_the_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: ``LABKIT_SANDBOX=bwrap`` (a typo) graded in whatever sandbox the machine allowed,
    and nothing said the variable had been ignored. Fix: the one parse refuses it."""
    monkeypatch.setenv(SANDBOX.name, "bwrap")
    with pytest.raises(SettingError, match=r"^LABKIT_SANDBOX='bwrap', but it must be one of"):
        choose()


def settings_table() -> str:
    """The table of settings docs/instructors.md holds, as ``SETTINGS`` makes it."""
    rows = [
        "| variable | a value must be | unset | what it is for |",
        "|---|---|---|---|",
    ]
    rows += [f"| `{s.name}` | {s.expected} | {s.default} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


def test_the_instructors_guide_lists_every_setting_in_one_table() -> None:
    guide = (ROOT / "docs" / "instructors.md").read_text(encoding="utf-8")
    table = settings_table()
    assert table in guide, (
        "docs/instructors.md's table of settings differs from labkit.settings; paste this:\n"
        + table
    )
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "| `LABKIT_" in p.read_text()]
    assert docs == [ROOT / "docs" / "instructors.md"], "one table of settings, not two"
