"""Bad inputs end `run_pretraining` with one line "error: <file>: <problem>" and exit status 1.

Damaged TFRecords are real files written with our writer (synthetic_data) and then damaged: a
flipped payload byte (CRC mismatch), a file cut in the middle of a record, a record re-encoded
with a feature of the wrong length. The record scanner is checked in-process on each kind of
damage; the command line is run as a subprocess for a training file damaged past its first
record (found mid-training), a damaged eval file (found before training starts), a BERT config
that does not fit the checkpoint, and flags out of range.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark.errors import UserError
from cleanup_scripts.records.pretraining_features import encode_examples, write_records
from cleanup_scripts.records.pretraining_features import RecordLayout
from reference import input_pipeline
from reference.bert_config import ConfigError, load_bert_config
from reference.distribution import StrategyError, tf_config
from reference.preflight import preflight
from reference.run_options import UsageError, options_from_flags
from tests.conftest import REPO
from tests.reference import synthetic_data
from tests.reference.test_run_options import parse
from tests.reference.test_run_pretraining import as_flags, read_mllog, run_trainer

BAD_INDEX = 150  # the damaged record of a 256-record file: well past the first one
RANDOM_PROBLEM = "not a tf.train.Example (wire format was corrupt)"  # RANDOM_RECORD's
SEQ, PRED = synthetic_data.SEQ_LENGTH, synthetic_data.MAX_PREDICTIONS
LAYOUT = RecordLayout.unpacked(SEQ, PRED)


# ------------------------------------------------------------------------------ damaging files
def record_offsets(path: Path) -> list[int]:
    """Byte offset of each record of a (sound) TFRecord file."""
    data, offsets, pos = path.read_bytes(), [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += 12 + struct.unpack("<Q", data[pos:pos + 8])[0] + 4
    return offsets


def flip_payload_byte(path: Path, index: int) -> None:
    """Flip one bit in the data of record `index`: its data CRC no longer matches."""
    data = bytearray(path.read_bytes())
    data[record_offsets(path)[index] + 12 + 20] ^= 0x01
    path.write_bytes(bytes(data))


def flip_length_byte(path: Path, index: int) -> None:
    """Flip one bit in the length field of record `index`: its length CRC no longer matches."""
    data = bytearray(path.read_bytes())
    data[record_offsets(path)[index]] ^= 0x01
    path.write_bytes(bytes(data))


def truncate_in_record(path: Path, index: int, keep: int = 30) -> int:
    """Cut the file `keep` bytes into record `index`; returns the new size in bytes."""
    size = record_offsets(path)[index] + keep
    path.write_bytes(path.read_bytes()[:size])
    return size


def write_with_bad_record(path: Path, count: int, index: int, seed: int, **columns) -> Path:
    """`count` synthetic records whose record `index` has the given feature columns instead
    (each a 1-row array, e.g. input_ids of another length; None drops the feature)."""
    good = synthetic_data.make_columns(count, seed)
    row = {name: values[index:index + 1] for name, values in good.items()}
    row.update(columns)
    records = encode_examples(good)
    records[index] = encode_examples({k: v for k, v in row.items() if v is not None})[0]
    with open(path, "wb") as handle:
        write_records(handle, records)
    return path


def ids(length: int) -> np.ndarray:
    return np.full((1, length), 9, np.int64)


# ------------------------------------------------------------------------------ the scanner
@pytest.mark.parametrize("damage, problem", [
    (flip_payload_byte, "CRC mismatch (data corrupted)"),
    (flip_length_byte, "length CRC mismatch (data corrupted)"),
])
def test_checksum_errors_name_the_record(tmp_path, damage, problem):
    path = synthetic_data.write_tfrecord(tmp_path / "part-00000", 256, seed=1)
    damage(path, BAD_INDEX)
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT)
    assert bad == input_pipeline.BadRecord(str(path), BAD_INDEX, problem)
    assert str(bad) == f"{path}: record {BAD_INDEX}: {problem}"


def test_truncated_file_names_the_record_and_byte(tmp_path):
    path = synthetic_data.write_tfrecord(tmp_path / "part-00000", 256, seed=1)
    start = record_offsets(path)[BAD_INDEX]
    size = truncate_in_record(path, BAD_INDEX)
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT)
    assert (bad.index, bad.problem.split(" (")[0]) == (BAD_INDEX, f"truncated at byte {size}")
    assert f"the record starts at byte {start}" in bad.problem
    truncate_in_record(path, BAD_INDEX - 1, keep=5)  # inside the 12-byte header
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT)
    assert bad.index == BAD_INDEX - 1 and "header" in bad.problem


@pytest.mark.parametrize("columns, problem", [
    ({"input_ids": ids(SEQ - 4)}, f"feature input_ids has {SEQ - 4} values, expected "
     f"--max_seq_length={SEQ}"),
    ({"masked_lm_ids": ids(PRED + 1)}, f"feature masked_lm_ids has {PRED + 1} values, "
     f"expected --max_predictions_per_seq={PRED}"),
    ({"next_sentence_labels": ids(2)}, "feature next_sentence_labels has 2 values, "
     "expected 1"),
    ({"segment_ids": None}, "feature segment_ids is missing"),
    ({"input_mask": np.ones((1, SEQ), np.float32)},
     "feature input_mask holds float32 values, expected int64"),
])
def test_records_of_other_shapes_name_the_feature(tmp_path, columns, problem):
    path = write_with_bad_record(tmp_path / "part-00000", 1500, 1200, seed=1, **columns)
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT)
    assert bad == input_pipeline.BadRecord(str(path), 1200, problem)  # in the second chunk


def test_a_record_of_random_bytes_is_named_by_file_and_record(tmp_path):
    # TensorFlow's parse error quotes the bytes, which are no UTF-8: a UnicodeDecodeError
    # traceback where the scan should name the record.
    path = synthetic_data.put_random_record(
        synthetic_data.write_tfrecord(tmp_path / "part-00000", 256, seed=1), BAD_INDEX)
    bad = input_pipeline.find_bad_record([str(path)], LAYOUT)
    assert bad == input_pipeline.BadRecord(str(path), BAD_INDEX, RANDOM_PROBLEM)


def test_scan_follows_file_order_and_limit(tmp_path):
    good = synthetic_data.write_tfrecord(tmp_path / "a", 100, seed=1)
    damaged = synthetic_data.write_tfrecord(tmp_path / "b", 100, seed=2)
    flip_payload_byte(damaged, 10)
    files = [str(good), str(damaged)]
    assert input_pipeline.find_bad_record(files, LAYOUT).path == str(damaged)
    assert input_pipeline.find_bad_record(files, LAYOUT, limit=110) is None
    assert input_pipeline.find_bad_record(files, LAYOUT, limit=111).index == 10
    assert input_pipeline.check_all_records(files, LAYOUT, limit=110) == 110
    assert input_pipeline.find_bad_record(files[:1], LAYOUT) is None


def test_first_records_of_every_training_file_are_checked(tmp_path):
    files = [str(synthetic_data.write_tfrecord(tmp_path / f"part-{i}", 8, seed=i))
             for i in range(3)]
    input_pipeline.check_first_records(files, LAYOUT)
    write_with_bad_record(Path(files[2]), 8, 0, seed=2, input_ids=ids(SEQ + 1))
    with pytest.raises(input_pipeline.InputError) as err:
        input_pipeline.check_first_records(files, LAYOUT)
    assert str(err.value) == (f"{files[2]}: records do not match --max_seq_length="
                              f"{SEQ} --max_predictions_per_seq={PRED} (record 0: feature "
                              f"input_ids has {SEQ + 1} values, expected --max_seq_length={SEQ})")
    Path(files[1]).write_bytes(b"")
    with pytest.raises(input_pipeline.InputError, match=f"^{files[1]}: holds no records$"):
        input_pipeline.check_first_records(files, LAYOUT)


# ------------------------------------------------------------------------------ flags
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("bad") / "data",
                                        train_files=2, train_records=256, eval_records=200)


RUN_FLAGS = {"do_train": "true", "do_eval": "true", "train_batch_size": 64,
             "eval_batch_size": 100, "max_eval_steps": 2, "learning_rate": 0.01,
             "num_train_steps": 40, "num_warmup_steps": 0, "iterations_per_loop": 5,
             "save_checkpoints_steps": 10, "seed": 3}


def run_args(data: dict, out: Path, **extra) -> list[str]:
    return [*as_flags({**data, **RUN_FLAGS, **extra}), f"--output_dir={out}"]


@pytest.mark.parametrize("extra, message", [
    ({"train_batch_size": -8}, "--train_batch_size=-8 must be at least 1"),
    ({"eval_batch_size": 0}, "--eval_batch_size=0 must be at least 1"),
    ({"max_eval_steps": 0}, "--max_eval_steps=0 must be at least 1"),
    ({"steps_per_update": 0}, "--steps_per_update=0 must be at least 1"),
    ({"iterations_per_loop": 0}, "--iterations_per_loop=0 must be at least 1"),
    ({"num_train_steps": 0}, "--num_train_steps=0 must be at least 1"),
    ({"save_checkpoints_steps": -1}, "--save_checkpoints_steps=-1 must be at least 1"),
    ({"stop_steps": 0}, "--stop_steps=0 must be at least 1"),
    ({"num_tpu_cores": 0}, "--num_tpu_cores=0 must be at least 1"),
    ({"keep_checkpoint_max": -1}, "--keep_checkpoint_max=-1 must be >= 0"),
    ({"eval_frequency_samples": -5}, "--eval_frequency_samples=-5 must be >= 0"),
    ({"num_gpus": -1}, "--num_gpus=-1 must be >= 0"),
    ({"cpu_devices": -2}, "--cpu_devices=-2 must be >= 0"),
    ({"masked_lm_block_rows": -1}, "--masked_lm_block_rows=-1 must be >= 0"),
    ({"num_warmup_steps": 41}, "--num_warmup_steps=41 must be in [0, --num_train_steps=40]"),
    ({"num_warmup_steps": -1}, "--num_warmup_steps=-1 must be in [0, --num_train_steps=40]"),
    ({"num_warmup_steps": 4, "start_warmup_step": 2},
     "--start_warmup_step=2 must be <= 0 (a later start gives negative learning rates"),
    ({"seed": -1}, "--seed=-1 must be in [0, 2147483647]"),
    ({"learning_rate": 0}, "--learning_rate=0.0 must be > 0"),
    ({"learning_rate": "inf"}, "--learning_rate=inf must be a finite number"),
    ({"learning_rate": "nan"}, "--learning_rate=nan must be a finite number"),
    ({"poly_power": -1}, "--poly_power=-1.0 must be > 0"),
    ({"lamb_beta_1": 1.0}, "--lamb_beta_1=1.0 must be in (0, 1)"),
    ({"lamb_beta_2": -0.1}, "--lamb_beta_2=-0.1 must be in (0, 1)"),
    ({"lamb_weight_decay_rate": -0.01}, "--lamb_weight_decay_rate=-0.01 must be >= 0"),
    ({"log_epsilon": 1}, "--log_epsilon=1.0 must be in [-30, 0] (epsilon"),
    ({"log_epsilon": -400}, "--log_epsilon=-400.0 must be in [-30, 0] (epsilon"),
    ({"target_mlm_accuracy": 0}, "--target_mlm_accuracy=0.0 must be in (0, 1]"),
    ({"target_mlm_accuracy": 1.01}, "--target_mlm_accuracy=1.01 must be in (0, 1]"),
    ({"dropout_override": 1.0}, "--dropout_override=1.0 must be in [0, 1)"),
    ({"train_batch_size": 100_000_000}, "--train_batch_size=100000000 must be at most "
     "1048576 (records per micro-step, all replicas together)"),
    ({"eval_batch_size": 2 ** 20 + 1}, "--eval_batch_size=1048577 must be at most 1048576 "
     "(records per eval step, all replicas together)"),
    ({"max_seq_length": 4097}, "--max_seq_length=4097 must be at most 4096"),
    ({"max_predictions_per_seq": 4097}, "--max_predictions_per_seq=4097 must be at most 4096"),
    ({"max_seq_length": SEQ + 1}, f"--max_seq_length={SEQ + 1} must be in [2, "
     f"max_position_embeddings={SEQ}]"),
    ({"max_predictions_per_seq": SEQ + 1}, f"--max_predictions_per_seq={SEQ + 1} must be in "
     "[1, --max_seq_length]"),
])
def test_flags_out_of_range_name_the_flag_and_range(data, tmp_path, extra, message):
    with pytest.raises(UsageError) as err:
        preflight(options_from_flags(parse(*run_args(data, tmp_path / "out", **extra))))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("extra, message", [
    # Per record: 61 int32 values; kept for the backward pass, the layer's input and output
    # (2 x 16 x 32), the feed-forward activation (16 x 64) and attention probabilities
    # (2 x 16 x 16): 10,484 bytes; the weights (9,792) and their gradient and slots: 157 kB.
    ({"train_batch_size": 1_000_000}, "--train_batch_size=1000000: a micro-step of 1,000,000 "
     "records of 16 tokens needs at least 10.5 GB of memory (the records, and the activations "
     "and weights of the 1-layer, hidden-32 model on the CPU), more than the 1.1 GB this "
     "machine has; at most 102,402 records fit"),
    ({"eval_batch_size": 1_000_000}, "--eval_batch_size=1000000: an eval step of 1,000,000 "
     "records of 16 tokens needs at least 6.4 GB of memory (the records, and the activations "
     "and weights of the 1-layer, hidden-32 model on the CPU), more than the 1.1 GB this "
     "machine has; at most 168,081 records fit"),
])
def test_batch_that_cannot_fit_in_memory_is_refused_before_any_file_is_read(
        data, tmp_path, monkeypatch, extra, message):
    from reference import preflight as preflight_module
    monkeypatch.setattr(preflight_module, "host_memory_bytes", lambda: 1 << 30)
    with pytest.raises(UsageError) as err:
        preflight(options_from_flags(parse(*run_args({**data, "input_file": "/nonexistent/*"},
                                                       tmp_path / "out", **extra))))
    assert str(err.value) == message
    preflight(options_from_flags(parse(*run_args(data, tmp_path / "out"))))  # 64 fit


def demo_options(*extra: str):
    """The demo preset's run (BERT 2 x 128, sequence 512, 76 predictions, layers recomputed)."""
    from reference.bert_config import load_bert_config
    presets = Path(__file__).resolve().parents[2] / "reference" / "presets"
    options = options_from_flags(parse(
        "--do_train", "--do_eval", "--input_file=x", "--eval_file=y", "--output_dir=z",
        f"--bert_config_file={presets / 'demo_bert_config.json'}", "--train_batch_size=32",
        "--eval_batch_size=50", "--max_seq_length=512", "--max_predictions_per_seq=76",
        "--recompute_layers", *extra))
    return options, load_bert_config(options.model.bert_config_file)


def test_memory_bound_stays_below_what_a_run_really_takes():
    from reference.run_options import check_memory
    options, config = demo_options()
    check_memory(options, config, int(1.49e9), on_cpu=True)  # measured peak RSS: 1.49 GB
    with pytest.raises(UsageError, match="^--train_batch_size=4096: a micro-step of 4,096 "
                                         "records of 512 tokens needs at least 16.2 GB"):
        check_memory(*demo_options("--train_batch_size=4096"), int(1.49e9), on_cpu=True)
    # Without recompute each layer keeps its attention probabilities and feed-forward
    # activation: more per record.
    with pytest.raises(UsageError, match="at most 200 records fit$"):
        check_memory(*demo_options("--norecompute_layers", "--train_batch_size=4096"),
                     int(1.49e9), on_cpu=True)
    # On an accelerator only the records take this machine's memory (7,060 bytes each).
    check_memory(*demo_options("--train_batch_size=200000"), int(1.49e9), on_cpu=False)
    with pytest.raises(UsageError, match="its records, which the input pipeline holds in this "
                                         "machine's memory\\), more than the 1.5 GB this "
                                         "machine has; at most 211,048 records fit$"):
        check_memory(*demo_options("--train_batch_size=300000"), int(1.49e9), on_cpu=False)


def test_an_update_whose_micro_batches_cannot_fit_is_refused():
    # The training stream holds an update's micro-batches parsed in one element: the bound
    # holds the whole update, not only one micro-step, to the machine's memory.
    from reference.run_options import check_memory
    steps = ("--num_train_steps=1000000", "--iterations_per_loop=100000",
             "--save_checkpoints_steps=100000", "--num_warmup_steps=0")
    check_memory(*demo_options("--steps_per_update=4", *steps), int(1.49e9), on_cpu=True)
    with pytest.raises(UsageError) as err:
        check_memory(*demo_options("--steps_per_update=100000", *steps), int(1.49e9),
                     on_cpu=True)
    assert str(err.value) == ("--steps_per_update=100000: an update's 100,000 micro-batches of "
                              "32 records, which the input pipeline holds parsed, need at least "
                              "22.6 GB of memory, more than the 1.5 GB this machine has")


def assert_one_error_line(result, expected: str) -> None:
    """Exit status 1, no traceback, and stderr's only `error:` line, its last, is `expected`."""
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error:")] == [expected]
    assert lines[-1] == expected
    assert "run_pretraining:" not in result.stdout  # no summary of a finished run


@pytest.mark.parametrize("extra, message", [
    pytest.param({"num_warmup_steps": 50}, "--num_warmup_steps=50 must be in [0, "
                 "--num_train_steps=40]", marks=pytest.mark.slow),
    ({"cpu_devices": 2, "eval_batch_size": 3},
     "--eval_batch_size=3 is not a multiple of the 2 replicas"),
])
def test_flag_errors_on_the_command_line(data, tmp_path, extra, message):
    out = tmp_path / "out"
    result = run_trainer(*run_args(data, out, **extra), check=False)
    assert_one_error_line(result, f"error: {message}")
    assert not out.exists()


def test_absurd_batch_on_the_command_line_is_one_line_at_once(data, tmp_path):
    # Unchecked, it is a TensorFlow shape traceback after run_start, 40 s in.
    out = tmp_path / "out"
    result = run_trainer(*run_args(data, out, train_batch_size=100_000_000), check=False,
                         timeout=120)
    assert_one_error_line(result, "error: --train_batch_size=100000000 must be at most 1048576 "
                                  "(records per micro-step, all replicas together)")
    assert not out.exists()


# A TensorFlow error raised by the n-th call of the compiled training steps (1: while the run
# is being set up; later: once it is training), injected into the trainer's process.
FAILING_STEPS = r"""
import runpy, sys
import tensorflow as tf
from reference import trainer
failing_call = int(sys.argv.pop(1))
calls = []
real = trainer.Trainer.train_steps
def train_steps(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == failing_call:
        raise tf.errors.ResourceExhaustedError(
            None, None, "Graph execution error:\n\nDetected at node x\n<stack traces "
            "unavailable>\nOOM when allocating tensor with shape[64,16,32] and type float on "
            "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu\n\t [[{{node x}}]]")
    return real(self, *args, **kwargs)
trainer.Trainer.train_steps = train_steps
sys.argv[0] = "run_pretraining"
runpy.run_module("reference.run_pretraining", run_name="__main__")
"""


def run_failing(data: dict, out: Path, failing_call: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", FAILING_STEPS, str(failing_call),
                           *run_args(data, out)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"))


def test_tensorflow_error_while_setting_up_is_one_line(data, tmp_path):
    out = tmp_path / "out"
    result = run_failing(data, out, failing_call=1)
    assert_one_error_line(result, "error: setting up the run failed: TensorFlow "
                                  "ResourceExhaustedError: OOM when allocating tensor with "
                                  "shape[64,16,32] and type float on /job:localhost/replica:0/"
                                  "task:0/device:CPU:0 by allocator cpu (out of memory: a "
                                  "smaller --train_batch_size or --eval_batch_size, or "
                                  "--recompute_layers, needs less)")
    records = read_mllog(out / "mlperf.log")
    assert records[-1]["key"] == "run_stop"
    assert records[-1]["metadata"]["status"] == "aborted"


@pytest.mark.slow
def test_tensorflow_error_once_training_keeps_its_traceback(data, tmp_path):
    result = run_failing(data, tmp_path / "out", failing_call=2)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ResourceExhaustedError" in result.stderr


# ------------------------------------------------------------------------------ damaged data
def damaged_dataset(root: Path, damage, target: str) -> tuple[dict, Path]:
    """The tiny dataset with file `target` ("part-00001-of-00002" or "eval_10k") damaged at
    record BAD_INDEX by `damage` (a function of path and index)."""
    data = synthetic_data.write_dataset(root, train_files=2, train_records=256,
                                        eval_records=200)
    damage(root / target, BAD_INDEX)
    return data, root / target


def wrong_length(path: Path, index: int) -> None:
    """Re-write the file (256 records, seed of part-00001) with input_ids of record `index`
    four values short."""
    write_with_bad_record(path, 256, index, seed=101, input_ids=ids(SEQ - 4))


@pytest.mark.parametrize("damage, problem", [
    (flip_payload_byte, "CRC mismatch (data corrupted)"),
    # The training stream raised UnicodeDecodeError (a traceback), not InvalidArgumentError.
    pytest.param(synthetic_data.put_random_record, RANDOM_PROBLEM, marks=pytest.mark.slow),
])
def test_damaged_training_record_is_located_mid_training(tmp_path, damage, problem):
    data, bad = damaged_dataset(tmp_path / "data", damage, "part-00001-of-00002")
    out = tmp_path / "out"
    result = run_trainer(*run_args(data, out), check=False)
    assert_one_error_line(result, f"error: --input_file: {bad}: record {BAD_INDEX}: {problem}")
    records = read_mllog(out / "mlperf.log")
    keys = [r["key"] for r in records]
    assert "run_start" in keys  # training had started: the first records were fine
    # The log ends as the run did, before the process exits with the error.
    assert keys.count("run_stop") == 1 and records[-1]["key"] == "run_stop"
    assert records[-1]["metadata"]["status"] == "aborted"


@pytest.mark.slow
@pytest.mark.parametrize("damage, problem", [
    (wrong_length, f"feature input_ids has {SEQ - 4} values, expected --max_seq_length={SEQ}"),
    (truncate_in_record, "truncated at byte"),
])
def test_other_damage_to_a_training_file_is_located_mid_training(tmp_path, damage, problem):
    data, bad = damaged_dataset(tmp_path / "data", damage, "part-00001-of-00002")
    result = run_trainer(*run_args(data, tmp_path / "out"), check=False)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(lines) == 1
    assert lines[0].startswith(f"error: --input_file: {bad}: record {BAD_INDEX}: {problem}")


@pytest.mark.parametrize("damage, problem", [
    (wrong_length, f"feature input_ids has {SEQ - 4} values, expected --max_seq_length={SEQ}"),
    pytest.param(flip_payload_byte, "CRC mismatch (data corrupted)", marks=pytest.mark.slow),
])
def test_damaged_eval_file_fails_before_training(tmp_path, damage, problem):
    data, bad = damaged_dataset(tmp_path / "data", damage, "eval_10k")
    out = tmp_path / "out"
    result = run_trainer(*run_args(data, out), check=False)
    assert_one_error_line(result, f"error: --eval_file: {bad}: record {BAD_INDEX}: {problem}")
    assert not out.exists()  # no MLPerf log (no run_start), no checkpoint


@pytest.mark.parametrize("damage, problem", [
    (flip_length_byte, "length CRC mismatch (data corrupted)"),
    (truncate_in_record, "truncated at byte"),
    (synthetic_data.put_random_record, RANDOM_PROBLEM),
])
def test_every_evaluated_eval_record_is_checked_by_the_flag_checks(tmp_path, damage, problem):
    data, bad = damaged_dataset(tmp_path / "data", damage, "eval_10k")
    with pytest.raises(input_pipeline.InputError) as err:
        preflight(options_from_flags(parse(*run_args(data, tmp_path / "out"))))
    assert str(err.value).startswith(f"--eval_file: {bad}: record {BAD_INDEX}: {problem}")
    # Only the records evaluated are read: eval_batch_size * max_eval_steps = 100 of them.
    inputs = preflight(options_from_flags(parse(*run_args(data, tmp_path / "out",
                                                            max_eval_steps=1))))
    assert inputs.eval.sequences == 100


def test_eval_files_that_match_nothing_or_hold_nothing(data, tmp_path):
    empty = tmp_path / "eval_empty"
    empty.write_bytes(b"")
    with pytest.raises(input_pipeline.InputError, match=f"^--eval_file: {empty}: holds no "
                                                        "records$"):
        preflight(options_from_flags(parse(*run_args({**data, "eval_file": str(empty)},
                                                       tmp_path / "out"))))
    pattern = str(tmp_path / "eval-*")
    with pytest.raises(input_pipeline.InputError, match="^--eval_file: .*/eval-\\*: no file "
                                                        "matches$"):
        preflight(options_from_flags(parse(*run_args({**data, "eval_file": pattern},
                                                       tmp_path / "out"))))


@pytest.mark.timeout(60)  # a FIFO that is read blocks: fail, not hang
@pytest.mark.parametrize("flag", ["input_file", "eval_file", "bert_config_file"])
def test_device_or_fifo_named_by_a_flag_is_named_for_what_it_is(data, tmp_path, flag):
    # A FIFO would block the first read for ever; /dev/zero would read as "length CRC
    # mismatch".
    fifo = tmp_path / "part-00000-of-00001"
    os.mkfifo(fifo)
    for special, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        with pytest.raises(UserError) as err:
            preflight(options_from_flags(parse(*run_args({**data, flag: str(special)},
                                                           tmp_path / "out"))))
        where = f"--{flag}: " if flag != "bert_config_file" else ""
        assert str(err.value) == f"{where}{special}: is not a regular file ({kind})"


def test_fifo_as_input_file_on_the_command_line_ends_at_once(data, tmp_path):
    fifo = tmp_path / "part-00000-of-00001"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    result = run_trainer(*run_args({**data, "input_file": f"{data['input_file']},{fifo}"}, out),
                         check=False, timeout=120)
    assert_one_error_line(result, f"error: --input_file: {fifo}: is not a regular file "
                                  "(a FIFO)")
    assert not out.exists()


# ------------------------------------------------------------------------------ config vs ckpt
def write_config(path: Path, base: Path, **changes) -> Path:
    """A copy of the bert_config.json at `base` with some values changed."""
    path.write_text(json.dumps({**json.loads(base.read_text()), **changes}))
    return path


@pytest.mark.parametrize("changes, tensor", [
    ({"hidden_size": 128}, "bert/embeddings/word_embeddings has shape [256, 64]"),
    pytest.param({"num_hidden_layers": 3}, "missing bert/encoder/layer_2/",
                 marks=pytest.mark.slow),
])
def test_config_that_does_not_fit_the_init_checkpoint_names_both_files(
        data, tmp_path, ref_dir, ref_results, changes, tensor):
    config = write_config(tmp_path / "bert_config.json", ref_dir / ref_results["bert_config"],
                          **changes)
    checkpoint = ref_dir / ref_results["tf1_checkpoint"]
    result = run_trainer(*run_args({**data, "bert_config_file": str(config)}, tmp_path / "out",
                                   init_checkpoint=checkpoint), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {checkpoint}: ") and tensor in last
    assert last.endswith(f"(model of --bert_config_file={config})")
    assert "run_start" not in (tmp_path / "out" / "mlperf.log").read_text()


def test_json_nested_too_deep_is_one_line_naming_its_source(tmp_path, monkeypatch):
    # json.loads raised RecursionError (a traceback) at 100,000 levels.
    deep = "[" * 100_000 + "]" * 100_000
    config = tmp_path / "bert_config.json"
    config.write_text(deep)
    with pytest.raises(ConfigError) as err:
        load_bert_config(config)
    assert str(err.value) == (f"{config}: lists or objects nested too deep to read, not a BERT "
                              "config")
    monkeypatch.setenv("TF_CONFIG", deep)
    with pytest.raises(StrategyError, match="^TF_CONFIG nests lists or objects too deep to "
                                            "read$"):
        tf_config()


@pytest.mark.slow
def test_config_other_than_the_resumed_checkpoint_s_names_the_key(data, tmp_path):
    out = tmp_path / "out"
    first = run_trainer(*run_args(data, out, stop_steps=5))
    assert "aborted at step 5" in first.stdout
    config = write_config(tmp_path / "wider.json", Path(data["bert_config_file"]),
                          hidden_size=64)
    result = run_trainer(*run_args({**data, "bert_config_file": str(config)}, out),
                         check=False)
    # The config is one of the run's settings, stored in the checkpoint: compared before
    # init_start, where the restore would only have found a tensor of another shape.
    assert_one_error_line(result, f"error: --bert_config_file: hidden_size: the checkpoint in "
                                  f"{out} was trained with 32, this run asks for 64; use the "
                                  "same value or a new --output_dir")
    assert len([r for r in read_mllog(out / "mlperf.log") if r["key"] == "init_start"]) == 1
