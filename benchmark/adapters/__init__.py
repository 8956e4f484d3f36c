"""One module per third-party library the harness patches or reaches into, each holding every
patch point of its library and refusing a release other than the one it was written for:
`mlperf_logging` (the official checkers' YAML reader, line strip and per-log compliance call),
`urllib3` (the connection class of the pools a download's session opens) and `tf_keras`
(the random generator of each Dropout layer)."""
from __future__ import annotations

import importlib.metadata

from benchmark.errors import UserError


def require_version(distribution: str, supported: tuple[str, ...]) -> str:
    """The installed version of `distribution`; raises UserError (one line) unless it equals
    one of `supported` or starts with one ending in '.' ("2." admits every 2.x)."""
    installed = importlib.metadata.version(distribution)
    if not any(installed == v or (v.endswith(".") and installed.startswith(v))
               for v in supported):
        wanted = " or ".join(v + "x" if v.endswith(".") else v for v in supported)
        raise UserError(f"{distribution} {installed} is installed; this harness reaches into "
                        f"{wanted} only (run `make install` for the pinned versions)")
    return installed
