"""Runs one round's `mlperf_logging` compliance checker on logs, in its own process.

    PYTHONPATH=<the round's mlperf_logging source>:<this project> \
        python -m devtools.round_worker <ruleset>  < paths (JSON lines)  > verdicts (JSON lines)

`devtools.round_checker` starts it with the round's package first on the path, so
`import mlperf_logging` finds that round's code, not the installed one. Each input line is
a JSON string, the path of a log; each output line is {"path", "passed", "messages"}: the
checker's verdict and its error messages (warnings left out). Nothing but those lines goes
to stdout: the checker's own printing goes to stderr. This module imports nothing of the
project, so the installed mlperf_logging is never loaded beside the round's.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import sys

USAGE = "training"


def _checker(ruleset: str):
    """(checker, common.yaml path) for `ruleset` in the API of the round's package (the
    1.0.0 package had no `usage` and kept its rules in `<ruleset>/`)."""
    from mlperf_logging.compliance_checker import mlp_compliance
    if "usage" in inspect.signature(mlp_compliance.make_checker).parameters:
        return (mlp_compliance.make_checker(USAGE, ruleset, True, False),
                f"{USAGE}_{ruleset}/common.yaml")
    return mlp_compliance.make_checker(ruleset, True, False), f"{ruleset}/common.yaml"


def verdict(path: str, ruleset: str) -> dict:
    """The round's checker's verdict on the log at `path`: {"path", "passed", "messages"}."""
    from mlperf_logging.compliance_checker import mlp_compliance
    checker, config = _checker(ruleset)
    mlp_compliance.enqueued_configs.clear()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            passed = bool(mlp_compliance.main(path, config, checker)[0])
        messages = list(checker.not_overwritable) + list(checker.overwritable.values())
    except Exception as exc:  # noqa: BLE001 - a crash of the checker is a failed log
        passed, messages = False, [f"the checker stopped with {type(exc).__name__}: {exc}"]
    finally:
        mlp_compliance.enqueued_configs.clear()
    return {"path": path, "passed": passed, "messages": [" ".join(str(m).split())[:300]
                                                        for m in messages]}


def main(argv: list[str]) -> int:
    """Read log paths from stdin, write one verdict per line to stdout."""
    ruleset = argv[1]
    logging.disable(logging.CRITICAL)
    # The verdicts get a descriptor of their own; whatever the checker prints, at import or
    # through file descriptor 1, goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(verdict(json.loads(line), ruleset)) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
