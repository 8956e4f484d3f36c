"""The compliance checker MLCommons ran in a round, run beside the installed one.

A round's checker is the `mlperf_logging` of that round's git tag in mlcommons/logging
(`benchmark.rulesets.Ruleset.checker_tag`). `round_verdicts` takes the tag's package out of a
local clone of that repository (git archive, once, into a cache folder) and runs its compliance
checker on many logs in one separate Python process (`benchmark.round_worker`), so the
installed `mlperf_logging` 4.x and the round's never meet in one interpreter.

The round's engine, like the installed one, turns a log's submission_division and
submission_benchmark into YAML paths and runs the code in that YAML; callers pass only logs
whose values are known names (`benchmark.official.untrusted_values`).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from benchmark.errors import UserError
from benchmark.rulesets import ruleset as ruleset_facts

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SILENCE_S = 300  # the worker is stopped when no verdict comes for this long


class RoundCheckerError(UserError):
    """The round's checker could not be had or run (no clone, no tag, a crashed worker)."""


@dataclass(frozen=True)
class RoundVerdict:
    """The round's checker on one log: passed, and its error messages."""
    passed: bool
    messages: tuple[str, ...] = ()


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=300)


def package_source(logging_repo: Path, tag: str, cache_dir: Path) -> Path:
    """The folder holding `tag`'s mlperf_logging package, extracted from `logging_repo` (a
    clone of mlcommons/logging, bare or not) into `cache_dir/tag` the first time."""
    target = cache_dir / tag
    if (target / "mlperf_logging" / "__init__.py").is_file():
        return target
    if _git(logging_repo, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}").returncode:
        raise RoundCheckerError(f"{logging_repo}: no tag {tag!r} (give a clone of "
                                "github.com/mlcommons/logging with its tags)")
    archive = _git(logging_repo, "archive", "--format=tar", tag, "mlperf_logging")
    if archive.returncode:
        raise RoundCheckerError(f"{logging_repo}: git archive {tag} failed: "
                                f"{archive.stderr.decode(errors='replace').strip()[:200]}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=cache_dir))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(staging, filter="data")
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "mlperf_logging").is_dir():  # not another process's complete copy
            raise
    return target


def round_verdicts(paths: Sequence[str], ruleset: str, logging_repo: Path, cache_dir: Path,
                   tick: Callable[[], None] = lambda: None) -> dict[str, RoundVerdict]:
    """{path: verdict} of the compliance checker of `ruleset`'s round on each log of `paths`.

    logging_repo: a clone of mlcommons/logging; cache_dir: where tags are extracted.
    tick: called once per log checked (progress).
    """
    source = package_source(logging_repo, ruleset_facts(ruleset).checker_tag, cache_dir)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source), str(PROJECT_ROOT)]))
    worker = subprocess.Popen([sys.executable, "-m", "benchmark.round_worker", ruleset],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=source)

    def feed() -> None:
        try:
            for path in paths:
                worker.stdin.write(json.dumps(path) + "\n")
            worker.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # the worker stopped; its exit status says why

    watchdog = threading.Timer(SILENCE_S, worker.kill)
    threading.Thread(target=feed, daemon=True).start()
    verdicts: dict[str, RoundVerdict] = {}
    try:
        watchdog.start()
        for line in worker.stdout:
            watchdog.cancel()
            item = json.loads(line)
            verdicts[item["path"]] = RoundVerdict(bool(item["passed"]), tuple(item["messages"]))
            tick()
            watchdog = threading.Timer(SILENCE_S, worker.kill)
            watchdog.start()
    finally:
        watchdog.cancel()
        worker.wait()
    if worker.returncode or len(verdicts) != len(set(paths)):
        stderr = worker.stderr.read().strip().splitlines()
        raise RoundCheckerError(
            f"the {ruleset} round's checker ({source}) stopped after {len(verdicts)} of "
            f"{len(set(paths))} logs: {stderr[-1][:200] if stderr else 'no message'}")
    return verdicts
