"""A real nginx on loopback, in front of a server of yours, for notebook 13 (nginx and the edge).

``start_nginx(server_block)`` writes a complete ``nginx.conf`` around the ``server { ... }`` body
you pass (your ``location`` blocks with their ``proxy_*`` directives), in a fresh temporary
prefix directory that also holds the pid file, the error log and every temp path, and runs
nginx as a non-daemon child process (a :class:`~labkit.servers.ProcessServer`) on a loopback
socket bound here, which nginx inherits. Nothing outside that directory is read or written,
and nothing nginx prints reaches the caller's stdout or stderr.

The lesson's directives (``proxy_buffering``, ``proxy_read_timeout``) stay in the notebook; this
module only supplies the boilerplate that makes nginx runnable as an unprivileged-looking test
server. When nginx is not installed, :class:`NginxNotFoundError` says how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from labkit.errors import NGINX_INSTALL_HINT, NginxNotFoundError, ServerStartError
from labkit.servers._handles import bind_socket, registry
from labkit.servers._process import ProcessServer

__all__ = [
    "INSTALL_HINT",
    "NginxNotFoundError",
    "NginxServer",
    "find_nginx",
    "nginx_version",
    "start_nginx",
]

INSTALL_HINT: Final = NGINX_INSTALL_HINT
DEFAULT_START_TIMEOUT: Final = 5.0
_SEARCH_PATH: Final = ("/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin", "/opt/homebrew/bin")

_CONFIG_TEMPLATE: Final = """\
# Written by labkit.servers.nginx for one lab experiment.
daemon off;
master_process on;
worker_processes 1;
{user}pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;

events {{
    worker_connections 256;
}}

http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;

    server {{
        listen 127.0.0.1:{port};
{server_block}
    }}
}}
"""


def find_nginx() -> str:
    """The path of the nginx executable; raises :class:`NginxNotFoundError` if there is none."""
    found = shutil.which("nginx")
    if found:
        return found
    for folder in _SEARCH_PATH:
        candidate = Path(folder) / "nginx"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise NginxNotFoundError()


def nginx_version() -> str:
    """``nginx/1.22.1`` or similar (nginx prints its version on stderr)."""
    done = subprocess.run(
        [find_nginx(), "-v"], capture_output=True, text=True, timeout=10, check=False
    )
    text = (done.stderr or done.stdout).strip()
    return text.removeprefix("nginx version: ")


def _indent(block: str) -> str:
    return "\n".join(("        " + line) if line.strip() else "" for line in block.splitlines())


class NginxServer(ProcessServer):
    """One nginx master process (and its worker) running a generated config.

    The listening socket is bound here (``bind_socket``, port 0) and inherited by nginx, which
    takes it from ``NGINX=fd;`` instead of binding the ``listen`` address itself: the port is
    ours from the moment it is chosen, so no other process can take it first.
    """

    def __init__(self, server_block: str, *, name: str, host: str = "127.0.0.1") -> None:
        self.server_block = server_block
        self.prefix = Path(tempfile.mkdtemp(prefix="labkit-nginx-"))
        self.conf_path = self.prefix / "nginx.conf"
        super().__init__(
            [],
            name=name,
            host=host,
            port=0,
            workdir=self.prefix,
            start_timeout=DEFAULT_START_TIMEOUT,
            stop_grace=5.0,
            merge_stderr=True,
        )
        self.poll_interval = 0.02
        # A failed start leaves the prefix in place: its error message names the config and
        # the error log in it.
        self.remove_on_failed_start = False

    def config_text(self, port: int) -> str:
        """The whole nginx.conf this server runs with, for ``port``."""
        # As root the workers would switch to `nobody`, who cannot read our temp prefix.
        user = "user root;\n" if os.geteuid() == 0 else ""
        return _CONFIG_TEMPLATE.format(
            user=user, prefix=self.prefix, port=port, server_block=_indent(self.server_block)
        )

    def error_log(self) -> str:
        """nginx's own error log for this run ("" if it wrote nothing)."""
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def ready(self) -> bool:
        """nginx wrote its pid file: its config is loaded and it holds the socket. (A connect
        would succeed at once: the socket listens from the moment it is bound here.)"""
        return (self.prefix / "nginx.pid").exists()

    def _argv(self, executable: str, *extra: str) -> list[str]:
        prefix = str(self.prefix)
        return [
            executable,
            *extra,
            "-p",
            prefix,
            "-e",
            f"{prefix}/error.log",
            "-c",
            str(self.conf_path),
        ]

    def start(self, timeout: float = DEFAULT_START_TIMEOUT) -> NginxServer:
        executable = find_nginx()
        self.start_timeout = timeout
        sock = bind_socket(self.host, 0, name=self.name)
        self.port = sock.getsockname()[1]
        self.conf_path.write_text(self.config_text(self.port))
        # nginx takes listening sockets from $NGINX ("fd;fd;") when one matches a `listen`.
        inherited = {"NGINX": f"{sock.fileno()};"}
        try:
            test = subprocess.run(
                self._argv(executable, "-t", "-q"),
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
                env={**os.environ, **inherited},
                pass_fds=(sock.fileno(),),
            )
        except BaseException:
            sock.close()
            raise
        if test.returncode != 0:
            sock.close()
            raise ServerStartError(
                f"nginx rejected the generated config {self.conf_path}: "
                f"{test.stderr.strip()} Fix the server block you passed to start_nginx().",
                name=self.name,
            )
        self.argv = self._argv(executable)
        self.env = inherited
        self.sock = sock  # handed to nginx, closed here once it has it
        try:
            super().start()
        except ServerStartError:
            log = self.error_log().strip().splitlines()
            raise ServerStartError(
                f"nginx did not start listening within {timeout} s; its error log "
                f"({self.prefix / 'error.log'}) ends with: {log[-1] if log else '(empty)'}. "
                "Run `nginx -t -c` on that config to see what is wrong.",
                name=self.name,
            ) from None
        return self


def start_nginx(
    server_block: str,
    *,
    name: str = "nginx",
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> NginxServer:
    """Run nginx on a free loopback port with ``server_block`` inside its ``server { }``.

    ``server_block`` holds your directives, e.g. ``location / { proxy_pass http://...; }``.
    Starting again under the same ``name`` stops the old one first; everything still running
    is stopped when the interpreter exits. Raises :class:`NginxNotFoundError` when nginx is
    not installed.
    """
    find_nginx()
    current = registry.get(name)
    if current is not None:
        current.stop()
    return NginxServer(server_block, name=name).start(start_timeout)
