"""Every record is checked where it is read: the training stream asserts each batch's rows
(packed structure; unpacked, no real prediction in the padding) as it parses them, so a bad row
after the first of its file stops the run, and the scan names its file and record. Real
TFRecords written and re-read, the trainer as a subprocess.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from cleanup_scripts.records.pretraining_features import (RecordLayout, encode_examples,
                                                          write_records)
from reference import input_pipeline
from tests.reference import synthetic_data
from tests.reference.test_bad_inputs import assert_one_error_line
from tests.reference.test_run_pretraining import read_mllog
from tests.reference.test_untrusted_inputs import run_cli

SEQ, PRED = synthetic_data.SEQ_LENGTH, synthetic_data.MAX_PREDICTIONS
RANGES = input_pipeline.IdRanges(vocab_size=synthetic_data.VOCAB_SIZE, type_vocab_size=2)
PACKED = RecordLayout(True, SEQ, PRED, 3)
UNPACKED = RecordLayout.unpacked(SEQ, PRED)
BAD_INDEX = 150


def packed_columns(count: int, seed: int) -> dict[str, np.ndarray]:
    """The synthetic records as packed rows of one sequence each."""
    columns = synthetic_data.make_columns(count, seed)
    labels = np.zeros((count, 3), np.int64)
    labels[:, 0] = columns["next_sentence_labels"][:, 0]
    weights = np.zeros((count, 3), np.float32)
    weights[:, 0] = 1.0
    return {"input_ids": columns["input_ids"], "segment_ids": columns["segment_ids"],
            "sequence_ids": np.ones((count, SEQ), np.int64),
            "position_ids": np.tile(np.arange(SEQ, dtype=np.int64), (count, 1)),
            "masked_lm_positions": columns["masked_lm_positions"],
            "masked_lm_ids": columns["masked_lm_ids"],
            "masked_lm_weights": columns["masked_lm_weights"],
            "next_sentence_positions": np.zeros((count, 3), np.int64),
            "next_sentence_labels": labels, "next_sentence_weights": weights}


def overlapping(columns: dict, row: int) -> None:
    """Two sequences whose ids go 1, 2, 1 (the second one overlaps the first)."""
    columns["sequence_ids"][row, SEQ // 2:] = 2
    columns["sequence_ids"][row, -2:] = 1


def restarting_late(columns: dict, row: int) -> None:
    """A second sequence whose positions go on counting from the first's."""
    columns["sequence_ids"][row, SEQ // 2:] = 2
    columns["next_sentence_positions"][row, 1] = SEQ // 2
    columns["next_sentence_weights"][row, 1] = 1.0


def cls_elsewhere(columns: dict, row: int) -> None:
    """Two well-formed sequences, the second's [CLS] said to be one token early."""
    restarting_late(columns, row)
    columns["position_ids"][row, SEQ // 2:] -= SEQ // 2
    columns["next_sentence_positions"][row, 1] = SEQ // 2 - 1


def masked_in_padding(columns: dict, row: int) -> None:
    """Unpacked: the last four tokens padding, a real prediction among them."""
    columns["input_mask"][row, -4:] = 0
    columns["masked_lm_positions"][row, -1] = SEQ - 1


def gapped(columns: dict, row: int) -> None:
    """Sequence ids 1, then padding, then 1 again."""
    columns["sequence_ids"][row, SEQ - 4:SEQ - 2] = 0


CONTIGUOUS = "sequence_ids are not contiguous (1..k in order, then 0 for padding)"
CASES = {  # (layout, damage, what the scan says)
    "overlapping": (PACKED, overlapping, CONTIGUOUS),
    "gapped": (PACKED, gapped, CONTIGUOUS),
    "positions": (PACKED, restarting_late, "position_ids do not restart at 0 with each "
                                           "sequence"),
    "cls": (PACKED, cls_elsewhere, "next_sentence_positions do not point at each sequence's "
                                   "first token"),
    "padding": (UNPACKED, masked_in_padding, "a real masked position lies in the padding "
                                             "(input_mask 0)"),
}


def write_file(path: Path, layout: RecordLayout, count: int, seed: int, damage=None) -> Path:
    columns = (packed_columns if layout.packed else synthetic_data.make_columns)(count, seed)
    if damage:
        damage(columns, BAD_INDEX)
    with open(path, "wb") as handle:
        write_records(handle, encode_examples(columns))
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_stream_stops_at_a_bad_row_after_the_first_and_the_scan_names_it(tmp_path, case):
    layout, damage, problem = CASES[case]
    good = write_file(tmp_path / "good", layout, 256, seed=1)
    bad = write_file(tmp_path / "bad", layout, 256, seed=1, damage=damage)

    def batches(path):
        dataset = input_pipeline.train_dataset([str(path)], 8, layout, seed=1,
                                               shuffle_buffer=0, id_ranges=RANGES)
        return [b["input_ids"].numpy() for b in dataset.take(40)]

    assert len(batches(good)) == 40
    with pytest.raises(tf.errors.InvalidArgumentError, match="well formed|in the padding"):
        batches(bad)
    assert str(input_pipeline.find_bad_record([str(bad)], layout, id_ranges=RANGES)) == \
        f"{bad}: record {BAD_INDEX}: {problem}"
    assert input_pipeline.find_bad_record([str(good)], layout, id_ranges=RANGES) is None


def dataset_with(root: Path, layout: RecordLayout, damage) -> dict:
    """The tiny data set (two training files of 256 records, eval_10k of 200) in `layout`,
    record BAD_INDEX of the second training file damaged by `damage` (bytes: replaced)."""
    flags = synthetic_data.write_dataset(root, train_files=2, train_records=256,
                                         eval_records=200)
    for index in range(2):
        path = root / f"part-{index:05d}-of-00002"
        write_file(path, layout, 256, seed=100 + index,
                   damage=damage if index == 1 and callable(damage) else None)
    if isinstance(damage, bytes):
        path = root / "part-00001-of-00002"
        records = list(input_pipeline._framed_records(str(path)))
        records[BAD_INDEX] = damage
        with open(path, "wb") as handle:
            write_records(handle, records)
    return flags


@pytest.mark.parametrize("case", ["overlapping", "padding", "not-an-example"])
def test_a_bad_record_mid_file_stops_training_in_one_line_naming_it(tmp_path, case):
    # Preflight checks only the first record of each training file: these fail mid-run.
    layout, damage, problem = CASES.get(case, (UNPACKED, b"\x0a\x08\x0a\x06\x0a\x02\xff\xfe"
                                               b"\x12\x00", "not a tf.train.Example (string field had "
                                               "bad UTF-8)"))
    data = dataset_with(tmp_path / "data", layout, damage)
    out = tmp_path / "out"
    # 40 steps of 64 records: 5 passes over the 512 training records.
    result = run_cli(data, out, train_batch_size=64, eval_frequency_samples=640)
    assert_one_error_line(result, f"error: --input_file: {tmp_path / 'data'}/"
                                  f"part-00001-of-00002: record {BAD_INDEX}: {problem}")
    records = read_mllog(out / "mlperf.log")
    assert "run_start" in [r["key"] for r in records]
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"
