"""Helpers for the Streaming Proxy Lab notebooks, grader and tests.

Everything a notebook needs is importable from here: ``from labkit import serve, capture_stream``.
``__all__`` is that surface, and a test keeps it whole (every public name here is in it). The
submodules' own paths (``labkit.checks``, ``labkit.servers``) keep working for older notebooks.
Servers of every kind live in one package, ``labkit.servers``.

The names load on first use (PEP 562's module ``__getattr__``), so importing one submodule does
not import them all. That is for the processes the grader starts: a learner's proxy is served by
``labkit.servers._child`` and a mock by ``mock_upstream.served``, and importing ``labkit``
whole (FastAPI, the mock, the checks) cost each of them about 0.5 s of CPU before it could
serve, four of them starting at once on half a CPU.

Layers, bottom first (a module imports from its own layer and the ones before it, never from a
later one; tests/labkit_core/test_layers.py reads this list and enforces it):

    core: errors wire sse scrape _blocking _ssl _decompress _capture_model _recorder
          capture servers regions packaging stream_gateway
    services: engine upstream chat plots
    checks: checks
    grading: grading
    surface: proxy_file student doctor cli notebook_checks

The core is formats, capture and processes; services run an engine, a mock or a page on it;
checks observe a proxy through them; grading runs the checks on submissions; the surface is
what the notebooks, the command line and the learner bundle use.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from labkit.capture import Capture, Chunk, Comment, Event, acapture_stream, capture_stream
    from labkit.chat import chat_page, machine_source
    from labkit.chat.browser import BrowserUnavailableError, ChatBrowser, browser_problem
    from labkit.checks import CheckResult, arun_checks, run_checks
    from labkit.engine import EngineHandle, EngineSettings, engine_if_built, start_engine
    from labkit.errors import (
        AppStartupError,
        CaptureError,
        EngineBuildError,
        EngineNotBuiltError,
        EngineReadError,
        InvalidTargetError,
        LabkitError,
        MockUpstreamError,
        PortInUseError,
        ServerExitedError,
        ServerStartError,
        StartTimeoutError,
        TargetLoadError,
    )
    from labkit.notebook_checks import NotebookChecks
    from labkit.plots import plot_cancellation, plot_gaps, plot_timeline, slope_guides
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
    "EngineBuildError",
    "EngineHandle",
    "EngineNotBuiltError",
    "EngineReadError",
    "EngineSettings",
    "Event",
    "ExternalServer",
    "InvalidTargetError",
    "LabkitError",
    "MockUpstream",
    "MockUpstreamError",
    "NginxNotFoundError",
    "NotebookChecks",
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
    "engine_if_built",
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
    "slope_guides",
    "start_engine",
    "start_mock_upstream",
    "start_nginx",
    "stop_all",
    "unwritten",
    "write_part",
]

# Where each name of ``__all__`` lives.
_WHERE = {
    "AppStartupError": "labkit.errors",
    "BrowserUnavailableError": "labkit.chat.browser",
    "Capture": "labkit.capture",
    "CaptureError": "labkit.errors",
    "ChatBrowser": "labkit.chat.browser",
    "CheckResult": "labkit.checks",
    "Chunk": "labkit.capture",
    "Comment": "labkit.capture",
    "EngineBuildError": "labkit.errors",
    "EngineHandle": "labkit.engine",
    "EngineNotBuiltError": "labkit.errors",
    "EngineReadError": "labkit.errors",
    "EngineSettings": "labkit.engine",
    "Event": "labkit.capture",
    "ExternalServer": "labkit.servers",
    "InvalidTargetError": "labkit.errors",
    "LabkitError": "labkit.errors",
    "MockUpstream": "labkit.upstream",
    "MockUpstreamError": "labkit.errors",
    "NginxNotFoundError": "labkit.servers",
    "NotebookChecks": "labkit.notebook_checks",
    "PortInUseError": "labkit.errors",
    "ProxyFileError": "labkit.proxy_file",
    "RestartPolicy": "labkit.stream_gateway",
    "ServerExitedError": "labkit.errors",
    "ServerHandle": "labkit.servers",
    "ServerStartError": "labkit.errors",
    "StartTimeoutError": "labkit.errors",
    "SubprocessServer": "labkit.servers",
    "TargetLoadError": "labkit.errors",
    "ThreadServer": "labkit.servers",
    "acapture_stream": "labkit.capture",
    "arun_checks": "labkit.checks",
    "browser_problem": "labkit.chat.browser",
    "capture_stream": "labkit.capture",
    "chat_page": "labkit.chat",
    "check_proxy": "labkit.proxy_file",
    "engine_if_built": "labkit.engine",
    "find_nginx": "labkit.servers",
    "find_proxy": "labkit.proxy_file",
    "load_ipython_extension": "labkit.proxy_file",
    "load_proxy": "labkit.proxy_file",
    "machine_source": "labkit.chat",
    "make_stream_gateway": "labkit.stream_gateway",
    "nginx_version": "labkit.servers",
    "plot_cancellation": "labkit.plots",
    "plot_gaps": "labkit.plots",
    "plot_timeline": "labkit.plots",
    "run_checks": "labkit.checks",
    "running_servers": "labkit.servers",
    "serve": "labkit.servers",
    "serve_subprocess": "labkit.servers",
    "slope_guides": "labkit.plots",
    "start_mock_upstream": "labkit.servers",
    "start_engine": "labkit.engine",
    "start_nginx": "labkit.servers",
    "stop_all": "labkit.servers",
    "unwritten": "labkit.regions",
    "write_part": "labkit.proxy_file",
}


def __getattr__(name: str) -> typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'labkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
