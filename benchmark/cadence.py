"""How often a BERT run must evaluate: the schedule the trainer follows and the checker judges.

The one home of the eval cadence: `eval_frequency` (the interval BERT fixes for a global batch
size), `eval_update`/`next_eval_index` (where the trainer evaluates), `step_interval` and
`judge_schedule` (how the checker judges a logged schedule).

The training rules (training_rules.adoc, "Quality measure") ask closed-division runs to
evaluate at least as frequently, in training samples between evals, as the interval BERT
fixes for the global batch size (`eval_frequency`), the eval at 0 samples being
optional. A trainer can only stop at a step boundary, so an interval rounded up to whole
steps is on time. Accepted published results go further: NVIDIA's v2.0 PyTorch code
evaluates a few steps after each multiple (up to 8 steps of 448, 2.4% of the interval), and
packed-sequence runs count a varying number of samples per step. Such lateness is reported
as a warning; an interval longer than `LATE_FRACTION` of the eval interval beyond it means
an eval was skipped or the schedule is another one, and is an error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

# Up to this fraction of an eval interval late is a warning; later means a skipped eval.
LATE_FRACTION = 0.5


@dataclass(frozen=True)
class Finding:
    """One remark on the eval schedule: the eval it concerns (index), whether it breaks the
    rule (`error`) or is only suspicious, and the message."""
    index: int
    error: bool
    message: str


def eval_frequency(global_batch_size: int) -> int:
    """Samples trained between two evaluations for a global batch size (in sequences).

    floor(0.05 * (230.23 * batch + 3,000,000) / 25,000) * 25,000, e.g. 150,000 for 256..2048.
    """
    return int(math.floor(0.05 * (230.23 * global_batch_size + 3_000_000) / 25_000)) * 25_000


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
    return f"an eval at least every {interval:,} samples for global_batch_size {batch:,}"


def judge_schedule(batch: int, samples: Sequence[int | None], trained: int | None,
                   per_eval_logged: bool) -> Iterator[Finding]:
    """Judge the samples at which a run evaluated against the interval of `batch`.

    batch: the global batch size (sequences per step).
    samples: samples trained at each eval in log order (None where unknown).
    trained: the samples the run trained in all (train_samples), None if not logged.
    per_eval_logged: False when the evals carry no sample counts (the same epoch_num on all);
        then only the mean interval, trained / evals, can be judged, and only as a warning.
    """
    interval = eval_frequency(batch)
    on_time = step_interval(batch)
    limit = interval + int(interval * LATE_FRACTION)
    if not per_eval_logged:
        if trained and samples and trained / len(samples) > on_time:
            yield Finding(len(samples) - 1, False, (
                f"the evals carry no sample count (the same epoch_num on each); {len(samples)} "
                f"evals over {trained:,} samples is one per {trained / len(samples):,.0f} "
                f"samples on average, more than {_rule(batch, interval)}"))
        return
    previous: int | None = 0
    for index, count in enumerate(samples):
        if count is None or previous is None:
            previous = count  # an eval of unknown samples: the next interval is unknown too
            continue
        if count < previous:
            yield Finding(index, True, (
                f"eval at {count:,} samples comes after an eval at {previous:,}: samples "
                "trained cannot decrease"))
            continue
        if count == previous and index > 0:
            yield Finding(index, False, f"eval at {count:,} samples repeats the previous eval")
            continue
        gap = count - previous
        if gap > limit:
            yield Finding(index, True, (
                f"eval at {count:,} samples comes {gap:,} samples after the "
                f"{'previous eval' if previous else 'start'} ({previous:,}): an eval was "
                f"skipped; {_rule(batch, interval)}"))
        elif gap > on_time:
            late = gap - interval
            yield Finding(index, False, (
                f"eval at {count:,} samples is {late:,} samples ({late / batch:.1f} steps) "
                f"late for {_rule(batch, interval)}; accepted results have been this late"))
        previous = count
