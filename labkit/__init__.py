"""Helpers for the Streaming Proxy Lab notebooks, grader and tests.

Everything a notebook needs is importable from here: ``from labkit import serve, capture_stream``.
That surface is written once, in ``_WHERE`` (each name and the module it comes from): ``__all__``
is derived from it, and a test keeps it whole (every public name here is in it). The
submodules' own paths (``labkit.checks``, ``labkit.servers``) keep working for older notebooks.
Servers of every kind live in one package, ``labkit.servers``.

The names load on first use (PEP 562's module ``__getattr__``), so importing one submodule does
not import them all. That is for the processes the grader starts: a learner's proxy is served by
``labkit.servers._child`` and a mock by ``mock_upstream.served``, and importing ``labkit``
whole (FastAPI, the mock, the checks) would cost each of them about 0.5 s of CPU before it
could serve, with four of them starting at once on half a CPU.

Layers, bottom first (a module imports from its own layer and the ones before it, never from a
later one; tests/labkit_core/test_layers.py reads this list and enforces it):

    mock: mock_upstream
    core: errors settings _source wire sse messages_api scrape _blocking _ssl _decompress
          _capture_model _recorder capture shape framing servers regions packaging
    services: engine upstream chat stream_gateway plots
    checks: checks heartbeat_cases notebook_checks
    grading: grading
    surface: proxy_file student doctor cli

The mock (``mock_upstream``, its own package) imports nothing of labkit; the core counts tokens
with its tokenizer and starts it, so importing the core must stay cheap: the mock's package loads
its names on first use, and a test imports the core and finds no FastAPI in it.
The core is formats, capture and processes; services run an engine, a mock, a page or the
stream gateway on it (a module that makes a web app goes no lower than services, whatever it
imports);
checks observe a proxy through them (notebook_checks judges the parts written in the notebooks,
and records its verdicts for the grader; heartbeat_cases are notebook 07's cases for its parts);
grading runs the checks on submissions; the surface is what the notebooks, the command line and
the learner bundle use.
"""

import importlib
import typing

# For type checkers, which do not run __getattr__: _WHERE below, as re-exporting imports. A test
# (tests/labkit_core/test_public_api.py) checks the two agree and prints this block when not.
if typing.TYPE_CHECKING:
    from labkit.capture import Capture as Capture
    from labkit.capture import Chunk as Chunk
    from labkit.capture import Comment as Comment
    from labkit.capture import Event as Event
    from labkit.capture import acapture_stream as acapture_stream
    from labkit.capture import capture_stream as capture_stream
    from labkit.chat import chat_page as chat_page
    from labkit.chat import machine_source as machine_source
    from labkit.chat.browser import ChatBrowser as ChatBrowser
    from labkit.chat.browser import browser_problem as browser_problem
    from labkit.checks import CheckResult as CheckResult
    from labkit.checks import arun_checks as arun_checks
    from labkit.checks import run_checks as run_checks
    from labkit.engine import EngineHandle as EngineHandle
    from labkit.engine import EngineSettings as EngineSettings
    from labkit.engine import engine_if_built as engine_if_built
    from labkit.engine import start_engine as start_engine
    from labkit.errors import AppStartupError as AppStartupError
    from labkit.errors import BrowserUnavailableError as BrowserUnavailableError
    from labkit.errors import CaptureError as CaptureError
    from labkit.errors import EngineBuildError as EngineBuildError
    from labkit.errors import EngineNotBuiltError as EngineNotBuiltError
    from labkit.errors import EngineReadError as EngineReadError
    from labkit.errors import ExitCode as ExitCode
    from labkit.errors import InputError as InputError
    from labkit.errors import InvalidTargetError as InvalidTargetError
    from labkit.errors import LabkitError as LabkitError
    from labkit.errors import MachineLacks as MachineLacks
    from labkit.errors import MockUpstreamError as MockUpstreamError
    from labkit.errors import NginxNotFoundError as NginxNotFoundError
    from labkit.errors import PortInUseError as PortInUseError
    from labkit.errors import ProxyFileError as ProxyFileError
    from labkit.errors import RedisNotFoundError as RedisNotFoundError
    from labkit.errors import ServerExitedError as ServerExitedError
    from labkit.errors import ServerStartError as ServerStartError
    from labkit.errors import StartTimeoutError as StartTimeoutError
    from labkit.errors import TargetLoadError as TargetLoadError
    from labkit.framing import feed_framer as feed_framer
    from labkit.messages_api import anthropic_events as anthropic_events
    from labkit.messages_api import anthropic_request as anthropic_request
    from labkit.notebook_checks import NotebookChecks as NotebookChecks
    from labkit.plots import plot_cancellation as plot_cancellation
    from labkit.plots import plot_gaps as plot_gaps
    from labkit.plots import plot_timeline as plot_timeline
    from labkit.plots import slope_guides as slope_guides
    from labkit.proxy_file import check_proxy as check_proxy
    from labkit.proxy_file import find_proxy as find_proxy
    from labkit.proxy_file import load_ipython_extension as load_ipython_extension
    from labkit.proxy_file import load_proxy as load_proxy
    from labkit.proxy_file import write_part as write_part
    from labkit.regions import unwritten as unwritten
    from labkit.servers import ExternalServer as ExternalServer
    from labkit.servers import ServerHandle as ServerHandle
    from labkit.servers import SubprocessServer as SubprocessServer
    from labkit.servers import ThreadServer as ThreadServer
    from labkit.servers import find_nginx as find_nginx
    from labkit.servers import find_redis_server as find_redis_server
    from labkit.servers import nginx_version as nginx_version
    from labkit.servers import redis_version as redis_version
    from labkit.servers import running_servers as running_servers
    from labkit.servers import serve as serve
    from labkit.servers import serve_subprocess as serve_subprocess
    from labkit.servers import start_mock_upstream as start_mock_upstream
    from labkit.servers import start_nginx as start_nginx
    from labkit.servers import start_redis as start_redis
    from labkit.servers import stop_all as stop_all
    from labkit.shape import stream_shape as stream_shape
    from labkit.stream_gateway import RestartPolicy as RestartPolicy
    from labkit.stream_gateway import make_stream_gateway as make_stream_gateway
    from labkit.upstream import SSE_HEADERS as SSE_HEADERS
    from labkit.upstream import UPSTREAM_TIMEOUT as UPSTREAM_TIMEOUT
    from labkit.upstream import MockUpstream as MockUpstream
    from labkit.upstream import chat_request as chat_request
    from labkit.upstream import tokens_after_hang_up as tokens_after_hang_up
    from labkit.upstream import upstream_lifespan as upstream_lifespan

# The public surface, written once: each name and the module it is loaded from.
_WHERE = {
    "AppStartupError": "labkit.errors",
    "BrowserUnavailableError": "labkit.errors",
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
    "ExitCode": "labkit.errors",
    "ExternalServer": "labkit.servers",
    "InputError": "labkit.errors",
    "InvalidTargetError": "labkit.errors",
    "LabkitError": "labkit.errors",
    "MachineLacks": "labkit.errors",
    "MockUpstream": "labkit.upstream",
    "MockUpstreamError": "labkit.errors",
    "NginxNotFoundError": "labkit.errors",
    "NotebookChecks": "labkit.notebook_checks",
    "PortInUseError": "labkit.errors",
    "ProxyFileError": "labkit.errors",
    "RedisNotFoundError": "labkit.errors",
    "RestartPolicy": "labkit.stream_gateway",
    "SSE_HEADERS": "labkit.upstream",
    "ServerExitedError": "labkit.errors",
    "ServerHandle": "labkit.servers",
    "ServerStartError": "labkit.errors",
    "StartTimeoutError": "labkit.errors",
    "SubprocessServer": "labkit.servers",
    "TargetLoadError": "labkit.errors",
    "ThreadServer": "labkit.servers",
    "UPSTREAM_TIMEOUT": "labkit.upstream",
    "acapture_stream": "labkit.capture",
    "anthropic_events": "labkit.messages_api",
    "anthropic_request": "labkit.messages_api",
    "arun_checks": "labkit.checks",
    "browser_problem": "labkit.chat.browser",
    "capture_stream": "labkit.capture",
    "chat_page": "labkit.chat",
    "chat_request": "labkit.upstream",
    "check_proxy": "labkit.proxy_file",
    "engine_if_built": "labkit.engine",
    "feed_framer": "labkit.framing",
    "find_nginx": "labkit.servers",
    "find_proxy": "labkit.proxy_file",
    "find_redis_server": "labkit.servers",
    "load_ipython_extension": "labkit.proxy_file",
    "load_proxy": "labkit.proxy_file",
    "machine_source": "labkit.chat",
    "make_stream_gateway": "labkit.stream_gateway",
    "nginx_version": "labkit.servers",
    "plot_cancellation": "labkit.plots",
    "plot_gaps": "labkit.plots",
    "plot_timeline": "labkit.plots",
    "redis_version": "labkit.servers",
    "run_checks": "labkit.checks",
    "running_servers": "labkit.servers",
    "serve": "labkit.servers",
    "serve_subprocess": "labkit.servers",
    "slope_guides": "labkit.plots",
    "start_mock_upstream": "labkit.servers",
    "start_engine": "labkit.engine",
    "start_nginx": "labkit.servers",
    "start_redis": "labkit.servers",
    "stop_all": "labkit.servers",
    "stream_shape": "labkit.shape",
    "tokens_after_hang_up": "labkit.upstream",
    "unwritten": "labkit.regions",
    "upstream_lifespan": "labkit.upstream",
    "write_part": "labkit.proxy_file",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'labkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
