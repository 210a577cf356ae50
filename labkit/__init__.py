"""Helpers for the Streaming Proxy Lab notebooks, grader and tests.

Everything a notebook needs is importable from here: ``from labkit import serve, capture_stream``.
``__all__`` is that surface, and a test keeps it whole (every public name here is in it). The
submodules' own paths (``labkit.checks``, ``labkit.servers``) keep working for older notebooks.
Servers of every kind live in one package, ``labkit.servers``.
"""

from labkit.capture import Capture, Chunk, Comment, Event, acapture_stream, capture_stream
from labkit.chat import chat_page, machine_source
from labkit.chat.browser import BrowserUnavailableError, ChatBrowser, browser_problem
from labkit.checks import CheckResult, arun_checks, run_checks
from labkit.errors import (
    AppStartupError,
    CaptureError,
    InvalidTargetError,
    LabkitError,
    MockUpstreamError,
    PortInUseError,
    ServerExitedError,
    ServerStartError,
    StartTimeoutError,
    TargetLoadError,
)
from labkit.plots import plot_cancellation, plot_gaps, plot_timeline
from labkit.proxy_file import (
    ProxyFileError,
    check_proxy,
    find_proxy,
    load_ipython_extension,
    load_proxy,
    write_part,
)
from labkit.regions import unwritten
from labkit.servers import (
    ExternalServer,
    NginxNotFoundError,
    ServerHandle,
    SubprocessServer,
    ThreadServer,
    find_nginx,
    nginx_version,
    running_servers,
    serve,
    serve_subprocess,
    start_mock_upstream,
    start_nginx,
    stop_all,
)
from labkit.stream_gateway import RestartPolicy, make_stream_gateway
from labkit.upstream import MockUpstream

__all__ = [
    "AppStartupError",
    "BrowserUnavailableError",
    "Capture",
    "CaptureError",
    "ChatBrowser",
    "CheckResult",
    "Chunk",
    "Comment",
    "Event",
    "ExternalServer",
    "InvalidTargetError",
    "LabkitError",
    "MockUpstream",
    "MockUpstreamError",
    "NginxNotFoundError",
    "PortInUseError",
    "ProxyFileError",
    "RestartPolicy",
    "ServerExitedError",
    "ServerHandle",
    "ServerStartError",
    "StartTimeoutError",
    "SubprocessServer",
    "TargetLoadError",
    "ThreadServer",
    "acapture_stream",
    "arun_checks",
    "browser_problem",
    "capture_stream",
    "chat_page",
    "check_proxy",
    "find_nginx",
    "find_proxy",
    "load_ipython_extension",
    "load_proxy",
    "machine_source",
    "make_stream_gateway",
    "nginx_version",
    "plot_cancellation",
    "plot_gaps",
    "plot_timeline",
    "run_checks",
    "running_servers",
    "serve",
    "serve_subprocess",
    "start_mock_upstream",
    "start_nginx",
    "stop_all",
    "unwritten",
    "write_part",
]
