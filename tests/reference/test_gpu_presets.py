"""A GPU preset's run on CPU writes the MLPerf log of its global batch, which both checkers accept.

The preset as given (global batch 768, NVIDIA's hyperparameters, bf16, XLA, its micro-batch and
accumulation) on one CPU device (--num_gpus=0) with the tiny synthetic BERT and records of 16
tokens, for two updates with an eval after each (--eval_frequency_samples, so an open-division
run). The log shows the optimizer's view whatever the accumulation: global_batch_size 768,
3,680 training steps, no warm-up, gradient_accumulation_steps n. The closed-division cadence
of batch 768 (150,000 samples) is checked on the options (test_run_options.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_module
from tests.reference import synthetic_data
from tests.reference.test_run_pretraining import (compliance, metadata, read_mllog,
                                                  run_trainer, values)

UPDATES = 2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("gpu") / "data", train_files=1,
                                        train_records=1536, eval_records=1000)


# gpu-1 (8 accumulated micro-steps) is slow: ~30 s of CPU each, 100 s on a busy 2-core machine.
@pytest.mark.parametrize("name, accumulation", [
    ("gpu-8", 1), pytest.param("gpu-1", 8, marks=pytest.mark.slow)])
def test_gpu_preset_run_logs_batch_768_and_passes_both_checkers(data, tmp_path, name,
                                                                accumulation):
    out = tmp_path / "out"
    tiny = [f"--{key}={data[key]}" for key in ("bert_config_file", "max_seq_length",
                                               "max_predictions_per_seq")]
    folder = Path(data["eval_file"]).parent  # part-* and eval_10k
    result = run_trainer(f"--preset={name}", f"--data_dir={folder}", *tiny, "--num_gpus=0",
                         "--seed=1", f"--output_dir={out}",
                         f"--stop_steps={UPDATES * accumulation}", "--eval_frequency_samples=768",
                         "--noncompliant_eval_frequency", "--max_eval_steps=1",
                         "--submission_division=open", "--submission_org=tests")
    assert f"aborted at step {UPDATES * accumulation}, {UPDATES * 768} samples" in result.stdout
    log = out / "mlperf.log"
    records = read_mllog(log)
    shown = {key: values(records, key) for key in (
        "global_batch_size", "gradient_accumulation_steps", "opt_base_learning_rate",
        "opt_learning_rate_training_steps", "opt_learning_rate_warmup_steps",
        "num_warmup_steps", "start_warmup_step", "opt_lamb_beta_1", "opt_lamb_beta_2",
        "opt_lamb_weight_decay_rate", "opt_epsilon", "mixed_precision")}
    assert shown == {
        "global_batch_size": [768], "gradient_accumulation_steps": [accumulation],
        "opt_base_learning_rate": [0.00096], "opt_learning_rate_training_steps": [3680],
        "opt_learning_rate_warmup_steps": [0], "num_warmup_steps": [0],
        "start_warmup_step": [0], "opt_lamb_beta_1": [0.60466], "opt_lamb_beta_2": [0.85437],
        "opt_lamb_weight_decay_rate": [0.1], "opt_epsilon": [1e-6], "mixed_precision": ["bf16"]}
    assert [m["epoch_num"] for m in metadata(records, "eval_accuracy")] == [768, 1536]
    ours = run_module("benchmark.check", str(log), check=False)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert "PASSED: 0 error(s)" in ours.stdout
    official = compliance(log, tmp_path)
    assert official.returncode == 0, official.stdout + official.stderr
    assert "open_bert.yaml" in official.stdout + official.stderr
