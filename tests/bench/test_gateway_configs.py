"""The gateways ``python -m bench.gateways`` grades: every configuration renders, pointing at the
mock and listening where it was told, and the table it writes; nothing is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import gateways
from bench.gateway_configs import BY_NAME, GATEWAYS

LISTEN_PORT = 41234
UPSTREAM_PORT = 45678
ISSUE_CONFIGURATIONS = {  # the thirteen configurations of issue 29
    "nginx-unbuffered",
    "caddy",
    "caddy-flush",
    "haproxy",
    "haproxy-abortonclose",
    "apache",
    "apache-flushpackets",
    "lighttpd-stream0",
    "lighttpd-stream1",
    "lighttpd-stream2",
    "varnish",
    "varnish-stream",
    "varnish-pipe",
}


def test_the_list_holds_the_thirteen_configurations_plus_nginx_http11_and_litellm() -> None:
    assert len(ISSUE_CONFIGURATIONS) == 13
    assert set(BY_NAME) == ISSUE_CONFIGURATIONS | {"nginx-http11", "litellm"}
    assert len(BY_NAME) == len(GATEWAYS)  # no name twice


@pytest.mark.parametrize("gateway", GATEWAYS, ids=lambda g: g.name)
def test_every_configuration_points_at_the_mock_and_listens_on_its_port(gateway: Any) -> None:
    workdir = Path("/tmp/bench-gateway-test")
    launch = gateway.render(workdir, LISTEN_PORT, UPSTREAM_PORT)
    config_text = "\n".join(launch.files.values())
    assert str(UPSTREAM_PORT) in config_text
    assert "127.0.0.1" in config_text
    assert str(LISTEN_PORT) in config_text + " ".join(launch.argv)
    # every file it names is in its own folder, written before it starts
    assert all(str(workdir / name) in " ".join(launch.argv) for name in launch.files)


def test_the_streaming_setting_of_each_variant_is_in_its_configuration() -> None:
    def text(name: str) -> str:
        return "\n".join(BY_NAME[name].render(Path("/tmp/x"), 1, 2).files.values())

    assert "proxy_buffering off;" in text("nginx-unbuffered")
    assert "flush_interval -1" in text("caddy-flush")
    assert "flush_interval" not in text("caddy")
    assert "option abortonclose" in text("haproxy-abortonclose")
    assert "timeout server 50000" in text("haproxy")
    assert "flushpackets=on" in text("apache-flushpackets")
    for n in (0, 1, 2):
        assert f"server.stream-response-body = {n}" in text(f"lighttpd-stream{n}")
    assert "sub vcl_" not in text("varnish")  # the built-in VCL only
    assert "beresp.do_stream = true" in text("varnish-stream")
    assert "return (pipe)" in text("varnish-pipe")


def _report(**outcomes: str) -> dict[str, Any]:
    checks = {}
    for check, status in outcomes.items():
        evidence: dict[str, object] = {"upstream_stop_after_hangup_ms": 7}
        if status == "inconclusive":
            status, evidence = "skipped", {"inconclusive": "the machine was too slow"}
        checks[check] = {"status": status, "verdict": f"{check} verdict", "evidence": evidence}
    return {"checks": checks, "elapsed_s": 12.4}


def test_the_table_shows_both_runs_where_they_disagree_and_lists_what_did_not_pass() -> None:
    rows = [
        gateways.Row(
            BY_NAME["caddy"],
            [
                _report(cancel="passed", keepalive="failed", usage="skipped"),
                _report(cancel="inconclusive", keepalive="failed", usage="skipped"),
            ],
        ),
        gateways.Row(BY_NAME["varnish"], [], skipped="not installed"),
    ]
    table = gateways.render_table(rows, 2, "today", ["caddy 2.6.2"])
    lines = table.splitlines()
    assert "| `cancel` | `keepalive` |" in lines[2]  # usage is never a column
    caddy = next(line for line in lines if line.startswith("| `caddy`"))
    assert "| pass / inconclusive | **FAIL** | 7 | 12, 12 |" in caddy
    assert any(
        line.startswith("| `varnish`") and "skipped: not installed" in line for line in lines
    )
    assert (
        "- `caddy` run 2 `cancel`: cancel verdict (inconclusive=the machine was too slow)" in lines
    )
    assert (
        "- `caddy` run 1 `keepalive`: keepalive verdict (upstream_stop_after_hangup_ms=7)" in lines
    )
    assert "`caddy 2.6.2`" in table


def test_the_doc_is_rewritten_between_its_markers_only(tmp_path: Path) -> None:
    doc = tmp_path / "gateways.md"
    doc.write_text(f"intro\n{gateways.BEGIN}\nold table\n{gateways.END}\nmeanings\n")
    gateways.write_doc(doc, "new table\n")
    assert doc.read_text() == f"intro\n{gateways.BEGIN}\nnew table\n{gateways.END}\nmeanings\n"


def test_a_doc_without_markers_is_refused_saying_what_to_add(tmp_path: Path) -> None:
    doc = tmp_path / "gateways.md"
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="Add both where the table goes"):
        gateways.write_doc(doc, "table\n")
    assert doc.read_text() == "no markers\n"
