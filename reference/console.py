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
    """How many updates the next compiled host call runs: at most `most` (the
    --iterations_per_loop of the reference), fewer when that would take longer than
    `seconds` at the pace measured so far, so that a progress line comes every few seconds.
    The call boundaries change no result: every update runs in the same order, dropout is
    keyed by the micro-step, and calls end at checkpoint steps whatever their length."""

    def __init__(self, most: int, seconds: float) -> None:
        self.most, self.seconds = max(1, most), seconds
        self.per_update: float | None = None
        self.calls = 0

    def updates(self, room: int) -> int:
        """The updates of the next call, at most `room` (the budget, the next checkpoint)."""
        if self.per_update is None:  # the first call compiles: one update, then measure
            return max(1, min(room, 1 if self.calls == 0 else self.most))
        fits = max(1, int(self.seconds / max(self.per_update, 1e-9)))
        return max(1, min(room, self.most, fits))

    def took(self, updates: int, seconds: float) -> None:
        """Record that a call of `updates` updates took `seconds` (the first is compilation)."""
        self.calls += 1
        if self.calls > 1 and updates:
            self.per_update = seconds / updates


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
