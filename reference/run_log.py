"""MLPerf log keys the trainer writes besides the benchmark's own (through BertLogger.event).

None of them is rejected by the official checker, which skips keys it has no rule for:

  weights_initialization   one per tensor read from --init_checkpoint (metadata: tensor)
  resume                   this process continues a run from a training checkpoint
                           (metadata: checkpoint, global_step, samples, and
                           skipped_checkpoints: newer ones that were incomplete or damaged);
                           benchmark.rules reports a log holding one as not a valid result
  noncompliant             one per reason the run is not a closed-division result (value: why)
  opt_name, max_sequence_length, max_predictions_per_seq, opt_lamb_learning_rate_decay_poly_power,
  mixed_precision          informative settings the reference also logs

A run that does not evaluate the full 10,000 samples logs its true `eval_samples`.

A resumed process appends its own complete section (init_start ... run_stop) to the same log,
with sample counts continuing from the checkpoint.
"""
from __future__ import annotations

import os

from benchmark.rules import RESUME

NONCOMPLIANT = "noncompliant"

__all__ = ["NONCOMPLIANT", "RESUME", "end_partial_line"]


def end_partial_line(path: str) -> bool:
    """End the last line of the local log file `path` if a killed process left it unfinished,
    so that the next record starts on a line of its own (the cut record stays, as one line the
    checker reports). Returns True if a newline was added."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return False
    with open(path, "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return False
        handle.write(b"\n")
    return True
