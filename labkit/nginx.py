"""The old path of :mod:`labkit.servers.nginx`, for notebook 13's ``from labkit.nginx import``.

Everything here is also ``from labkit import ...``; this module only re-exports.
"""

from labkit.servers.nginx import (
    INSTALL_HINT,
    NginxNotFoundError,
    NginxServer,
    find_nginx,
    nginx_version,
    start_nginx,
)

__all__ = [
    "INSTALL_HINT",
    "NginxNotFoundError",
    "NginxServer",
    "find_nginx",
    "nginx_version",
    "start_nginx",
]
