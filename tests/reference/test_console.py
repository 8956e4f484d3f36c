"""reference.console and the trainer's console: the live line, the pace of host calls, one
line for a TPU that cannot be reached."""
from __future__ import annotations

import io
import urllib.error

import pytest
import tensorflow as tf

from reference import distribution
from reference.console import CallPace, LiveLine


def test_host_calls_compile_on_one_update_then_last_about_the_progress_interval():
    pace = CallPace(most=1000, seconds=5.0)
    assert pace.updates(room=500) == 1       # the first call compiles: one update
    pace.took(1, 30.0)
    assert pace.updates(room=500) == 500     # not yet measured: the room (next save) rules
    pace.took(500, 50.0)                     # 0.1 s an update
    assert pace.updates(room=500) == 50      # 5 s of updates
    assert pace.updates(room=7) == 7         # never past the next checkpoint or the budget
    pace.took(50, 0.5)                       # fast hardware: 0.01 s an update
    assert pace.updates(room=10_000) == 500  # 5 s of updates
    pace.took(500, 0.001)
    assert pace.updates(room=10_000) == 1000  # and by --iterations_per_loop


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
