"""The BERT rules the official `mlperf_logging` checker does not enforce, as a list of data.

Each `Rule` is a name, a severity, the division(s) it applies to, one sentence saying what it
requires, the source it enforces, and a small function that reads a `LogView` and yields
`(line, message)` for every place the rule is broken (line 0: the whole file). Adding a rule is
adding an entry to RULES. The official rules (key presence, order, ruleset checks) run
separately, see `benchmark.official`.

An error must have a source: a section of the MLPerf training rules
(mlcommons/training_policies, training_rules.adoc) or the official ruleset YAML. What no rule
forbids but looks wrong is a warning. Where an accepted published result contradicts a
reading of the rules, the reading gives way (see `benchmark.cadence` for the eval schedule).
A check yields a `Mild(...)` message for a finding that is only a warning within a rule whose
other findings are errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from benchmark import cadence, constants
from benchmark import log_keys as k
from benchmark.log_view import (LogView, as_count, as_finite, as_int, as_number,
                                is_valid_accuracy)
from benchmark.problems import ERROR, WARNING, Problem
from benchmark.rulesets import ruleset

# Where each error comes from, quoted: the MLPerf training rules (mlcommons/training_policies,
# training_rules.adoc; the sentences are the same in every round with BERT, 1.0-5.0) and the
# official ruleset YAML (mlcommons/logging). A rule enforces what its sentence says, no more.
RULES_TEXT = "training_rules.adoc"
SRC_QUALITY = cadence.RULE_SENTENCE
SRC_THOROUGH = (f"{RULES_TEXT}, Quality measure: \"The quality measure must be evaluated ... at "
                "least as thoroughly (in terms of number of tests per set) as in the reference "
                "implementation.\" (the reference evaluates 10,000 samples)")
SRC_TARGET = (f"{RULES_TEXT}, Quality measure: \"Each run must reach a target quality level on "
              "the reference implementation quality measure.\"; closed_bert.yaml: "
              "\"(v['value'] >= 0.720) and v['value'] < 1.0\"")
SRC_CONTIGUOUS = (f"{RULES_TEXT}, Run Results: \"A run result consists of a wall-clock timing "
                  "measurement for a contiguous period that includes ... using the dataset to "
                  "train the model\"")
SRC_NOT_PAUSED = f"{RULES_TEXT}, Run Results: \"The clock may not be paused during the run.\""
SRC_CLOCK_START = (f"{RULES_TEXT}, Run Results: \"The clock must start before any part of the "
                   "system touches the dataset\"")
SRC_EVAL_SAMPLE = (f"{RULES_TEXT}, Epoch reporting for deprecated benchmarks: \"BERT | Training "
                   "sample (integer)\"")
SRC_TRAIN_SAMPLES = (f"{RULES_TEXT}, RCP Rules and Guidelines: \"submitters are allowed to add "
                     "an extra log line with key set to train_samples and value the number of "
                     "samples to converge\"")
SRC_YAML_ACCURACY = "closed_bert.yaml: \"(v['value'] >= 0.720) and v['value'] < 1.0\""
SRC_BENCHMARK = ("closed_common.yaml: submission_benchmark \"EXACTLY_ONE\"; the package checker "
                 "reads results/<system>/bert as BERT logs")
SRC_HYPERPARAMETERS = "closed_bert.yaml of the round: each hyperparameter \"REQ: EXACTLY_ONE\""
SRC_SUCCESS = (f"{SRC_TARGET}; mllog: run_stop status 'success' says the run reached it, "
               "'aborted' that it did not")

Finding = tuple[int, str]


class Mild(str):
    """A finding message that is only a warning, whatever the rule's severity."""
MAX_FINDINGS = 4  # per rule and log; further findings are summarized in one line
NOT_LOGGED = "the closed division requires these hyperparameters, not logged: "


@dataclass(frozen=True)
class Rule:
    """One BERT rule: `check(view)` yields (line, message) for each violation.

    `open_severity` replaces `severity` for open-division logs, where the rules allow a
    different eval schedule and eval set (None: the same severity).
    `beyond_official`: the rule enforces a training-rule sentence that the official
    compliance checker does not test, so an accepted result may break it
    (`devtools.agreement` lists those instead of counting them as disagreements).
    """
    name: str
    severity: str
    summary: str
    check: Callable[[LogView], Iterable[Finding]]
    source: str = ""
    divisions: tuple[str, ...] = k.DIVISIONS
    open_severity: str | None = None
    beyond_official: bool = False

    def severity_for(self, division: str | None) -> str:
        """The severity of this rule's findings in a log of `division`."""
        return self.open_severity if division == "open" and self.open_severity else self.severity


def _samples(n: int | None) -> str:
    """A sample count for messages: 150,000."""
    return "?" if n is None else f"{n:,}"


def _show(value) -> str:
    """A logged value for a message: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bounds(hp: k.Hyperparameter) -> str:
    """The allowed range of a hyperparameter in words: ">= 1", "> 0 and < 1"."""
    low = None if hp.minimum is None else (">" if hp.minimum_open else ">=") + f" {hp.minimum:g}"
    high = None if hp.maximum is None else ("<" if hp.maximum_open else "<=") + f" {hp.maximum:g}"
    return " and ".join(b for b in (low, high) if b)


def _target() -> str:
    """The target accuracy for messages: 0.720."""
    return f"{constants.TARGET_MLM_ACCURACY:.3f}"


def _keys(view: LogView, *keys: str) -> list:
    """Records with any of `keys`, in file order."""
    wanted = set(keys)
    return [r for r in view.records if r.key in wanted]


# --------------------------------------------------------------------------------------------
# Checks. Each takes a LogView and yields (line, message).

def check_benchmark(view: LogView) -> Iterator[Finding]:
    """submission_benchmark names BERT."""
    record = view.first(k.SUBMISSION_BENCHMARK)
    if record is not None and record.value != k.BENCHMARK_NAME:
        yield record.line, (f"submission_benchmark is {_show(record.value)}; this checker checks "
                            f"'{k.BENCHMARK_NAME}' logs")


def check_timestamps(view: LogView) -> Iterator[Finding]:
    """time_ms does not decrease from one record to the next (a warning: several ranks log
    the start-up records a few ms apart, submission records get time_ms 0 after the run, and
    offline evaluation stamps evals with their checkpoint's time, which the rules allow)."""
    previous = None
    for record in view.records:
        if not math.isfinite(record.time_ms):
            continue  # reported by the parser
        if previous is not None and record.time_ms < previous.time_ms:
            yield record.line, (f"{record.key} at time_ms {record.time_ms:.0f} is earlier than "
                                f"{previous.key} on line {previous.line} ({previous.time_ms:.0f})")
        previous = record


def check_run_time(view: LogView) -> Iterator[Finding]:
    """run_stop is not earlier than run_start: the run's time is a wall-clock period."""
    start, stop = view.run_start, view.run_stop
    if start is None or stop is None or not (math.isfinite(start.time_ms)
                                             and math.isfinite(stop.time_ms)):
        return
    if stop.time_ms < start.time_ms:
        yield stop.line, (f"run_stop at time_ms {stop.time_ms:.0f} is earlier than run_start "
                          f"(line {start.line}, {start.time_ms:.0f}); the run has no duration")


def _first_of(records: list, where: str, why: str, mild: bool) -> Iterator[Finding]:
    """One finding for the first of `records` (and how many more), if any."""
    if records:
        more = f" (and {len(records) - 1} more)" if len(records) > 1 else ""
        message = f"{records[0].key} {where}{more}; {why}"
        yield records[0].line, Mild(message) if mild else message


def check_run_interval(view: LogView) -> Iterator[Finding]:
    """Training (blocks, epochs) lies between run_start and run_stop. Evals outside are only
    warnings: an eval of the initial checkpoint before the clock starts is untimed, and the
    rules allow evaluating timestamped checkpoints after the clock stops."""
    start, stop = view.run_start, view.run_stop
    training = _keys(view, *k.TRAINING_KEYS)
    evals = {k.EVAL_START, k.EVAL_STOP, k.EVAL_ACCURACY}
    if start is not None:
        early = [r for r in training if r.line < start.line]
        yield from _first_of([r for r in early if r.key not in evals],
                             f"before run_start (line {start.line})",
                             "training belongs inside the timed run", False)
        yield from _first_of([r for r in early if r.key in evals],
                             f"before run_start (line {start.line})",
                             "an eval before the clock starts is not timed", True)
    if stop is not None:
        late = [r for r in training if r.line > stop.line]
        yield from _first_of([r for r in late if r.key not in evals],
                             f"after run_stop (line {stop.line})",
                             "training after the clock stopped is not timed", False)
        yield from _first_of([r for r in late if r.key in evals],
                             f"after run_stop (line {stop.line})",
                             "allowed only as offline evaluation of timestamped checkpoints",
                             True)


def _hyperparameter_keys(view: LogView) -> list[tuple[str, k.Hyperparameter]]:
    """(key in the log's ruleset, hyperparameter) for every BERT hyperparameter."""
    epsilon = ruleset(view.ruleset).epsilon_key
    return [(epsilon if hp.key == k.OPT_EPSILON else hp.key, hp) for hp in k.HYPERPARAMETERS]


def check_hyperparameters(view: LogView) -> Iterator[Finding]:
    """Closed: every hyperparameter of the ruleset's closed_bert.yaml is logged (an error, as
    there); any division: a value of the wrong type or out of range is a warning (no rule
    bounds them, and accepted results log e.g. opt_learning_rate_training_steps 0), except
    a global_batch_size that is no batch size, reported by bert/eval-cadence."""
    keys = _hyperparameter_keys(view)
    missing = [key for key, _ in keys if view.first(key) is None]
    if missing and view.division == "closed":
        yield 0, NOT_LOGGED + ", ".join(missing)
    for key, hp in keys:
        record = view.first(key)
        if record is None:
            continue
        value = record.value
        number = as_int(value) if hp.kind == "int" else as_finite(value)
        if number is None:
            kind = "an integer" if hp.kind == "int" else "a finite number"
            yield record.line, Mild(f"{key} is {_show(value)}; expected {kind} ({hp.meaning})")
            continue
        low_ok = hp.minimum is None or (number > hp.minimum if hp.minimum_open
                                        else number >= hp.minimum)
        high_ok = hp.maximum is None or (number < hp.maximum if hp.maximum_open
                                         else number <= hp.maximum)
        if not (low_ok and high_ok):
            yield record.line, Mild(f"{key} is {_show(value)}; expected {_bounds(hp)} "
                                    f"({hp.meaning})")


def check_eval_samples(view: LogView) -> Iterator[Finding]:
    """eval_samples is at least the reference's 10,000 (more is as thorough: a warning, since
    BERT's eval set holds 10,000)."""
    for record in view.all(k.EVAL_SAMPLES):
        count = as_count(record.value)
        if count is None or count < constants.EVAL_SAMPLES:
            yield record.line, (f"eval_samples is {_show(record.value)}; the reference evaluates "
                                f"{constants.EVAL_SAMPLES:,} samples and closed runs at least as "
                                "many")
        elif count > constants.EVAL_SAMPLES:
            yield record.line, Mild(f"eval_samples is {count:,}; BERT's eval set holds "
                                    f"{constants.EVAL_SAMPLES:,} samples")


def check_train_samples(view: LogView) -> Iterator[Finding]:
    """train_samples is a sample count; logged after run_start, it is not below the samples of
    the first eval at target (the RCP check reads it as the samples to converge). One logged
    before run_start is the configured run length and is not compared."""
    start = view.run_start
    target = view.samples_to_converge if view.samples_per_eval_logged else None
    for record in view.all(k.TRAIN_SAMPLES):
        value = as_count(record.value)
        if value is None or value < 0:
            yield record.line, f"train_samples is {_show(record.value)}; it must be a sample count"
        elif target is not None and value < target and (start is None or
                                                          record.line > start.line):
            yield record.line, (f"train_samples is {value:,} but the eval at target was logged "
                                f"after {target:,} samples; the samples to converge cannot be "
                                "fewer")


def check_eval_epoch_num(view: LogView) -> Iterator[Finding]:
    """epoch_num of eval records is a non-negative integer (samples trained)."""
    for record in _keys(view, k.EVAL_START, k.EVAL_STOP, k.EVAL_ACCURACY):
        if k.EPOCH_NUM not in record.metadata:
            continue  # the official checker requires it
        raw = record.metadata[k.EPOCH_NUM]
        samples = as_int(raw)
        if samples is None or samples < 0:
            yield record.line, (f"{record.key} epoch_num is {_show(raw)}; for BERT it is the "
                                "number of samples trained, a non-negative integer")


def check_eval_accuracy(view: LogView) -> Iterator[Finding]:
    """eval_accuracy values are finite numbers in [0, 1)."""
    for ev in view.evals:
        number = as_number(ev.record.value)
        if number is None or not math.isfinite(number) or not is_valid_accuracy(number):
            yield ev.line, (f"eval_accuracy is {_show(ev.record.value)}; masked-LM accuracy "
                            "must be a finite number in [0, 1)")


def check_eval_sequence(view: LogView) -> Iterator[Finding]:
    """Where eval_start/eval_stop are logged: eval_start -> eval_stop -> eval_accuracy, same
    epoch_num, nothing interleaved. The official rules make the pair optional
    (AT_LEAST_ONE_OR(block_start)) and no rule orders them, so this only warns."""
    if not view.all(k.EVAL_START) and not view.all(k.EVAL_STOP):
        return
    started = None   # open eval_start
    stopped = None   # eval_stop still waiting for its eval_accuracy
    for record in _keys(view, k.EVAL_START, k.EVAL_STOP, k.EVAL_ACCURACY, k.BLOCK_START,
                        k.RUN_STOP):
        samples = record.metadata.get(k.EPOCH_NUM)
        if record.key in (k.EVAL_START, k.BLOCK_START, k.RUN_STOP) and stopped is not None:
            yield stopped.line, (f"eval_stop is not followed by its eval_accuracy (next came "
                                 f"{record.key} on line {record.line})")
            stopped = None
        if record.key == k.EVAL_START:
            if started is not None:
                yield record.line, (f"eval_start while the eval started on line {started.line} "
                                    "has no eval_stop")
            started = record
        elif record.key == k.EVAL_STOP:
            if started is None:
                yield record.line, "eval_stop without an eval_start before it"
            elif started.metadata.get(k.EPOCH_NUM) != samples:
                yield record.line, (f"eval_stop epoch_num {_show(samples)} differs from its "
                                    f"eval_start (line {started.line}: "
                                    f"{_show(started.metadata.get(k.EPOCH_NUM))})")
            if stopped is not None:
                yield stopped.line, "eval_stop is not followed by its eval_accuracy"
            started, stopped = None, record
        elif record.key == k.EVAL_ACCURACY:
            if stopped is None:
                yield record.line, ("eval_accuracy without an eval_stop before it (each eval "
                                    "is eval_start, eval_stop, eval_accuracy)")
            elif stopped.metadata.get(k.EPOCH_NUM) != samples:
                yield record.line, (f"eval_accuracy epoch_num {_show(samples)} differs from its "
                                    f"eval_stop (line {stopped.line}: "
                                    f"{_show(stopped.metadata.get(k.EPOCH_NUM))})")
            stopped = None
    if started is not None:
        yield started.line, "eval_start never followed by eval_stop"
    if stopped is not None:
        yield stopped.line, "eval_stop is not followed by its eval_accuracy"


def check_eval_cadence(view: LogView) -> Iterator[Finding]:
    """Closed division ("CLOSED: ... at the same frequency"; an open run picks its own
    schedule): evals at the due points of eval_frequency(global_batch_size)
    (`benchmark.cadence`). A schedule of another interval, an eval well before its due
    point, a second eval for one due point, a skipped due point or samples going backwards
    is an error; drift and lateness seen in accepted results are warnings."""
    if not view.evals:
        return
    batch = view.batch_size
    if batch is None:
        record = view.first(k.GLOBAL_BATCH_SIZE)
        yield (record.line if record else 0), (
            f"global_batch_size is {_show(record.value) if record else 'not logged'}; the "
            "eval interval is computed from the batch size, so the eval schedule cannot be "
            "checked")
        return
    findings = cadence.judge_schedule(batch, [ev.samples for ev in view.evals], view.trained,
                                      view.samples_per_eval_logged)
    for finding in findings:
        line = view.evals[finding.index].line
        yield line, finding.message if finding.error else Mild(finding.message)


def _block_span(record) -> tuple[int, int] | None:
    """(first, end) of a block_start whose first_epoch_num and epoch_count are usable."""
    first = as_int(record.metadata.get(k.FIRST_EPOCH_NUM))
    count = as_int(record.metadata.get(k.EPOCH_COUNT))
    if first is None or count is None or count <= 0:
        return None
    return first, first + count


def check_blocks(view: LogView) -> Iterator[Finding]:
    """Blocks pair up (block_stop repeats its block_start's first_epoch_num) and tile the run:
    each starts where the previous one ended.

    BERT counts in samples, and when the blocks do too (some block ends where the eval after
    it is logged), the blocks start at 0 and every eval is at the end of its block. A sample
    count and the first step boundary at or after it (a multiple of the batch) count as the
    same point, so blocks may carry nominal sizes (eval_frequency) while evals carry the
    samples actually trained. Blocks in another unit (steps, epochs) are only checked for
    pairing and tiling. After an inconsistency the count resynchronizes at the next eval, so
    one bad number gives one or two findings, not one per block. The official YAML only asks
    block_start for a positive epoch_count and a first_epoch_num, so these are warnings.
    """
    if not view.all(k.BLOCK_START) and not view.all(k.BLOCK_STOP):
        return
    batch = view.batch_size

    def same(a: int, b: int) -> bool:
        if a == b:
            return True
        return batch is not None and (cadence.rounded_to_step(a, batch) == b or
                                      cadence.rounded_to_step(b, batch) == a)

    sequence = _keys(view, k.BLOCK_START, k.BLOCK_STOP, k.EVAL_ACCURACY)
    in_samples, span = False, None
    for record in sequence:
        if record.key == k.BLOCK_START:
            span = _block_span(record)
        elif record.key == k.EVAL_ACCURACY and span is not None:
            samples = as_int(record.metadata.get(k.EPOCH_NUM))
            in_samples = in_samples or (samples is not None and same(samples, span[1]))
            span = None

    trained: int | None = 0 if in_samples else None  # where the closed blocks end
    open_block = None        # (record, first, end) of the block in progress
    for record in sequence:
        meta = record.metadata
        if record.key == k.BLOCK_START:
            if open_block is not None:
                yield record.line, (f"block_start while the block from line "
                                    f"{open_block[0].line} has no block_stop")
            span = _block_span(record)
            if span is None:
                yield record.line, (
                    f"block_start has first_epoch_num {_show(meta.get(k.FIRST_EPOCH_NUM))} and "
                    f"epoch_count {_show(meta.get(k.EPOCH_COUNT))}; both must be counts "
                    "(epoch_count > 0)")
                open_block = (record, None, None)
                continue
            if trained is not None and not same(span[0], trained):
                yield record.line, (f"block starts at {span[0]:,} but the blocks before it "
                                    f"end at {trained:,}")
            open_block = (record, *span)
        elif record.key == k.BLOCK_STOP:
            if open_block is None:
                yield record.line, "block_stop without a block_start before it"
                continue
            start, first, end = open_block
            stop_first = as_int(meta.get(k.FIRST_EPOCH_NUM))
            if first is not None and stop_first != first:
                yield record.line, (f"block_stop first_epoch_num "
                                    f"{_show(meta.get(k.FIRST_EPOCH_NUM))} does not match its "
                                    f"block_start (line {start.line}: {first:,})")
            trained = end
            open_block = None
        elif in_samples:
            samples = as_int(meta.get(k.EPOCH_NUM))
            if samples is None or (samples == 0 and trained == 0):
                continue
            end = open_block[2] if open_block is not None else trained
            if end is not None and not same(samples, end):
                yield record.line, (f"eval at {samples:,} samples but the block before it ends "
                                    f"at {end:,} samples")
            if open_block is None:
                trained = samples  # resynchronize on the eval


def check_target_reached(view: LogView) -> Iterator[Finding]:
    """A stopped closed run has an eval at or above the target."""
    if view.run_stop is None or view.first_at_target is not None:
        return
    scored = [ev for ev in view.evals if ev.accuracy is not None]
    if scored:
        best = max(scored, key=lambda ev: ev.accuracy)
        detail = f"best {best.accuracy:.4f} at {_samples(best.samples)} samples, line {best.line}"
    else:
        detail = "no eval_accuracy with a number"
    yield view.run_stop.line, f"no eval reached the target {_target()} ({detail})"


def check_stop_at_target(view: LogView) -> Iterator[Finding]:
    """Nothing is trained or evaluated after the first eval at target; run_stop follows. The
    rules let the clock stop at the target ("may"), they do not forbid going on, so this only
    warns: going on makes the run slower, not invalid."""
    hit = view.first_at_target
    if hit is None:
        return
    where = (f"the target {_target()} was reached on line {hit.line} "
             f"({hit.accuracy:.4f} at {_samples(hit.samples)} samples)")
    later = [r for r in _keys(view, k.EVAL_START, k.EVAL_ACCURACY, k.BLOCK_START,
                              k.EPOCH_START) if r.line > hit.line]
    if later:
        more = f" (and {len(later) - 1} more)" if len(later) > 1 else ""
        yield later[0].line, (f"training went on past the target: {later[0].key}{more} after "
                              f"{where}; the clock may stop at the first eval at target")
    if view.run_stop is None:
        yield hit.line, f"{where} but no run_stop follows (log truncated?)"


def check_run_stop_status(view: LogView) -> Iterator[Finding]:
    """run_stop status is success or aborted; closed: success exactly when at target."""
    stop = view.run_stop
    if stop is None or k.STATUS not in stop.metadata:
        return  # the official checker requires run_stop and its status
    status = stop.metadata[k.STATUS]
    others = [r for r in view.all(k.RUN_STOP)[1:] if r.metadata.get(k.STATUS) != status]
    if others:
        yield others[0].line, (f"a second run_stop says {_show(others[0].metadata.get(k.STATUS))}"
                               f" after line {stop.line} said {_show(status)}")
    if status not in k.RUN_STOP_STATUSES:
        yield stop.line, (f"run_stop status is {_show(status)}; it must be "
                          f"{' or '.join(repr(s) for s in k.RUN_STOP_STATUSES)}")
        return
    if view.division != "closed":
        return
    hit = view.first_at_target
    if hit is not None and status != k.SUCCESS:
        yield stop.line, Mild(f"run_stop status is {_show(status)} but the eval on line "
                              f"{hit.line} reached the target {_target()}; the run is scored "
                              "as not converged")
    if hit is None and status == k.SUCCESS:
        yield stop.line, (f"run_stop status is 'success' but no eval reached the target "
                          f"{_target()}")


def check_seed(view: LogView) -> Iterator[Finding]:
    """A seed record exists (the package checker's seed check needs it)."""
    if view.records and view.first(k.SEED) is None:
        yield 0, ("no 'seed' record; the package checker's seed check needs one per run "
                  "(closed division)")


def check_single_run(view: LogView) -> Iterator[Finding]:
    """The log holds one uninterrupted run: no resume record, no second run started later.

    A run resumed from a checkpoint appends a second timed section; its time leaves out the
    interrupted process's, so the log is not a valid result in any division. (A run_start line
    repeated with the same time is a duplicated line, which the official checker warns about.)
    """
    starts = view.all(k.RUN_START)
    lines = ", ".join(str(r.line) for r in starts)
    resumes = view.all(k.RESUME)
    for record in resumes:
        meta = record.metadata
        yield record.line, (
            f"the run was resumed from checkpoint {_show(meta.get('checkpoint'))} at step "
            f"{_show(meta.get('global_step'))}, {_samples(as_int(meta.get('samples')))} "
            f"samples: the log joins {len(starts)} timed sections (run_start on lines "
            f"{lines}) and the time of the interrupted one is not counted; a resumed run is "
            "not a valid result")
    restarts = [r for r in starts[1:] if r.time_ms != starts[0].time_ms]
    if not resumes and restarts:
        yield restarts[0].line, (f"a second run starts here (the first run_start is on line "
                                 f"{starts[0].line}): a log holds exactly one run")


def check_event_types(view: LogView) -> Iterator[Finding]:
    """Interval keys carry the event_type mllog writes for them."""
    for record in view.records:
        expected = k.INTERVAL_EVENT_TYPES.get(record.key)
        if expected is not None and record.event_type is not None \
                and record.event_type != expected:
            yield record.line, (f"{record.key} has event_type {_show(record.event_type)}, "
                                f"not {_show(expected)}")


# --------------------------------------------------------------------------------------------
# The rule table.

RULES: tuple[Rule, ...] = (
    Rule("bert/benchmark", ERROR, "submission_benchmark is 'bert'.", check_benchmark,
         SRC_BENCHMARK),
    Rule("bert/timestamps", WARNING, "time_ms does not decrease from one record to the next.",
         check_timestamps),
    Rule("bert/run-time", ERROR, "run_stop is not earlier than run_start.", check_run_time,
         SRC_CONTIGUOUS, beyond_official=True),
    Rule("bert/run-interval", ERROR,
         "Blocks and epochs lie between run_start and run_stop (evals outside: warnings).",
         check_run_interval, f"{SRC_CLOCK_START}; {SRC_CONTIGUOUS}", beyond_official=True),
    Rule("bert/hyperparameters", ERROR,
         "The closed division's hyperparameters are logged (values: warnings).",
         check_hyperparameters, SRC_HYPERPARAMETERS),
    Rule("bert/eval-samples", ERROR, f"eval_samples is at least {constants.EVAL_SAMPLES:,}.",
         check_eval_samples, SRC_THOROUGH, open_severity=WARNING, beyond_official=True),
    Rule("bert/train-samples", ERROR,
         "train_samples is a sample count, not fewer than the samples to converge.",
         check_train_samples, SRC_TRAIN_SAMPLES, beyond_official=True),
    Rule("bert/eval-epoch-num", ERROR,
         "epoch_num of eval events is the samples trained, a non-negative integer.",
         check_eval_epoch_num, SRC_EVAL_SAMPLE),
    Rule("bert/eval-accuracy", ERROR, "eval_accuracy is a finite number in [0, 1).",
         check_eval_accuracy, SRC_YAML_ACCURACY),
    Rule("bert/eval-sequence", WARNING,
         "Logged eval_start/eval_stop pairs enclose their eval_accuracy.",
         check_eval_sequence),
    Rule("bert/eval-cadence", ERROR,
         "Evals come at the due points of eval_frequency(global_batch_size).",
         check_eval_cadence, SRC_QUALITY, ("closed",), beyond_official=True),
    Rule("bert/blocks", WARNING,
         "Blocks start where the previous ended; the eval after a block is at its end.",
         check_blocks),
    Rule("bert/target-reached", ERROR,
         f"A closed run that stopped has an eval at or above {constants.TARGET_MLM_ACCURACY}.",
         check_target_reached, SRC_TARGET, ("closed",)),
    Rule("bert/stop-at-target", WARNING,
         "Nothing is trained or evaluated after the first eval at target.",
         check_stop_at_target, divisions=("closed",)),
    Rule("bert/run-stop-status", ERROR,
         "run_stop status is 'success' or 'aborted', success only with an eval at target.",
         check_run_stop_status, SRC_SUCCESS),
    Rule("bert/single-run", ERROR,
         "The log holds one uninterrupted run (no resume from a checkpoint).",
         check_single_run, SRC_NOT_PAUSED, beyond_official=True),
    Rule("bert/seed", WARNING, "A seed is logged.", check_seed, divisions=("closed",)),
    Rule("log/event-type", WARNING, "Interval keys carry mllog's event_type.",
         check_event_types),
)


BEYOND_OFFICIAL = frozenset(rule.name for rule in RULES if rule.beyond_official)


def run_rules(view: LogView, rules: Iterable[Rule] = RULES) -> list[Problem]:
    """Apply `rules` to `view`; returns the problems found.

    A rule that fails internally is reported as an "internal/<rule>" error, never raised.
    """
    problems: list[Problem] = []
    for rule in rules:
        if view.division not in rule.divisions:
            continue
        try:
            findings = list(rule.check(view))
        except Exception as exc:  # noqa: BLE001 - a checker must not crash on any input
            findings = []
            problems.append(Problem(view.path, 0, f"internal/{rule.name}",
                                    f"rule failed on this log: {type(exc).__name__}: {exc}"))
        severity = rule.severity_for(view.division)
        for mild in (False, True):
            kept = [f for f in findings if isinstance(f[1], Mild) == mild]
            level = WARNING if mild else severity
            source = rule.source if level == ERROR else ""
            shown, rest = kept[:MAX_FINDINGS], kept[MAX_FINDINGS:]
            for line, message in shown:
                problems.append(Problem(view.path, line, rule.name, str(message), level, source))
            if rest:
                lines = ", ".join(str(line) for line, _ in rest[:12]) + (
                    ", ..." if len(rest) > 12 else "")
                problems.append(Problem(view.path, rest[0][0], rule.name,
                                        f"{len(rest)} more like the above, on lines {lines}",
                                        level, source))
    return problems
