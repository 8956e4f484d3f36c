"""MLPerf log keys the trainer writes besides the benchmark's own (through BertLogger.event).

None of them is rejected by the official checker, which skips keys it has no rule for:

  weights_initialization   one per tensor read from --init_checkpoint (metadata: tensor)
  resume                   this process continues a run from a training checkpoint
                           (metadata: checkpoint, global_step, samples, and
                           skipped_checkpoints: newer ones that were incomplete or damaged);
                           benchmark.rules reports a log holding one as not a valid result
  noncompliant             one per reason the run is not a closed-division result (value: why)
  opt_name, max_sequence_length, max_predictions_per_seq, opt_lamb_learning_rate_decay_poly_power,
  mixed_precision          informative settings the MLCommons reference also logs

A run that does not evaluate the full 10,000 samples logs its true `eval_samples`.

A resumed process appends its own complete section (init_start ... run_stop) to the same log,
with sample counts continuing from the checkpoint. A run that starts over (no checkpoint to
resume from) starts a new log: the earlier one is renamed first
(`reference.run_outputs.set_aside_earlier_run`). A process that fails after run_start (bad
data, an output it cannot write, an internal error) still ends its section with run_stop
status "aborted" before it exits.

The trainer writes the log through `LogFile`, a stream of its own rather than a logging file
handler, so that a write that fails (a full disk) is an error it can report in one line: the
logging module would print a traceback and carry on.
"""
from __future__ import annotations

import os
from typing import TextIO

from benchmark.files import open_output
from reference.error_text import OutputError, write_failure


def end_partial_line(path: str) -> bool:
    """End the last line of the local log file `path` if a killed process left it unfinished,
    so that the next record starts on a line of its own (the cut record stays, as one line the
    checker reports). Returns True if a newline was added. Never through a link nor on a FIFO
    or device (`benchmark.files.open_output`: RefusedOutput)."""
    if not os.path.lexists(path) or os.lstat(path).st_size == 0:
        return False
    with os.fdopen(open_output(path), "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return False
        handle.write(b"\n")
    return True


class LogFile:
    """The MLPerf log as the text stream that BertLogger writes to: records are appended to the
    local file `path` (flushed with each record) and copied to `echo` (e.g. sys.stdout).

    path or echo may be None (a worker that writes no log passes both). Opening the file (its
    folder is created, a line a killed process left unfinished is ended) raises OutputError,
    or RefusedOutput for a link or a FIFO there (never followed nor opened). A
    later write that fails is kept rather than raised, since BertLogger writes through the
    logging module, which would print a traceback and go on; the file gets nothing more after
    it, and `check()` raises it as OutputError.
    """

    def __init__(self, path: str | None, echo: TextIO | None = None):
        self.path = path
        self._echo = echo
        self._file = None
        self._error: OSError | None = None
        if path is None:
            return
        try:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.lexists(folder):
                os.makedirs(folder)
            end_partial_line(path)
            self._file = os.fdopen(open_output(path, append=True), "a", encoding="utf-8")
        except OSError as err:
            raise OutputError(f"--mlperf_log: {path}: cannot write ({write_failure(err)})") \
                from err

    def _to_file(self, method: str, *args) -> None:
        if self._file is None or self._error is not None:
            return
        try:
            getattr(self._file, method)(*args)
        except OSError as err:
            self._error = err

    def write(self, text: str) -> None:
        """Append `text` to the file (unless a write failed before) and to echo."""
        self._to_file("write", text)
        if self._echo is not None:
            self._echo.write(text)

    def flush(self) -> None:
        """Flush the file and echo."""
        self._to_file("flush")
        if self._echo is not None:
            self._echo.flush()

    def check(self) -> None:
        """Raise OutputError if a write to the file failed."""
        if self._error is not None:
            raise OutputError(f"--mlperf_log: {self.path}: cannot write "
                              f"({write_failure(self._error)})") from self._error

    def close(self) -> None:
        """Close the file (a failure to flush its last records is kept for `check`)."""
        if self._file is None:
            return
        try:
            self._file.close()  # closed even when its last flush fails
        except OSError as err:
            self._error = self._error or err
