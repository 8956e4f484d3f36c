"""The BERT rules the official `mlperf_logging` checker does not enforce, as a list of data.

Each `Rule` is a name, a severity, the division(s) it applies to, one sentence saying what it
requires, and a small function that reads a `LogView` and yields `(line, message)` for every
place the rule is broken (line 0: the whole file). Adding a rule is adding an entry to RULES.
The official rules (key presence, order, ruleset checks) run separately, see
`benchmark.official`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from benchmark import constants
from benchmark import log_keys as k
from benchmark.log_view import LogView, as_finite, as_int, as_number, is_valid_accuracy
from benchmark.problems import ERROR, WARNING, Problem

Finding = tuple[int, str]
MAX_FINDINGS = 4  # per rule and log; further findings are summarized in one line
NOT_LOGGED = "the closed division requires these hyperparameters, not logged: "
# The record reference.run_pretraining writes when a process continues a run from a checkpoint
# (metadata: checkpoint, global_step, samples).
RESUME = "resume"


@dataclass(frozen=True)
class Rule:
    """One BERT rule: `check(view)` yields (line, message) for each violation.

    `open_severity` replaces `severity` for open-division logs, where the rules allow a
    different eval schedule and eval set (None: the same severity).
    """
    name: str
    severity: str
    summary: str
    check: Callable[[LogView], Iterable[Finding]]
    divisions: tuple[str, ...] = k.DIVISIONS
    open_severity: str | None = None

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
    """time_ms never decreases from one record to the next."""
    previous = None
    for record in view.records:
        if not math.isfinite(record.time_ms):
            continue  # reported by the parser
        if previous is not None and record.time_ms < previous.time_ms:
            yield record.line, (f"{record.key} at time_ms {record.time_ms:.0f} is earlier than "
                                f"{previous.key} on line {previous.line} ({previous.time_ms:.0f}); "
                                "timestamps must not go backwards")
        previous = record


def check_run_interval(view: LogView) -> Iterator[Finding]:
    """No block, epoch or eval record before run_start or after run_stop."""
    start, stop = view.run_start, view.run_stop
    training = _keys(view, *k.TRAINING_KEYS)
    if start is not None:
        early = [r for r in training if r.line < start.line]
        if early:
            more = f" (and {len(early) - 1} more)" if len(early) > 1 else ""
            yield early[0].line, (f"{early[0].key} before run_start (line {start.line}){more}; "
                                  "training and evals belong inside the timed run")
    if stop is not None:
        late = [r for r in training if r.line > stop.line]
        if late:
            more = f" (and {len(late) - 1} more)" if len(late) > 1 else ""
            yield late[0].line, (f"{late[0].key} after run_stop (line {stop.line}){more}; "
                                 "nothing may be trained or evaluated after the run stops")


def check_hyperparameters(view: LogView) -> Iterator[Finding]:
    """Closed: every hyperparameter of log_keys.HYPERPARAMETERS is logged; any division: each
    logged one has its type and range."""
    missing = [hp.key for hp in k.HYPERPARAMETERS if view.first(hp.key) is None]
    if missing and view.division == "closed":
        yield 0, NOT_LOGGED + ", ".join(missing)
    for hp in k.HYPERPARAMETERS:
        record = view.first(hp.key)
        if record is None:
            continue
        value = record.value
        number = as_int(value) if hp.kind == "int" else as_finite(value)
        if number is None:
            kind = "an integer" if hp.kind == "int" else "a finite number"
            yield record.line, f"{hp.key} is {_show(value)}; it must be {kind} ({hp.meaning})"
            continue
        low_ok = hp.minimum is None or (number > hp.minimum if hp.minimum_open
                                        else number >= hp.minimum)
        high_ok = hp.maximum is None or (number < hp.maximum if hp.maximum_open
                                         else number <= hp.maximum)
        if not (low_ok and high_ok):
            yield record.line, (f"{hp.key} is {_show(value)}; it must be {_bounds(hp)} "
                                f"({hp.meaning})")


def check_eval_samples(view: LogView) -> Iterator[Finding]:
    """eval_samples is 10,000."""
    for record in view.all(k.EVAL_SAMPLES):
        if as_int(record.value) != constants.EVAL_SAMPLES:
            yield record.line, (f"eval_samples is {_show(record.value)}; BERT evaluates on "
                                f"exactly {constants.EVAL_SAMPLES:,} samples")


def check_train_samples(view: LogView) -> Iterator[Finding]:
    """train_samples is a count not below the samples of the last eval."""
    evaluated = [ev.samples for ev in view.evals if ev.samples is not None]
    for record in view.all(k.TRAIN_SAMPLES):
        value = as_int(record.value)
        if value is None or value < 0:
            yield record.line, f"train_samples is {_show(record.value)}; it must be a sample count"
        elif evaluated and value < max(evaluated):
            yield record.line, (f"train_samples is {value:,} but an eval was logged after "
                                f"{max(evaluated):,} samples; samples trained cannot be fewer")


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
    """eval_start -> eval_stop -> eval_accuracy, same epoch_num, nothing interleaved."""
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
    """Evals at F, 2F, 3F, ... samples (F = eval_frequency(batch)); an eval at 0 is optional.

    An eval counts as at j*F if it is at exactly j*F samples or at the first step boundary
    after it (ceil(j*F / batch) * batch), which is where a trainer with that batch can stop.
    """
    if not view.evals:
        return
    batch, freq = view.batch_size, view.eval_frequency
    if batch is None or freq is None:
        record = view.first(k.GLOBAL_BATCH_SIZE)
        yield (record.line if record else 0), (
            "cannot check the eval cadence: global_batch_size is missing or not a usable "
            "batch size")
        return
    rule = (f"evals come every {freq:,} samples for global_batch_size {batch} "
            f"(eval_frequency), at {freq:,}, {2 * freq:,}, ...")
    expected = 1
    previous = None
    for ev in view.evals:
        s = ev.samples
        if s is None:
            continue  # reported by bert/eval-epoch-num
        if previous is not None and s <= previous.samples:
            yield ev.line, (f"eval at {s:,} samples does not come after the previous eval "
                            f"(line {previous.line}, {previous.samples:,} samples)")
            continue
        first = previous is None
        previous = ev
        if s == 0 and first:
            continue  # the optional eval of the initial checkpoint
        j = s // freq
        on_cadence = j >= 1 and (s == j * freq or s == -(-j * freq // batch) * batch)
        if not on_cadence:
            yield ev.line, f"eval at {s:,} samples is off the cadence: {rule}"
            expected = j + 1
            continue
        if j > expected:
            missing = ", ".join(f"{i * freq:,}" for i in range(expected, min(j, expected + 3)))
            more = ", ..." if j - expected > 3 else ""
            yield ev.line, (f"eval at {s:,} samples, but the eval(s) at {missing}{more} samples "
                            f"are missing: {rule}")
        elif j < expected:
            yield ev.line, (f"eval at {s:,} samples repeats the eval due at {j * freq:,} "
                            "samples")
        expected = j + 1


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
    one bad number gives one or two findings, not one per block.
    """
    if not view.all(k.BLOCK_START) and not view.all(k.BLOCK_STOP):
        return
    batch = view.batch_size

    def same(a: int, b: int) -> bool:
        if a == b:
            return True
        return batch is not None and (-(-a // batch) * batch == b or -(-b // batch) * batch == a)

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
    """Nothing is trained or evaluated after the first eval at target; run_stop follows."""
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
                              f"{where}; the run must stop at the first eval at target")
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
    if hit is not None and hit.line < stop.line and status != k.SUCCESS:
        yield stop.line, (f"run_stop status is {_show(status)} but the eval on line {hit.line} "
                          f"reached the target {_target()}; it must be 'success'")
    if (hit is None or hit.line > stop.line) and status == k.SUCCESS:
        yield stop.line, (f"run_stop status is 'success' but no eval before it reached the "
                          f"target {_target()}")


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
    resumes = view.all(RESUME)
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
    Rule("bert/benchmark", ERROR, "submission_benchmark is 'bert'.", check_benchmark),
    Rule("bert/timestamps", ERROR, "time_ms never decreases from one record to the next.",
         check_timestamps),
    Rule("bert/run-interval", ERROR,
         "Blocks, epochs and evals lie between run_start and run_stop.", check_run_interval),
    Rule("bert/hyperparameters", ERROR,
         "The closed division's hyperparameters are logged, each with its type and range.",
         check_hyperparameters),
    Rule("bert/eval-samples", ERROR, f"eval_samples is {constants.EVAL_SAMPLES:,}.",
         check_eval_samples, open_severity=WARNING),
    Rule("bert/train-samples", ERROR,
         "train_samples is a sample count, not fewer than the samples of the last eval.",
         check_train_samples),
    Rule("bert/eval-epoch-num", ERROR,
         "epoch_num of eval events is the samples trained, a non-negative integer.",
         check_eval_epoch_num),
    Rule("bert/eval-accuracy", ERROR, "eval_accuracy is a finite number in [0, 1).",
         check_eval_accuracy),
    Rule("bert/eval-sequence", ERROR,
         "Each eval is eval_start, eval_stop, eval_accuracy with one epoch_num.",
         check_eval_sequence),
    Rule("bert/eval-cadence", ERROR,
         "Evals come every eval_frequency(global_batch_size) samples, none skipped.",
         check_eval_cadence, open_severity=WARNING),
    Rule("bert/blocks", ERROR,
         "Blocks start where the previous ended; the eval after a block is at its end.",
         check_blocks),
    Rule("bert/target-reached", ERROR,
         f"A closed run that stopped has an eval at or above {constants.TARGET_MLM_ACCURACY}.",
         check_target_reached, ("closed",)),
    Rule("bert/stop-at-target", ERROR,
         "Nothing is trained or evaluated after the first eval at target.",
         check_stop_at_target, ("closed",)),
    Rule("bert/run-stop-status", ERROR,
         "run_stop status is 'success' exactly when an eval reached the target (closed).",
         check_run_stop_status),
    Rule("bert/single-run", ERROR,
         "The log holds one uninterrupted run (no resume from a checkpoint).",
         check_single_run),
    Rule("bert/seed", WARNING, "A seed is logged.", check_seed, ("closed",)),
    Rule("log/event-type", WARNING, "Interval keys carry mllog's event_type.",
         check_event_types),
)


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
        shown, rest = findings[:MAX_FINDINGS], findings[MAX_FINDINGS:]
        for line, message in shown:
            problems.append(Problem(view.path, line, rule.name, message, severity))
        if rest:
            lines = ", ".join(str(line) for line, _ in rest[:12]) + (", ..." if len(rest) > 12
                                                                      else "")
            problems.append(Problem(view.path, rest[0][0], rule.name,
                                    f"{len(rest)} more like the above, on lines {lines}",
                                    severity))
    return problems
