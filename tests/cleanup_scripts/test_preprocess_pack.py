"""`make preprocess PACK=1`: the pack stage, on the embedded slice.

It packs the training parts of tfrecords/ in one packer call and eval_10k in another into
tfrecords_packed/, records them like every stage's outputs, and changes nothing without --pack.
"""
from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cleanup_scripts.records.pretraining_features import (decode_example, read_records, record_layout,
                                                          tf_feature_spec)
from tests import forked
from tests.cleanup_scripts.test_preprocess import (first_run, first_run_console,  # noqa: F401
                                                   manifest, preprocess, stage_file_counts,
                                                   summarised_stages)
from tests.conftest import REPO, md5_of, run_module

PACKED = ("tfrecords_packed/eval_10k", "tfrecords_packed/part-00000-of-00500",
          "tfrecords_packed/part-00001-of-00500")


@pytest.fixture(scope="module")
def packed_run(first_run, tmp_path_factory) -> tuple[Path, str]:  # noqa: F811
    """The sample dataset, then `make preprocess PACK=1` on it (one worker): (folder, stderr)."""
    output = tmp_path_factory.mktemp("packed") / "dataset"
    shutil.copytree(first_run, output)
    return output, preprocess(output, "--pack", "--nworker=1").stderr


def packed_digests(output: Path) -> dict[str, str]:
    return {name: md5_of(output / name) for name in PACKED}


def test_pack_runs_once_after_the_dataset_and_adds_only_its_files(packed_run, first_run):
    output, stderr = packed_run
    assert stage_file_counts(stderr) == {"pack": 3, "manifest": 14}
    [line] = [line for line in stderr.splitlines() if line.startswith("pack: ")]
    assert "sequences ->" in line and "expected speed-up" in line
    parts = sorted(path.name for path in (output / "tfrecords").glob("part-*"))
    assert sorted(path.name for path in (output / "tfrecords_packed").iterdir()) == \
        sorted(parts + ["eval_10k"])
    listed = manifest(output)
    assert {name: listed.pop(name) for name in PACKED} == packed_digests(output)
    assert listed == manifest(first_run)
    recorded = (output / ".state" / "pack").read_text()
    assert all(f"{name}\t{(output / name).stat().st_size}\n" in recorded for name in PACKED)


def parsed_columns(path: Path) -> dict:
    """Every record of a file as numpy columns, parsed by TensorFlow (a decoder of its own
    beside the codec's, and a fast one), in the layout its first record has."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    records = list(read_records(path))
    layout = record_layout(decode_example(records[0]))
    parsed = tf.io.parse_example(records, tf_feature_spec(layout))
    return {name: values.numpy() for name, values in parsed.items()}


def unpacked_sequences(path: Path) -> list[tuple]:
    """Each record of an unpacked file as (tokens, segments, masked positions, their ids,
    label), the arrays as bytes."""
    columns = parsed_columns(path)
    out = []
    for index, length in enumerate(columns["input_mask"].sum(axis=1)):
        real = columns["masked_lm_weights"][index] != 0
        out.append((columns["input_ids"][index, :length].tobytes(),
                    columns["segment_ids"][index, :length].tobytes(),
                    columns["masked_lm_positions"][index, real].tobytes(),
                    columns["masked_lm_ids"][index, real].tobytes(),
                    int(columns["next_sentence_labels"][index, 0])))
    return out


def packed_sequences(path: Path) -> list[tuple]:
    """Each sequence of each row of a packed file, as `unpacked_sequences` gives them (its
    masked positions counted from its own start)."""
    columns = parsed_columns(path)
    out = []
    for index, sequence_ids in enumerate(columns["sequence_ids"]):
        real = columns["masked_lm_weights"][index] != 0
        positions = columns["masked_lm_positions"][index, real]
        ids = columns["masked_lm_ids"][index, real]
        owner = sequence_ids[positions]
        for number in range(1, int(sequence_ids.max()) + 1):
            start = int(columns["next_sentence_positions"][index, number - 1])
            end = start + int((sequence_ids == number).sum())
            mine = owner == number
            out.append((columns["input_ids"][index, start:end].tobytes(),
                        columns["segment_ids"][index, start:end].tobytes(),
                        (positions[mine] - start).tobytes(), ids[mine].tobytes(),
                        int(columns["next_sentence_labels"][index, number - 1])))
    return out


def test_every_sequence_is_in_its_packed_file_once(packed_run):
    output, _ = packed_run
    widths = set()
    for name in PACKED:
        packed = output / name
        source = output / "tfrecords" / packed.name
        assert collections.Counter(packed_sequences(packed)) == \
            collections.Counter(unpacked_sequences(source))
        layout = record_layout(decode_example(next(read_records(packed))))
        assert layout.packed and layout.max_seq_length == 512 and layout.max_sequences == 3
        widths.add((packed.name == "eval_10k", layout.max_predictions))
    assert len(widths) == 2  # one width for both parts, eval_10k's own


def test_rerun_skips_pack_and_the_packer_cli_gives_the_same_bytes(packed_run, tmp_path):
    output, _ = packed_run
    assert summarised_stages(preprocess(output, "--pack", "--nworker=1").stderr) == set()
    flags = ("--max_seq_length=512", "--max_predictions_per_seq=76", "--random_seed=12345",
             "--nworker=1")
    for inputs, packed in (("part-*", tmp_path), ("eval_10k", tmp_path / "eval_10k")):
        run_module("cleanup_scripts.pack_pretraining_data",
                   f"--input_file={output}/tfrecords/{inputs}", f"--output_file={packed}",
                   *flags, tf_log_level=forked.SERVER_LOG_LEVEL)
    assert {f"tfrecords_packed/{path.name}": md5_of(path) for path in tmp_path.iterdir()} == \
        packed_digests(output)


def test_changed_parameter_redoes_pack_and_a_run_without_pack_lists_it_no_more(
        packed_run, first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(packed_run[0], output)
    two = preprocess(output, "--pack", "--max_sequences_per_pack=2", "--nworker=1")
    assert summarised_stages(two.stderr) == {"pack", "manifest"}
    assert packed_digests(output)[PACKED[1]] != packed_digests(packed_run[0])[PACKED[1]]
    without = preprocess(output, "--nworker=1")
    assert summarised_stages(without.stderr) == {"manifest"}
    assert manifest(output) == manifest(first_run)
    again = preprocess(output, "--pack", "--max_sequences_per_pack=2", "--nworker=1")
    assert summarised_stages(again.stderr) == {"manifest"}


def test_an_earlier_stage_run_again_without_pack_makes_the_next_pack_run_redo_it(
        packed_run, tmp_path):
    # eval_10k killed midway in a run without --pack (its key is the --pack run's): the
    # packed eval_10k is of the old records until pack runs again.
    output = tmp_path / "dataset"
    shutil.copytree(packed_run[0], output)
    (output / ".state" / "eval_10k").rename(output / ".state" / "eval_10k.started")
    without = preprocess(output, "--nworker=1")
    assert summarised_stages(without.stderr) == {"eval_10k", "manifest"}
    again = preprocess(output, "--pack", "--nworker=1")
    assert summarised_stages(again.stderr) == {"pack", "manifest"}
    assert manifest(output) == manifest(packed_run[0])


def _temporary_holds_rows(folder: Path) -> bool:
    """Whether a packer's temporary (`.NAME.partial-PID`) in `folder` holds bytes; one renamed
    into place between the listing and its stat counts as none."""
    for path in folder.glob(".*partial*"):
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size:
                return True
    return False


def test_killed_while_packing_in_two_workers_then_rerun_gives_the_same_bytes(
        first_run, packed_run, tmp_path):  # noqa: F811
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    process = subprocess.Popen(
        [sys.executable, "-m", "cleanup_scripts.preprocess", f"--output_dir={output}",
         "--pack", "--nworker=2"], env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    # Killed mid-write: once a worker's temporary packed file holds rows.
    deadline = time.time() + 120
    while not _temporary_holds_rows(output / "tfrecords_packed"):
        assert time.time() < deadline and process.poll() is None, "pack never wrote"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    rerun = preprocess(output, "--pack", "--nworker=2")
    assert summarised_stages(rerun.stderr) == {"pack", "manifest"}
    assert manifest(output) == manifest(packed_run[0])
    assert not list(output.rglob(".*partial*"))


def test_max_sequences_per_pack_out_of_range_is_refused_before_the_first_stage(tmp_path):
    result = preprocess(tmp_path / "dataset", "--pack", "--max_sequences_per_pack=0",
                        check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "error: --max_sequences_per_pack=0: must be between 1 and 64"]
    assert not (tmp_path / "dataset").exists()
