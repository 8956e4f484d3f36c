"""Every place the harness reaches into mlperf_logging (pinned: 4.1.68), the package of the
official checkers, whose module globals it replaces:

- `mlp_compliance.yaml` by `PackageYaml`: the compliance engine reads only YAML files inside
  the installed package (a log's division and benchmark values name the next file it loads)
  and parses each once per process;
- `re` of the official log readers (the RCP checker, each ruleset's parser) by `LinearStrip`:
  their per-line `re.sub(".*" + TOKEN, ...)` backtracks quadratically in the line's length;
- `mlp_compliance.main`, within `known_compliance`: the package checker's per-log compliance
  call answers from verdicts already computed.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import pickle
import re
from pathlib import Path
from typing import Iterator

from benchmark.adapters import require_version
from benchmark.mllog_parse import TOKEN
from benchmark.rulesets import RULESETS

SUPPORTED = ("4.1.68",)
_SPEC = importlib.util.find_spec("mlperf_logging")
PACKAGE_DIR = Path(_SPEC.origin).parent.resolve() if _SPEC and _SPEC.origin else None


class PackageYaml:
    """Stands in for the `yaml` module inside the compliance engine: `load` reads only files
    inside the installed mlperf_logging package (anything else raises PermissionError, which
    the engine reports as a failure) and parses each file once per process. Each call gets
    its own copy (the engine changes what it is given), unpickled: a fraction of the time of
    a deep copy, which was the largest part of checking a small log."""

    def __init__(self, real) -> None:
        self._real = real
        self._cache: dict[str, bytes] = {}  # file name as the engine opened it: pickled YAML
        self.BaseLoader = real.BaseLoader

    def load(self, stream, Loader=None):  # noqa: N803 - the yaml.load signature
        """The parsed YAML of `stream` (a file the engine opened), a fresh copy each call."""
        name = str(getattr(stream, "name", ""))
        if name not in self._cache:
            path = Path(name).resolve()
            if PACKAGE_DIR is None or PACKAGE_DIR not in path.parents:
                raise PermissionError(f"refusing to load {path.name}: not a file of "
                                      "mlperf_logging")
            self._cache[name] = pickle.dumps(
                self._real.load(stream, Loader=Loader or self._real.BaseLoader))
        return pickle.loads(self._cache[name])


class LinearStrip:
    """Stands in for the `re` module in the official log readers. They strip every line with
    `re.sub(".*" + TOKEN, TOKEN, line)`, which backtracks quadratically in the line length
    (most of the time of a whole-round check). For that one call this returns the same
    string in linear time: within each newline-free segment, everything before the last
    token is dropped. Every other use goes to the real `re`."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def sub(self, pattern, repl, string, *args, **kwargs):
        """`re.sub`, in linear time for the readers' own strip."""
        if pattern != ".*" + TOKEN or repl != TOKEN or args or kwargs \
                or not isinstance(string, str):
            return self._real.sub(pattern, repl, string, *args, **kwargs)
        return "\n".join(TOKEN + part.rsplit(TOKEN, 1)[1] if TOKEN in part else part
                         for part in string.split("\n"))


def reader_modules() -> list:
    """The official log readers whose `re` is replaced: the RCP checker and each BERT
    ruleset's parser."""
    from mlperf_logging.rcp_checker import rcp_checker
    return [rcp_checker] + [importlib.import_module(
        f"mlperf_logging.compliance_checker.mlp_parser.ruleset_{v.replace('.', '')}")
        for v in RULESETS]


def guard_engine() -> None:
    """Install `PackageYaml` in the compliance engine and `LinearStrip` in the official log
    readers (once); raises UserError for an mlperf_logging release other than SUPPORTED."""
    require_version("mlperf-logging", SUPPORTED)
    from mlperf_logging.compliance_checker import mlp_compliance
    if not isinstance(mlp_compliance.yaml, PackageYaml):
        mlp_compliance.yaml = PackageYaml(mlp_compliance.yaml)
    for module in reader_modules():
        if getattr(module, "re", None) is re:
            module.re = LinearStrip(re)


@contextlib.contextmanager
def known_compliance(verdicts: dict[str, bool]) -> Iterator[None]:
    """Within the block, the package checker's per-log compliance call answers from
    `verdicts` ({resolved log path: passed}, the same engine's verdicts with the round's
    leniency) and runs the engine only on logs not in it."""
    from mlperf_logging.compliance_checker import mlp_compliance
    real = mlp_compliance.main

    def main(filename, config_file, checker):
        known = verdicts.get(str(Path(filename).resolve()))
        return real(filename, config_file, checker) if known is None else (known, None,
                                                                           None, None)
    mlp_compliance.main = main
    try:
        yield
    finally:
        mlp_compliance.main = real
