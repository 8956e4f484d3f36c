"""benchmark.cadence: evals at the rule's due points; jitter and lateness seen in accepted
results are quiet or warnings; another schedule, an early or extra eval, or a skipped one
fails. The shapes are those of published logs (named per case)."""
from __future__ import annotations

import pytest

from benchmark.cadence import (batches_with_frequency, eval_frequency, judge_schedule,
                               step_interval)

BATCH = 3072
F = eval_frequency(BATCH)          # 175,000
STEP = step_interval(BATCH)        # 175,104: 57 steps


def judged(samples, batch=BATCH, trained=None, per_eval=True):
    return [(f.index, f.error) for f in judge_schedule(batch, samples, trained, per_eval)]


def due(k, batch=BATCH):
    """The k-th due point rounded up to a step (how our trainer and NVIDIA's evaluate)."""
    return -(-k * eval_frequency(batch) // batch) * batch


def test_the_interval_formula_and_the_batches_that_share_an_interval():
    assert [eval_frequency(b) for b in (256, 2048, 3072, 6144, 8192)] == [
        150_000, 150_000, 175_000, 200_000, 225_000]
    assert batches_with_frequency(175_000) == (2172, 4343)
    assert batches_with_frequency(100_000) is None  # no batch size evaluates that often


def test_each_due_point_rounded_up_to_a_step_is_on_time_and_the_eval_at_zero_optional():
    assert judged([due(k) for k in range(1, 19)]) == []
    assert judged([0] + [due(k) for k in range(1, 19)]) == []


def test_the_interval_rounded_up_to_whole_steps_is_on_time():
    # Google's v1.0 tpu-v4-4096-TF: every 33 steps of 6,144 (202,752 for a 200,000 interval)
    assert judged([k * step_interval(6144) for k in range(1, 17)], batch=6144) == []


def test_a_few_steps_of_jitter_either_way_is_quiet():
    # packed runs (v3.0 Supermicro AS-8125GS-TNHR, batch 768): a step or two off each point
    jittered = [due(k, 768) + (-1) ** k * 2 * 768 for k in range(1, 20)]
    assert judged(jittered, batch=768) == []


def test_drift_within_one_percent_of_the_samples_warns_and_beyond_fails():
    # Google's v2.0 cloud-tpu-v4-8192-TF drifts about 0.5 % early per interval (here at 768)
    batch, interval = 768, eval_frequency(768)
    drifting = [int(k * interval * 0.995) for k in range(1, 16)]
    findings = judged(drifting, batch=batch)
    assert findings and not any(error for _, error in findings)
    assert judged([due(1), due(2), due(3) - 4 * BATCH - int(0.01 * 3 * F)]) == [(2, True)]


def test_late_evals_warn_up_to_half_an_interval():
    late = [due(k) + 8 * BATCH for k in range(1, 5)]  # NVIDIA's v2.0 code: 8 steps late
    assert judged(late) == [(i, False) for i in range(4)]
    assert judged([due(1), due(2) + F // 2 - BATCH]) == [(1, False)]


def test_a_skipped_due_point_fails():
    assert judged([due(1), due(3), due(4)]) == [(1, True)]
    assert judged([due(2), due(3)]) == [(0, True)]


def test_a_second_eval_for_one_due_point_or_an_early_extra_eval_fails():
    assert judged([due(1), due(1) + 5 * BATCH, due(2)]) == [(1, True)]
    assert judged([F // 2, due(1)]) == [(0, True), (1, True)]


@pytest.mark.parametrize("batch, every, formula", [
    (256, 100_000, None),           # the case: every 100,000 where 150,000 is due
    (8192, 150_000, (1, 2171)),     # on the schedule of batch 256
    (6144, 172_032, (2172, 4343)),  # v2.1 HPE XL675d 16N: 28 steps where 200,000 is due
    (1536, 175_104, (2172, 4343)),  # v2.1/v3.0 Dell 8xR750xa: less often than 150,000
])
def test_a_schedule_on_another_interval_fails_once_naming_the_formula_it_follows(
        batch, every, formula):
    findings = list(judge_schedule(batch, [k * every for k in range(1, 12)], None, True))
    assert [(f.index, f.error) for f in findings] == [(1, True)]
    if formula:
        assert f"global_batch_size {formula[0]:,}-{formula[1]:,}" in findings[0].message


def test_two_evals_on_another_interval_fail_too():
    assert (0, True) in judged([100_000, 200_000], batch=256)


def test_samples_going_backwards_fail_and_a_repeat_warns():
    assert judged([due(1), due(1) - 1]) == [(1, True)]
    assert judged([due(1), due(1)]) == [(1, False)]


def test_an_eval_of_unknown_samples_is_skipped_over():
    assert judged([due(1), None, due(2), due(3)]) == []


def test_without_per_eval_counts_the_mean_interval_is_judged():
    # NVIDIA's v1.0 style: epoch_num 1 on every eval, train_samples at the end
    assert judged([None] * 17 + [18 * F], trained=18 * F, per_eval=False) == []
    # v1.0 Supermicro SYS-420GP-TNAR+: 34 evals over 3.4 M samples at batch 256
    assert judged([None] * 34, batch=256, trained=3_400_192, per_eval=False) == [(33, True)]
    assert judged([None] * 9 + [18 * F], trained=18 * F, per_eval=False) == [(9, False)]
