"""bf16 and fp16 training through `python -m reference.run_pretraining` on CPU.

The same short run (tiny model, 12 micro-steps, an eval every 6) in float32, in bf16 compiled
with XLA (the gpu-N presets' combination) and in fp16 with dynamic loss scaling: the MLPerf
log has the same records in the same order with the same values (but for mixed_precision, the
eval accuracies and the times), the checkpoints hold the same entries with the same shapes and
types (float32 weights and optimizer slots in every mode), and the reduced-precision losses stay
close to float32's. The loss-scale arithmetic itself (skipped updates, halving, growth) is
tested on the trainer in test_trainer.py.
"""
from __future__ import annotations

import math

import pytest
import tensorflow as tf

from tests.reference import synthetic_data
from tests.reference.test_run_pretraining import (as_flags, read_eval_results, read_mllog,
                                                  run_trainer, values)

RUN = {"do_train": "true", "do_eval": "true", "train_batch_size": 32, "eval_batch_size": 100,
       "max_eval_steps": 2, "learning_rate": 0.01, "num_warmup_steps": 0, "seed": 5,
       "num_train_steps": 1000, "stop_steps": 12, "iterations_per_loop": 6,
       "save_checkpoints_steps": 6, "eval_frequency_samples": 192,
       "noncompliant_eval_frequency": "true"}
MODES = {"none": [], "bf16": ["--mixed_precision=bf16", "--use_xla"],
         "fp16": ["--mixed_precision=fp16"]}
# Keys whose values legitimately differ between the modes.
VARYING = {"mixed_precision", "eval_accuracy"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{mode: (output folder, stdout + stderr)} of the same run in each compute type."""
    data = synthetic_data.write_dataset(tmp_path_factory.mktemp("mp") / "data",
                                        train_records=256, eval_records=200)
    out = {}
    for mode, flags in MODES.items():
        folder = tmp_path_factory.mktemp(mode) / "out"
        result = run_trainer(*as_flags(data), *as_flags(RUN), *flags, f"--output_dir={folder}")
        out[mode] = folder, result.stdout + result.stderr
    return out


def layout(records: list[dict]) -> list[tuple]:
    """The log as (key, metadata keys, value unless it may vary), in order."""
    return [(r["key"], tuple(sorted(set(r["metadata"]) - {"file", "lineno"})),
             None if r["key"] in VARYING else r["value"]) for r in records]


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_mlperf_log_has_the_layout_of_a_float32_run(runs, mode):
    base = read_mllog(runs["none"][0] / "mlperf.log")
    ours = read_mllog(runs[mode][0] / "mlperf.log")
    assert layout(ours) == layout(base)
    assert values(ours, "mixed_precision") == [mode]
    assert values(base, "mixed_precision") == ["none"]
    assert len(values(ours, "eval_accuracy")) == 2
    for accuracy, reference in zip(values(ours, "eval_accuracy"), values(base, "eval_accuracy")):
        assert math.isfinite(accuracy) and accuracy == pytest.approx(reference, abs=0.03)


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_checkpoints_have_the_layout_of_a_float32_run(runs, mode):
    def entries(folder):
        reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder)))
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        return {name: (tuple(shapes[name]), dtypes[name]) for name in shapes}

    base, ours = entries(runs["none"][0]), entries(runs[mode][0])
    assert ours.keys() == base.keys()
    assert {n: s for n, (s, _) in ours.items()} == {n: s for n, (s, _) in base.items()}
    assert ours == base  # dtypes too: float32 variables, the computation alone is reduced
    assert any(name.startswith("loss_scale") for name in ours)
    assert sorted(p.name for p in runs[mode][0].glob("model.ckpt-*.index")) == \
        sorted(p.name for p in runs["none"][0].glob("model.ckpt-*.index"))


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_reduced_precision_losses_stay_close_to_float32(runs, mode):
    base = read_eval_results(runs["none"][0] / "eval_results.txt")
    ours = read_eval_results(runs[mode][0] / "eval_results.txt")
    assert ours["global_step"] == base["global_step"] == 12
    assert ours["masked_lm_loss"] == pytest.approx(base["masked_lm_loss"], rel=0.05)
    assert ours["next_sentence_loss"] == pytest.approx(base["next_sentence_loss"], rel=0.05)


def test_fp16_run_reports_its_loss_scale(runs):
    output = runs["fp16"][1]
    assert "loss scale 32768" in output and "0 updates skipped" in output
    assert "loss scale" not in runs["none"][1]


def test_no_run_retraces_its_step_functions(runs):
    """Two host calls and two evals per run, XLA-compiled in bf16: static shapes, one trace."""
    for mode, (_, output) in runs.items():
        assert "run_pretraining: aborted at step 12, 384 samples" in output, mode
        assert "traced more than once" not in output, mode
