"""How often a BERT run must evaluate: the schedule the trainer follows and the checker judges.

The one home of the eval cadence: `eval_frequency` (the interval BERT fixes for a global batch
size), `eval_update`/`next_eval_index` (where the trainer evaluates), and `judge_schedule`
(how the checker judges a logged schedule against the rule, `RULE_SENTENCE`).

The schedule's due points are k x eval_frequency(batch), k = 1, 2, ... (the eval at 0 is
optional), each of which a trainer may round up to its next step boundary. Two readings of
that rounding are in accepted results: each due point rounded up (NVIDIA, ours), or the
interval rounded up to whole steps and repeated (Google's TPU runs, which then fall a little
further behind each due point). Both are on schedule. The tolerances around them are derived
from every published closed BERT log of rounds 1.0-5.0 (see the README's agreement section):
packed-sequence runs count a varying number of sequences per step and drift up to 8 steps
or 0.8 % of the samples trained from the due points in either direction; some
implementations evaluate a constant 8 steps late; late evals up to half an interval occur.
Beyond those, a schedule whose interval differs from the rule's, an eval well before its due
point, a second eval for one due point, or a skipped due point is an error.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterator, Sequence

RULE_SENTENCE = (
    "training_rules.adoc, Quality measure: \"The quality measure must be evaluated at the "
    "same frequency (in terms of number of training items between test sets) ... as in the "
    "reference implementation. Where applicable, the required evaluation point may be rounded "
    "up to the nearest batch size.\"; BERT: \"eval_interval_samples=FLOOR(0.05*(230.23*GBS+"
    "3000000), 25000), skipping 0\"")

# Jitter around a due point that is not reported: a sample count within this many steps.
# Beyond it an eval is a warning: early, up to DRIFT_FRACTION of the due point's samples (if
# that is more than the jitter); late, up to half an interval (an eval later still is nearer
# the next due point, and is judged against that one and the one it skipped).
JITTER_STEPS = 3
DRIFT_FRACTION = 0.01
# The typical interval of a schedule (the median gap between evals) may differ from the
# rule's by one step or this fraction of the interval, whichever is larger, beyond the two
# readings above. Accepted logs stay within 1.9 steps; schedules on another formula are
# 11 % or more off.
PERIOD_FRACTION = 0.02


@dataclass(frozen=True)
class Finding:
    """One remark on the eval schedule: the eval it concerns (index into the samples given),
    whether it breaks the rule (`error`) or is only suspicious, and the message."""
    index: int
    error: bool
    message: str


def eval_frequency(global_batch_size: int) -> int:
    """Samples trained between two evaluations for a global batch size (in sequences).

    floor(0.05 * (230.23 * batch + 3,000,000) / 25,000) * 25,000, e.g. 150,000 for 256..2048.
    """
    return int(math.floor(0.05 * (230.23 * global_batch_size + 3_000_000) / 25_000)) * 25_000


def batches_with_frequency(frequency: int) -> tuple[int, int] | None:
    """The (smallest, largest) global batch size whose eval interval is `frequency` samples,
    None if no batch size has it."""
    low = math.ceil((20 * frequency - 3_000_000) / 230.23)
    high = math.ceil((20 * (frequency + 25_000) - 3_000_000) / 230.23) - 1
    low = max(low, 1)
    while low <= high and eval_frequency(low) < frequency:
        low += 1
    while high >= low and eval_frequency(high) > frequency:
        high -= 1
    return (low, high) if low <= high and eval_frequency(low) == frequency else None


def eval_update(index: int, frequency: int, global_batch: int) -> int:
    """The optimizer update after which eval number `index` (1, 2, ...) runs: the first update
    boundary at or after index * frequency samples (`frequency` in samples, `global_batch` in
    sequences per update)."""
    return -(-index * frequency // global_batch)


def next_eval_index(samples: int, frequency: int) -> int:
    """The index of the first eval still due after `samples` samples (evals already run at or
    before `samples` are done)."""
    return samples // frequency + 1


def rounded_to_step(samples: int, global_batch: int) -> int:
    """`samples` rounded up to a whole number of updates of `global_batch` sequences."""
    return -(-samples // global_batch) * global_batch


def step_interval(global_batch_size: int) -> int:
    """The eval interval rounded up to whole steps of `global_batch_size`, in samples."""
    return rounded_to_step(eval_frequency(global_batch_size), global_batch_size)


def _rule(batch: int, interval: int) -> str:
    return f"the rule: an eval every {interval:,} samples for global_batch_size {batch:,}"


def _other_formula(period: float) -> str:
    """' (the interval of global_batch_size a-b)' when `period` is another batch's interval."""
    nearest = round(period / 25_000) * 25_000
    batches = batches_with_frequency(nearest) if nearest else None
    if batches is None or abs(period - nearest) > PERIOD_FRACTION * nearest:
        return ""
    return f" (the interval the rule gives global_batch_size {batches[0]:,}-{batches[1]:,})"


def _period_finding(batch: int, positive: list[tuple[int, int]]) -> Finding | None:
    """An error when the typical gap between evals (the median of three or more, so one
    late or early eval does not move it) is not the rule's interval."""
    if len(positive) < 4:
        return None
    interval, on_step = eval_frequency(batch), step_interval(batch)
    gaps = [b - a for (_, a), (_, b) in zip(positive, positive[1:])]
    period = statistics.median(gaps)
    slack = max(batch, PERIOD_FRACTION * interval)
    if interval - slack <= period <= on_step + slack:
        return None
    how = "more often" if period < interval else "less often"
    return Finding(positive[1][0], True, (
        f"the evals come every {period:,.0f} samples (median of {len(gaps)} intervals)"
        f"{_other_formula(period)}, {how} than {_rule(batch, interval)}; closed runs evaluate "
        "at the rule's frequency"))


def _due_findings(batch: int, positive: list[tuple[int, int]]) -> Iterator[Finding]:
    """Each eval judged against its due point k * interval (k = the nearest multiple)."""
    interval, on_step = eval_frequency(batch), step_interval(batch)
    seen: dict[int, int] = {}
    expected = 1
    for index, count in positive:
        due = max(1, round(count / interval))
        point, stepped = due * interval, due * on_step
        jitter = max(JITTER_STEPS * batch, DRIFT_FRACTION * point)
        if due in seen:
            yield Finding(index, True, (
                f"eval at {count:,} samples is a second eval for the due point {point:,} "
                f"(the first at {seen[due]:,}); {_rule(batch, interval)}"))
            continue
        seen[due] = count
        if due > expected:
            missed = ", ".join(f"{j * interval:,}" for j in range(expected, min(due, expected + 3)))
            more = ", ..." if due - expected > 3 else ""
            yield Finding(index, True, (
                f"no eval at {missed}{more} samples: the eval at {count:,} comes after "
                f"{due - expected} skipped due point(s); {_rule(batch, interval)}"))
        expected = due + 1
        early, late = point - count, count - stepped
        if early > jitter:
            yield Finding(index, True, (
                f"eval at {count:,} samples is {early:,} samples ({early / batch:.1f} steps) "
                f"before its due point {point:,}; {_rule(batch, interval)}"))
        elif early > JITTER_STEPS * batch:
            yield Finding(index, False, (
                f"eval at {count:,} samples is {early / batch:.1f} steps before its due point "
                f"{point:,}; accepted packed-sequence runs drift up to {DRIFT_FRACTION:.0%} of "
                "the samples trained"))
        elif late > JITTER_STEPS * batch:
            yield Finding(index, False, (
                f"eval at {count:,} samples is {late:,} samples ({late / batch:.1f} steps) "
                f"late for its due point {point:,} ({stepped:,} at a step boundary); accepted "
                "results have been up to half an interval late"))


def _mean_findings(batch: int, samples: Sequence[int | None],
                   trained: int | None) -> Iterator[Finding]:
    """Evals without sample counts: only their mean interval over `trained` can be judged."""
    interval, on_step = eval_frequency(batch), step_interval(batch)
    if not trained or not samples:
        return
    slack = max(batch, PERIOD_FRACTION * interval)
    # The most lenient reading: one of the evals may be the optional one at 0 samples.
    lenient = trained / max(1, len(samples) - 1)
    if lenient < interval - slack:
        yield Finding(len(samples) - 1, True, (
            f"{len(samples)} evals over {trained:,} samples is one per {lenient:,.0f} samples "
            f"or more often{_other_formula(lenient)}: more often than "
            f"{_rule(batch, interval)}; closed runs evaluate at the rule's frequency"))
    elif trained / len(samples) > on_step + slack:
        yield Finding(len(samples) - 1, False, (
            f"the evals carry no sample count (the same epoch_num on each); {len(samples)} "
            f"evals over {trained:,} samples is one per {trained / len(samples):,.0f} samples "
            f"on average, less often than {_rule(batch, interval)}"))


def judge_schedule(batch: int, samples: Sequence[int | None], trained: int | None,
                   per_eval_logged: bool) -> Iterator[Finding]:
    """Judge the samples at which a run evaluated against BERT's schedule for `batch`.

    batch: the global batch size (sequences per step).
    samples: samples trained at each eval in log order (None where unknown).
    trained: the samples the run trained in all (train_samples), None if not logged.
    per_eval_logged: False when the evals carry no sample counts (the same epoch_num on all);
        then only the mean interval, trained / evals, can be judged.
    Yields findings in eval order: errors break `RULE_SENTENCE`, the rest are warnings.
    """
    if not per_eval_logged:
        yield from _mean_findings(batch, samples, trained)
        return
    positive: list[tuple[int, int]] = []
    previous: int | None = None
    for index, count in enumerate(samples):
        if count is None:
            continue
        if previous is not None and count < previous:
            yield Finding(index, True, (
                f"eval at {count:,} samples comes after an eval at {previous:,}: samples "
                "trained cannot decrease"))
            continue
        if previous is not None and count == previous:
            yield Finding(index, False, f"eval at {count:,} samples repeats the previous eval")
            continue
        previous = count
        if count > 0:
            positive.append((index, count))
    period = _period_finding(batch, positive)
    if period is not None:
        yield period  # every eval would be off its due point: one finding says why
        return
    yield from _due_findings(batch, positive)
