"""Where the harness reaches into urllib3 (2.x, as requests installs it): the connection class
of a pool. `watched_pool_classes` gives pool classes whose connections hand each new socket,
direct or to a proxy, to a callback before any TLS handshake or request is sent on it, which
is how a download's deadline can shut a connection that stalls (`cleanup_scripts.artifacts.
transfer.WatchedAdapter` installs them in a requests session)."""
from __future__ import annotations

import socket
from typing import Callable

from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from benchmark.adapters import require_version

SUPPORTED = ("2.",)


def watched_pool_classes(watch: Callable[[socket.socket], socket.socket]) -> dict[str, type]:
    """{"http": pool class, "https": pool class} for a PoolManager's `pool_classes_by_scheme`:
    urllib3's own pools whose connections pass every socket they open through `watch` (which
    returns it). Raises UserError for a urllib3 release other than SUPPORTED."""
    require_version("urllib3", SUPPORTED)

    def watched(pool: type) -> type:
        class Connection(pool.ConnectionCls):  # type: ignore[misc, name-defined]
            def _new_conn(self):
                return watch(super()._new_conn())
        return type(pool.__name__, (pool,), {"ConnectionCls": Connection})
    return {"http": watched(HTTPConnectionPool), "https": watched(HTTPSConnectionPool)}
