"""The packer: the plan from the length histogram, rows that hold every sequence exactly once
with its own tokens, positions, predictions and label, same bytes for the same inputs, and one
line for bad input. Real records: create_pretraining_data on real Wikipedia parts (the
reference-checked `sample_results_dir`)."""
from __future__ import annotations

import collections
import os
import signal
import subprocess

import numpy as np
import pytest

from benchmark.files import InputError, expand_inputs
from cleanup_scripts.create_pretraining_data import write_pretraining_data
from cleanup_scripts.pack_pretraining_data import (PackOptions, output_paths, pack_files,
                                                   read_sequences)
from cleanup_scripts.packing.plan import assign_sequences, length_histogram, pack_plan
from cleanup_scripts.records.pretraining_features import (decode_example, encode_examples,
                                                          feature_spec, packed_row_problem,
                                                          read_records, record_layout,
                                                          write_records)
from tests import forked
from tests.conftest import md5_of, run_module
from tests.reference.synthetic_data import put_random_record

SEQ, PRED = 128, 20


def official_like_lengths(count: int, seed: int = 0) -> np.ndarray:
    """Lengths with about the official data's padding (half the tokens of 512-token rows):
    create_pretraining_data's mix of full-length pairs, pairs cut short by a document's end,
    and 10% short targets."""
    rng = np.random.default_rng(seed)
    kind = rng.random(count)
    full = rng.integers(480, 513, count)
    cut = rng.integers(20, 380, count)
    short = rng.integers(5, 512, count)
    return np.where(kind < 0.15, full, np.where(kind < 0.9, cut, short))


def test_plan_holds_every_sequence_once_within_the_limits():
    lengths = official_like_lengths(20_000)
    histogram = length_histogram(lengths, 512)
    plan = pack_plan(histogram, 512, 3)
    placed = collections.Counter()
    for strategy, rows in plan:
        assert 1 <= len(strategy) <= 3 and sum(strategy) <= 512 and rows > 0
        for length in strategy:
            placed[length] += rows
    assert placed == collections.Counter(lengths.tolist())
    assert plan == pack_plan(histogram, 512, 3)  # deterministic


def test_plan_on_the_official_length_mix_halves_the_rows():
    lengths = official_like_lengths(50_000)
    plan = pack_plan(length_histogram(lengths, 512), 512, 3)
    rows = sum(count for _, count in plan)
    padding_before = 1 - lengths.sum() / (lengths.size * 512)
    padding_after = 1 - lengths.sum() / (rows * 512)
    assert 0.45 < padding_before < 0.55
    # Best-fit decreasing with 3 per row on this mix: 7.7% padding left (the official
    # data's many short remainders of documents pack tighter: NVIDIA reports 1.999x).
    assert padding_after < 0.09
    assert lengths.size / rows > 1.75


def test_one_sequence_per_pack_is_no_packing():
    lengths = np.array([5, 7, 7, 100])
    plan = pack_plan(length_histogram(lengths, 128), 128, 1)
    assert sorted(plan) == [((5,), 1), ((7,), 2), ((100,), 1)]


def test_assignment_fills_slots_in_input_order():
    lengths = np.array([60, 60, 50, 60, 10])
    plan = pack_plan(length_histogram(lengths, 128), 128, 3)
    rows = assign_sequences(lengths, plan)
    assert sorted(rows.sequence.tolist()) == [0, 1, 2, 3, 4]
    per_row = collections.defaultdict(list)
    for row, slot, sequence in sorted(zip(rows.row, rows.slot, rows.sequence)):
        per_row[row].append(int(lengths[sequence]))
    assert all(sum(row) <= 128 for row in per_row.values())
    assert rows.count == len(per_row) == 2  # (60, 60) and (60, 50, 10)
    with pytest.raises(ValueError):
        assign_sequences(np.array([60, 60]), plan)


@pytest.fixture(scope="module")
def real_records(sample_results_dir, tmp_path_factory):
    """create_pretraining_data on two real Wikipedia parts, at sequence 128 (real documents
    end mid-row often there too)."""
    folder = tmp_path_factory.mktemp("records")
    paths = []
    for index, part in enumerate(sorted(sample_results_dir.glob("part-*"))[:2]):
        path = folder / f"part-{index:05d}"
        write_pretraining_data([str(part)], [str(path)], max_seq_length=SEQ,
                               max_predictions_per_seq=PRED, dupe_factor=2)
        paths.append(str(path))
    return paths


def sequences_of_unpacked(path: str) -> list[tuple]:
    """Each record as (tokens, segments, predictions (position, id), label)."""
    out = []
    spec = feature_spec(SEQ, PRED)
    for data in read_records(path):
        example = decode_example(data)
        decoded = {name: example[name][1] for name in spec}
        length = int(decoded["input_mask"].sum())
        real = decoded["masked_lm_weights"] != 0
        out.append((tuple(decoded["input_ids"][:length]), tuple(decoded["segment_ids"][:length]),
                    tuple(zip(decoded["masked_lm_positions"][real],
                              decoded["masked_lm_ids"][real])),
                    int(decoded["next_sentence_labels"][0])))
    return out


def sequences_of_packed(path: str) -> list[tuple]:
    """Each sequence of each packed row, as `sequences_of_unpacked` gives them."""
    out = []
    for data in read_records(path):
        row = {name: values for name, (_, values) in decode_example(data).items()}
        assert packed_row_problem(row) is None
        ids, weights = row["sequence_ids"], row["masked_lm_weights"]
        masked = row["masked_lm_positions"][weights != 0]
        labels = row["masked_lm_ids"][weights != 0]
        for index in range(1, int(ids.max()) + 1):
            where = np.flatnonzero(ids == index)
            start = where[0]
            assert row["next_sentence_positions"][index - 1] == start
            assert (row["position_ids"][where] == np.arange(where.size)).all()
            mine = ids[masked] == index
            out.append((tuple(row["input_ids"][where]), tuple(row["segment_ids"][where]),
                        tuple(zip(masked[mine] - start, labels[mine])),
                        int(row["next_sentence_labels"][index - 1])))
    return out


def test_packed_rows_hold_every_real_sequence_once(real_records, tmp_path):
    outputs = output_paths(real_records, str(tmp_path / "packed"))
    result = pack_files(real_records, outputs, PackOptions(SEQ, PRED, 3, 7), nworker=1)
    sequences = 0
    for source, packed in zip(real_records, outputs):
        before, after = sequences_of_unpacked(source), sequences_of_packed(packed)
        sequences += len(before)
        assert collections.Counter(after) == collections.Counter(before)
        lengths = [len(sequence[0]) for sequence in before]
        assert sum(1 for _ in read_records(packed)) < len(before)
        assert lengths != sorted(lengths)
    layout = record_layout(decode_example(next(read_records(outputs[0]))))
    assert layout == result.layout and layout.packed and layout.max_sequences == 3
    assert layout.max_predictions < 3 * PRED  # the data's own limit
    assert result.stats.sequences == sequences
    assert "sequences ->" in result.line() and "expected speed-up" in result.line()


def test_rows_do_not_come_out_sorted_by_length(real_records, tmp_path):
    output = tmp_path / "packed"
    pack_files(real_records[:1], [str(output)], PackOptions(SEQ, PRED, 3, 7), nworker=1)
    counts = [int(decode_example(data)["sequence_ids"][1].max())
              for data in read_records(output)]
    assert len(set(counts)) > 1 and counts != sorted(counts) and \
        counts != sorted(counts, reverse=True)


def test_same_inputs_same_bytes_and_the_seed_shuffles(real_records, tmp_path):
    digests = []
    for name, seed, workers in (("a", 7, 1), ("b", 7, 2), ("c", 8, 1)):
        outputs = output_paths(real_records, str(tmp_path / name))
        pack_files(real_records, outputs, PackOptions(SEQ, PRED, 3, seed), nworker=workers)
        digests.append([md5_of(path) for path in outputs])
    assert digests[0] == digests[1] != digests[2]


def test_cli_prints_one_summary_line(real_records, tmp_path):
    result = run_module("cleanup_scripts.pack_pretraining_data",
                        f"--input_file={real_records[0]}", f"--output_file={tmp_path / 'one'}",
                        f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
                        "--nworker=1")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pack_pretraining_data: ")
    assert (tmp_path / "one").is_file()
    assert "cuInit" not in result.stderr and "cuda" not in result.stderr.lower()  # CPU machine


def _write(path, columns):
    with open(path, "wb") as handle:
        write_records(handle, encode_examples(columns))


def _columns(count=4):
    spec = feature_spec(SEQ, PRED)
    columns = {name: np.zeros((count,) + item.shape,
                              np.float32 if item.dtype == "float32" else np.int64)
               for name, item in spec.items()}
    columns["input_ids"][:, :10] = 5
    columns["input_mask"][:, :10] = 1
    columns["masked_lm_positions"][:, 0] = 3
    columns["masked_lm_weights"][:, 0] = 1
    return columns


@pytest.mark.parametrize("damage, problem", [
    (lambda c: c["input_mask"].__setitem__((2, 3), 0), "record 2: input_mask is not 1s then 0s"),
    (lambda c: c["masked_lm_positions"].__setitem__((1, 0), 50),
     "record 1: a masked position lies outside the sequence"),
    (lambda c: c["input_ids"].__setitem__((3, 0), -4), "record 3: input_ids holds a negative"),
    # Values that, unchecked, would pass into the packed rows without a word:
    (lambda c: c["masked_lm_weights"].__setitem__((1, 0), np.nan),
     "record 1: masked_lm_weights holds nan, not 0 or 1"),
    (lambda c: c["next_sentence_labels"].__setitem__((2, 0), 7),
     "record 2: next_sentence_labels holds 7, not 0 or 1"),
    (lambda c: c["segment_ids"].__setitem__(3, 1), "record 3: segment_ids are not 0s then 1s "
     r"within the sequence \(not a create_pretraining_data record\)"),
    (lambda c: c["segment_ids"].__setitem__((0, slice(2, 4)), (1, 0)),
     "record 0: segment_ids are not 0s then 1s"),
])
def test_bad_records_are_one_line_and_leave_no_output(tmp_path, damage, problem):
    columns = _columns()
    damage(columns)
    source = tmp_path / "bad"
    _write(source, columns)
    output = tmp_path / "out"
    with pytest.raises(InputError, match=problem):
        pack_files([str(source)], [str(output)], PackOptions(SEQ, PRED), nworker=1)
    assert not output.exists() and list(tmp_path.iterdir()) == [source]


def test_records_of_other_shapes_name_the_flag(tmp_path):
    source = tmp_path / "short"
    columns = _columns()
    _write(source, columns)
    with pytest.raises(InputError, match="record 0: feature input_ids has 128 values, "
                                         "expected --max_seq_length=512"):
        read_sequences(str(source), PackOptions())


def test_cli_refuses_bad_flags_in_one_line(real_records, tmp_path):
    result = run_module("cleanup_scripts.pack_pretraining_data",
                        f"--input_file={real_records[0]}", f"--output_file={tmp_path / 'x'}",
                        "--max_sequences_per_pack=0", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --max_sequences_per_pack=0: must be between 1 and 64")


def _row(ids, masked=(1,)):
    """A packed row's structural features for sequence ids `ids` (positions counted from each
    sequence's start, [CLS] at its first token) and real predictions at `masked`."""
    ids = np.array(ids)
    starts = np.flatnonzero(np.diff(np.concatenate(([0], ids))) != 0)
    lengths = np.diff(np.append(starts, ids.size))
    positions = np.arange(ids.size) - np.repeat(starts, lengths)
    count = int(ids.max())
    slots = [int(np.flatnonzero(ids == j)[0]) if (ids == j).any() else 0
             for j in range(1, count + 1)]
    return {"sequence_ids": ids, "position_ids": positions * (ids != 0),
            "next_sentence_positions": np.array(slots + [0] * (3 - count)),
            "next_sentence_weights": np.array([1.0] * count + [0.0] * (3 - count)),
            "masked_lm_positions": np.array(masked), "masked_lm_weights": np.ones(len(masked))}


@pytest.mark.parametrize("ids, masked, problem", [
    ([1, 1, 2, 2, 0, 0], (1, 3), None),
    ([1, 2, 3, 0], (0, 2), None),
    ([1, 1, 2, 1, 0], (1,), "sequence_ids are not contiguous"),
    ([1, 1, 3, 3, 0], (1,), "sequence_ids are not contiguous"),
    ([1, 1, 0, 2, 2], (1,), "sequence_ids are not contiguous"),
    ([2, 2, 0], (1,), "sequence_ids must start with sequence 1"),
    ([1, 1, 2, 2, 0], (3, 1), "masked positions are not in the order of their sequences"),
    ([1, 1, 2, 2, 0], (4,), "a masked position lies outside the row's sequences"),
    ([1, 1, 2, 2, 0], (-1,), "a masked position lies outside the row's sequences"),
])
def test_packed_row_structure(ids, masked, problem):
    found = packed_row_problem(_row(ids, masked))
    assert found == problem if problem is None else found.startswith(problem)


def test_packed_row_positions_and_cls_must_follow_the_sequences():
    row = _row([1, 1, 2, 2, 0])
    row["position_ids"] = np.array([0, 1, 2, 3, 0])
    assert packed_row_problem(row) == "position_ids do not restart at 0 with each sequence"
    row = _row([1, 1, 2, 2, 0])
    row["next_sentence_positions"] = np.array([0, 3, 0])
    assert packed_row_problem(row) == ("next_sentence_positions do not point at each "
                                       "sequence's first token")


def test_a_record_claiming_a_terabyte_is_one_line_in_bounded_memory(tmp_path):
    """A length field whose own checksum is right but which claims 1 TiB: the reader takes the
    bytes that are there (a truncated record), not a terabyte-sized read."""
    import struct

    from cleanup_scripts.records.pretraining_features import masked_crc32c
    length = struct.pack("<Q", 1 << 40)
    source = tmp_path / "claims-a-terabyte"
    source.write_bytes(length + struct.pack("<I", masked_crc32c(length)) + b"x" * 100)
    output = tmp_path / "out"
    with pytest.raises(InputError, match=r"claims-a-terabyte: record 0: truncated at byte 112"):
        pack_files([str(source)], [str(output)], PackOptions(SEQ, PRED), nworker=1)
    assert not output.exists()


def test_cli_names_a_fifo_or_device_input_for_what_it_is(real_records, tmp_path):
    # A FIFO among the inputs exists but is no file: named as what it is, not "input file does
    # not exist".
    fifo = tmp_path / "part-00001-of-00500"
    os.mkfifo(fifo)
    for special, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        result = run_module("cleanup_scripts.pack_pretraining_data",
                            f"--input_file={real_records[0]},{special}",
                            f"--output_file={tmp_path / 'packed'}", f"--max_seq_length={SEQ}",
                            f"--max_predictions_per_seq={PRED}", "--nworker=1", check=False)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == (
            f"error: {special}: is not a regular file ({kind})")
    assert not (tmp_path / "packed").exists()
    with pytest.raises(InputError, match=f"^{real_records[0]}.txt: input file does not exist$"):
        expand_inputs(real_records[0], ".txt")  # a reference-style stage's missing input
    with pytest.raises(InputError, match=f"^{tmp_path}: is a directory, not an input file$"):
        expand_inputs(str(tmp_path))


# ---- outputs never over inputs, all or nothing, bounds ------------------------------------------

def _tree(root) -> dict[str, str]:
    """Every file under `root` (links as their target) with its md5."""
    return {str(path.relative_to(root)): (os.readlink(path) if path.is_symlink()
                                          else md5_of(path))
            for path in sorted(root.rglob("*")) if path.is_file() or path.is_symlink()}


@pytest.mark.parametrize("inputs, output, problem", [
    ("data/a", "data/a", "is the input data/a (the same file)"),
    ("data/a", "link", "is the input data/a (the same file)"),
    ("data/a", "hard", "is the input data/a (the same file)"),
    ("data/a,data/b", "data", "holds the input data/a"),
    ("data/a", "data/", "holds the input data/a"),
    ("data/a,data/b", ".", "holds the input data/a"),
])
def test_output_that_is_an_input_is_refused_before_anything_is_written(tmp_path, inputs,
                                                                        output, problem):
    # Unguarded, --output_file equal to the input (or its folder) overwrites it, exit 0.
    (tmp_path / "data").mkdir()
    for name in ("a", "b"):
        _write(tmp_path / "data" / name, _columns())
    (tmp_path / "link").symlink_to(tmp_path / "data" / "a")
    os.link(tmp_path / "data" / "a", tmp_path / "hard")
    before = _tree(tmp_path)
    result = run_module("cleanup_scripts.pack_pretraining_data", f"--input_file={inputs}",
                        f"--output_file={output}", f"--max_seq_length={SEQ}",
                        f"--max_predictions_per_seq={PRED}", "--nworker=1", cwd=tmp_path,
                        check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --output_file: {output}: {problem}")
    assert _tree(tmp_path) == before


def test_a_failing_multi_file_pack_leaves_no_output(tmp_path):
    # Unguarded, the files packed before the bad one would stay under their final names.
    columns = _columns()
    _write(tmp_path / "a", columns)
    columns["input_mask"][2, 3] = 0
    _write(tmp_path / "b", columns)
    out = tmp_path / "packed"
    with pytest.raises(InputError, match="b: record 2: input_mask is not 1s then 0s"):
        pack_files([str(tmp_path / "a"), str(tmp_path / "b")], [str(out / "a"), str(out / "b")],
                   PackOptions(SEQ, PRED), nworker=1, max_predictions=PRED)
    assert list(out.iterdir()) == []


def test_temporaries_of_a_killed_packer_are_swept_by_the_next_run(tmp_path):
    # A packer killed with -9 leaves `.NAME.partial-PID`; the next run writing NAME removes it,
    # and nothing else: not a live process's temporary, nor another output's, nor other files.
    dead = subprocess.Popen(["sleep", "60"])
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    source = tmp_path / "data" / "a"
    source.parent.mkdir()
    _write(source, _columns())
    out = tmp_path / "packed"
    out.mkdir()
    stale = out / f".a.partial-{dead.pid}"
    kept = [out / f".a.partial-{os.getpid()}", out / f".b.partial-{dead.pid}",
            out / f"a.partial-{dead.pid}", out / ".a.partial-x"]
    for path in [stale, *kept]:
        path.write_bytes(b"half a file")
    result = run_module("cleanup_scripts.pack_pretraining_data", f"--input_file={source}",
                        f"--output_file={out / 'a'}", f"--max_seq_length={SEQ}",
                        f"--max_predictions_per_seq={PRED}", "--nworker=1", check=False,
                        tf_log_level=forked.SERVER_LOG_LEVEL)
    assert result.returncode == 0, result.stderr
    assert not stale.exists() and all(path.exists() for path in kept)
    assert sorted(path.name for path in out.iterdir()) == sorted(["a", *(p.name for p in kept)])


@pytest.mark.parametrize("args, message", [
    (("--input_file=", "--output_file=out"), "error: --input_file: names no files"),
    (("--input_file=data/a", "--output_file=folder"),
     "error: --output_file=folder: is a folder; with one input it names the packed file (end "
     "it with / to write into it)"),
    (("--input_file=data/a", "--output_file=out", "--max_seq_length=100000000"),
     "error: --max_seq_length=100000000: must be between 2 and 8192"),
])
def test_packer_bounds_are_one_line_and_write_nothing(tmp_path, args, message):
    # Unchecked: a traceback (no inputs, a folder), a segfault (a row of 10^8 tokens).
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "a", _columns())
    (tmp_path / "folder").mkdir()
    before = _tree(tmp_path)
    result = run_module("cleanup_scripts.pack_pretraining_data", f"--max_seq_length={SEQ}",
                        "--nworker=1", *args, cwd=tmp_path, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [message]
    assert _tree(tmp_path) == before and list((tmp_path / "folder").iterdir()) == []


def test_a_record_of_random_bytes_is_one_line_naming_it(tmp_path):
    # TensorFlow's parse error quotes the bytes, which are no UTF-8: printed as is, a
    # UnicodeDecodeError traceback. The record is framed by TensorFlow's own writer: its CRCs
    # are valid.
    source = tmp_path / "mixed"
    _write(source, _columns(6))
    put_random_record(source, 4)
    with pytest.raises(InputError) as err:
        pack_files([str(source)], [str(tmp_path / "out")], PackOptions(SEQ, PRED), nworker=1)
    assert str(err.value) == f"{source}: record 4: not a tf.train.Example (wire format was corrupt)"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mixed"]


def test_a_record_that_is_no_example_is_one_line_naming_it(tmp_path):
    source = tmp_path / "mixed"
    with open(source, "wb") as handle:
        write_records(handle, encode_examples(_columns()) + [b"\x0a\x08\x0a\x06\x0a\x02\xff\xfe"
                                                             b"\x12\x00"])
    with pytest.raises(InputError, match=r"^.*mixed: record 4: not a tf.train.Example \(string "
                                         r"field had bad UTF-8\)$"):
        pack_files([str(source)], [str(tmp_path / "out")], PackOptions(SEQ, PRED), nworker=1)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mixed"]
