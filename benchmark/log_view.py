"""A BERT run as the rules see it: the parsed records plus what they say about the run.

`build_view(parsed)` reads a `ParsedLog` once and exposes the division, the batch size, the
samples trained, the evals (samples, accuracy, line) and the first eval at target, so each rule in
`benchmark.rules` stays a few lines. Nothing here judges; it only reads, and never raises on odd
values (wrong types come back as None).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from benchmark import constants
from benchmark import log_keys as k
from benchmark.mllog_parse import LogRecord, ParsedLog
from benchmark.rulesets import DEFAULT_RULESET


# The times a run_start/run_stop may have (ms since the epoch: 1990-01-01 to 2100-01-01) and the
# longest run whose minutes are shown and scored (30 days; published BERT runs: hours).
PLAUSIBLE_TIME_MS = (631_152_000_000, 4_102_444_800_000)
MAX_RUN_MINUTES = 30 * 24 * 60


def as_int(value: Any) -> int | None:
    """`value` as an int if it is a JSON integer or an integral finite float; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def as_count(value: Any) -> int | None:
    """`value` as an int (see `as_int`), also from a one-element list such as `[10000]`,
    the form some submitters' loggers give eval_samples and train_samples."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return as_int(value)


def as_number(value: Any) -> float | None:
    """`value` as a float if it is a JSON number (possibly NaN or infinite); else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return math.inf if value > 0 else -math.inf


def as_finite(value: Any) -> float | None:
    """`value` as a float if it is a finite JSON number; else None."""
    number = as_number(value)
    return number if number is not None and math.isfinite(number) else None


def is_valid_accuracy(value: float) -> bool:
    """An accuracy the official checker can accept: 0 <= value < 1 (it rejects 1.0 and above)."""
    return 0.0 <= value < 1.0


@dataclass(frozen=True)
class Eval:
    """One `eval_accuracy` record.

    samples: samples trained at the eval (its metadata `epoch_num`, or the run's
        train_samples when the evals do not carry a sample count), None if not known.
    accuracy: masked-LM accuracy, None if not a finite number.
    """
    record: LogRecord
    samples: int | None
    accuracy: float | None

    @property
    def line(self) -> int:
        """The eval_accuracy line."""
        return self.record.line


@dataclass
class LogView:
    """What a parsed log says about the run (see module docstring)."""
    parsed: ParsedLog
    by_key: dict[str, list[LogRecord]] = field(default_factory=dict)
    division: str = "closed"
    division_logged: bool = False
    batch_size: int | None = None
    ruleset: str = DEFAULT_RULESET
    trained: int | None = None
    samples_per_eval_logged: bool = True
    evals: list[Eval] = field(default_factory=list)
    first_at_target: Eval | None = None

    @property
    def path(self) -> str:
        """The log file."""
        return self.parsed.path

    @property
    def records(self) -> list[LogRecord]:
        """Well-formed records in file order."""
        return self.parsed.records

    def all(self, key: str) -> list[LogRecord]:
        """Every record with `key`, in file order."""
        return self.by_key.get(key, [])

    def first(self, key: str) -> LogRecord | None:
        """The first record with `key`, or None."""
        found = self.by_key.get(key)
        return found[0] if found else None

    def value(self, key: str, default: Any = None) -> Any:
        """The value of the first record with `key`, or `default`."""
        record = self.first(key)
        return default if record is None else record.value

    @property
    def run_start(self) -> LogRecord | None:
        """The first run_start record."""
        return self.first(k.RUN_START)

    @property
    def run_stop(self) -> LogRecord | None:
        """The first run_stop record."""
        return self.first(k.RUN_STOP)

    @property
    def status(self) -> str | None:
        """run_stop's metadata status, if it is a string."""
        stop = self.run_stop
        status = stop.metadata.get(k.STATUS) if stop else None
        return status if isinstance(status, str) else None

    @property
    def minutes(self) -> float | None:
        """Minutes from run_start to run_stop, None if either is missing, not a plausible
        time (`PLAUSIBLE_TIME_MS`) or more than MAX_RUN_MINUTES apart."""
        start, stop = self.run_start, self.run_stop
        if start is None or stop is None:
            return None
        low, high = PLAUSIBLE_TIME_MS
        if not (low <= start.time_ms < high and low <= stop.time_ms < high):
            return None
        minutes = (stop.time_ms - start.time_ms) / 60_000.0
        return minutes if abs(minutes) <= MAX_RUN_MINUTES else None

    @property
    def converged(self) -> bool:
        """run_stop says success and an eval reached the target before it."""
        stop, hit = self.run_stop, self.first_at_target
        return (self.status == k.SUCCESS and hit is not None and stop is not None
                and hit.line < stop.line)

    @property
    def reached_goal(self) -> bool:
        """The run counts as converged for scoring: closed, `converged`; open (its own
        stopping criterion), run_stop says success."""
        return self.converged if self.division == "closed" else self.status == k.SUCCESS

    @property
    def samples_to_converge(self) -> int | None:
        """Samples trained at the first eval at target, None if the run did not get there."""
        return self.first_at_target.samples if self.first_at_target else None

    @property
    def target(self) -> float | None:
        """The accuracy the run aims at: closed, the benchmark's 0.720; open, the run's own
        target_accuracy record when it logs one (None if not)."""
        if self.division == "closed":
            return constants.TARGET_MLM_ACCURACY
        value = as_finite(self.value(k.TARGET_ACCURACY))
        return value if value is not None and 0.0 < value < 1.0 else None

    @property
    def final_accuracy(self) -> float | None:
        """Accuracy of the last eval (None if there is none or it is not a number)."""
        return self.evals[-1].accuracy if self.evals else None


def _trained_samples(view: LogView) -> int | None:
    """The last train_samples logged after run_start (None if none).

    One logged before run_start is the configured length of the run, not what it trained
    (Habana's v1.1 logs write both), so it is not read as the samples trained.
    """
    start = view.run_start
    counts = [as_count(r.value) for r in view.all(k.TRAIN_SAMPLES)
              if start is None or r.line > start.line]
    counts = [c for c in counts if c is not None and c >= 0]
    return counts[-1] if counts else None


def _eval_samples(view: LogView, counts: list[int | None]) -> list[int | None]:
    """Samples trained at each eval, from the evals' epoch_num or from train_samples.

    The training rules have BERT report the eval's sample count as epoch_num ("Eval sample
    (integer)", RCP epoch reporting). Some accepted logs (NVIDIA's v1.0/v1.1 PyTorch code)
    write the same epoch_num on every eval and give the samples once, as train_samples after
    the run: then only the last eval's count is known (train_samples), the others are None.
    """
    if len(counts) > 1 and None not in counts and len(set(counts)) == 1:
        view.samples_per_eval_logged = False
        return [None] * (len(counts) - 1) + [view.trained]
    return [c if c is None or c >= 0 else None for c in counts]


def build_view(parsed: ParsedLog, ruleset: str = DEFAULT_RULESET) -> LogView:
    """Read `parsed` into a LogView for the rules of `ruleset` (never raises)."""
    view = LogView(parsed=parsed, ruleset=ruleset)
    for record in parsed.records:
        view.by_key.setdefault(record.key, []).append(record)

    division = view.value(k.SUBMISSION_DIVISION)
    view.division_logged = division in k.DIVISIONS
    view.division = division if view.division_logged else "closed"

    batch = as_int(view.value(k.GLOBAL_BATCH_SIZE))
    if batch is not None and 0 < batch <= k.MAX_GLOBAL_BATCH_SIZE:
        view.batch_size = batch

    view.trained = _trained_samples(view)
    records = view.all(k.EVAL_ACCURACY)
    counts = _eval_samples(view, [as_int(r.metadata.get(k.EPOCH_NUM)) for r in records])
    view.evals = [Eval(r, samples, as_finite(r.value)) for r, samples in zip(records, counts)]
    for ev in view.evals:
        if ev.accuracy is not None and is_valid_accuracy(ev.accuracy) \
                and ev.accuracy >= constants.TARGET_MLM_ACCURACY:
            view.first_at_target = ev
            break
    return view
