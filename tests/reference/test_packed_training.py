"""Packed rows train and evaluate exactly as the same sequences unpacked.

Sixteen real records of the MLCommons reference's fixture (eval.tfrecord), cut to 28-32 tokens,
are packed two to a 64-token row (8 rows). From the reference-made TF1 checkpoint, dropout 0,
three LAMB updates of all 16 sequences give the same eval metrics to 1e-5 whether the batches
are the 16 unpacked records on one device or the 8 packed rows: on one device, compiled with
XLA, and over two mirrored replicas with two accumulated micro-batches. A checkpoint evaluated
on packed and on unpacked eval records gives the same metrics over the same 16 sequences. Bad
packed input is one line.
"""
from __future__ import annotations

import numpy as np
import pytest

from cleanup_scripts.pack_pretraining_data import PackOptions, pack_files
from cleanup_scripts.records.pretraining_features import (decode_example, encode_examples,
                                                          feature_spec, packed_feature_spec,
                                                          read_records, write_records)
from tests.conftest import run_module
from tests.reference.test_bad_inputs import assert_one_error_line
from tests.reference.test_bert_large_variables import bert_large  # noqa: F401 (fixture)
from tests.reference.test_distributed_training import model_weights
from tests.reference.test_run_pretraining import (as_flags, compliance, read_eval_results,
                                                  read_mllog, run_trainer, values)

SEQ, PRED = 64, 10
METRIC_TOL = 1e-5


def _cut_records(source, count_lengths):
    """Columns of the first records of `source`, each cut to the given length: tokens, masks
    and predictions past it dropped."""
    spec = feature_spec(SEQ, PRED)
    rows = [decode_example(data) for data in read_records(source)][:len(count_lengths)]
    columns = {name: np.stack([row[name][1] for row in rows]) for name in spec}
    for index, length in enumerate(count_lengths):
        for name in ("input_ids", "input_mask", "segment_ids"):
            columns[name][index, length:] = 0
        outside = columns["masked_lm_positions"][index] >= length
        for name in ("masked_lm_positions", "masked_lm_ids"):
            columns[name][index, outside] = 0
        columns["masked_lm_weights"][index, outside] = 0.0
    return columns


@pytest.fixture(scope="module")
def data(tmp_path_factory, ref_dir, ref_results):
    """Flags for the 16 short sequences, unpacked and packed, and the fixture's model."""
    root = tmp_path_factory.mktemp("packed")
    columns = _cut_records(ref_dir / "eval.tfrecord", [28 + i % 5 for i in range(16)])
    unpacked, packed = root / "short", root / "short.packed"
    with open(unpacked, "wb") as handle:
        write_records(handle, encode_examples(columns))
    result = pack_files([str(unpacked)], [str(packed)], PackOptions(SEQ, PRED, 3, 5), nworker=1)
    assert (result.stats.sequences, result.stats.rows) == (16, 8)
    common = {"bert_config_file": ref_dir / ref_results["bert_config"],
              "max_seq_length": SEQ, "max_predictions_per_seq": PRED}
    return {"unpacked": str(unpacked), "packed": str(packed), "common": common,
            "checkpoint": ref_dir / ref_results["tf1_checkpoint"]}


TRAIN = {"do_train": "true", "do_eval": "true", "learning_rate": 0.002, "num_warmup_steps": 0,
         "dropout_override": 0.0, "eval_frequency_samples": 48,
         "noncompliant_eval_frequency": "true", "max_eval_steps": 100, "seed": 3,
         "iterations_per_loop": 1, "submission_division": "closed"}  # made open: 16 evaluated
ONE_BATCH = {"train_batch_size": 16, "num_train_steps": 1_000_000, "stop_steps": 3}
ACCUMULATED = {"train_batch_size": 8, "steps_per_update": 2, "num_train_steps": 2_000_000,
               "stop_steps": 6}


def train(data, kind: str, out, *extra: str, eval_batch: int = 16, **flags):
    records = data[kind]
    result = run_trainer(*as_flags(data["common"]), *as_flags(TRAIN), *as_flags(flags),
                         f"--init_checkpoint={data['checkpoint']}", f"--input_file={records}",
                         f"--eval_file={records}", f"--eval_batch_size={eval_batch}",
                         f"--output_dir={out}", *extra)
    return result, read_eval_results(out / "eval_results.txt"), read_mllog(out / "mlperf.log")


@pytest.fixture(scope="module")
def baseline(data, tmp_path_factory):
    return train(data, "unpacked", tmp_path_factory.mktemp("unpacked") / "out", **ONE_BATCH)


@pytest.mark.parametrize("extra, flags", [
    ([], ONE_BATCH),
    (["--use_xla"], ONE_BATCH),
    (["--cpu_devices=2"], ACCUMULATED),
    (["--cpu_devices=2", "--use_xla"], ACCUMULATED),
], ids=["one-device", "xla", "mirrored-accumulated", "mirrored-accumulated-xla"])
def test_packed_training_matches_unpacked(data, baseline, tmp_path, extra, flags):
    _, base_metrics, base_log = baseline
    result, metrics, log = train(data, "packed", tmp_path / "out", *extra, eval_batch=4, **flags)
    assert "packed rows" in result.stderr
    assert "traced more than once" not in result.stderr  # fixed row shapes: one trace each
    for key, value in base_metrics.items():
        if key != "global_step":
            assert metrics[key] == pytest.approx(value, abs=METRIC_TOL), key
    # Every update trains all 16 sequences: the eval falls at 48 samples in both runs.
    assert values(log, "eval_accuracy") == pytest.approx(values(base_log, "eval_accuracy"),
                                                         abs=METRIC_TOL)
    assert [r["metadata"]["epoch_num"] for r in log if r["key"] == "eval_accuracy"] == [48]
    assert values(log, "train_samples") == values(base_log, "train_samples") == [48]
    assert values(log, "global_batch_size") == [16]
    assert values(log, "eval_samples") == values(base_log, "eval_samples") == [16]


def test_checkpoint_evaluates_alike_on_packed_and_unpacked_records(data, tmp_path):
    results = {}
    for kind, batch in (("unpacked", 16), ("packed", 2)):
        out = tmp_path / kind
        result = run_trainer(*as_flags(data["common"]), "--do_eval", "--nodo_train",
                             f"--init_checkpoint={data['checkpoint']}",
                             f"--input_file={data[kind]}", f"--eval_batch_size={batch}",
                             "--max_eval_steps=100", f"--output_dir={out}")
        assert "eval of 16 records" in result.stderr
        results[kind] = read_eval_results(out / "eval_results.txt")
    for key, value in results["unpacked"].items():
        assert results["packed"][key] == pytest.approx(value, abs=METRIC_TOL), key


def test_packed_eval_counts_sequences_not_rows(data, tmp_path):
    """max_eval_steps x eval_batch_size counts sequences: 2 x 5 = 10 of the 16, the last row
    that holds them weighing only the sequences up to the tenth."""
    result = run_trainer(*as_flags(data["common"]), "--do_eval", "--nodo_train",
                         f"--init_checkpoint={data['checkpoint']}",
                         f"--input_file={data['packed']}", "--eval_batch_size=2",
                         "--max_eval_steps=5", f"--output_dir={tmp_path}")
    assert "eval of 10 records" in result.stderr


# ------------------------------------------------------------------------------ bad packed input
def _packed_row(**changes):
    spec = packed_feature_spec(SEQ, 8, 3)
    row = {name: np.zeros((1,) + item.shape, np.float32 if item.dtype == "float32"
                          else np.int64) for name, item in spec.items()}
    row["input_ids"][0, :20] = 7
    row["sequence_ids"][0, :20] = [1] * 10 + [2] * 10
    row["position_ids"][0, :20] = list(range(10)) * 2
    row["masked_lm_positions"][0, :2] = [3, 13]
    row["masked_lm_ids"][0, :2] = 9
    row["masked_lm_weights"][0, :2] = 1
    row["next_sentence_positions"][0, :2] = [0, 10]
    row["next_sentence_weights"][0, :2] = 1
    for name, (index, value) in changes.items():
        row[name][(0,) + index] = value
    return row


def _write_rows(path, count=4, **changes):
    rows = [_packed_row(**(changes if i == count - 1 else {})) for i in range(count)]
    columns = {name: np.concatenate([row[name] for row in rows]) for name in rows[0]}
    with open(path, "wb") as handle:
        write_records(handle, encode_examples(columns))
    return path


def _eval_only(data, path, out, *extra):
    return run_trainer(*as_flags(data["common"]), "--do_eval", "--nodo_train",
                       f"--init_checkpoint={data['checkpoint']}", f"--input_file={path}",
                       "--eval_batch_size=2", f"--output_dir={out}", *extra, check=False)


@pytest.mark.parametrize("changes, problem", [
    ({"sequence_ids": ((12,), 3)}, "sequence_ids are not contiguous (1..k in order, then 0 "
                                    "for padding)"),
    ({"masked_lm_positions": ((1,), 30)}, "a masked position lies outside the row's sequences"),
    ({"position_ids": ((11,), 5)}, "position_ids do not restart at 0 with each sequence"),
], ids=["sequence-ids", "masked-position", "position-ids"])
def test_malformed_packed_rows_are_named_in_one_line(data, tmp_path, changes, problem):
    path = _write_rows(tmp_path / "rows", **changes)
    result = _eval_only(data, path, tmp_path / "out")
    assert_one_error_line(result, f"error: --input_file: {path}: record 3: {problem}")


def test_rows_longer_than_max_seq_length_are_one_line(data, tmp_path):
    path = _write_rows(tmp_path / "rows")
    result = _eval_only(data, path, tmp_path / "out", "--max_seq_length=32")
    assert_one_error_line(result, f"error: --input_file: {path}: packed rows of 64 tokens, but "
                                  "--max_seq_length=32")


def test_a_mix_of_packed_and_unpacked_files_is_one_line(data, tmp_path):
    result = run_trainer(*as_flags(data["common"]), *as_flags(TRAIN), *as_flags(ONE_BATCH),
                         f"--input_file={data['packed']},{data['unpacked']}",
                         f"--eval_file={data['unpacked']}", f"--output_dir={tmp_path}",
                         check=False)
    assert_one_error_line(result, f"error: --input_file: {data['unpacked']}: unpacked records "
                                  "among packed ones: a set of files must be all packed or all "
                                  "unpacked")


# ------------------------------------------------------------------------------ a packed run's log
@pytest.fixture(scope="module")
def packed_run(data, tmp_path_factory):
    """Four packed updates with an eval due every 20 sequences (at 32, 48 and 64), dropout on."""
    out = tmp_path_factory.mktemp("packed_run") / "out"
    flags = {**TRAIN, "eval_frequency_samples": 20, "dropout_override": 0.1, "seed": 9}
    run_trainer(*as_flags(data["common"]), *as_flags(flags), *as_flags(ONE_BATCH),
                "--stop_steps=4", f"--init_checkpoint={data['checkpoint']}",
                f"--input_file={data['packed']}", f"--eval_file={data['packed']}",
                "--eval_batch_size=4", f"--output_dir={out}")
    return out


@pytest.mark.parametrize("kind, what", [("packed", "sequences"), ("unpacked", "records")])
def test_closed_run_with_an_eval_set_of_other_size_is_open_division_packed_or_not(
        baseline, packed_run, kind, what):
    """An eval set of another size, packed or unpacked, makes a closed-division run open
    division, logged with the reason (one rule for both layouts): the runs above asked for
    closed division and evaluate 16 packed sequences (`packed_run`) or records (`baseline`)."""
    records = read_mllog(packed_run / "mlperf.log") if kind == "packed" else baseline[2]
    assert values(records, "submission_division") == ["open"]
    assert f"the eval covers 16 {what}, not the benchmark's 10,000" in values(records,
                                                                             "noncompliant")


def test_packed_run_log_passes_our_checker_and_the_official_one(packed_run):
    log = packed_run / "mlperf.log"
    records = read_mllog(log)
    assert [r["metadata"]["epoch_num"] for r in records if r["key"] == "eval_accuracy"] == \
        [32, 48, 64]
    ours = run_module("benchmark.check", str(log), check=False)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert "PASSED: 0 error(s), 1 warning(s)" in ours.stdout  # open division, 16 evaluated
    assert "bert/blocks" not in ours.stdout + ours.stderr  # blocks tile exactly
    official = compliance(log, packed_run.parent)
    assert official.returncode == 0, official.stdout + official.stderr


def test_packed_run_with_dropout_resumes_bit_exact(data, packed_run, tmp_path):
    """The same run stopped after 2 updates and resumed by a second process ends with the
    weights of the uninterrupted run, bit for bit: dropout masks are keyed by step and
    replica, the row stream is seeded and skipped on resume, and each process repeats what
    the other did."""
    flags = {**TRAIN, "eval_frequency_samples": 20, "dropout_override": 0.1, "seed": 9}
    common = [*as_flags(data["common"]), *as_flags(flags), *as_flags(ONE_BATCH),
              f"--init_checkpoint={data['checkpoint']}", f"--input_file={data['packed']}",
              f"--eval_file={data['packed']}", "--eval_batch_size=4"]
    resumed = tmp_path / "resumed"
    run_trainer(*common, "--stop_steps=2", f"--output_dir={resumed}")
    run_trainer(*common, "--stop_steps=4", f"--output_dir={resumed}")
    reference, weights = model_weights(packed_run), model_weights(resumed)
    assert weights.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)


# ------------------------------------------------------------------------------ BERT-large shapes
@pytest.mark.slow
def test_bert_large_packed_row_matches_its_sequences_alone_and_trains(bert_large):
    """BERT-large at sequence 512: a row of three packed sequences gives each sequence the
    next-sentence logits and masked-LM outputs it gets alone in an unpacked row (inference,
    to float32 rounding), and one LAMB step on packed rows updates the weights."""
    import tensorflow as tf

    from reference.lamb import Lamb, clip_gradients
    from reference.losses import pretraining_losses
    from reference.model import dummy_features

    rng = np.random.default_rng(1)
    lengths, predictions = (220, 180, 100), 20
    unpacked = []
    for length in lengths:
        batch = {k: v.numpy() for k, v in dummy_features(1, 512, predictions).items()}
        batch["input_ids"][0, :length] = rng.integers(5, 30522, length)
        batch["input_mask"][0] = (np.arange(512) < length)
        batch["segment_ids"][0, length // 2:length] = 1
        batch["masked_lm_positions"][0] = np.sort(rng.choice(np.arange(1, length),
                                                             predictions, False))
        batch["masked_lm_ids"][0] = rng.integers(5, 30522, predictions)
        batch["masked_lm_weights"][0] = 1.0
        unpacked.append(batch)
    row = {name: np.zeros((1,) + item.shape, np.float32 if item.dtype == "float32"
                          else np.int32)
           for name, item in packed_feature_spec(512, 3 * predictions, 3).items()}
    start = 0
    for index, (length, batch) in enumerate(zip(lengths, unpacked)):
        span = slice(start, start + length)
        row["input_ids"][0, span] = batch["input_ids"][0, :length]
        row["segment_ids"][0, span] = batch["segment_ids"][0, :length]
        row["sequence_ids"][0, span] = index + 1
        row["position_ids"][0, span] = np.arange(length)
        slots = slice(index * predictions, (index + 1) * predictions)
        row["masked_lm_positions"][0, slots] = batch["masked_lm_positions"][0] + start
        row["masked_lm_ids"][0, slots] = batch["masked_lm_ids"][0]
        row["masked_lm_weights"][0, slots] = 1.0
        row["next_sentence_positions"][0, index] = start
        row["next_sentence_weights"][0, index] = 1.0
        start += length
    packed_out = bert_large(row, training=False)
    hidden = packed_out["masked_lm_hidden"].numpy()
    for index, batch in enumerate(unpacked):
        alone = bert_large(batch, training=False)
        np.testing.assert_allclose(packed_out["next_sentence_logits"][0, index],
                                   alone["next_sentence_logits"][0], atol=2e-4)
        np.testing.assert_allclose(hidden[index * predictions:(index + 1) * predictions],
                                   alone["masked_lm_hidden"].numpy(), atol=2e-4)

    before = [v.numpy() for v in bert_large.trainable_variables]
    with tf.GradientTape() as tape:
        loss = pretraining_losses(bert_large(row, training=True), row)["total_loss"]
    grads, _ = clip_gradients(tape.gradient(loss, bert_large.trainable_variables))
    Lamb(4e-4).apply_gradients(zip(grads, bert_large.trainable_variables))
    assert np.isfinite(float(loss)) and float(loss) > 5.0
    changed = [not np.array_equal(a, v.numpy())
               for a, v in zip(before, bert_large.trainable_variables)]
    assert sum(changed) >= 396


def test_a_packed_training_row_of_other_shapes_is_one_line(data, tmp_path):
    """Past the first record, which preflight checks in every file: the rows read for the
    mean sequences per row name the record that does not parse (its index in its own file,
    the second one read)."""
    good = _write_rows(tmp_path / "good")
    path = _write_rows(tmp_path / "rows")
    wider = {**_packed_row(), "masked_lm_positions": np.zeros((1, 9), np.int64)}
    with open(path, "ab") as handle:
        write_records(handle, encode_examples(wider))
    result = run_trainer(*as_flags(data["common"]), *as_flags(TRAIN), *as_flags(ONE_BATCH),
                         f"--input_file={good},{path}", f"--eval_file={data['packed']}",
                         f"--output_dir={tmp_path / 'out'}", check=False)
    assert_one_error_line(result, f"error: --input_file: {path}: record 4: feature "
                                  "masked_lm_positions has 9 values, expected 8")
