"""The trainer's command line, presets, eval cadence and input pipelines, in-process (fast).

Flags are parsed on a fresh absl FlagValues per test (`define_flags`), so nothing here touches
the global FLAGS that other tools define.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from benchmark import cadence
from cleanup_scripts.records.pretraining_features import RecordLayout
from reference import input_pipeline, presets
from reference.optimizer_settings import DEFAULT_OPTIMIZER
from reference.preflight import preflight
from reference.run_flags import define_flags, read_flags
from reference.run_options import UsageError, options_from_flags
from tests.conftest import REPO
from tests.reference import synthetic_data


def parse(*argv: str) -> flags.FlagValues:
    values = define_flags(flags.FlagValues())
    values(["run_pretraining", *argv])
    return values


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("opts") / "data",
                                        train_records=64, eval_records=40)


def base_args(data, tmp_path, **extra) -> list[str]:
    values = {**data, "output_dir": tmp_path / "out", "do_train": "true", "do_eval": "true",
              "train_batch_size": 8, "num_train_steps": 40, "num_warmup_steps": 4, **extra}
    return [f"--{k}={v}" for k, v in values.items()]


def test_valid_flags_become_run_options(data, tmp_path):
    options = options_from_flags(parse(*base_args(
        data, tmp_path, eval_batch_size=16, max_eval_steps=10, seed=5)))
    inputs = preflight(options)
    files = inputs.train.files
    assert files == tuple(sorted(files)) and len(files) == 2
    assert inputs.eval.sequences == 40  # fewer than 16 x 10: each record once
    assert options.eval.frequency == cadence.eval_frequency(8) == 150_000
    assert options.data.global_batch_size == 8 and options.budget_steps == 40
    assert options.output.mlperf_log == str(tmp_path / "out" / "mlperf.log")
    assert options.submission.noncompliant == ()
    assert inputs.noncompliant == ("the eval covers 40 records, not the benchmark's 10,000",)
    with pytest.raises(dataclasses.FrozenInstanceError):  # built once, never filled in later
        options.data.train_batch_size = 16


# Reads the options of a demo run in a fresh interpreter and says whether TensorFlow came with them.
READ_OPTIONS = """
import sys
from absl import flags
from reference.run_flags import define_flags
from reference.run_options import options_from_flags
values = define_flags(flags.FlagValues())
values(["run_pretraining", "--preset=demo", "--output_dir=" + sys.argv[1],
        "--data_dir=" + sys.argv[2]])
options = options_from_flags(values)
print(options.compute.deterministic, "tensorflow" in sys.modules)
"""


def test_reading_the_options_imports_no_tensorflow(tmp_path):
    """--deterministic turns oneDNN off before TensorFlow's import, which reads the switch
    once: the options (the strategy request among them) must be read without importing it."""
    result = subprocess.run([sys.executable, "-c", READ_OPTIONS, str(tmp_path / "out"),
                             str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["True", "False"]


@pytest.mark.parametrize("extra, message", [
    ({"do_train": "false", "do_eval": "false"}, "at least one of --do_train or --do_eval"),
    ({"train_batch_size": 0}, "--train_batch_size=0 must be at least 1"),
    ({"steps_per_update": 4, "num_train_steps": 42},
     "--num_train_steps=42 is not a multiple of --steps_per_update=4"),
    ({"steps_per_update": 2, "stop_steps": 5},
     "--stop_steps=5 is not a multiple of --steps_per_update=2"),
    ({"lamb_beta_1": 1.0}, "--lamb_beta_1=1.0 must be in (0, 1)"),
    ({"target_mlm_accuracy": 1.5}, "--target_mlm_accuracy=1.5 must be in (0, 1]"),
    ({"max_seq_length": 64}, "--max_seq_length=64 must be in [2, max_position_embeddings=16]"),
    ({"eval_frequency_samples": 1000}, "--eval_frequency_samples=1000 differs from the "
     "benchmark's 150,000 for global batch 8; add --noncompliant_eval_frequency"),
])
def test_bad_flags_are_one_line_usage_errors(data, tmp_path, extra, message):
    with pytest.raises(UsageError) as err:
        preflight(options_from_flags(parse(*base_args(data, tmp_path, **extra))))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_files_that_do_not_fit_are_input_errors(data, tmp_path):
    with pytest.raises(input_pipeline.InputError, match=r"--input_file: .*/none-\*: no file "
                                                        r"matches$"):
        preflight(options_from_flags(parse(*base_args(data, tmp_path,
                                                        input_file=tmp_path / "none-*"))))
    with pytest.raises(input_pipeline.InputError, match="records do not match "
                                                        "--max_seq_length=12"):
        preflight(options_from_flags(parse(*base_args(data, tmp_path, max_seq_length=12))))


def test_noncompliant_cadence_and_target_are_recorded(data, tmp_path):
    options = options_from_flags(parse(*base_args(
        data, tmp_path, eval_frequency_samples=1000, noncompliant_eval_frequency="true",
        target_mlm_accuracy=0.5)))
    reasons = options.submission.noncompliant
    assert options.eval.frequency == 1000
    assert any("evals every 1,000 samples" in reason for reason in reasons)
    assert any("target masked-LM accuracy 0.5" in reason for reason in reasons)


def test_eval_cadence_is_the_first_update_at_or_after_each_multiple():
    # Batch 8192: every 225,000 samples, i.e. after updates 28, 55, 83 (27.47, 54.93, 82.4).
    freq = cadence.eval_frequency(8192)
    assert [cadence.eval_update(j, freq, 8192) for j in (1, 2, 3)] == [28, 55, 83]
    assert cadence.eval_update(1, 150_000, 2048) == 74  # 151,552 samples
    assert cadence.next_eval_index(0, freq) == 1
    assert cadence.next_eval_index(28 * 8192, freq) == 2  # that eval is done
    assert cadence.next_eval_index(27 * 8192, freq) == 1


# ------------------------------------------------------------------------------ presets
def test_v3_128_preset_has_the_readme_hyperparameters():
    values = presets.resolve("v3-128", "gs://bucket/tfrecord")
    expected = {"train_batch_size": 8192, "learning_rate": 0.00288293, "lamb_beta_1": 0.88,
                "lamb_beta_2": 0.88, "lamb_weight_decay_rate": 0.0166629, "log_epsilon": -6,
                "num_warmup_steps": 287, "start_warmup_step": -76, "num_train_steps": 600,
                "eval_batch_size": 640, "max_eval_steps": 125, "max_seq_length": 512,
                "max_predictions_per_seq": 76, "use_tpu": True, "num_tpu_cores": 128,
                "optimizer": "lamb", "steps_per_update": 1}
    assert {key: values[key] for key in expected} == expected
    assert values["input_file"] == "gs://bucket/tfrecord/part-*"
    assert values["eval_file"] == "gs://bucket/tfrecord/eval_10k"


GPU_PRESETS = ("gpu-1", "gpu-2", "gpu-4", "gpu-8")
# NVIDIA's 8-GPU runs at global batch 768 (MLPerf Training v3.0-v5.0 logs): the optimizer's view.
NVIDIA_768 = {"learning_rate": 0.00096, "lamb_beta_1": 0.60466, "lamb_beta_2": 0.85437,
              "lamb_weight_decay_rate": 0.1, "log_epsilon": -6, "optimizer": "lamb"}
NVIDIA_768_UPDATES = 3680


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_gpu_preset_trains_nvidias_batch_768_with_96_sequences_per_gpu(name):
    values = presets.resolve(name, "d")
    n, gpus = values["steps_per_update"], values["num_gpus"]
    assert gpus == int(name.split("-")[1]) and n * gpus == 8
    assert values["train_batch_size"] * n == 768  # the global batch of every GPU preset
    assert values["train_batch_size"] == 96 * gpus  # per GPU and micro-step
    assert {key: values[key] for key in NVIDIA_768} == NVIDIA_768
    # Step counts are micro-steps: the optimizer's 3,680 updates without warm-up, times n.
    assert (values["num_train_steps"], values["num_warmup_steps"],
            values["start_warmup_step"]) == (NVIDIA_768_UPDATES * n, 0, 0)
    for key in ("save_checkpoints_steps", "iterations_per_loop"):
        assert values[key] % n == 0, key
    assert values["eval_batch_size"] * values["max_eval_steps"] == 10_000
    assert values["eval_batch_size"] % gpus == 0
    assert (values["mixed_precision"], values["use_xla"], values["packed"]) == ("bf16", True,
                                                                                 True)


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_gpu_preset_options_give_the_cadence_and_log_of_batch_768(name, tmp_path):
    options = options_from_flags(parse(f"--preset={name}", f"--data_dir={tmp_path}",
                                       f"--output_dir={tmp_path / 'out'}"))
    n = options.data.steps_per_update
    assert options.data.global_batch_size == 768
    assert options.eval.frequency == cadence.eval_frequency(768) == 150_000
    assert options.optimizer.num_train_steps // n == NVIDIA_768_UPDATES
    assert options.submission.noncompliant == ()


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_gpu_preset_reads_the_packed_dataset_unless_nopacked(name):
    from cleanup_scripts.pipeline.layout import DatasetLayout
    layout = DatasetLayout(Path.cwd() / "build" / "dataset")
    packed = read_flags(parse(f"--preset={name}"))
    assert packed["input_file"] == f"{layout.packed_dir}/part-*"
    assert packed["eval_file"] == f"{layout.packed_dir}/eval_10k"
    unpacked = read_flags(parse(f"--preset={name}", "--nopacked"))
    assert unpacked["input_file"] == f"{layout.tfrecord_dir}/part-*"
    given = read_flags(parse(f"--preset={name}", "--data_dir=/data/tfrecords"))
    assert given["input_file"] == "/data/tfrecords/part-*"


def test_batch_768_lies_between_two_reference_convergence_points():
    """mlperf_logging's RCP check (pruned RCPs, as its package checker runs it) has no RCP at
    768 and interpolates between the nearest RCPs on either side; a batch outside them would
    be 'Missing RCP'."""
    import logging

    from mlperf_logging.rcp_checker import rcp_checker
    logging.disable(logging.INFO)
    try:
        checker = rcp_checker.RCP_Checker("training", "5.0.0", "bert", False)
    finally:
        logging.disable(logging.NOTSET)
    assert checker._find_rcp(768, "pruned_rcps") is None
    low = checker._find_top_min_rcp(768, "pruned_rcps")
    high = checker._find_bottom_max_rcp(768, "pruned_rcps")
    assert (low["BS"], high["BS"]) == (448, 4608)
    _, interpolated = checker._create_interp_rcp(768, low, high)
    assert 2.4e6 < interpolated["RCP Mean"] < 2.5e6  # samples to converge


def test_every_preset_parses_into_flags(tmp_path):
    for name in presets.available():
        values = read_flags(parse(f"--preset={name}", f"--data_dir={tmp_path}"))
        preset = presets.resolve(name, str(tmp_path))
        assert values["train_batch_size"] == preset["train_batch_size"], name
        assert values["do_train"], name


def test_command_line_flags_win_over_the_preset():
    parsed = parse("--preset=v3-128", "--data_dir=gs://b/d", "--train_batch_size=4096")
    values = read_flags(parsed)
    assert values["train_batch_size"] == 4096
    assert values["learning_rate"] == 0.00288293
    assert parsed.learning_rate == DEFAULT_OPTIMIZER.learning_rate  # the flags stay as parsed


def test_preset_errors():
    with pytest.raises(presets.PresetError, match="unknown preset"):
        presets.resolve("v9-9")
    with pytest.raises(presets.PresetError, match="--data_dir is required"):
        presets.resolve("v3-128")


def test_demo_preset_defaults_to_the_make_preprocess_output():
    from cleanup_scripts.pipeline.layout import DatasetLayout
    values = presets.resolve("demo")
    records = DatasetLayout(Path.cwd() / "build" / "dataset").tfrecord_dir
    assert values["input_file"] == f"{records}/part-*"
    assert values["eval_file"] == f"{records}/eval_10k"
    assert values["bert_config_file"].endswith("demo_bert_config.json")


# ------------------------------------------------------------------------------ input pipeline
def test_eval_dataset_pads_to_whole_batches(data):
    dataset = input_pipeline.eval_dataset([data["eval_file"]], batch_size=16, num_records=40,
                                          padded_records=48,
                                          layout=RecordLayout.unpacked(16, 4))
    batches = list(dataset)
    assert len(batches) == 3
    weights = np.concatenate([b[input_pipeline.EXAMPLE_WEIGHT].numpy() for b in batches])
    assert weights.tolist() == [1.0] * 40 + [0.0] * 8
    assert batches[0]["input_ids"].dtype == tf.int32


def test_record_shards_of_two_pipelines_make_up_the_single_pipeline_batch(tmp_path):
    path = synthetic_data.write_tfrecord(tmp_path / "one", 64, seed=2)
    single = input_pipeline.train_dataset([str(path)], 8, RecordLayout.unpacked(16, 4), seed=9)
    shards = [input_pipeline.train_dataset(
        [str(path)], 4, RecordLayout.unpacked(16, 4), seed=9,
        input_context=tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i))
        for i in range(2)]
    for whole, *parts in zip(single.take(12), *shards):  # past one epoch (8 batches)
        union = np.concatenate([p["masked_lm_positions"].numpy() for p in parts])
        key = lambda a: sorted(map(tuple, a))  # noqa: E731
        assert key(union) == key(whole["masked_lm_positions"].numpy())
