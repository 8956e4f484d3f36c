"""Training that goes wrong stops: a non-finite loss (NaN in the data, a learning rate that
blows the weights up) ends the run at once with one line naming the step, run_stop "aborted"
and no checkpoint of the broken state. Real runs of `run_pretraining` as subprocesses on the
tiny synthetic data set.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from reference.run_loop import diverged
from tests.reference import synthetic_data
from tests.reference.test_bad_inputs import assert_one_error_line
from tests.reference.test_crash_resume import checkpoint_steps
from tests.reference.test_run_pretraining import read_mllog
from tests.reference.test_untrusted_inputs import run_cli, with_bad_record

DIVERGED = re.compile(r"error: training diverged at step (\d+): total_loss nan")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("stops") / "data",
                                        train_files=2, train_records=256, eval_records=200)


def assert_stopped_with_finite_checkpoints(result, out: Path) -> int:
    """The run ended with one "training diverged" line, its log with run_stop "aborted", and
    every checkpoint left is from before the step named and holds finite weights; returns
    that step."""
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    match = DIVERGED.match(last)
    assert match, last
    assert_one_error_line(result, last)
    step = int(match.group(1))
    records = read_mllog(out / "mlperf.log")
    assert [r["key"] for r in records].count("run_start") == 1
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"
    for saved in checkpoint_steps(out):
        assert saved < step
        reader = tf.train.load_checkpoint(str(out / f"model.ckpt-{saved}"))
        for name in reader.get_variable_to_shape_map():
            value = reader.get_tensor(name)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                assert np.isfinite(value).all(), (saved, name)
    return step


def test_nan_in_the_data_stops_the_run_at_the_step(data, tmp_path):
    # Unchecked, NaN masked_lm_weights give NaN losses to the end, accuracy 0 and exit 0.
    bad = with_bad_record(data, tmp_path, "part-00001-of-00002", 60,
                          masked_lm_weights=(0, np.nan))
    out = tmp_path / "out"
    result = run_cli(bad, out, iterations_per_loop=1)
    step = assert_stopped_with_finite_checkpoints(result, out)
    assert checkpoint_steps(out), f"diverged at step {step}, before the first checkpoint"


def test_a_huge_learning_rate_stops_the_run_and_keeps_the_last_finite_checkpoint(data,
                                                                                   tmp_path):
    # Unchecked, --learning_rate=1e30 trains NaN weights to the end and saves them, exit 0.
    out = tmp_path / "out"
    result = run_cli(data, out, learning_rate=1e30, iterations_per_loop=1,
                     save_checkpoints_steps=1)
    assert_stopped_with_finite_checkpoints(result, out)


@pytest.mark.parametrize("losses, fp16, problem", [
    ({"total_loss": 2.0, "masked_lm_loss": 1.5, "next_sentence_loss": 0.5}, False, None),
    ({"total_loss": math.nan, "masked_lm_loss": math.nan, "next_sentence_loss": 0.5}, False,
     "total_loss nan, masked_lm_loss nan"),
    ({"total_loss": 2.0, "masked_lm_loss": 1.5, "next_sentence_loss": 0.5,
      "gradient_norm": math.inf}, False, "gradient_norm inf"),
    # fp16: an update loss scaling skipped while the scale can still drop is what it is for.
    ({"total_loss": math.inf, "masked_lm_loss": 1.5, "next_sentence_loss": 0.5,
      "skipped_updates": 1, "loss_scale": 16384.0}, True, None),
    ({"total_loss": math.nan, "masked_lm_loss": 1.5, "next_sentence_loss": 0.5,
      "skipped_updates": 1, "loss_scale": 1.0}, True, "total_loss nan"),
    ({"total_loss": math.nan, "masked_lm_loss": 1.5, "next_sentence_loss": 0.5,
      "skipped_updates": 0, "loss_scale": 32768.0}, True, "total_loss nan"),
])
def test_what_counts_as_diverged(losses, fp16, problem):
    assert diverged(losses, fp16) == problem
