"""reference.console and the trainer's console: the live line, the pace of host calls, one
line for a TPU that cannot be reached."""
from __future__ import annotations

import io
import urllib.error

import pytest
import tensorflow as tf

from reference import distribution
from reference.console import CallPace, LiveLine, time_to_target


def test_host_calls_start_at_one_update_and_double_until_the_progress_interval():
    pace = CallPace(most=1000, seconds=5.0)
    assert pace.updates(room=500) == 1       # the first call compiles: one update
    pace.took(1, 30.0)
    assert pace.updates(room=500) == 1       # the second measures the pace: one update
    pace.took(1, 0.1)                        # 0.1 s an update
    assert [pace.updates(room=500)] == [2]   # then twice the longest call so far
    pace.took(2, 0.2)
    assert pace.updates(room=500) == 4
    pace.took(4, 0.4)
    for _ in range(5):                       # 8, 16, 32, then 5 s of updates: 50
        pace.took(pace.updates(room=500), 0.1 * pace.updates(room=500))
    assert pace.updates(room=500) == 50
    assert pace.updates(room=7) == 7         # never past the next checkpoint or the budget
    pace.took(50, 0.5)                       # fast hardware: 0.01 s an update
    assert pace.updates(room=10_000) == 100  # doubling on, towards 5 s of updates (500)
    pace.took(500, 0.001)
    assert pace.updates(room=10_000) == 1000  # and at most --iterations_per_loop


def test_v100_preset_pace_shows_progress_within_the_progress_interval_of_the_start():
    """The v100-8 preset's 1,000 micro-steps a call at 0.3 s each: a call of 300 s froze the
    line for 5 minutes; now every call after compilation ends within --progress_seconds."""
    pace, clock = CallPace(most=1000, seconds=5.0), 0.0
    pace.took(pace.updates(room=10_000), 60.0)  # compilation
    while clock < 120:
        updates = pace.updates(room=10_000)
        assert updates * 0.3 <= 5.0 or updates <= 2
        pace.took(updates, updates * 0.3)
        clock += updates * 0.3


def test_time_to_target_follows_the_trend_of_the_last_two_evals_or_names_the_budget():
    evals = [(1000, 0.50), (2000, 0.60)]  # +0.1 per 1,000 samples: 0.72 at 3,200 samples
    assert time_to_target(evals, 0.72, 2100, 10_000, 100.0) == \
        "target ~0m11s (trend of the last 2 evals)"
    assert time_to_target(evals, 0.72, 2100, 3000, 100.0) == \
        "target not within the step budget at the trend (budget in 0m09s)"
    assert time_to_target(evals[:1], 0.72, 2100, 3000, 100.0) == \
        "step budget in 0m09s (no rising eval trend yet)"
    assert time_to_target([(1000, 0.6), (2000, 0.5)], 0.72, 2100, 3000, 100.0) == \
        "step budget in 0m09s (no rising eval trend yet)"  # falling accuracy: no trend to follow
    assert time_to_target(evals, 0.72, 2100, 3000, None) == "measuring the pace"


def test_live_line_rewrites_in_place_on_a_terminal_and_keeps_lines_that_stay():
    out = io.StringIO()
    line = LiveLine(stream=out, interactive=True)
    line.update("step 1")
    line.update("step 2")
    line.keep("eval 1")
    line.update("step 3")
    line.close()
    assert out.getvalue() == "\r\x1b[Kstep 1\r\x1b[Kstep 2\r\x1b[Keval 1\n\r\x1b[Kstep 3\n"


def test_live_line_elsewhere_is_a_line_at_most_every_interval():
    out = io.StringIO()
    line = LiveLine(every_s=3600, stream=out, interactive=False)
    for step in range(5):
        line.update(f"step {step}")
    line.keep("eval 1")
    line.close()
    assert out.getvalue() == "step 0\nstep 4\neval 1\n"  # the newest progress before an eval


def test_a_tpu_that_cannot_be_reached_is_one_line(monkeypatch):
    def unreachable(**_):
        raise urllib.error.URLError("[Errno -2] Name or service not known")
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", unreachable)
    request = distribution.StrategyRequest(use_tpu=True, tpu_name="v3-128",
                                           tpu_zone="europe-west4-a", gcp_project="p",
                                           num_tpu_cores=128, num_gpus=0)
    with pytest.raises(distribution.StrategyError) as raised:
        distribution.make_strategy(request)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("--use_tpu --tpu_name=v3-128: cannot reach the TPU (URLError:")


def test_host_calls_of_several_workers_double_whatever_each_clock_says():
    """Workers' calls must run the same updates: without timing, two workers whose clocks
    disagree size every call alike."""
    fast, slow = CallPace(most=64, seconds=5.0, timed=False), CallPace(64, 5.0, timed=False)
    sizes = []
    for pace, seconds in ((fast, 0.001), (slow, 10.0)):
        run = []
        for _ in range(10):
            updates = pace.updates(room=1000)
            pace.took(updates, seconds * updates)
            run.append(updates)
        sizes.append(run)
    assert sizes[0] == sizes[1] == [1, 1, 2, 4, 8, 16, 32, 64, 64, 64]
