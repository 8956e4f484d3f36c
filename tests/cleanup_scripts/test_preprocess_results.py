"""`make preprocess RESULTS=DIR`: the TFRecords from the official results/ text.

The "official" folder here is real text: the parts, eval.txt and eval.md5 that `make
preprocess` makes from the embedded sample. Their md5s are not the official ones, so the runs
that must get past the md5 check read a copy of `checksums/` whose results.md5 lists them
(`RUNNER` swaps it in; it also prints every md5 the run computes, to see what is hashed).
"""
from __future__ import annotations

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

from cleanup_scripts.artifacts import checksums
from cleanup_scripts.records.tfrecord_digest import tfrecord_digest
from tests.conftest import REPO, md5_of, run_module

DUMP_ROUTE = {"extract", "clean", "segment", "separate", "gather", "tfrecords", "eval_10k",
              "manifest"}
RESULTS_ROUTE = {"import_results", "tfrecords", "eval_10k", "manifest"}
# Small pretraining values, for the runs that need not be the benchmark's.
SMALL = ("--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=1",
         "--num_eval_examples=200", "--nworker=2")

RUNNER = r"""
import os, sys
from absl import app
from benchmark import files
from cleanup_scripts import preprocess
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.pipeline import ledger
table = sys.argv.pop(1)
official = checksums.known_artifacts
checksums.known_artifacts = lambda *args: official(table)
real_md5 = files.md5_file
def traced(path, progress=None):
    os.write(2, f"hashed {os.path.realpath(path)}\n".encode())  # one write: workers share it
    return real_md5(path, progress)
files.md5_file = ledger.md5_file = traced
if os.environ.get("NO_HARD_LINKS"):
    def no_link(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")
    os.link = no_link
sys.argv[0] = "preprocess"
app.run(preprocess.main)
"""


def command(output: Path, table: Path, *flags: str) -> list[str]:
    return [sys.executable, "-c", RUNNER, str(table), f"--output_dir={output}", *flags]


def environment(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), **extra)


def preprocess_results(output: Path, table: Path, *flags: str, check: bool = True,
                       **env: str) -> subprocess.CompletedProcess:
    """preprocess with `table` as checksums/ (RUNNER)."""
    result = subprocess.run(command(output, table, *flags), env=environment(**env),
                            capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"preprocess failed ({result.returncode}):\n{result.stderr}")
    return result


def preprocess(output: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess:
    """preprocess as a user runs it (the real checksums/)."""
    return run_module("cleanup_scripts.preprocess", f"--output_dir={output}", *flags,
                      check=check)


def summarised_stages(stderr: str) -> set[str]:
    return set(re.findall(r"^([\w+]+): \d+ files, ", stderr, flags=re.MULTILINE))


def hashed(stderr: str) -> list[str]:
    """The files a RUNNER run hashed (real paths), in order."""
    return re.findall(r"^hashed (.+)$", stderr, flags=re.MULTILINE)


def manifest(output: Path) -> dict[str, str]:
    rows = (output / "manifest.tsv").read_text().splitlines()[1:]
    return {path: md5 for path, _, md5 in (row.split("\t") for row in rows)}


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` with its size and mtime (the lock file aside: each
    run takes it)."""
    return {str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
            for path in sorted(root.rglob("*")) if path.name != "lock"}


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a refused run prints (absl's warnings aside)."""
    assert result.returncode != 0
    lines = [line for line in result.stderr.strip().splitlines()
             if not re.match(r"hashed |[IW]\d{4} ", line)]
    assert len(lines) == 1, result.stderr
    return lines[0]


def write_table(folder: Path, md5s: dict[str, str]) -> Path:
    """A copy of checksums/ whose results.md5 lists `md5s` ({name in results/: md5})."""
    shutil.copytree(REPO / "checksums", folder)
    (folder / "results.md5").write_text("".join(f"{md5}  results/{name}\n"
                                                for name, md5 in sorted(md5s.items())))
    return folder


@pytest.fixture(scope="module")
def dump_run(tmp_path_factory) -> Path:
    """`make preprocess` on the embedded sample (small pretraining values: the text is the
    same whatever they are)."""
    output = tmp_path_factory.mktemp("dump") / "dataset"
    result = preprocess(output, *SMALL)
    assert summarised_stages(result.stderr) == DUMP_ROUTE
    return output


@pytest.fixture(scope="module")
def official(dump_run, tmp_path_factory) -> Path:
    """A stand-in for `make download ARTIFACTS=results`: DIR/results with the sample's text."""
    folder = tmp_path_factory.mktemp("download") / "results"
    shutil.copytree(dump_run / "results", folder)
    assert sorted(path.name for path in folder.iterdir()) == [
        "eval.md5", "eval.txt", "part-00000-of-00500", "part-00001-of-00500"]
    return folder


@pytest.fixture(scope="module")
def table(official, tmp_path_factory) -> Path:
    """checksums/ with the stand-in's md5s as the official ones."""
    return write_table(tmp_path_factory.mktemp("table") / "checksums",
                       {path.name: md5_of(path) for path in official.iterdir()})


@pytest.fixture(scope="module")
def one_part(official, tmp_path_factory) -> Path:
    """The stand-in with one part only (what `ARTIFACTS=results/part-00000-of-00500,
    results/eval.txt,results/eval.md5` downloads)."""
    folder = tmp_path_factory.mktemp("download-one") / "results"
    folder.mkdir()
    for name in ("part-00000-of-00500", "eval.txt", "eval.md5"):
        shutil.copy2(official / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def results_run(one_part, table, tmp_path_factory) -> tuple[Path, str]:
    """--results_text with every benchmark value (512/76/0.15/dupe 10/seed 12345, 10,000
    eval records), into a new output directory."""
    output = tmp_path_factory.mktemp("results") / "dataset"
    result = preprocess_results(output, table, f"--results_text={one_part}", "--nworker=2")
    return output, result.stderr


def test_official_text_gives_the_reference_tfrecords_with_the_benchmark_values(
        results_run, one_part, fixtures_dir):
    output, stderr = results_run
    assert summarised_stages(stderr) == RESULTS_ROUTE
    for path in one_part.iterdir():  # hard links: the very files of DIR, unchanged
        assert (output / "results" / path.name).samefile(path)
    assert set(manifest(output)) == {
        "results/part-00000-of-00500", "results/eval.txt", "results/eval.md5",
        "tfrecords/part-00000-of-00500", "tfrecords/eval_intermediate", "tfrecords/eval_10k"}
    # The reference scripts' TFRecords from this text (create_pretraining_data and
    # pick_eval_samples of mlcommons/training, run with the benchmark's values).
    reference = fixtures_dir / "reference-enwiki-sample" / "tfrecord-digests.txt"
    for line in reference.read_text().splitlines():
        name, count, decoded = line.split()
        if name != "part-00001-of-00500":
            assert tfrecord_digest(output / "tfrecords" / name) == (int(count), decoded), name
    # Each DIR file with an official md5 is hashed once, to check it (then its link, as the
    # ledger records it).
    folder = one_part.resolve()
    assert sorted(path for path in hashed(stderr) if path.startswith(str(folder))) == [
        str(folder / name) for name in ("eval.md5", "eval.txt", "part-00000-of-00500")]


def test_same_tfrecords_as_the_dump_route_and_switching_routes_never_mixes(
        dump_run, official, table, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(dump_run, output)
    from_text = preprocess_results(output, table, f"--results_text={official}", *SMALL)
    assert summarised_stages(from_text.stderr) == RESULTS_ROUTE
    assert not (output / "text").exists() and not (output / "work").exists()
    expected = {path: md5 for path, md5 in manifest(dump_run).items()
                if not path.startswith("text/")}
    assert manifest(output) == expected
    for name in ("part-00000-of-00500", "part-00001-of-00500", "eval_intermediate",
                 "eval_10k"):
        assert tfrecord_digest(output / "tfrecords" / name, 128, 20) == \
            tfrecord_digest(dump_run / "tfrecords" / name, 128, 20), name
    back = preprocess(output, *SMALL)
    assert summarised_stages(back.stderr) == DUMP_ROUTE
    assert manifest(output) == manifest(dump_run)
    for path in official.iterdir():  # the dump route replaced the links, not DIR's files
        assert md5_of(path) == md5_of(dump_run / "results" / path.name)
        assert not (output / "results" / path.name).samefile(path)


def test_rerun_skips_every_stage_and_hashes_nothing(results_run, one_part, table, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(results_run[0], output)
    again = preprocess_results(output, table, f"--results_text={one_part}", "--nworker=2")
    assert summarised_stages(again.stderr) == set()
    assert hashed(again.stderr) == []
    touched = one_part / "part-00000-of-00500"
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    try:  # a DIR file touched but not changed: hashed once, nothing redone
        touched_run = preprocess_results(output, table, f"--results_text={one_part}",
                                         "--nworker=2")
    finally:
        os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert summarised_stages(touched_run.stderr) == set()
    assert hashed(touched_run.stderr) == [str(touched.resolve())]


def test_copies_where_links_fail_and_a_changed_folder_is_imported_again(official, tmp_path):
    folder = tmp_path / "download" / "results"
    shutil.copytree(official, folder)
    table = write_table(tmp_path / "checksums", {"eval.txt": md5_of(folder / "eval.txt")})
    output = tmp_path / "dataset"
    first = preprocess_results(output, table, f"--results_text={folder}", *SMALL,
                               NO_HARD_LINKS="1")
    assert "4 of 4 files copied, not hard-linked" in first.stderr
    for path in folder.iterdir():
        copy = output / "results" / path.name
        assert not copy.samefile(path) and md5_of(copy) == md5_of(path)
    assert summarised_stages(preprocess_results(
        output, table, f"--results_text={folder}", *SMALL).stderr) == set()
    shutil.copy(folder / "part-00001-of-00500", folder / "part-00002-of-00500")
    added = preprocess_results(output, table, f"--results_text={folder}", *SMALL)
    assert "import_results: 1 input(s) added, removed or changed since it finished " \
           "(first: part-00002-of-00500)" in added.stderr
    assert summarised_stages(added.stderr) == RESULTS_ROUTE
    assert manifest(output)["tfrecords/part-00002-of-00500"] == \
        manifest(output)["tfrecords/part-00001-of-00500"]


def test_folder_in_place_as_make_download_leaves_it(official, table, tmp_path):
    # make download DIR=D ARTIFACTS=results; make preprocess RESULTS=D/results OUT=D
    output = tmp_path / "bert"
    shutil.copytree(official, output / "results")
    before = tree_state(output / "results")
    run = preprocess_results(output, table, f"--results_text={output / 'results'}", *SMALL)
    assert summarised_stages(run.stderr) == RESULTS_ROUTE
    assert tree_state(output / "results") == before
    assert summarised_stages(preprocess_results(
        output, table, f"--results_text={output / 'results'}", *SMALL).stderr) == set()
    state = tree_state(output)
    refused = preprocess(output, *SMALL, check=False)
    assert error_line(refused) == (
        f"error: {output / 'results'}: holds the official text, used in place by "
        f"--results_text; a build from a dump would overwrite it: give another --output_dir")
    assert tree_state(output) == state


def test_damaged_record_of_the_folder_used_in_place_keeps_it(official, table, tmp_path):
    # The md5 ledger of the imported folder is what tells a later build from a dump that
    # OUT/results is official text: damaged, it stops such a build (it is not taken as
    # "none" and the text removed); a run from the same folder rewrites it.
    output = tmp_path / "bert"
    shutil.copytree(official, output / "results")
    preprocess_results(output, table, f"--results_text={output / 'results'}", *SMALL)
    source = output / ".state" / "import_results.md5s"
    recorded = source.read_text()
    source.write_bytes(b"\xff" + source.read_bytes())
    official_text = tree_state(output / "results")
    state = tree_state(output)
    refused = preprocess(output, *SMALL, check=False)
    assert error_line(refused) == (
        f"error: {source}: damaged state file (not UTF-8 text): there is no telling whether "
        f"results/ is official text used in place; remove it (and results/ unless it is that "
        f"text) and run again")
    assert tree_state(output) == state
    rerun = preprocess_results(output, table, f"--results_text={output / 'results'}", *SMALL)
    assert "Traceback" not in rerun.stderr
    assert source.read_text() == recorded
    assert tree_state(output / "results") == official_text


def test_killed_at_a_random_point_then_rerun_gives_the_uninterrupted_outputs(
        dump_run, official, table, tmp_path):
    output = tmp_path / "dataset"
    process = subprocess.Popen(command(output, table, f"--results_text={official}", *SMALL),
                               env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(random.Random(2027).uniform(1.0, 3.0))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    preprocess_results(output, table, f"--results_text={official}", *SMALL)
    assert manifest(output) == {path: md5 for path, md5 in manifest(dump_run).items()
                                if not path.startswith("text/")}
    assert not list(output.rglob(".*partial*"))


# ---- refused, with one line, before anything is written -----------------------------------------

def test_dump_and_results_text_together_is_a_usage_error(official, tmp_path):
    result = preprocess(tmp_path / "out", f"--results_text={official}", "--dump=x.xml.bz2",
                        check=False)
    assert error_line(result) == (
        "error: --dump and --results_text exclude each other: give --dump to build from a "
        "Wikipedia dump, --results_text from the official results/ text")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("keep, problem", [
    (("eval.txt", "eval.md5"), "no part-*-of-* files"),
    (("part-00000-of-00500", "part-00001-of-00500", "eval.md5"), "no eval.txt"),
    ((), "no part-*-of-* files and no eval.txt"),
])
def test_folder_without_parts_or_eval_text_is_refused(official, tmp_path, keep, problem):
    folder = tmp_path / "results"
    folder.mkdir()
    for name in keep:
        shutil.copy(official / name, folder / name)
    (folder / "part-00002-of-00500.partial").write_text("an unfinished download")
    result = preprocess(tmp_path / "out", f"--results_text={folder}", check=False)
    assert error_line(result) == (f"error: {folder}: {problem}; expected the official results/ "
                                  f"text (make download ARTIFACTS=results)")
    assert not (tmp_path / "out").exists()


def test_missing_folder_is_refused(tmp_path):
    missing = preprocess(tmp_path / "out", f"--results_text={tmp_path / 'none'}", check=False)
    assert error_line(missing) == f"error: {tmp_path / 'none'}: results text directory does " \
                                  f"not exist"
    assert not (tmp_path / "out").exists()


def test_file_with_another_md5_than_the_official_is_refused_and_changes_nothing(
        dump_run, official, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(dump_run, output)
    before = tree_state(output)
    # The real checksums/: the sample's eval.md5 is not the official one.
    real = preprocess(output, f"--results_text={official}", check=False)
    assert error_line(real) == (
        f"error: {official / 'eval.md5'}: md5 {md5_of(official / 'eval.md5')} is not the "
        f"official {checksums.known_artifacts()['results/eval.md5'].md5} "
        f"(checksums/results.md5)")
    assert tree_state(output) == before
    part = official / "part-00001-of-00500"
    md5s = {path.name: md5_of(path) for path in official.iterdir()}
    table = write_table(tmp_path / "checksums", {**md5s, part.name: "0" * 32})
    wrong = preprocess_results(output, table, f"--results_text={official}", check=False)
    assert error_line(wrong) == (f"error: {part}: md5 {md5s[part.name]} is not the official "
                                 f"{'0' * 32} (checksums/results.md5)")
    assert tree_state(output) == before
