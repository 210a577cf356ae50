"""The learner's proxy.py: parts written into it by name, found, loaded fresh, graded."""

from __future__ import annotations

import importlib.util
import os
import py_compile
from pathlib import Path

import pytest

from labkit.proxy_file import (
    ProxyFileError,
    find_proxy,
    load_ipython_extension,
    load_proxy,
    write_part,
)
from labkit.regions import SolutionRegionError, Unwritten, strip_solutions, unwritten

PROXY = '''\
"""A proxy."""

LIMIT = 3


@decorate
def first():
    ### BEGIN SOLUTION
    return 1
    ### END SOLUTION


def second():
    return 2
'''


def decorate_source() -> str:
    return "def decorate(f):\n    return f\n\n\n"


@pytest.fixture
def proxy(tmp_path: Path) -> Path:
    path = tmp_path / "proxy.py"
    path.write_text(decorate_source() + PROXY)
    return path


def test_a_part_replaces_the_function_with_its_decorator_and_trailing_comments(
    proxy: Path,
) -> None:
    names = write_part("@decorate\ndef first():\n    return LIMIT * 10\n", proxy)

    assert names == ["first"]
    text = proxy.read_text()
    assert "@decorate\ndef first():\n    return LIMIT * 10\n\n\ndef second():" in text
    assert "### END SOLUTION" not in text  # the old region's closing comment went with it
    assert load_proxy(proxy).first() == 30


def test_a_part_leaves_everything_else_alone(proxy: Path) -> None:
    before = proxy.read_text()
    write_part("def second():\n    return 22\n", proxy)
    after = proxy.read_text()
    assert after == before.replace("    return 2\n", "    return 22\n")


def test_a_part_that_changes_nothing_does_not_touch_the_file(proxy: Path) -> None:
    part = "@decorate\ndef first():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"
    stamp = proxy.stat().st_mtime_ns
    write_part(part, proxy)
    assert proxy.stat().st_mtime_ns == stamp


def test_two_functions_in_one_part(proxy: Path) -> None:
    write_part("def second():\n    return 5\n\n\ndef first():\n    return 4\n", proxy)
    module = load_proxy(proxy)
    assert (module.first(), module.second()) == (4, 5)


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ("x = 1\n", "This cell defines no function"),
        (
            "def first():\n    return 1\n\n\nprint(2)\n",
            "Line 5 of this cell is not a function, a setting",
        ),
        ("def first():\n    return 1\n\n\nLIMIT = 4\n", "LIMIT is already defined in proxy.py"),
        ("def first():\n    return 1\n\n\nsecond = 4\n", "second is already defined in"),
        ("def first():\n    return 1\n\n\nA = 1\nA = 2\n", "This cell defines A twice"),
        ("def third():\n    return 3\n", "proxy.py has no function named third"),
        ("def first(:\n", r"this cell is not valid Python \(line 1"),
    ],
)
def test_a_part_that_does_not_fit_says_why(proxy: Path, part: str, message: str) -> None:
    before = proxy.read_text()
    with pytest.raises(ProxyFileError, match=message):
        write_part(part, proxy)
    assert proxy.read_text() == before


HELPERS = """\
# how many times to try
TRIES = 3


def helper():
    ### BEGIN SOLUTION
    return TRIES * LIMIT
    ### END SOLUTION


@decorate
def first():
    return helper()
"""


def test_a_part_adds_its_helper_and_setting_beside_it(proxy: Path) -> None:
    names = write_part(HELPERS, proxy)

    assert names == ["TRIES", "helper", "first"]
    text = proxy.read_text()
    block = (
        "# Written with first by its %%proxy_part cell (running it again replaces this):\n"
        "# how many times to try\nTRIES = 3\n\n\ndef helper():\n"
        "    ### BEGIN SOLUTION\n    return TRIES * LIMIT\n    ### END SOLUTION\n\n\n"
        "# (end of what was written with first)\n\n\n@decorate\ndef first():\n"
        "    return helper()\n\n\ndef second():"
    )
    assert block in text
    assert text.startswith(decorate_source() + '"""A proxy."""\n\nLIMIT = 3\n\n\n# Written')
    module = load_proxy(proxy)
    assert (module.first(), module.TRIES) == (9, 3)


def test_running_a_part_with_helpers_again_changes_nothing(proxy: Path) -> None:
    write_part(HELPERS, proxy)
    once = proxy.read_text()
    stamp = proxy.stat().st_mtime_ns
    write_part(HELPERS, proxy)
    assert proxy.read_text() == once
    assert proxy.stat().st_mtime_ns == stamp


def test_running_it_again_replaces_the_helpers_and_drops_what_the_cell_dropped(
    proxy: Path,
) -> None:
    before = proxy.read_text()
    write_part(HELPERS, proxy)
    write_part("TRIES = 5\nSPARE = 1\n\n\ndef first():\n    return TRIES + SPARE\n", proxy)
    text = proxy.read_text()
    assert "def helper" not in text and "TRIES = 3" not in text
    assert text.count("# Written with first") == 1
    assert load_proxy(proxy).first() == 6
    write_part("def first():\n    return 1\n", proxy)  # the part alone: its block goes
    assert proxy.read_text() == before.replace(
        "@decorate\ndef first():\n", "def first():\n"
    ).replace("    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n", "    return 1\n")


def test_a_helper_another_part_wrote_is_a_clash_that_names_that_part(proxy: Path) -> None:
    write_part(HELPERS, proxy)
    before = proxy.read_text()
    with pytest.raises(
        ProxyFileError,
        match=r"helper is already in proxy\.py: another %%proxy_part cell wrote it with first\. "
        r"Give this cell's helper a name of its own",
    ):
        write_part("def helper():\n    return 0\n\n\ndef second():\n    return helper()\n", proxy)
    with pytest.raises(ProxyFileError, match=r"TRIES is already in proxy\.py"):
        write_part("TRIES = 1\n\n\ndef second():\n    return TRIES\n", proxy)
    assert proxy.read_text() == before


def test_an_import_the_file_already_has_is_no_clash(proxy: Path) -> None:
    proxy.write_text("import json\n\n\n" + proxy.read_text())
    write_part("import json\nimport math\n\n\ndef second():\n    return math.floor(2.5)\n", proxy)
    assert load_proxy(proxy).second() == 2
    with pytest.raises(ProxyFileError, match=r"json is already defined in proxy\.py"):
        write_part("json = 1\n\n\ndef second():\n    return json\n", proxy)


def test_a_cell_with_only_helpers_says_where_helpers_go(proxy: Path) -> None:
    with pytest.raises(ProxyFileError, match="A helper goes in the cell of the part that uses it"):
        write_part("TRIES = 3\n\n\ndef helper():\n    return 1\n", proxy)


def test_a_block_whose_end_was_deleted_is_named(proxy: Path) -> None:
    write_part(HELPERS, proxy)
    proxy.write_text(proxy.read_text().replace("# (end of what was written with first)\n", ""))
    with pytest.raises(ProxyFileError, match=r"line \d+: the helpers written with first are not"):
        write_part(HELPERS, proxy)


def test_a_broken_proxy_file_is_named_with_its_line(proxy: Path) -> None:
    proxy.write_text("def first(:\n")
    with pytest.raises(ProxyFileError, match=r"proxy.py is not valid Python \(line 1"):
        write_part("def first():\n    return 1\n", proxy)


def test_load_proxy_sees_an_edited_file(proxy: Path) -> None:
    assert load_proxy(proxy).second() == 2
    write_part("def second():\n    return 7\n", proxy)
    assert load_proxy(proxy).second() == 7


def test_load_proxy_never_runs_a_stale_pyc_of_an_edit_within_the_second(proxy: Path) -> None:
    """A .pyc is trusted when its recorded mtime (to the second) and size match the source: an
    edit that keeps the size, within the second, left the old code running wherever Python
    writes bytecode (a learner's kernel does; CI, with PYTHONDONTWRITEBYTECODE, did not)."""
    py_compile.compile(str(proxy), cfile=importlib.util.cache_from_source(str(proxy)))
    before = proxy.stat()
    write_part("def second():\n    return 7\n", proxy)
    os.utime(proxy, ns=(before.st_atime_ns, before.st_mtime_ns))  # "within the same second"
    assert proxy.stat().st_size == before.st_size  # the case a .pyc cannot tell apart
    assert load_proxy(proxy).second() == 7


def test_the_magic_gives_the_notebook_the_part_as_the_file_has_it(
    proxy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A check cell calls a ``%%proxy_part`` function by its name, as it calls any part, and
    the function sees the file's settings (``LIMIT``), not the notebook's."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    load_ipython_extension(shell)
    shell.user_ns["LIMIT"] = 1000  # the notebook's own LIMIT is not the file's
    ran = shell.run_cell(f"%%proxy_part {proxy}\ndef second():\n    return LIMIT * 7\n")
    assert ran.success
    assert shell.user_ns["second"]() == 21
    assert capsys.readouterr().out == "proxy.py: wrote second\n"
    broken = shell.run_cell(f"%%proxy_part {proxy}\nWHAT = NOWHERE\n\n\ndef second():\n    pass\n")
    assert not broken.success
    assert "proxy.py does not import now (NameError: name 'NOWHERE' is not defined)" in str(
        broken.error_in_exec
    )
    assert shell.user_ns["second"]() == 21  # the last function that imported stays


def test_find_proxy_prefers_the_bundle_then_the_solutions_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAB_PROXY", raising=False)
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    monkeypatch.chdir(notebooks)
    with pytest.raises(ProxyFileError, match=r"No proxy\.py found: expected"):
        find_proxy()
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "proxy.py").write_text("")
    assert find_proxy() == tmp_path / "solutions" / "proxy.py"
    (tmp_path / "proxy.py").write_text("")
    assert find_proxy() == tmp_path / "proxy.py"


def test_find_proxy_takes_lab_proxy_and_checks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: Path
) -> None:
    monkeypatch.setenv("LAB_PROXY", str(proxy))
    assert find_proxy() == proxy
    monkeypatch.setenv("LAB_PROXY", str(tmp_path / "missing.py"))
    with pytest.raises(ProxyFileError, match=r"LAB_PROXY is .*missing\.py, but there is no such"):
        find_proxy()


def test_a_learner_copy_of_a_part_with_helpers_is_stubbed_like_the_part(proxy: Path) -> None:
    """The learner's cell and the learner's proxy.py are both stubbed from the solution: the
    helper's body names itself and its notebook, and the stubbed cell fits the stubbed file."""
    write_part(HELPERS, proxy)
    learner_file, _ = strip_solutions(proxy.read_text(), kind="code", notebook="07_x")
    learner_cell, _ = strip_solutions(HELPERS, kind="code", notebook="07_x")
    proxy.write_text(learner_file)
    write_part(learner_cell, proxy)
    assert proxy.read_text() == learner_file
    assert unwritten(learner_file) == [Unwritten("helper", "07_x")]
    with pytest.raises(NotImplementedError, match="helper, in notebook 07_x"):
        load_proxy(proxy).first()


SETTING_PART = """\
### BEGIN SOLUTION
### STAND-IN: TRIES = None
TRIES = 3
### END SOLUTION


def first():
    ### BEGIN SOLUTION
    return TRIES
    ### END SOLUTION
"""


def test_a_setting_in_a_solution_region_becomes_its_stand_in_and_the_file_still_imports(
    proxy: Path,
) -> None:
    write_part(SETTING_PART, proxy)
    assert load_proxy(proxy).first() == 3
    learner_file, _ = strip_solutions(proxy.read_text(), kind="code", importable=True)
    learner_cell, _ = strip_solutions(SETTING_PART, kind="code", notebook="07_x", importable=True)
    assert learner_cell.startswith(
        "# YOUR CODE HERE: settings for this part (notebook 07_x)\nTRIES = None\n"
    )
    proxy.write_text(learner_file.replace("this notebook", "07_x"))
    write_part(learner_cell, proxy)
    assert proxy.read_text() == learner_file.replace("this notebook", "07_x")
    assert load_proxy(proxy).TRIES is None
    assert unwritten(proxy.read_text()) == [Unwritten("first", "07_x")]


def test_a_module_level_region_without_a_stand_in_cannot_be_made_importable() -> None:
    source = "### BEGIN SOLUTION\nTRIES = 3\n### END SOLUTION\n"
    with pytest.raises(SolutionRegionError, match=r"line 1 is at module level.*Give it a stand-in"):
        strip_solutions(source, kind="code", notebook="07_x", importable=True)
    stubbed, _ = strip_solutions(source, kind="code", notebook="07_x")  # a plain cell: it raises
    assert 'raise NotImplementedError("Write this part yourself: this part' in stubbed
