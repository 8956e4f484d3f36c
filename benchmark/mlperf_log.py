"""Write a compliant BERT MLPerf log through `mlperf_logging.mllog`.

The trainer calls, in order:

    log = BertLogger("result_0.txt")
    log.submission(org="MyOrg", platform="1xH100", division="closed", status="onprem")
    log.cache_clear()
    log.init_start()
    log.seed(seed)
    log.hyperparameters(Hyperparameters(global_batch_size=256, ...))
    log.init_stop()
    log.run_start()
    for each block of eval_frequency samples:
        log.block_start(first_samples, block_samples)
        ...train...
        log.block_stop(first_samples)
        log.eval_start(samples); ...eval...; log.eval_stop(samples)
        log.eval_accuracy(samples, accuracy)
        stop at the first accuracy >= 0.720
    log.train_samples(samples)
    log.run_stop("success" or "aborted")
    log.close()

Sample counts (`samples`) are sequences trained since run_start; they are what BERT logs as
`epoch_num`, `first_epoch_num` and `epoch_count`. Each record's metadata also carries the
calling file and line, as mllog does (the package checker's seed check relies on it).
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import time
from dataclasses import dataclass, fields
from typing import Any, Callable, TextIO

from mlperf_logging.mllog import mllog

from benchmark import constants
from benchmark import log_keys as k
from benchmark.files import open_output

# Frames between mllog's caller lookup and the code calling a BertLogger method:
# _log_helper <- event/start/end <- BertLogger._log <- BertLogger.<method> <- caller.
_STACK_OFFSET = 3
_ids = itertools.count()


@dataclass(frozen=True)
class Hyperparameters:
    """The hyperparameters a closed-division BERT run logs (names are the log keys).

    global_batch_size: sequences per optimizer step (micro-batch x accumulation x replicas).
    opt_learning_rate_training_steps: steps of the polynomial learning-rate decay.
    opt_learning_rate_warmup_steps, num_warmup_steps: warm-up steps (the reference logs both).
    start_warmup_step: step at which warm-up starts (may be negative).
    """
    global_batch_size: int
    opt_base_learning_rate: float
    opt_epsilon: float
    opt_learning_rate_training_steps: int
    opt_learning_rate_warmup_steps: int
    num_warmup_steps: int
    start_warmup_step: int
    opt_lamb_beta_1: float
    opt_lamb_beta_2: float
    opt_lamb_weight_decay_rate: float
    gradient_accumulation_steps: int = 1

    def items(self) -> list[tuple[str, Any]]:
        """(log key, value) pairs in the order of `benchmark.log_keys.HYPERPARAMETERS`."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return [(key, values[key]) for key in k.HYPERPARAMETER_KEYS]


class BertLogger:
    """Writes one run's `:::MLLOG` lines to a file and/or a stream.

    path: log file to append to (None: none); never through a link nor on a FIFO
        (`benchmark.files.open_output`: RefusedOutput).
    stream: text stream to write to as well, e.g. sys.stdout (None: none).
    clock_ms: returns the time in ms since the epoch (None: the wall clock); tests and
        replays pass their own.
    root_dir: prefix trimmed from the `file` metadata of each record (None: this repository's
        root, so records name `reference/run_pretraining.py`, not a path on this machine).
    """

    def __init__(self, path: str | None = None, stream: TextIO | None = None,
                 clock_ms: Callable[[], float] | None = None, root_dir: str | None = None):
        self._logger = logging.getLogger(f"benchmark.mlperf_log.{next(_ids)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handlers: list[logging.Handler] = []
        self._file: TextIO | None = None
        if path is not None:
            self._file = os.fdopen(open_output(path, append=True), "a", encoding="utf-8")
            self._handlers.append(logging.StreamHandler(self._file))
        if stream is not None:
            self._handlers.append(logging.StreamHandler(stream))
        for handler in self._handlers:
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)
        if root_dir is None:
            root_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # mllog trims the prefix with a regular expression.
        self._mllogger = mllog.MLLogger(logger=self._logger, root_dir=re.escape(root_dir))
        self._clock_ms = clock_ms

    def now_ms(self) -> float:
        """The time this logger stamps a record with now, ms since the epoch."""
        return time.time() * 1000.0 if self._clock_ms is None else self._clock_ms()

    def _log(self, kind: str, key: str, value: Any = None,
             metadata: dict | None = None, time_ms: float | None = None) -> None:
        method = {"start": self._mllogger.start, "end": self._mllogger.end,
                  "event": self._mllogger.event}[kind]
        if time_ms is None:
            time_ms = None if self._clock_ms is None else self._clock_ms()
        method(key=key, value=value, metadata=metadata, time_ms=time_ms,
               stack_offset=_STACK_OFFSET)

    # Submission and set-up ----------------------------------------------------------------

    def submission(self, org: str, platform: str, division: str = "closed",
                   status: str = "onprem") -> None:
        """Log submission_benchmark (bert), _org, _division, _status and _platform."""
        self._log("event", k.SUBMISSION_BENCHMARK, k.BENCHMARK_NAME)
        self._log("event", k.SUBMISSION_ORG, org)
        self._log("event", k.SUBMISSION_DIVISION, division)
        self._log("event", k.SUBMISSION_STATUS, status)
        self._log("event", k.SUBMISSION_PLATFORM, platform)

    def cache_clear(self) -> None:
        """Log that the file-system caches were cleared before the run."""
        self._log("event", k.CACHE_CLEAR, True)

    def init_start(self) -> None:
        """Log the start of initialization (untimed, at most 30 minutes to init_stop)."""
        self._log("start", k.INIT_START)

    def init_stop(self) -> None:
        """Log the end of initialization."""
        self._log("end", k.INIT_STOP)

    def seed(self, seed: int) -> None:
        """Log the run's random seed (each of the 10 runs uses a different one)."""
        self._log("event", k.SEED, int(seed))

    def hyperparameters(self, hp: Hyperparameters,
                        eval_samples: int = constants.EVAL_SAMPLES) -> None:
        """Log every hyperparameter in `hp` and eval_samples (10,000 in a compliant run)."""
        for key, value in hp.items():
            self._log("event", key, value)
        self._log("event", k.EVAL_SAMPLES, int(eval_samples))

    def event(self, key: str, value: Any = None, metadata: dict | None = None) -> None:
        """Log any other point-in-time record (e.g. the trainer's informative settings)."""
        self._log("event", key, value, metadata)

    def weights_initialization(self, tensors: list[str]) -> None:
        """Log one weights_initialization record per tensor read from the initial checkpoint."""
        for name in tensors:
            self._log("event", k.WEIGHTS_INITIALIZATION, None, {"tensor": name})

    # The timed run ------------------------------------------------------------------------

    def run_start(self) -> None:
        """Log the start of the timed run."""
        self._log("start", k.RUN_START)

    def block_start(self, first_samples: int, samples: int,
                    started_ms: float | None = None) -> None:
        """Log a block of training from `first_samples` for `samples` samples; `started_ms`
        (`now_ms` when it began): a block logged once it is trained, stamped with its start
        (packed rows: a block's sample count is known only then)."""
        self._log("start", k.BLOCK_START, metadata={k.FIRST_EPOCH_NUM: int(first_samples),
                                                    k.EPOCH_COUNT: int(samples)},
                  time_ms=started_ms)

    def block_stop(self, first_samples: int) -> None:
        """Log the end of the block that started at `first_samples`."""
        self._log("end", k.BLOCK_STOP, metadata={k.FIRST_EPOCH_NUM: int(first_samples)})

    def eval_start(self, samples: int) -> None:
        """Log the start of the eval after `samples` samples of training."""
        self._log("start", k.EVAL_START, metadata={k.EPOCH_NUM: int(samples)})

    def eval_stop(self, samples: int) -> None:
        """Log the end of the eval after `samples` samples."""
        self._log("end", k.EVAL_STOP, metadata={k.EPOCH_NUM: int(samples)})

    def eval_accuracy(self, samples: int, accuracy: float) -> None:
        """Log the masked-LM accuracy of the eval after `samples` samples."""
        self._log("event", k.EVAL_ACCURACY, float(accuracy),
                  metadata={k.EPOCH_NUM: int(samples)})

    def train_samples(self, samples: int) -> None:
        """Log the samples trained when the run stopped."""
        self._log("event", k.TRAIN_SAMPLES, int(samples))

    def run_stop(self, status: str) -> None:
        """Log the end of the timed run; `status` is "success" (target reached) or "aborted"."""
        if status not in k.RUN_STOP_STATUSES:
            raise ValueError(f"run_stop status must be one of {k.RUN_STOP_STATUSES}")
        self._log("end", k.RUN_STOP, metadata={k.STATUS: status})

    def close(self) -> None:
        """Flush and close the log file."""
        for handler in self._handlers:
            handler.flush()
            handler.close()
            self._logger.removeHandler(handler)
        self._handlers.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "BertLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
