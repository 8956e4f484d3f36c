"""`make preprocess` end to end: deterministic, resumable, equal to the reference stage by stage."""
from __future__ import annotations

import bz2
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cleanup_scripts
from tests.conftest import REPO, md5_of, read_md5_manifest, run_module
from cleanup_scripts.tfrecord_digest import tfrecord_digest

def preprocess(output_dir: Path, *flags: str, check: bool = True):
    return run_module("cleanup_scripts.preprocess", f"--output_dir={output_dir}", *flags,
                      check=check)


def summarised_stages(stderr: str) -> set[str]:
    """Stages that printed a summary line (`<stage>: N files, ...`), i.e. that ran."""
    return set(re.findall(r"^([\w+]+): \d+ files, ", stderr, flags=re.MULTILINE))


def manifest(output_dir: Path) -> dict[str, str]:
    rows = (output_dir / "manifest.tsv").read_text().splitlines()[1:]
    return {path: md5 for path, _, md5 in (row.split("\t") for row in rows)}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Path:
    """`make preprocess` as a user runs it: the embedded sample, every default."""
    output = tmp_path_factory.mktemp("first") / "dataset"
    result = preprocess(output, "--nworker=2")
    assert summarised_stages(result.stderr) == {
        "extract", "clean", "segment", "separate", "gather", "tfrecords", "eval_10k", "manifest"}
    return output


def test_sample_run_writes_the_benchmark_layout(first_run):
    files = manifest(first_run)
    assert {"results/eval.txt", "results/eval.md5", "results/part-00000-of-00500",
            "tfrecords/part-00000-of-00500", "tfrecords/eval_intermediate",
            "tfrecords/eval_10k"} <= set(files)
    assert any(path.startswith("text/AA/wiki_") for path in files)
    assert len((first_run / "results" / "eval.md5").read_text().split()) == 20
    for path, digest in files.items():
        assert md5_of(first_run / path) == digest


def test_every_stage_equals_the_reference_scripts_on_the_sample(first_run, fixtures_dir):
    reference = fixtures_dir / "reference-enwiki-sample"
    produced = manifest(first_run)
    for name, digest in read_md5_manifest(reference / "extracted.md5").items():
        assert produced[name] == digest, name
    work_dirs = {"2": "cleaned", "3": "sentences", "4": "train"}
    for name, digest in read_md5_manifest(reference / "md5sums.txt").items():
        if name.startswith("results/"):
            assert produced[name] == digest, name
        else:  # text/AA/wiki_00.2 -> work/cleaned/AA/wiki_00 (.1 is never written alone)
            stem, suffix = name.rsplit(".", 1)
            if suffix in work_dirs:
                path = first_run / "work" / work_dirs[suffix] / stem.removeprefix("text/")
                assert md5_of(path) == digest, name
    for line in (reference / "tfrecord-digests.txt").read_text().splitlines():
        name, count, decoded = line.split()
        assert tfrecord_digest(first_run / "tfrecords" / name) == (int(count), decoded), name


def test_second_run_gives_identical_md5_for_every_output(first_run, tmp_path):
    second = tmp_path / "dataset"
    preprocess(second, "--nworker=1")
    assert manifest(second) == manifest(first_run)


def test_rerun_skips_finished_stages_and_redoes_changed_ones(first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    unchanged = preprocess(output, "--nworker=2")
    assert summarised_stages(unchanged.stderr) == set()
    changed = preprocess(output, "--num_eval_examples=50", "--nworker=2")
    assert summarised_stages(changed.stderr) == {"eval_10k", "manifest"}
    assert manifest(output)["tfrecords/eval_10k"] != manifest(first_run)["tfrecords/eval_10k"]


def stage_file_counts(stderr: str) -> dict[str, int]:
    """Files each stage that ran worked on, from its summary line."""
    return {stage: int(count) for stage, count in
            re.findall(r"^([\w+]+): (\d+) files, ", stderr, flags=re.MULTILINE)}


def test_rerun_redoes_only_outputs_damaged_since_they_were_finished(first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    cleaned = sorted((output / "work" / "cleaned").rglob("wiki_*"))
    cleaned[1].unlink()
    part = output / "tfrecords" / "part-00000-of-00500"
    part.write_bytes(part.read_bytes()[:1000])
    repaired = preprocess(output, "--nworker=2")
    assert stage_file_counts(repaired.stderr) == {"clean": 1, "tfrecords": 1}
    assert "missing or changed since" in repaired.stderr
    assert manifest(output) == manifest(first_run)


def test_verify_outputs_hashes_files_whose_size_and_mtime_were_kept(first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    part = output / "results" / "part-00000-of-00500"
    stat = part.stat()
    damaged = bytearray(part.read_bytes())
    damaged[100] ^= 0x20
    part.write_bytes(bytes(damaged))
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert stage_file_counts(preprocess(output, "--nworker=2").stderr) == {}
    verified = preprocess(output, "--nworker=2", "--verify_outputs")
    assert "gather" in stage_file_counts(verified.stderr)
    assert manifest(output) == manifest(first_run)


def test_process_wiki_matches_reference_on_sample_files(sample_results_dir):
    # The fixture runs process_wiki and compares all eight text outputs and four results files
    # with the reference's md5s.
    assert sorted(p.name for p in sample_results_dir.iterdir()) == [
        "eval.md5", "eval.txt", "part-00000-of-00500", "part-00001-of-00500"]


def test_process_wiki_cli(tmp_path, fixtures_dir):
    shutil.copy(fixtures_dir / "wiki-extracted" / "wiki_00", tmp_path / "wiki_00")
    result = run_module("cleanup_scripts.process_wiki", f"{tmp_path}/wiki_??",
                        "--num_test_articles=5", f"--results_dir={tmp_path}/results")
    assert summarised_stages(result.stderr) == {
        "cleanup_file+clean", "do_sentence_segmentation", "seperate_test_set", "do_gather"}
    assert (tmp_path / "results" / "part-00000-of-00500").is_file()
    assert len((tmp_path / "results" / "eval.md5").read_text().split()) == 5


def test_dump_with_wrong_official_md5_is_refused(tmp_path):
    fake = tmp_path / "enwiki-20200101-pages-articles-multistream.xml.bz2"
    shutil.copy(cleanup_scripts.SAMPLE_DUMP, fake)
    result = preprocess(tmp_path / "out", f"--dump={fake}", check=False)
    assert result.returncode != 0
    assert f"error: {fake}: md5 differs from the official" in result.stderr
    assert not (tmp_path / "out" / "text").exists()


def test_truncated_dump_is_refused_without_output(tmp_path):
    truncated = tmp_path / "dump.xml.bz2"
    truncated.write_bytes(cleanup_scripts.SAMPLE_DUMP.read_bytes()[:200_000])
    result = preprocess(tmp_path / "out", f"--dump={truncated}", check=False)
    assert result.returncode != 0
    assert str(truncated) in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out" / "text").exists()
    assert not (tmp_path / "out" / "manifest.tsv").exists()


def test_empty_dump_is_refused(tmp_path):
    empty = tmp_path / "empty.xml.bz2"
    empty.write_bytes(bz2.compress(b""))
    result = preprocess(tmp_path / "out", f"--dump={empty}", check=False)
    assert result.returncode != 0
    assert str(empty) in result.stderr.strip().splitlines()[-1]


def test_not_a_vocab_is_refused_before_tfrecords_look_complete(first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("hello\nworld\n")
    result = preprocess(output, f"--vocab_file={bad_vocab}", check=False)
    assert result.returncode != 0
    assert str(bad_vocab) in result.stderr.strip().splitlines()[-1]
    assert not (output / ".state" / "tfrecords").exists()
    assert not (output / "manifest.tsv").exists()


def test_unwritable_output_directory(tmp_path):
    # Tests run as root, where permission bits do not stop writes: a file where a directory
    # must go is unwritable for everyone.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = preprocess(blocker / "dataset", check=False)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: ") and str(blocker) in last_line


def test_killed_at_random_points_then_rerun_gives_the_uninterrupted_outputs(first_run, tmp_path):
    output = tmp_path / "dataset"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "cleanup_scripts.preprocess", f"--output_dir={output}",
               "--nworker=2"]
    rng = random.Random(2026)
    for _ in range(3):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(rng.uniform(1.0, 9.0))
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    preprocess(output, "--nworker=2")
    assert manifest(output) == manifest(first_run)
    assert not [p for p in output.rglob(".*partial*")]
