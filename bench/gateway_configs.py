"""Real gateways as ``python -m bench.gateways`` runs them: each one's configuration and command.

A :class:`Gateway` is one configuration of one reverse proxy (nginx, Caddy, HAProxy, Apache,
lighttpd and Varnish from Debian's packages; LiteLLM's proxy from its own venv). Its ``render``
is pure: given the folder the gateway may write in, the port it listens on and the mock's port,
it returns a :class:`Launch` (the files to write there and the command line), so every
configuration can be read and tested without starting anything. Every gateway runs as a
foreground process of its own on 127.0.0.1, with its pid file, logs and state in that folder,
never as a system service.

The configurations are the ones a platform engineer would write first: the program's defaults
plus the one setting each program documents for streaming. They are here to be graded, not
tuned: what each verdict means for a deployment is in docs/gateways.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.configs import (
    HOST,
    LITELLM_ENV,
    LITELLM_START_TIMEOUT_S,
    LITELLM_VENV,
    START_TIMEOUT_S,
    render_nginx_conf,
)

APACHE_MODULES = Path("/usr/lib/apache2/modules")
READY_PATH = "/healthz"  # the mock's own health route, answered through the gateway


@dataclass(frozen=True)
class Launch:
    """What starting one gateway takes: ``files`` (name → text) written into its folder, then
    ``argv`` (``argv[0]`` is the program's name, found on the PATH when started), ready once
    ``ready_path`` answers 200 through it."""

    argv: list[str]
    files: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    socket_env: str | None = None  # variable through which it takes a listening socket (nginx)
    ready_path: str = READY_PATH
    start_timeout: float = START_TIMEOUT_S


Render = Callable[[Path, int, int], Launch]  # (its folder, its port, the mock's port) -> Launch


@dataclass(frozen=True)
class Gateway:
    """One configuration of one gateway: ``package`` is the Debian package that ships
    ``program`` (empty for LiteLLM, which has its own venv: ``install_hint`` says how)."""

    name: str
    label: str
    program: str
    package: str
    render: Render
    install_hint: str = ""

    @property
    def install_line(self) -> str:
        """The command that installs what this gateway needs."""
        return self.install_hint or f"apt-get install -y --no-install-recommends {self.package}"


# -- nginx (bench.configs holds the bench's nginx.conf) ---------------------------------------


def _nginx(directives: str) -> Render:
    def render(workdir: Path, port: int, upstream: int) -> Launch:
        conf = render_nginx_conf(workdir, upstream, port, directives)
        argv = ["nginx", "-p", str(workdir), "-c", str(workdir / "nginx.conf")]
        argv += ["-e", str(workdir / "e.log")]
        return Launch(argv, {"nginx.conf": conf}, socket_env="NGINX")

    return render


# -- Caddy ------------------------------------------------------------------------------------

CADDYFILE = """\
{{
	admin off
	auto_https off
	storage file_system {workdir}/caddy
}}
http://{host}:{port} {{
	bind {host}
	reverse_proxy {host}:{upstream}{block}
}}
"""


def _caddy(directives: str) -> Render:
    block = "".join(f"\n\t\t{line}" for line in directives.splitlines())
    block = f" {{{block}\n\t}}" if block else ""

    def render(workdir: Path, port: int, upstream: int) -> Launch:
        text = CADDYFILE.format(
            workdir=workdir, host=HOST, port=port, upstream=upstream, block=block
        )
        argv = ["caddy", "run", "--config", str(workdir / "Caddyfile"), "--adapter", "caddyfile"]
        home = str(workdir / "home")
        env = {"HOME": home, "XDG_DATA_HOME": home, "XDG_CONFIG_HOME": home}
        return Launch(argv, {"Caddyfile": text}, env=env)

    return render


# -- HAProxy ----------------------------------------------------------------------------------

HAPROXY_CFG = """\
global
    maxconn 4096
    pidfile {workdir}/haproxy.pid

defaults
    mode http
    timeout connect {connect}
    timeout client {client}
    timeout server {server}
{options}
frontend gateway
    bind {host}:{port}
    default_backend mock

backend mock
    server mock {host}:{upstream}
"""
# Debian's /etc/haproxy/haproxy.cfg: connect 5 s, client and server 50 s (in ms).
DEBIAN_HAPROXY_TIMEOUTS = ("5000", "50000", "50000")
LONG_HAPROXY_TIMEOUTS = ("5s", "1h", "1h")


def _haproxy(timeouts: tuple[str, str, str], options: str = "") -> Render:
    connect, client, server = timeouts
    option_lines = "".join(f"    {line}\n" for line in options.splitlines())

    def render(workdir: Path, port: int, upstream: int) -> Launch:
        text = HAPROXY_CFG.format(
            workdir=workdir,
            connect=connect,
            client=client,
            server=server,
            options=option_lines,
            host=HOST,
            port=port,
            upstream=upstream,
        )
        # -db: stay in the foreground and log to stderr (no `daemon` in the file either)
        return Launch(["haproxy", "-db", "-f", str(workdir / "haproxy.cfg")], {"haproxy.cfg": text})

    return render


# -- Apache -----------------------------------------------------------------------------------

APACHE_CONF = """\
ServerRoot "{workdir}"
ServerName {host}
Listen {host}:{port}
PidFile "{workdir}/apache2.pid"
DefaultRuntimeDir "{workdir}"
Mutex file:{workdir} default
ErrorLog "{workdir}/error.log"
LogLevel warn
LoadModule mpm_event_module {modules}/mod_mpm_event.so
LoadModule authz_core_module {modules}/mod_authz_core.so
LoadModule proxy_module {modules}/mod_proxy.so
LoadModule proxy_http_module {modules}/mod_proxy_http.so
# Used only when started as root (Debian's user for Apache's children)
User www-data
Group www-data
ProxyPass "/" "http://{host}:{upstream}/"{params}
ProxyPassReverse "/" "http://{host}:{upstream}/"
"""


def _apache(params: str = "") -> Render:
    def render(workdir: Path, port: int, upstream: int) -> Launch:
        text = APACHE_CONF.format(
            workdir=workdir,
            host=HOST,
            port=port,
            upstream=upstream,
            modules=APACHE_MODULES,
            params=f" {params}" if params else "",
        )
        argv = ["apache2", "-DFOREGROUND", "-f", str(workdir / "apache2.conf")]
        return Launch(argv, {"apache2.conf": text})

    return render


# -- lighttpd ---------------------------------------------------------------------------------

LIGHTTPD_CONF = """\
server.modules = ("mod_proxy")
server.bind = "{host}"
server.port = {port}
server.document-root = "{workdir}"
server.errorlog = "{workdir}/error.log"
server.upload-dirs = ("{workdir}")
server.stream-response-body = {stream}
proxy.server = ("" => (("host" => "{host}", "port" => {upstream})))
"""


def _lighttpd(stream: int) -> Render:
    def render(workdir: Path, port: int, upstream: int) -> Launch:
        text = LIGHTTPD_CONF.format(
            workdir=workdir, host=HOST, port=port, upstream=upstream, stream=stream
        )
        return Launch(
            ["lighttpd", "-D", "-f", str(workdir / "lighttpd.conf")], {"lighttpd.conf": text}
        )

    return render


# -- Varnish ----------------------------------------------------------------------------------

VARNISH_VCL = """\
vcl 4.1;

backend mock {{
    .host = "{host}";
    .port = "{upstream}";
}}
{subs}"""
VARNISH_DO_STREAM = """
sub vcl_recv {
    return (pass);
}

sub vcl_backend_response {
    set beresp.do_stream = true;
}
"""
VARNISH_PIPE = """
sub vcl_recv {
    return (pipe);
}

sub vcl_pipe {
    set bereq.http.connection = "close";
}
"""


def _varnish(subs: str = "") -> Render:
    def render(workdir: Path, port: int, upstream: int) -> Launch:
        text = VARNISH_VCL.format(host=HOST, upstream=upstream, subs=subs)
        argv = ["varnishd", "-F", "-f", str(workdir / "default.vcl")]
        argv += ["-a", f"{HOST}:{port}", "-n", str(workdir / "varnish"), "-j", "none"]
        argv += ["-s", "malloc,64m"]
        return Launch(argv, {"default.vcl": text})

    return render


# -- LiteLLM ----------------------------------------------------------------------------------

LITELLM_CONF = """\
model_list:
  - model_name: lab-model
    litellm_params:
      model: openai/lab-model
      api_base: http://{host}:{upstream}/v1
      api_key: sk-mock
general_settings:
  dangerously_permit_weak_or_unset_master_key: true
"""


def _litellm(workdir: Path, port: int, upstream: int) -> Launch:
    text = LITELLM_CONF.format(host=HOST, upstream=upstream)
    argv = [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(workdir / "litellm.yaml")]
    argv += ["--host", HOST, "--port", str(port), "--num_workers", "1"]
    return Launch(
        argv,
        {"litellm.yaml": text},
        env=dict(LITELLM_ENV),
        ready_path="/health/liveliness",
        start_timeout=LITELLM_START_TIMEOUT_S,
    )


GATEWAYS: tuple[Gateway, ...] = (
    Gateway(
        "nginx-unbuffered",
        "nginx: `proxy_buffering off` (HTTP/1.0 to the upstream, the default)",
        "nginx",
        "nginx",
        _nginx("proxy_buffering off;"),
    ),
    Gateway(
        "nginx-http11",
        "nginx: `proxy_http_version 1.1`, buffering on (the default)",
        "nginx",
        "nginx",
        _nginx('proxy_http_version 1.1;\nproxy_set_header Connection "";'),
    ),
    Gateway("caddy", "Caddy: plain `reverse_proxy`", "caddy", "caddy", _caddy("")),
    Gateway(
        "caddy-flush",
        "Caddy: `reverse_proxy` with `flush_interval -1`",
        "caddy",
        "caddy",
        _caddy("flush_interval -1"),
    ),
    Gateway(
        "haproxy",
        "HAProxy: Debian's default timeouts (client and server 50 s)",
        "haproxy",
        "haproxy",
        _haproxy(DEBIAN_HAPROXY_TIMEOUTS),
    ),
    Gateway(
        "haproxy-abortonclose",
        "HAProxy: `option abortonclose`, client and server timeouts 1 h",
        "haproxy",
        "haproxy",
        _haproxy(LONG_HAPROXY_TIMEOUTS, "option abortonclose"),
    ),
    Gateway("apache", "Apache: plain `ProxyPass`", "apache2", "apache2", _apache()),
    Gateway(
        "apache-flushpackets",
        "Apache: `ProxyPass ... flushpackets=on`",
        "apache2",
        "apache2",
        _apache("flushpackets=on"),
    ),
    Gateway(
        "lighttpd-stream0",
        "lighttpd: `server.stream-response-body = 0` (the default: whole response first)",
        "lighttpd",
        "lighttpd",
        _lighttpd(0),
    ),
    Gateway(
        "lighttpd-stream1",
        "lighttpd: `server.stream-response-body = 1` (stream, buffer without bound)",
        "lighttpd",
        "lighttpd",
        _lighttpd(1),
    ),
    Gateway(
        "lighttpd-stream2",
        "lighttpd: `server.stream-response-body = 2` (stream, minimal buffering)",
        "lighttpd",
        "lighttpd",
        _lighttpd(2),
    ),
    Gateway("varnish", "Varnish: built-in VCL", "varnishd", "varnish", _varnish()),
    Gateway(
        "varnish-stream",
        "Varnish: `return (pass)` and `beresp.do_stream = true`",
        "varnishd",
        "varnish",
        _varnish(VARNISH_DO_STREAM),
    ),
    Gateway(
        "varnish-pipe",
        "Varnish: `return (pipe)`",
        "varnishd",
        "varnish",
        _varnish(VARNISH_PIPE),
    ),
    Gateway(
        "litellm",
        "LiteLLM proxy 1.108, one worker",
        str(LITELLM_VENV / "bin" / "litellm"),
        "",
        _litellm,
        install_hint="make bench/.venv-litellm/.installed",
    ),
)
BY_NAME = {g.name: g for g in GATEWAYS}
