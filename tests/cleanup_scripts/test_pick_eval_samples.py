"""pick_eval_samples picks the reference's records; the TFRecord reader copes with bad files.

Expected digests in fixtures/pretraining/cases.json ("pick") come from the reference
pick_eval_samples.py run on the same inputs: synthetic files of 1, 6, 50 and 122 records, and
the reference's own create_pretraining_data output for the wiki slice.
"""
from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from benchmark.capacity import gigabytes
from benchmark.files import InputError
from cleanup_scripts.pick_eval_samples import BATCH, pick_examples, pick_indices
from cleanup_scripts.records.pretraining_features import (DecodeError, count_records,
                                                          decode_example, encode_examples,
                                                          feature_spec, frame_record,
                                                          parse_pretraining_example, read_records,
                                                          smallest_record_bytes)
from cleanup_scripts.records.tfrecord_digest import tfrecord_digest
from tests.conftest import run_module
from tests.pretraining_cases import (FIXTURES, case_flags, flag_args, load_cases,
                                     synthetic_records, write_synthetic_tfrecord)

CASES = load_cases()
PICKS = CASES["pick"]
MODULE = "cleanup_scripts.pick_eval_samples"


def source_file(case: dict, tmp_path) -> str:
    source = case["source"]
    path = tmp_path / "input.tfrecord"
    if "synthetic" in source:
        write_synthetic_tfrecord(path, source["synthetic"], case["max_seq_length"],
                                 case["max_predictions_per_seq"])
    else:
        create = CASES["create"][source["create"]]
        inputs = ",".join(str(FIXTURES / name) for name in create["inputs"])
        run_module("cleanup_scripts.create_pretraining_data", f"--input_file={inputs}",
                   f"--output_file={path}", *flag_args(case_flags(create)))
    return str(path)


@pytest.mark.parametrize("name", sorted(PICKS))
def test_picks_match_reference(name, tmp_path):
    case = PICKS[name]
    output = tmp_path / "picked.tfrecord"
    result = run_module(MODULE, f"--input_tfrecord={source_file(case, tmp_path)}",
                        f"--output_tfrecord={output}",
                        f"--num_examples_to_pick={case['num_examples_to_pick']}",
                        f"--max_seq_length={case['max_seq_length']}",
                        f"--max_predictions_per_seq={case['max_predictions_per_seq']}")
    assert f"pick_eval_samples: 1 files, {case['num_examples_to_pick']} records" in result.stderr
    assert list(tfrecord_digest(output, case["max_seq_length"],
                                case["max_predictions_per_seq"])) == case["expected"]


def test_float_ratio_is_not_integer_division():
    """int(i * (n / k)) differs from i * n // k; the reference (and this) use the former."""
    six = list(pick_indices(6, 10_000))
    assert six[5000] == 2 and 5000 * 6 // 10_000 == 3
    assert list(pick_indices(122, 14))[7] == 60 and 7 * 122 // 14 == 61
    for total, wanted in ((3530, 10_000), (843_343, 10_000), (10_000, 10_000), (1, 1)):
        picks = list(pick_indices(total, wanted))
        assert len(picks) == wanted and picks == sorted(picks) and 0 <= picks[-1] < total


def test_fewer_records_than_asked_repeats_them(tmp_path, caplog):
    source = tmp_path / "in.tfrecord"
    write_synthetic_tfrecord(source, 3, 8, 2)
    output = tmp_path / "out.tfrecord"
    assert pick_examples(str(source), str(output), 7, 8, 2) == 7
    assert "fewer than the 7 asked for" in caplog.text
    records = synthetic_records(3, 8, 2)
    assert list(read_records(output)) == [records[i] for i in (0, 0, 0, 1, 1, 2, 2)]


def test_repeats_of_a_record_are_written_a_batch_at_a_time(tmp_path):
    # Holding every pick of one record before writing the batch, 10^12 picks from a 6-record
    # file grow past 2.8 GB, and 10^11 end in a numpy traceback.
    source = tmp_path / "in.tfrecord"
    write_synthetic_tfrecord(source, 1, 8, 2)
    output = tmp_path / "out.tfrecord"
    batches: list[int] = []
    count = 3 * BATCH + 5
    assert pick_examples(str(source), str(output), count, 8, 2, progress=batches.append) == count
    assert batches == [BATCH, BATCH, BATCH, 5]
    assert list(read_records(output)) == synthetic_records(1, 8, 2) * count


@pytest.mark.timeout(30)  # unbounded: records written until the disk is full
def test_more_records_than_the_disk_holds_is_one_line_before_reading(tmp_path):
    source = tmp_path / "in.tfrecord"
    write_synthetic_tfrecord(source, 6, 8, 2)
    output = tmp_path / "out.tfrecord"
    started = time.monotonic()
    result = run_module(MODULE, f"--input_tfrecord={source}", f"--output_tfrecord={output}",
                        "--num_examples_to_pick=1000000000000000", "--max_seq_length=8",
                        "--max_predictions_per_seq=2", check=False)
    assert time.monotonic() - started < 10  # the interpreter's start included
    record = smallest_record_bytes(feature_spec(8, 2))
    [line] = result.stderr.strip().splitlines()
    assert result.returncode == 1
    assert line.startswith(f"error: --num_examples_to_pick=1000000000000000: "
                           f"1,000,000,000,000,000 records of at least {record} bytes take at "
                           f"least {gigabytes(10 ** 15 * record)}, more than the ")
    assert line.endswith(f" free on the disk of {tmp_path}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.tfrecord"]


@pytest.mark.parametrize("seq, pred", [(8, 2), (128, 20), (512, 76), (16, 20)])
def test_smallest_record_bytes_are_those_of_an_all_zero_record(seq, pred):
    spec = feature_spec(seq, pred)
    zeros = {name: np.zeros((1, item.length), np.float32 if item.dtype == "float32"
                            else np.int64) for name, item in spec.items()}
    assert smallest_record_bytes(spec) == len(frame_record(encode_examples(zeros)[0]))
    real = [len(frame_record(record)) for record in synthetic_records(20, seq, pred)]
    assert smallest_record_bytes(spec) <= min(real)


def test_picked_records_are_canonical(tmp_path):
    """Extra features are dropped and int64 values pass through int32, as in the reference."""
    spec = feature_spec(4, 2)
    columns = {name: np.ones((1, item.length), np.float32 if item.dtype == "float32" else np.int64)
               for name, item in spec.items()}
    columns["input_ids"][0, 0] = 2 ** 32 + 5
    columns["extra"] = np.array([[7]])
    source = tmp_path / "in.tfrecord"
    source.write_bytes(frame_record(encode_examples(columns)[0]))
    output = tmp_path / "out.tfrecord"
    pick_examples(str(source), str(output), 1, 4, 2)
    canonical = {name: columns[name] for name in spec}  # in the spec's order, no "extra"
    canonical["input_ids"][0, 0] = 5
    assert list(read_records(output)) == encode_examples(canonical)


# ---- the reader ---------------------------------------------------------------------------------

def test_decoder_reads_tensorflow_protos():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    example = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[0, 1, 300, -5])),
        "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 0.5])),
        "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x", b"yz"])),
        "empty": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
    }))
    decoded = decode_example(example.SerializeToString())
    assert decoded["input_ids"][0] == "int64"
    assert decoded["input_ids"][1].tolist() == [0, 1, 300, -5]
    assert decoded["masked_lm_weights"][1].tolist() == [1.0, 0.5]
    assert decoded["name"] == ("bytes", [b"x", b"yz"])
    assert decoded["empty"][1].tolist() == []
    assert decoded["empty"][1].dtype == np.int64 and decoded["masked_lm_weights"][1].dtype == \
        np.float32
    serialized = example.SerializeToString()
    for damaged in (serialized[:-3], b"\x0a\x05\x0a\x03\x0a\x01\xff"):  # cut; a name not UTF-8
        with pytest.raises(DecodeError):
            decode_example(damaged)
    assert decode_example(b"") == {}
    with pytest.raises(DecodeError, match="expected int64"):
        parse_pretraining_example(example.SerializeToString(),
                                  {"masked_lm_weights": feature_spec(2, 2)["input_ids"]})
    with pytest.raises(DecodeError, match="has 4 values, expected 2"):
        parse_pretraining_example(example.SerializeToString(),
                                  {"input_ids": feature_spec(2, 2)["input_ids"]})


def test_damaged_files_are_input_errors(tmp_path):
    good = b"".join(frame_record(record) for record in synthetic_records(4, 8, 2))
    cases = {
        "truncated": good[:-3],
        "bad-length-crc": good[:8] + b"\x00\x00\x00\x00" + good[12:],
        "bad-data-crc": good[:-1] + bytes([good[-1] ^ 1]),
        "short-header": good + b"\x01\x02",
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(InputError) as error:
            list(read_records(path))
        assert str(path) in str(error.value), name
    (tmp_path / "good").write_bytes(good)
    assert count_records(tmp_path / "good") == 4
    with pytest.raises(InputError, match="truncated"):
        count_records(tmp_path / "truncated")


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in last, last


def test_error_paths(tmp_path):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    output = tmp_path / "out.tfrecord"
    result = run_module(MODULE, f"--input_tfrecord={empty}", f"--output_tfrecord={output}",
                        check=False)
    assert_one_line_error(result, str(empty), "no records")

    result = run_module(MODULE, f"--input_tfrecord={tmp_path / 'absent'}",
                        f"--output_tfrecord={output}", check=False)
    assert_one_line_error(result, "absent", "cannot read")

    source = tmp_path / "in.tfrecord"
    write_synthetic_tfrecord(source, 5, 8, 2)
    result = run_module(MODULE, f"--input_tfrecord={source}", f"--output_tfrecord={output}",
                        "--num_examples_to_pick=2", check=False)  # flags say 512 / 76
    assert_one_line_error(result, str(source), "record 0 is not a pretraining example")

    result = run_module(MODULE, f"--input_tfrecord={source}", f"--output_tfrecord={output}",
                        "--num_examples_to_pick=0", check=False)
    assert_one_line_error(result, "--num_examples_to_pick=0")

    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_module(MODULE, f"--input_tfrecord={source}",
                        f"--output_tfrecord={blocker / 'out'}", "--num_examples_to_pick=2",
                        "--max_seq_length=8", "--max_predictions_per_seq=2", check=False)
    assert_one_line_error(result, str(blocker))
    assert not output.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_frame_record_layout():
    framed = frame_record(b"abc")
    assert struct.unpack("<Q", framed[:8])[0] == 3 and framed[12:15] == b"abc"
    assert len(framed) == 8 + 4 + 3 + 4
