"""What a training run shows on the console: TensorFlow's native messages diverted to a file
(`divert_native_stderr`), absl lines without their machine prefix (`plain_console_logging`),
one live progress line (`LiveLine`) that host calls of `CallPace`'s length keep moving, and
the line of each eval (`eval_line`).
"""
from __future__ import annotations

import io
import logging as py_logging
import os
import sys
import time
from typing import TextIO

from absl import logging


def divert_native_stderr(path: str) -> str | None:
    """Send what native code writes to file descriptor 2 (TensorFlow's C++ code: CUDA probing,
    oneDNN, XLA) to `path` (appended; the folder is made), keeping Python's stderr (our
    messages, warnings, tracebacks, the one-line errors) on the console. Returns `path`, or
    None when the file cannot be opened (then nothing changes)."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return None
    sys.stderr.flush()
    console = os.dup(2)
    sys.stderr = io.TextIOWrapper(os.fdopen(console, "wb", buffering=0), write_through=True,
                                  encoding=sys.stderr.encoding, errors="backslashreplace")
    handler = logging.get_absl_handler().python_handler
    handler.stream = sys.stderr  # absl's console handler took the old stderr at import
    os.dup2(target, 2)
    os.close(target)
    return path


class _PlainFormatter(py_logging.Formatter):
    def format(self, record: py_logging.LogRecord) -> str:
        prefix = {"WARNING": "warning: ", "ERROR": "error: ", "CRITICAL": "error: "}.get(
            record.levelname, "")
        return prefix + record.getMessage()


_OURS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name)
              + os.sep for name in ("reference", "benchmark", "cleanup_scripts"))


class _OnlyOurInfo(py_logging.Filter):
    """Passes warnings and errors from anywhere, INFO and below only from this project's
    modules (TensorFlow logs its checkpoint sharding timings through absl too)."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        return record.levelno >= py_logging.WARNING or record.pathname.startswith(_OURS)


def plain_console_logging() -> None:
    """absl's console lines as `W message` instead of `W1125 22:35:59.275889 140540686027648
    preflight.py:87] message`; other libraries' INFO lines (TensorFlow's checkpoint sharding
    timings) left out."""
    handler = logging.get_absl_handler().python_handler
    handler.setFormatter(_PlainFormatter())
    handler.addFilter(_OnlyOurInfo())
    py_logging.getLogger("tensorflow").setLevel(py_logging.WARNING)


class LiveLine:
    """One progress line: rewritten in place on a terminal after each update, a full line every
    `every_s` seconds elsewhere (a file, CI); lines that stay (`keep`: an eval, the end) clear
    it first. `stream` defaults to sys.stderr (read when used, after any diversion)."""

    def __init__(self, every_s: float = 60.0, stream: TextIO | None = None,
                 interactive: bool | None = None) -> None:
        self._stream = stream
        self._interactive = interactive
        self.every_s = every_s
        self._shown = False
        self._last = float("-inf")
        self._pending: str | None = None  # elsewhere: the newest text not printed yet

    @property
    def stream(self) -> TextIO:
        """Where the lines go."""
        return self._stream or sys.stderr

    @property
    def interactive(self) -> bool:
        """Whether the stream is a terminal (the line is rewritten in place)."""
        if self._interactive is None:
            try:
                self._interactive = self.stream.isatty()
            except (AttributeError, ValueError):
                self._interactive = False
        return self._interactive

    def update(self, text: str) -> None:
        """Show `text` as the progress line (elsewhere than a terminal: when `every_s` passed
        since the last line)."""
        now = time.monotonic()
        if self.interactive:
            self.stream.write("\r\x1b[K" + text)
            self._shown = True
        elif now - self._last >= self.every_s:
            self.stream.write(text + "\n")
            self._last, self._pending = now, None
        else:
            self._pending = text
        self.stream.flush()

    def keep(self, text: str) -> None:
        """A line that stays (an eval, the end of the run), below the progress line; elsewhere
        than a terminal the progress not printed yet comes first."""
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False
        self._flush_pending()
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the progress line, leaving its last text on the screen (elsewhere: printing
        the progress not printed yet)."""
        if self._shown:
            self.stream.write("\n")
            self._shown = False
        self._flush_pending()
        self.stream.flush()

    def _flush_pending(self) -> None:
        if self._pending is not None:
            self.stream.write(self._pending + "\n")
            self._pending = None
            self._last = time.monotonic()


class CallPace:
    """How many updates the next compiled host call runs: the first call one update (it
    compiles), the second one update (it measures the pace), then each call twice the longest
    so far, at most `most` (the --iterations_per_loop of the reference) and at most what fits
    in `seconds` at the pace measured, so that a progress line comes within `seconds` of the
    start and every few seconds after. The call boundaries change no result: every update
    runs in the same order, dropout is keyed by the micro-step, and calls end at checkpoint
    steps whatever their length. Not `timed` (several workers, whose calls must all run the
    same updates), the lengths only double up to `most`: no worker's clock decides them."""

    def __init__(self, most: int, seconds: float, timed: bool = True) -> None:
        self.most, self.seconds, self.timed = max(1, most), seconds, timed
        self.per_update: float | None = None  # seconds an update, from the calls after the first
        self.calls = 0
        self.longest = 0

    def updates(self, room: int) -> int:
        """The updates of the next call, at most `room` (the budget, the next checkpoint)."""
        if self.per_update is None:
            return 1
        fits = max(1, int(self.seconds / max(self.per_update, 1e-9))) if self.timed else self.most
        return max(1, min(room, self.most, fits, 2 * self.longest))

    def took(self, updates: int, seconds: float) -> None:
        """Record that a call of `updates` updates took `seconds` (the first is compilation)."""
        self.calls += 1
        self.longest = max(self.longest, updates)
        if self.calls > 1 and updates:
            self.per_update = seconds / updates


def time_to_target(evals: list[tuple[int, float]], target: float, samples: int,
                   budget_samples: int, samples_per_second: float | None) -> str:
    """The ETA part of the progress line: how long until the target, and how it was found.

    `evals`: (samples, masked-LM accuracy) of the evals so far; `samples`: trained now;
    `budget_samples`: the samples at the step budget; `samples_per_second`: the training pace
    (None: not measured yet). With two evals whose accuracy rises, the target is placed where
    the line through the last two reaches it ("target ~1h02m05s (trend of the last 2
    evals)"); past the budget, or without such a trend, the time to the budget is the bound
    ("target not within the step budget at the trend (budget in ...)" or "step budget in
    ... (no rising eval trend yet)").
    """
    if not samples_per_second:
        return "measuring the pace"
    to_budget = duration(max(0, budget_samples - samples) / samples_per_second)
    if len(evals) >= 2:
        (s0, a0), (s1, a1) = evals[-2], evals[-1]
        if s1 > s0 and a1 > a0:
            due = s1 + (target - a1) * (s1 - s0) / (a1 - a0)
            if due > budget_samples:
                return f"target not within the step budget at the trend (budget in {to_budget})"
            seconds = max(0.0, due - samples) / samples_per_second
            return f"target ~{duration(seconds)} (trend of the last 2 evals)"
    return f"step budget in {to_budget} (no rising eval trend yet)"


def duration(seconds: float) -> str:
    """`seconds` as "12m05s", or "1h02m05s" from an hour on."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else \
        f"{rest // 60}m{rest % 60:02d}s"


def eval_line(number: int, step: int, samples: int, metrics: dict[str, float],
               target: float, seconds: float) -> str:
    """The console line of eval `number`: where, the accuracy against the target, how long."""
    accuracy = metrics["masked_lm_accuracy"]
    verdict = "target reached" if accuracy >= target else f"target {target:.3f}"
    return (f"eval {number} at step {step:,} ({samples:,} samples): masked_lm_accuracy "
            f"{accuracy:.4f} ({verdict}), masked_lm_loss {metrics['masked_lm_loss']:.4f}, "
            f"{seconds:.1f} s")
