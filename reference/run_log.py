"""MLPerf log records the trainer writes besides `benchmark.mlperf_log.BertLogger`'s.

`ExtraEvents` appends `:::MLLOG` point events to the same file (and stream) through its own
`mlperf_logging.mllog.MLLogger`; every record is flushed as it is written, so the two writers'
lines interleave in time order. Keys written here, none of which the official checker rejects
(it skips keys it has no rule for):

  weights_initialization   one per tensor read from --init_checkpoint (metadata: tensor)
  resume                   this process continues a run from a training checkpoint
                           (metadata: checkpoint, global_step, samples)
  noncompliant             one per reason the run is not a closed-division result (value: why)
  opt_name, max_sequence_length, max_predictions_per_seq, opt_lamb_learning_rate_decay_poly_power,
  mixed_precision          informative settings the reference also logs
  and, for a run that does not evaluate the full 10,000 samples, the hyperparameters with the
  true `eval_samples` (`hyperparameters`), because BertLogger always writes 10,000.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, TextIO

from mlperf_logging.mllog import constants as mlc
from mlperf_logging.mllog import mllog

from benchmark.mlperf_log import Hyperparameters

RESUME = "resume"
NONCOMPLIANT = "noncompliant"
_ids = itertools.count()


class ExtraEvents:
    """Appends MLPerf point events to `path` (None: nowhere) and/or `stream`."""

    def __init__(self, path: str | None = None, stream: TextIO | None = None):
        self._logger = logging.getLogger(f"reference.run_log.{next(_ids)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handlers: list[logging.Handler] = []
        if path is not None:
            self._handlers.append(logging.FileHandler(path, mode="a", encoding="utf-8"))
        if stream is not None:
            self._handlers.append(logging.StreamHandler(stream))
        for handler in self._handlers:
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)
        self._mllogger = mllog.MLLogger(logger=self._logger)

    def event(self, key: str, value: Any = None, metadata: dict | None = None) -> None:
        """One point-in-time record; file/line metadata name this method's caller."""
        self._mllogger.event(key=key, value=value, metadata=metadata, stack_offset=2)

    def weights_initialization(self, tensors: list[str]) -> None:
        """One `weights_initialization` record per tensor restored from the initial checkpoint."""
        for name in tensors:
            self._mllogger.event(key=mlc.WEIGHTS_INITIALIZATION, value=None,
                                 metadata={"tensor": name}, stack_offset=2)

    def hyperparameters(self, hp: Hyperparameters, eval_samples: int) -> None:
        """Every hyperparameter of `hp`, then the true `eval_samples`."""
        for key, value in hp.items():
            self._mllogger.event(key=key, value=value, stack_offset=2)
        self._mllogger.event(key=mlc.EVAL_SAMPLES, value=int(eval_samples), stack_offset=2)

    def close(self) -> None:
        """Flush and close the file."""
        for handler in self._handlers:
            handler.flush()
            handler.close()
            self._logger.removeHandler(handler)
        self._handlers.clear()
