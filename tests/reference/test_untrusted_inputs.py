"""Inputs the trainer must not trust: a checkpoint resumed with other flags, token ids outside
the model's tables, an output folder that cannot be written, a disk that fills.

Each case ends `run_pretraining` with one line "error: ..." (exit status 1, no traceback) and
leaves nothing that looks complete: a resume with other run-defining flags, or from a checkpoint
that does not say which flags wrote it, stops before init_start; an id out of range is named by
file and record, before training (first record of every training file, every eval record) or
mid-run (an assertion in the input pipeline); a run that fails after run_start ends its MLPerf
log with run_stop "aborted". Runs that could hang (the training loop used to spin without
training on inconsistent counters) are subprocesses killed after a timeout.

The tests run as root, which ignores file permissions, so an output folder that cannot be
written is made by putting a regular file where a folder is expected; a full disk is /dev/full,
where every write fails with ENOSPC (test_crash_resume fills one with RLIMIT_FSIZE instead).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from cleanup_scripts.records.pretraining_features import encode_examples, write_records
from cleanup_scripts.records.pretraining_features import RecordLayout
from reference import checkpoint as ckpt
from reference import input_pipeline
from reference.bert_config import load_bert_config
from reference.error_text import OutputError
from reference.preflight import CheckedInputs, preflight
from reference.resume import peek_progress
from reference.run_flags import define_flags
from reference.run_log import LogFile
from reference.run_loop import train
from reference.run_options import RunOptions, UsageError, options_from_flags
from reference.trainer import CHECKPOINT_NAME, OptimizerSettings, Trainer
from tests import forked
from tests.conftest import REPO
from tests.reference import synthetic_data
from tests.reference.test_bad_inputs import assert_one_error_line, write_with_bad_record
from tests.reference.test_run_pretraining import read_mllog

SEQ, PRED = synthetic_data.SEQ_LENGTH, synthetic_data.MAX_PREDICTIONS
LAYOUT = RecordLayout.unpacked(SEQ, PRED)
VOCAB = synthetic_data.VOCAB_SIZE
BAD_INDEX = 150
# Batch 8, an eval every 64 samples (8 steps), a checkpoint every 4 steps.
RUN_FLAGS = {"do_train": "true", "do_eval": "true", "train_batch_size": 8,
             "eval_batch_size": 100, "max_eval_steps": 2, "learning_rate": 0.01,
             "num_train_steps": 40, "num_warmup_steps": 0, "iterations_per_loop": 2,
             "save_checkpoints_steps": 4, "keep_checkpoint_max": 0, "seed": 3,
             "eval_frequency_samples": 64, "noncompliant_eval_frequency": "true",
             "target_mlm_accuracy": 0.999}
STOPPED_AT = 12  # the first segment's last step: 96 samples, one eval (at 64)
TIMEOUT = 240  # seconds a run may take before the test calls it hung


def flag_list(data: dict, out: Path, **extra) -> list[str]:
    values = {**data, **RUN_FLAGS, "output_dir": out, **extra}
    return [f"--{key}={value}" for key, value in values.items() if value is not None]


def checked(data: dict, out: Path, **extra) -> tuple[RunOptions, CheckedInputs]:
    """The options of RUN_FLAGS with `extra` (a value None drops the flag), and their inputs
    as preflight checked them."""
    values = define_flags(flags.FlagValues())
    values(["run_pretraining", *flag_list(data, out, **extra)])
    options = options_from_flags(values)
    return options, preflight(options)


def run_cli(data: dict, out: Path, **extra) -> subprocess.CompletedProcess:
    """The trainer's command line; a run still going after TIMEOUT seconds is killed and the
    test fails (it hung)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "reference.run_pretraining", *flag_list(data, out, **extra)]
    try:
        return forked.run(command, env=env, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        log = out / "mlperf.log"
        tail = log.read_text().splitlines()[-3:] if log.exists() else []
        pytest.fail(f"the run hung ({TIMEOUT} s); its log ends with {tail}")


def last_record(out: Path) -> dict:
    return read_mllog(out / "mlperf.log")[-1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("untrusted") / "data",
                                        train_files=2, train_records=256, eval_records=200)


@pytest.fixture(scope="module")
def stopped(data, tmp_path_factory) -> Path:
    """A run stopped after STOPPED_AT steps of batch 8 (checkpoints every 4 steps)."""
    out = tmp_path_factory.mktemp("stopped") / "out"
    result = train(*checked(data, out, stop_steps=STOPPED_AT))
    assert (result.step, result.samples) == (STOPPED_AT, STOPPED_AT * 8)
    return out


def copy_run(stopped: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(stopped, out)
    return out


def trainer_for(data: dict) -> Trainer:
    """A trainer with RUN_FLAGS' model and optimizer, to read and rewrite checkpoints."""
    return Trainer(tf.distribute.get_strategy(), load_bert_config(data["bert_config_file"]),
                   OptimizerSettings(learning_rate=0.01, num_train_steps=40,
                                     num_warmup_steps=0), train_batch_size=8)


# ------------------------------------------------------------------------------ resume flags
def test_resume_with_another_batch_size_is_refused_before_init_start(data, stopped,
                                                                       tmp_path):
    # Unchecked, the run goes on with batch 16 (from step 12, 96 samples, the next eval "due"
    # at update 8 lies behind it: block_start epoch_count -64, for ever, without training).
    out = copy_run(stopped, tmp_path)
    log_before = (out / "mlperf.log").read_text()
    result = run_cli(data, out, train_batch_size=16)
    assert_one_error_line(result, f"error: --train_batch_size: the checkpoint in {out} was "
                                  "trained with 8, this run asks for 16; use the same value "
                                  "or a new --output_dir")
    assert (out / "mlperf.log").read_text() == log_before  # not even an init_start
    assert sorted(p.name for p in out.glob("*.index")) == sorted(
        p.name for p in stopped.glob("*.index"))


def test_checkpoint_copied_into_a_new_folder_is_checked_too(data, stopped, tmp_path):
    # The checkpoint alone, as copied by hand into a fresh folder: no log, no state file.
    out = tmp_path / "copy"
    out.mkdir()
    for path in stopped.glob(f"{CHECKPOINT_NAME}-{STOPPED_AT}.*"):
        shutil.copy(path, out / path.name)
    result = run_cli(data, out, train_batch_size=16)
    assert_one_error_line(result, f"error: --train_batch_size: the checkpoint in {out} was "
                                  "trained with 8, this run asks for 16; use the same value "
                                  "or a new --output_dir")
    assert not (out / "mlperf.log").exists()


@pytest.fixture(scope="module")
def relu_config(data, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("relu") / "bert_config.json"
    path.write_text(Path(data["bert_config_file"]).read_text().replace('"gelu"', '"relu"'))
    return path


@pytest.mark.parametrize("extra, flag, old, new", [
    ({"steps_per_update": 2}, "--steps_per_update", "1", "2"),
    ({"learning_rate": 0.02}, "--learning_rate", "0.01", "0.02"),
    ({"num_train_steps": 80}, "--num_train_steps", "40", "80"),
    ({"num_warmup_steps": 4}, "--num_warmup_steps", "0", "4"),
    ({"start_warmup_step": -4}, "--start_warmup_step", "0", "-4"),
    ({"poly_power": 2}, "--poly_power", "1.0", "2.0"),
    ({"optimizer": "adamw"}, "--optimizer", "lamb", "adamw"),
    ({"lamb_beta_1": 0.8}, "--lamb_beta_1", "0.9", "0.8"),
    ({"lamb_beta_2": 0.99}, "--lamb_beta_2", "0.999", "0.99"),
    ({"lamb_weight_decay_rate": 0.02}, "--lamb_weight_decay_rate", "0.01", "0.02"),
    ({"log_epsilon": -8}, "--log_epsilon", "-6.0", "-8.0"),
    ({"seed": 4}, "--seed", "3", "4"),
    ({"clip_by_global_norm_after_gradient_allreduce": "true"},
     "--clip_by_global_norm_after_gradient_allreduce", "false", "true"),
    ({"mixed_precision": "bf16"}, "--mixed_precision", "none", "bf16"),
    ({"dropout_override": 0.2}, "--dropout_override", "none", "0.2"),
    ({"eval_frequency_samples": 128}, "--eval_frequency_samples", "64", "128"),
    ({"target_mlm_accuracy": 0.9}, "--target_mlm_accuracy", "0.999", "0.9"),
    ({"relu": True}, "--bert_config_file: hidden_act", "gelu", "relu"),
    ({"one_file": True}, "--input_file", "2 files", "1 file"),
])
def test_each_run_defining_flag_is_compared_on_resume(data, stopped, relu_config, tmp_path,
                                                      extra, flag, old, new):
    out = copy_run(stopped, tmp_path)
    if extra.pop("relu", False):
        extra["bert_config_file"] = relu_config
    if extra.pop("one_file", False):
        extra["input_file"] = data["input_file"].replace("*", "00000-of-00002")
    with pytest.raises(UsageError) as err:
        train(*checked(data, out, **extra))
    message = str(err.value)
    assert message.startswith(f"{flag}: the checkpoint in {out} was trained with {old}")
    assert f", this run asks for {new}" in message and "\n" not in message
    assert message.endswith("; use the same value or a new --output_dir")
    assert len([r for r in read_mllog(out / "mlperf.log") if r["key"] == "init_start"]) == 1


def test_flags_that_do_not_change_the_run_may_change_on_resume(data, stopped, tmp_path):
    out = copy_run(stopped, tmp_path)
    result = train(*checked(data, out, stop_steps=16, iterations_per_loop=4,
                           save_checkpoints_steps=8, keep_checkpoint_max=3,
                           eval_batch_size=50, max_eval_steps=4, seed=None))
    assert (result.status, result.step, result.samples) == ("aborted", 16, 128)
    resume = [r for r in read_mllog(out / "mlperf.log") if r["key"] == "resume"]
    assert resume[0]["metadata"]["global_step"] == STOPPED_AT
    seeds = [r["value"] for r in read_mllog(out / "mlperf.log") if r["key"] == "seed"]
    assert seeds == [3, 3]  # no --seed: the run's own seed, from the checkpoint


def test_checkpoint_without_stored_settings_is_refused(data, stopped, tmp_path):
    # As written before the settings were stored: the same objects, no run_settings.
    out = copy_run(stopped, tmp_path)
    prefix = str(out / f"{CHECKPOINT_NAME}-{STOPPED_AT}")
    trainer = trainer_for(data)
    trainer.restore(prefix)
    ckpt.training_checkpoint(
        trainer.model, trainer.optimizer, trainer.global_step,
        trained_samples=trainer.trained_samples, target_reached=trainer.target_reached,
        run_seed=trainer.run_seed, loss_scale=trainer.loss_scale,
        good_updates=trainer.good_updates).write(prefix)
    assert "run_settings/.ATTRIBUTES/VARIABLE_VALUE" not in \
        tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    with pytest.raises(UsageError) as err:
        train(*checked(data, out))
    assert str(err.value) == (f"--output_dir: {prefix} does not store the settings of the run "
                              "that wrote it (an older version of this trainer did not), so "
                              "this run's flags cannot be checked against it; use a new "
                              "--output_dir")


def test_run_settings_nested_too_deep_are_one_line(tmp_path):
    # A crafted checkpoint's settings, 100,000 nested lists: json.loads raised RecursionError.
    prefix = str(tmp_path / f"{CHECKPOINT_NAME}-4")
    tf.train.Checkpoint(run_settings=tf.Variable("[" * 100_000 + "]" * 100_000),
                        global_step=tf.Variable(4, dtype=tf.int64)).write(prefix)
    with pytest.raises(UsageError) as err:
        peek_progress(prefix)
    assert str(err.value) == (f"--output_dir: {prefix}: its run settings do not read back "
                              "(maximum recursion depth exceeded while decoding a JSON array "
                              "from a unicode string); use a new --output_dir")


def test_inconsistent_counters_end_with_an_internal_error_not_a_loop(data, stopped, tmp_path):
    # A crafted checkpoint: 0 samples at step 12, so the eval "due" at update 8 lies behind.
    # Unguarded, the loop would log block_start with a negative epoch_count for ever, without
    # training.
    out = copy_run(stopped, tmp_path)
    prefix = str(out / f"{CHECKPOINT_NAME}-{STOPPED_AT}")
    trainer = trainer_for(data)
    trainer.restore(prefix)
    trainer.trained_samples.assign(0)
    trainer.checkpoint.write(prefix)
    result = run_cli(data, out)
    assert_one_error_line(result, "error: internal error: step 12 with 0 samples trained, "
                                  "where 12 updates of 8 make 96: the step and sample counters "
                                  "disagree")
    records = read_mllog(out / "mlperf.log")
    assert [r["metadata"]["status"] for r in records if r["key"] == "run_stop"] == \
        ["aborted", "aborted"]
    assert records[-1]["key"] == "run_stop"
    assert all(r["metadata"]["epoch_count"] > 0 for r in records if r["key"] == "block_start")


# ------------------------------------------------------------------------------ token ids
def bad_row(**columns) -> dict:
    """Replacement columns for one record, as write_with_bad_record takes them."""
    good = synthetic_data.make_columns(1, seed=11)
    for name, (position, value) in columns.items():
        good[name][0, position] = value
    return good


RANGES = input_pipeline.IdRanges(vocab_size=VOCAB, type_vocab_size=2)
ID_CASES = [
    ({"input_ids": (3, VOCAB + 8)},
     f"input_ids has id {VOCAB + 8} >= vocab_size {VOCAB} of --bert_config_file"),
    ({"input_ids": (5, -1)}, "input_ids has id -1 < 0"),
    ({"segment_ids": (2, 2)}, "segment_ids has id 2 >= type_vocab_size 2 of --bert_config_file"),
    ({"masked_lm_ids": (1, VOCAB)},
     f"masked_lm_ids has id {VOCAB} >= vocab_size {VOCAB} of --bert_config_file"),
    ({"masked_lm_positions": (3, SEQ)},
     f"masked_lm_positions has position {SEQ} >= --max_seq_length={SEQ}"),
    ({"next_sentence_labels": (0, 2)}, "next_sentence_labels has label 2 >= 2 (0 or 1)"),
]


@pytest.mark.parametrize("columns, problem", ID_CASES)
def test_ids_out_of_range_are_named_by_file_record_and_feature(tmp_path, columns, problem):
    path = write_with_bad_record(tmp_path / "part-00000", 1500, 1200, seed=1,
                                 **bad_row(**columns))
    assert input_pipeline.find_bad_record([str(path)], LAYOUT) is None  # shapes are fine
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT, id_ranges=RANGES)
    assert bad == input_pipeline.BadRecord(str(path), 1200, problem)  # in the second chunk


def test_an_id_error_before_a_shape_error_in_the_same_chunk_comes_first(tmp_path):
    path = write_with_bad_record(tmp_path / "part-00000", 100, 60, seed=1,
                                 input_ids=np.full((1, SEQ - 1), 9, np.int64))
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    row = bad_row(segment_ids=(0, 5))
    records[20] = encode_examples(row)[0]
    with open(path, "wb") as handle:
        write_records(handle, records)
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT, id_ranges=RANGES)
    assert (bad.index, bad.problem) == (20, "segment_ids has id 5 >= type_vocab_size 2 of "
                                            "--bert_config_file")


def with_bad_record(data: dict, tmp_path: Path, target: str, index: int, **columns) -> dict:
    """A copy of the data set's files with record `index` of `target` replaced."""
    root = tmp_path / "data"
    shutil.copytree(Path(data["bert_config_file"]).parent, root)
    seed = 7 if target == "eval_10k" else 100 + int(target.split("-")[1])
    count = 200 if target == "eval_10k" else 256
    write_with_bad_record(root / target, count, index, seed=seed, **bad_row(**columns))
    return {key: value.replace(str(Path(data["bert_config_file"]).parent), str(root))
            for key, value in data.items()}


def test_first_training_record_with_an_id_out_of_range_fails_the_flag_checks(data, tmp_path):
    bad = with_bad_record(data, tmp_path, "part-00001-of-00002", 0, input_ids=(4, 40000))
    with pytest.raises(input_pipeline.InputError) as err:
        checked(bad, tmp_path / "out")
    assert str(err.value) == (f"--input_file: {tmp_path / 'data' / 'part-00001-of-00002'}: "
                              f"record 0: input_ids has id 40000 >= vocab_size {VOCAB} of "
                              "--bert_config_file")


def test_eval_record_with_an_id_out_of_range_fails_the_flag_checks(data, tmp_path):
    bad = with_bad_record(data, tmp_path, "eval_10k", BAD_INDEX, segment_ids=(7, 3))
    with pytest.raises(input_pipeline.InputError) as err:
        checked(bad, tmp_path / "out")
    assert str(err.value) == (f"--eval_file: {tmp_path / 'data' / 'eval_10k'}: record "
                              f"{BAD_INDEX}: segment_ids has id 3 >= type_vocab_size 2 of "
                              "--bert_config_file")


def test_training_stream_asserts_the_id_ranges(tmp_path):
    # On a GPU an out-of-range gather returns zeros and one_hot of one is all zeros (on the
    # CPU too): the stream itself must fail.
    good = synthetic_data.write_tfrecord(tmp_path / "good", 64, seed=1)
    bad = write_with_bad_record(tmp_path / "bad", 64, 40, seed=1,
                                **bad_row(masked_lm_ids=(2, VOCAB + 1)))

    def batches(path, id_ranges):
        dataset = input_pipeline.train_dataset([str(path)], 8, LAYOUT, seed=1,
                                               shuffle_buffer=0, id_ranges=id_ranges)
        return [b["masked_lm_ids"].numpy() for b in dataset.take(8)]

    for ours, plain in zip(batches(good, RANGES), batches(good, None), strict=True):
        np.testing.assert_array_equal(ours, plain)
    assert len(batches(bad, None)) == 8  # nothing in the data path notices
    with pytest.raises(tf.errors.InvalidArgumentError, match="masked_lm_ids"):
        batches(bad, RANGES)


def test_id_out_of_range_mid_training_is_named_and_the_log_ends_aborted(data, tmp_path):
    # masked_lm_ids only feed one_hot, which gives zeros for an id out of range: unchecked,
    # the run would train on the record without a word.
    bad = with_bad_record(data, tmp_path, "part-00001-of-00002", BAD_INDEX,
                          masked_lm_ids=(1, VOCAB + 3))
    out = tmp_path / "out"
    # 40 steps of 64 records: 5 passes over the 512 training records.
    result = run_cli(bad, out, train_batch_size=64, eval_frequency_samples=640)
    assert_one_error_line(result, f"error: --input_file: {tmp_path / 'data'}/"
                                  f"part-00001-of-00002: record {BAD_INDEX}: masked_lm_ids has "
                                  f"id {VOCAB + 3} >= vocab_size {VOCAB} of --bert_config_file")
    records = read_mllog(out / "mlperf.log")
    assert "run_start" in [r["key"] for r in records]
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"


# ------------------------------------------------------------------------------ output
def test_output_dir_that_cannot_be_created_is_one_line(data, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "out"
    result = run_cli(data, out)
    assert_one_error_line(result, f"error: --output_dir: {out}: cannot write "
                                  f"({tmp_path / 'file'} is not a directory)")


def test_mlperf_log_that_cannot_be_written_stops_before_init_start(data, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    log = tmp_path / "file" / "mlperf.log"
    with pytest.raises(OutputError) as err:
        train(*checked(data, tmp_path / "out", mlperf_log=log))
    assert str(err.value) == f"--mlperf_log: {log}: cannot write (Not a directory)"
    assert not list((tmp_path / "out").glob(f"{CHECKPOINT_NAME}*"))


def test_summaries_that_cannot_be_written_are_one_line(data, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train").write_text("a file where the summaries' folder goes")
    with pytest.raises(OutputError) as err:
        train(*checked(data, out))
    assert str(err.value) == f"--output_dir: {out / 'train'}: cannot write (Not a directory)"
    assert not (out / "mlperf.log").exists()  # found before the log is opened


def test_checkpoint_that_cannot_be_written_is_one_line_and_the_log_ends_aborted(data,
                                                                                tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # TensorFlow writes a checkpoint's files into this folder first: a file blocks the save.
    (out / f"{CHECKPOINT_NAME}-4_temp").write_text("")
    result = run_cli(data, out, stop_steps=8)
    assert_one_error_line(result, f"error: --output_dir: {out / CHECKPOINT_NAME}-4: cannot "
                                  "write (Not a directory)")
    assert last_record(out)["key"] == "run_stop"
    assert last_record(out)["metadata"]["status"] == "aborted"
    assert not list(out.glob("*.index"))


FULL = "/dev/full"  # every write: ENOSPC, "No space left on device"
needs_dev_full = pytest.mark.skipif(not os.path.exists(FULL), reason=f"no {FULL}")


@needs_dev_full
def test_log_file_keeps_a_failed_write_for_check(capsys):
    log = LogFile(FULL, echo=sys.stdout)
    log.write(":::MLLOG {}\n")
    log.flush()  # the logging module calls this after each record: no exception
    assert capsys.readouterr().out == ":::MLLOG {}\n"  # the echo still gets every record
    with pytest.raises(OutputError) as err:
        log.check()
    assert str(err.value) == f"--mlperf_log: {FULL}: cannot write (No space left on device)"
    log.close()


@needs_dev_full
def test_mlperf_log_on_a_full_disk_is_one_line_before_init_start(data, tmp_path):
    # Unhandled, the logging module prints a traceback for every record and the run goes on.
    out = tmp_path / "out"
    result = run_cli(data, out, mlperf_log=FULL)
    assert_one_error_line(result, f"error: --mlperf_log: {FULL}: cannot write (No space left "
                                  "on device)")
    assert '"key": "init_start"' not in result.stdout
    assert not list(out.glob("*.index"))
