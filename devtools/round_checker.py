"""The compliance checker MLCommons ran in a round, run beside the installed one.

A round's checker is the `mlperf_logging` of that round's git tag in mlcommons/logging
(`benchmark.rulesets.Ruleset.checker_tag`). `round_verdicts` takes the tag's package out of a
local clone of that repository (git archive, once, into a cache folder) and runs its compliance
checker on many logs in one separate Python process (`devtools.round_worker`), so the
installed `mlperf_logging` 4.x and the round's never meet in one interpreter. The worker is
read as untrusted: both its pipes are drained as they come (of stderr only a tail is kept),
each stdout line must be the verdict of the log it was given, and a tag or cached copy holding
a link out of its tree is not run; anything else is one line naming the round and the log.

The round's engine, like the installed one, turns a log's submission_division and
submission_benchmark into YAML paths and runs the code in that YAML; callers pass only logs
whose values are known names (`benchmark.official.untrusted_values`).
"""
from __future__ import annotations

import collections
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

from benchmark.errors import UserError, printable
from benchmark.files import link_outside, walk_files
from benchmark.rulesets import ruleset as ruleset_facts

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SILENCE_S = 300  # the worker is stopped when no verdict comes for this long
EXIT_S = 30  # a worker that has given every verdict is stopped if it has not ended by then
MAX_LINE_CHARS = 1 << 20  # a longer line from the worker is not a verdict
MESSAGE_CHARS = 300  # of each message of a verdict, kept
TAIL_CHARS = 64 << 10  # of the worker's stderr, kept for the message when it stops
MAX_PACKAGE_DEPTH = 8  # folders of a cached checker searched for links out of it


class RoundCheckerError(UserError):
    """The round's checker could not be had or run (no clone, no tag, a crashed worker)."""


@dataclass(frozen=True)
class RoundVerdict:
    """The round's checker on one log: passed, and its error messages."""
    passed: bool
    messages: tuple[str, ...] = ()


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=300)


def cache_folder(cache_dir: Path) -> None:
    """Make `cache_dir` (the --cache_dir folder) or say in one line why it cannot be one."""
    if cache_dir.exists() and not cache_dir.is_dir():
        raise RoundCheckerError(f"--cache_dir {cache_dir}: is a file, not a folder; give a "
                                "folder for the rounds' checkers")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RoundCheckerError(f"--cache_dir {cache_dir}: cannot be made "
                                f"({exc.strerror or type(exc).__name__})") from None


def _link_out(tree: Path) -> str | None:
    """The first entry of `tree` (the tree itself included) that is a link resolving outside
    it, as "entry -> where"; None when there is none."""
    outside = link_outside(tree, tree.parent)
    if outside:
        return f"{tree} -> {outside}"
    for path, _ in walk_files(tree, MAX_PACKAGE_DEPTH):
        outside = link_outside(path, tree)
        if outside:
            return f"{path} -> {outside}"
    return None


def _extract(archive: bytes, tag: str, cache_dir: Path, target: Path, origin: Path) -> None:
    """Unpack `archive` (git archive of `tag` from `origin`) to `target` through a staging
    folder in `cache_dir`; a member linking outside the tree is refused in one line."""
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{tag}-", dir=cache_dir))
    except OSError as exc:
        raise RoundCheckerError(f"--cache_dir {cache_dir}: cannot be written "
                                f"({exc.strerror or type(exc).__name__})") from None
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        os.replace(staging, target)
    except tarfile.TarError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise RoundCheckerError(f"{origin}: tag {tag!r} holds what cannot be unpacked safely "
                                f"({printable(exc)}); not used") from None
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "mlperf_logging").is_dir():  # not another process's complete copy
            raise RoundCheckerError(f"--cache_dir {cache_dir}: cannot unpack {tag} there "
                                    f"({exc.strerror or type(exc).__name__})") from None


def package_source(logging_repo: Path, tag: str, cache_dir: Path) -> Path:
    """The folder holding `tag`'s mlperf_logging package, extracted from `logging_repo` (a
    clone of mlcommons/logging, bare or not) into `cache_dir/tag` the first time.

    Raises RoundCheckerError (one line) for a missing tag, a --cache_dir that is a file or
    cannot be written, or a tag or cached copy holding a link that leads out of its tree.
    """
    target = cache_dir / tag
    if not (target / "mlperf_logging" / "__init__.py").is_file():
        cache_folder(cache_dir)
        if _git(logging_repo, "rev-parse", "--verify", "--quiet",
                f"{tag}^{{commit}}").returncode:
            raise RoundCheckerError(f"{logging_repo}: no tag {tag!r} (give a clone of "
                                    "github.com/mlcommons/logging with its tags)")
        archive = _git(logging_repo, "archive", "--format=tar", tag, "mlperf_logging")
        if archive.returncode:
            raise RoundCheckerError(f"{logging_repo}: git archive {tag} failed: "
                                    f"{printable(archive.stderr.decode(errors='replace'))[:200]}")
        _extract(archive.stdout, tag, cache_dir, target, logging_repo)
    link = _link_out(target)
    if link:
        raise RoundCheckerError(f"the {tag} checker under --cache_dir holds a link out of its "
                                f"tree ({printable(link)}); not run (remove {target})")
    return target


class _Tail:
    """Drains a text stream in a thread, keeping only its last TAIL_CHARS characters."""

    def __init__(self, stream) -> None:
        self._parts: collections.deque[str] = collections.deque()
        self._size = 0
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        for chunk in iter(lambda: stream.read(1 << 16), ""):
            self._parts.append(chunk[-TAIL_CHARS:])
            self._size += len(self._parts[-1])
            while self._size - len(self._parts[0]) >= TAIL_CHARS:
                self._size -= len(self._parts.popleft())

    def last_line(self) -> str:
        """The last non-blank line drained (waits up to 5 s for the stream to end)."""
        self._thread.join(5)
        lines = "".join(self._parts).strip().splitlines()
        return printable(lines[-1].strip())[:200] if lines else "no message"


def _verdict(line: str, expected: str) -> RoundVerdict | None:
    """The verdict a worker's output `line` gives on log `expected`; None when the line is
    anything else (not JSON, another log, fields of the wrong type)."""
    try:
        item = json.loads(line)
    except ValueError:
        return None
    if not isinstance(item, dict) or item.get("path") != expected \
            or not isinstance(item.get("passed"), bool) \
            or not isinstance(item.get("messages"), list) \
            or not all(isinstance(m, str) for m in item["messages"]):
        return None
    return RoundVerdict(item["passed"], tuple(m[:MESSAGE_CHARS] for m in item["messages"]))


def round_verdicts(paths: Sequence[str], ruleset: str, logging_repo: Path, cache_dir: Path,
                   tick: Callable[[], None] = lambda: None) -> dict[str, RoundVerdict]:
    """{path: verdict} of the compliance checker of `ruleset`'s round on each log of `paths`.

    logging_repo: a clone of mlcommons/logging; cache_dir: where tags are extracted.
    tick: called once per log checked (progress). The worker's stderr is drained as it comes
    (its last TAIL_CHARS kept for the message); its stdout must be one verdict line per log,
    in order, each at most MAX_LINE_CHARS: anything else stops it, and a RoundCheckerError
    names the round and the log.
    """
    source = package_source(logging_repo, ruleset_facts(ruleset).checker_tag, cache_dir)
    logs = list(dict.fromkeys(paths))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source), str(PROJECT_ROOT)]))
    worker = subprocess.Popen([sys.executable, "-m", "devtools.round_worker", ruleset],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                              cwd=source)

    def feed() -> None:
        try:
            for path in logs:
                worker.stdin.write(json.dumps(path) + "\n")
            worker.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # the worker stopped; its exit status says why

    stderr = _Tail(worker.stderr)
    threading.Thread(target=feed, daemon=True).start()
    verdicts: dict[str, RoundVerdict] = {}
    problem = None
    watchdog = threading.Timer(SILENCE_S, worker.kill)
    try:
        watchdog.start()
        while len(verdicts) < len(logs):
            line = worker.stdout.readline(MAX_LINE_CHARS + 1)
            watchdog.cancel()
            if not line:
                break
            found = _verdict(line, logs[len(verdicts)])
            if found is None:
                problem = f"printed {printable(line.strip())[:80]!r}, not its verdict"
                break
            verdicts[logs[len(verdicts)]] = found
            tick()
            watchdog = threading.Timer(SILENCE_S, worker.kill)
            watchdog.start()
    finally:
        watchdog.cancel()
        if problem is not None or len(verdicts) < len(logs):
            worker.kill()
        worker.stdout.close()  # whatever it prints after its verdicts is not read
        try:
            worker.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    if problem is None and len(verdicts) < len(logs):
        problem = f"stopped: {stderr.last_line()}"
    if problem is not None:
        raise RoundCheckerError(
            f"the {ruleset} round's checker ({source}) on {printable(logs[len(verdicts)])} "
            f"(log {len(verdicts) + 1} of {len(logs)}) {problem}")
    return verdicts
