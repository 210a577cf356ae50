"""The learner's proxy.py: parts written into it by name, found, loaded fresh, graded."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.proxy_file import ProxyFileError, find_proxy, load_proxy, write_part

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
            "def first():\n    return 1\n\n\nx = 2\n",
            "Line 5 of this cell is not part of a function",
        ),
        ("def third():\n    return 3\n", "proxy.py has no function named third"),
        ("def first(:\n", r"this cell is not valid Python \(line 1"),
    ],
)
def test_a_part_that_does_not_fit_says_why(proxy: Path, part: str, message: str) -> None:
    before = proxy.read_text()
    with pytest.raises(ProxyFileError, match=message):
        write_part(part, proxy)
    assert proxy.read_text() == before


def test_a_broken_proxy_file_is_named_with_its_line(proxy: Path) -> None:
    proxy.write_text("def first(:\n")
    with pytest.raises(ProxyFileError, match=r"proxy.py is not valid Python \(line 1"):
        write_part("def first():\n    return 1\n", proxy)


def test_load_proxy_sees_an_edited_file(proxy: Path) -> None:
    assert load_proxy(proxy).second() == 2
    write_part("def second():\n    return 7\n", proxy)
    assert load_proxy(proxy).second() == 7


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
