"""What a training run shows on the console: TensorFlow's own messages kept off it, absl lines
without their machine prefix, and one live progress line.

- `divert_native_stderr`: TensorFlow's C++ code (CUDA probing, oneDNN, XLA) writes straight to
  file descriptor 2; this points that descriptor at a file and gives Python's `sys.stderr` (our
  messages, warnings, tracebacks, the one-line errors) the console back.
- `plain_console_logging`: absl's console lines as `W message` instead of
  `W1125 22:35:59.275889 140540686027648 preflight.py:87] message`; TensorFlow's Python
  loggers kept to warnings.
- `LiveLine`: the progress of a run. On a terminal one line rewritten in place after each host
  call; elsewhere (a file, CI) a full line at most every `every_s` seconds. Lines that stay
  (`LiveLine.keep`: an eval, the end) clear the live line first.
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
    """Send what native code writes to file descriptor 2 to `path` (appended; the folder is
    made), keeping Python's stderr on the console. Returns `path`, or None when the file
    cannot be opened (then nothing changes)."""
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
    """absl's console lines without the time, thread and source prefix; other libraries'
    INFO lines (TensorFlow's checkpoint sharding timings) left out."""
    handler = logging.get_absl_handler().python_handler
    handler.setFormatter(_PlainFormatter())
    handler.addFilter(_OnlyOurInfo())
    py_logging.getLogger("tensorflow").setLevel(py_logging.WARNING)


class LiveLine:
    """One progress line: rewritten in place on a terminal, a line every `every_s` seconds
    elsewhere. `stream` defaults to sys.stderr (read when used, after any diversion)."""

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
        return self._stream or sys.stderr

    @property
    def interactive(self) -> bool:
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
