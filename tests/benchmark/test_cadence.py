"""benchmark.cadence: evals at least every eval interval; a few steps late warns, a skipped
eval fails, earlier or extra evals are fine."""
from __future__ import annotations

from benchmark.cadence import LATE_FRACTION, judge_schedule, step_interval
from benchmark.cadence import eval_frequency

BATCH = 3072
F = eval_frequency(BATCH)          # 175,000
STEP = step_interval(BATCH)        # 175,104: 57 steps


def judged(samples, trained=None, per_eval=True):
    return [(f.index, f.error) for f in judge_schedule(BATCH, samples, trained, per_eval)]


def test_on_time_means_within_the_interval_rounded_up_to_a_step():
    assert STEP == 57 * BATCH
    assert judged([STEP * j for j in range(1, 19)]) == []


def test_earlier_and_extra_evals_are_fine_and_the_eval_at_zero_is_optional():
    assert judged([0, 100_000, 150_000, 300_000, 475_000]) == []


def test_a_few_steps_late_is_a_warning():
    late = STEP + 8 * BATCH  # NVIDIA v2.0: 8 steps after the due point
    assert judged([late, late + STEP]) == [(0, False)]


def test_a_skipped_eval_is_an_error():
    assert judged([STEP, 3 * STEP]) == [(1, True)]
    limit = F + int(F * LATE_FRACTION)
    assert judged([limit]) == [(0, False)] and judged([limit + 1]) == [(0, True)]


def test_samples_going_backwards_is_an_error_and_a_repeat_a_warning():
    assert judged([STEP, STEP - 1]) == [(1, True)]
    assert judged([STEP, STEP]) == [(1, False)]


def test_an_eval_of_unknown_samples_leaves_the_next_interval_unjudged():
    assert judged([STEP, None, 3 * STEP, 4 * STEP]) == []


def test_without_per_eval_counts_only_the_mean_interval_is_judged_and_only_warns():
    assert judged([None] * 17 + [18 * STEP], 18 * STEP, per_eval=False) == []
    assert judged([None] * 9 + [18 * STEP], 18 * STEP, per_eval=False) == [(9, False)]
