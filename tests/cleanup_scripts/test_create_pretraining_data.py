"""create_pretraining_data writes the reference's records, and fails cleanly on bad input.

The expected digests (record count, md5 of the decoded features) were made by running the
MLCommons reference create_pretraining_data.py on the same inputs and flags: the cases in
fixtures/pretraining/cases.json (non-default flags, adversarial text, a vocabulary with
duplicate lines, several inputs and outputs) and, where the text parts are available, the
benchmark's flags on the reference-wiki_00-01 parts (fixtures/reference-wiki_00-01).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from benchmark.capacity import free_disk_bytes, gigabytes, host_memory_bytes
from benchmark.files import InputError
from cleanup_scripts import VOCAB_FILE
from cleanup_scripts.create_pretraining_data import INSTANCE_BYTES, write_pretraining_data
from cleanup_scripts.records.pretraining_features import (PretrainingEncoder, encode_examples,
                                                          feature_spec, frame_record, read_records,
                                                          smallest_record_bytes)
from cleanup_scripts.records.tfrecord_digest import tfrecord_digest
from tests.conftest import run_module
from tests.pretraining_cases import (FIXTURES, case_flags, flag_args, load_cases, mlperf_digests,
                                     write_vocab)

CASES = load_cases()["create"]
MODULE = "cleanup_scripts.create_pretraining_data"
MLPERF_FLAGS = ["--do_lower_case=True", "--max_seq_length=512", "--max_predictions_per_seq=76",
                "--masked_lm_prob=0.15", "--random_seed=12345", "--dupe_factor=10"]


def leftovers(directory: Path) -> list[str]:
    """Temporary files a stage left behind in `directory`."""
    return [path.name for path in directory.iterdir() if ".partial-" in path.name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_records_match_reference(name, tmp_path):
    case = CASES[name]
    flags = case_flags(case)
    inputs = ",".join(str(FIXTURES / path) for path in case["inputs"])
    outputs = [tmp_path / f"out-{index}.tfrecord" for index in range(case["outputs"])]
    result = run_module(MODULE, f"--input_file={inputs}",
                        f"--output_file={','.join(map(str, outputs))}",
                        f"--vocab_file={write_vocab(case['vocab'], tmp_path)}", *flag_args(flags))
    total = sum(count for count, _ in case["expected"])
    assert re.search(rf"create_pretraining_data: {len(case['inputs'])} files, {total} records",
                     result.stderr)
    digests = [list(tfrecord_digest(path, flags["max_seq_length"],
                                    flags["max_predictions_per_seq"])) for path in outputs]
    assert digests == case["expected"]
    assert not leftovers(tmp_path)


MLPERF = mlperf_digests()


@pytest.mark.parametrize("part", sorted(MLPERF))
def test_mlperf_parts_match_reference(part, tmp_path, sample_results_dir):
    text = sample_results_dir / part
    output = tmp_path / "part.tfrecord"
    run_module(MODULE, f"--input_file={text}", f"--output_file={output}",
               f"--vocab_file={VOCAB_FILE}", *MLPERF_FLAGS)
    assert tfrecord_digest(output) == MLPERF[part]


def test_defaults_are_the_benchmark_flags(tmp_path):
    """With only input and output, the flags are MLPerf's (512, 76, seed 12345, dupe 10...)."""
    output = tmp_path / "out.tfrecord"
    run_module(MODULE, f"--input_file={FIXTURES / 'wiki-slice.txt'}", f"--output_file={output}")
    assert [list(tfrecord_digest(output))] == CASES["slice-mlperf"]["expected"]


def test_library_call_and_globs(tmp_path):
    """write_pretraining_data (used by preprocess) and glob inputs give the same records."""
    case = CASES["split-inputs"]
    flags = case_flags(case)
    del flags["preserve_unused_tokens"]
    output = tmp_path / "lib.tfrecord"
    count = write_pretraining_data([str(FIXTURES / path) for path in case["inputs"]],
                                   [str(output)], vocab_file=str(VOCAB_FILE), **flags)
    assert [[count, tfrecord_digest(output, 128, 20)[1]]] == case["expected"]
    # A glob is expanded in sorted order: wiki-slice-a, wiki-slice-b.
    glob_output = tmp_path / "glob.tfrecord"
    inputs = f"{FIXTURES / 'wiki-slice-?.txt'},{FIXTURES / 'adversarial.txt'}"
    run_module(MODULE, f"--input_file={inputs}",
               f"--output_file={glob_output}", *flag_args(case_flags(case)))
    assert [list(tfrecord_digest(glob_output, 128, 20))] == case["expected"]


@pytest.mark.parametrize("seq, pred, id_count", [(512, 76, 30522), (16, 3, 300000),
                                              (5, 1, 200), (130, 20, 3_000_000)])
def test_encoder_writes_encode_examples_bytes(seq, pred, id_count):
    """PretrainingEncoder's records are frame_record(encode_examples(...)) of the same rows."""
    rng = np.random.default_rng(seq)
    rows = 60
    token_counts = rng.integers(5, seq + 1, rows)
    token_counts[:2] = (5, seq)
    a_lengths = np.array([rng.integers(1, count - 3) for count in token_counts])
    mask_counts = np.array([rng.integers(1, min(pred, count - 3) + 1) for count in token_counts])
    mask_counts[:2] = (1, min(pred, seq - 3))
    columns = {name: np.zeros((rows, spec.length), dtype=np.float32 if spec.dtype == "float32"
                              else np.int64) for name, spec in feature_spec(seq, pred).items()}
    tokens, positions, labels = [], [], []
    for row, (count, a_length, masks) in enumerate(zip(token_counts, a_lengths, mask_counts)):
        edges = [value for value in (0, 1, 127, 128, 16383, 16384, 1 << 21, id_count - 1)
                 if value < id_count]
        ids = np.where(rng.random(count) < 0.3, rng.choice(edges, count),
                       rng.integers(0, id_count, count))
        chosen = np.sort(rng.choice(np.arange(1, count), masks, replace=False))
        tokens.extend(ids)
        positions.extend(chosen)
        labels.extend(ids[chosen])
        columns["input_ids"][row, :count] = ids
        columns["input_mask"][row, :count] = 1
        columns["segment_ids"][row, a_length + 2:count] = 1
        columns["masked_lm_positions"][row, :masks] = chosen
        columns["masked_lm_ids"][row, :masks] = ids[chosen]
        columns["masked_lm_weights"][row, :masks] = 1.0
        columns["next_sentence_labels"][row] = row % 2
    encoder = PretrainingEncoder(seq, pred, id_count)
    records = encoder.records(np.array(tokens), token_counts, a_lengths, np.array(positions),
                              np.array(labels), mask_counts, np.arange(rows) % 2)
    assert records == [frame_record(record) for record in encode_examples(columns)]


def test_records_are_valid_examples_for_tensorflow(tmp_path):
    """The hand-made protos parse in TensorFlow as the values written, in any byte layout."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(0)
    columns = {name: (rng.random((3, spec.length)).astype(np.float32) if spec.dtype == "float32"
                      else rng.integers(0, 2 ** 40, (3, spec.length)))
               for name, spec in feature_spec(16, 4).items()}
    columns["input_ids"][0, :3] = [-1, 2 ** 63 - 1, -(2 ** 63)]
    records = encode_examples(columns)
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(frame_record(record) for record in records))
    assert list(read_records(path)) == records
    assert [bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(path))] == records
    for row, record in enumerate(records):
        example = tf.train.Example.FromString(record)
        for name, values in columns.items():
            feature = example.features.feature[name]
            got = (feature.float_list.value if values.dtype == np.float32
                   else feature.int64_list.value)
            assert np.array_equal(np.asarray(got, dtype=values.dtype), values[row]), name


# ---- errors -------------------------------------------------------------------------------------

def assert_one_line_error(result, *fragments: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[-1], lines[-1]


def run_failing(tmp_path, *args: str):
    return run_module(MODULE, *args, check=False, cwd=tmp_path)


def test_not_a_vocab(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    output = tmp_path / "out.tfrecord"
    result = run_failing(tmp_path, f"--input_file={FIXTURES / 'one-doc.txt'}",
                         f"--output_file={output}", f"--vocab_file={vocab}")
    assert_one_line_error(result, str(vocab), "not a BERT vocab")
    assert not output.exists() and not leftovers(tmp_path)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n\t\n", b"\x07\n\n\xe2\x80\x8b\n"])
def test_empty_input(tmp_path, content):
    text = tmp_path / "empty.txt"
    text.write_bytes(content)
    output = tmp_path / "out.tfrecord"
    result = run_failing(tmp_path, f"--input_file={text}", f"--output_file={output}")
    assert_one_line_error(result, str(text), "no text")
    assert not output.exists() and not leftovers(tmp_path)


def test_input_not_found(tmp_path):
    output = tmp_path / "out.tfrecord"
    result = run_failing(tmp_path, f"--input_file={tmp_path / 'nothing-*.txt'}",
                         f"--output_file={output}")
    assert_one_line_error(result, "nothing-*.txt", "no input files match")
    assert not output.exists()


def test_invalid_utf8_input(tmp_path):
    """The reference dies with UnicodeDecodeError here; this names the file and line."""
    output = tmp_path / "out.tfrecord"
    text = FIXTURES / "invalid-utf8.txt"
    result = run_failing(tmp_path, f"--input_file={text}", f"--output_file={output}")
    assert_one_line_error(result, str(text), "line 2 is not UTF-8")
    assert not output.exists() and not leftovers(tmp_path)


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    good = tmp_path / "good.tfrecord"
    bad = blocker / "sub" / "out.tfrecord"
    result = run_failing(tmp_path, f"--input_file={FIXTURES / 'one-doc.txt'}",
                         f"--output_file={good},{bad}")
    assert_one_line_error(result, str(blocker / "sub"), "cannot create output directory")
    assert not good.exists() and not leftovers(tmp_path)
    if os.geteuid() != 0:  # root writes anywhere: only a non-root run can test permissions
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        result = run_failing(tmp_path, f"--input_file={FIXTURES / 'one-doc.txt'}",
                             f"--output_file={locked / 'out.tfrecord'}")
        assert_one_line_error(result, str(locked))
        assert not list(locked.iterdir())


@pytest.mark.parametrize("flag, message", [
    ("--max_seq_length=4", "must be at least 5"),
    ("--max_seq_length=4097", "at most 4096"),
    ("--max_predictions_per_seq=0", "must be at least 1"),
    ("--max_predictions_per_seq=5000", "at most 4096"),  # its tables grow with its square
    ("--dupe_factor=0", "must be at least 1"),
    ("--masked_lm_prob=1.5", "between 0 and 1"),
])
def test_bad_flag_values(tmp_path, flag, message):
    output = tmp_path / "out.tfrecord"
    result = run_failing(tmp_path, f"--input_file={FIXTURES / 'one-doc.txt'}",
                         f"--output_file={output}", flag)
    assert_one_line_error(result, flag.split("=")[0], message)
    assert not output.exists()


@pytest.mark.timeout(60)  # before the bound: instances made without end
def test_dupe_factor_no_machine_holds_is_one_line_at_once(tmp_path):
    output = tmp_path / "out.tfrecord"
    started = time.monotonic()
    result = run_failing(tmp_path, f"--input_file={FIXTURES / 'one-doc.txt'}",
                         f"--output_file={output}", "--dupe_factor=10000000000000")
    assert time.monotonic() - started < 10  # the interpreter's start included
    assert "Traceback" not in result.stderr
    assert_one_line_error(result, "--dupe_factor=10000000000000: 10,000,000,000,000 instances "
                          "(at least one per duplicate of a document) need at least "
                          "900,000.0 GB of memory, more than the ", "this machine has")
    assert not output.exists() and not leftovers(tmp_path)


def refused_at_once(*args, **kwargs) -> str:
    """The InputError message of write_pretraining_data(*args, **kwargs), which must come
    within 5 s (the vocabulary and the input read, no instance made)."""
    started = time.monotonic()
    with pytest.raises(InputError) as err:
        write_pretraining_data(*args, **kwargs)
    assert time.monotonic() - started < 5
    return str(err.value)


@pytest.mark.timeout(60)
def test_dupe_factor_beyond_memory_for_the_input_is_refused_before_any_instance(tmp_path):
    # Half the machine's memory for one document's instances: the input's 39 make 19.5 times it.
    dupe = host_memory_bytes() // INSTANCE_BYTES // 2
    output = tmp_path / "out.tfrecord"
    message = refused_at_once([str(FIXTURES / "wiki-slice.txt")], [str(output)],
                              dupe_factor=dupe)
    assert message.startswith(f"--dupe_factor={dupe}: {39 * dupe:,} instances (at least one per "
                              "duplicate of each of 39 documents) need at least ")
    assert message.endswith(" this machine has")
    assert not output.exists() and not leftovers(tmp_path)


@pytest.mark.timeout(60)
def test_dupe_factor_beyond_the_output_disk_is_refused_before_any_instance(tmp_path):
    dupe = host_memory_bytes() // INSTANCE_BYTES // 2  # fits in memory
    record = smallest_record_bytes(feature_spec(4096, 4096))
    if dupe * record <= free_disk_bytes(tmp_path):
        pytest.skip(f"{tmp_path}'s disk holds {dupe:,} records of {record:,} bytes")
    output = tmp_path / "out.tfrecord"
    message = refused_at_once([str(FIXTURES / "one-doc.txt")], [str(output)], dupe_factor=dupe,
                              max_seq_length=4096, max_predictions_per_seq=4096)
    assert message.startswith(f"--dupe_factor={dupe}: {dupe:,} records of at least {record:,} "
                              f"bytes take at least {gigabytes(dupe * record)}, more than the ")
    assert message.endswith(f" free on the disk of {tmp_path}")
    assert not output.exists() and not leftovers(tmp_path)


def test_output_listed_twice(tmp_path):
    output = tmp_path / "out.tfrecord"
    result = run_failing(tmp_path, f"--input_file={FIXTURES / 'one-doc.txt'}",
                         f"--output_file={output},{output}")
    assert_one_line_error(result, "listed twice")


def test_vocabulary_of_more_than_65536_tokens(tmp_path):
    """Ids above 16 bits survive the compact storage (tokens and random replacement words)."""
    vocab = tmp_path / "big-vocab.txt"
    words = [f"w{index}" for index in range(70_000)]
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(" ".join(words[(doc * 997 + k * 7919) % 70_000] for k in range(12))
                                for doc in range(30)) + "\n")
    output = tmp_path / "out.tfrecord"
    count = write_pretraining_data([str(text)], [str(output)], vocab_file=str(vocab),
                                   max_seq_length=32, max_predictions_per_seq=8, dupe_factor=3)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from cleanup_scripts.records.pretraining_features import RecordLayout, tf_feature_spec
    parsed = [tf.io.parse_single_example(record, tf_feature_spec(RecordLayout.unpacked(32, 8)))
              for record in tf.data.TFRecordDataset(str(output))]
    assert len(parsed) == count > 0
    ids = np.concatenate([example["input_ids"].numpy() for example in parsed])
    labels = np.concatenate([example["masked_lm_ids"].numpy() for example in parsed])
    assert ids.max() > 65_536 and labels.max() > 65_536
    text_ids = {index + 5 for index in range(70_000)} | {0, 2, 3, 4}
    assert set(labels.tolist()) - {0} <= text_ids
