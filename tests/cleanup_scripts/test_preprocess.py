"""`make preprocess` end to end: deterministic, resumable, equal to the reference stage by stage."""
from __future__ import annotations

import bz2
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.files import exclusive_lock
import cleanup_scripts
from cleanup_scripts.records.tfrecord_digest import tfrecord_digest
from tests.cleanup_scripts.test_download import FileServer
from tests.conftest import REPO, built_once, md5_of, read_md5_manifest, run_module

STAGES = {"extract", "clean", "segment", "separate", "gather", "tfrecords", "eval_10k",
          "manifest"}


def preprocess(output_dir: Path, *flags: str, check: bool = True):
    return run_module("cleanup_scripts.preprocess", f"--output_dir={output_dir}", *flags,
                      check=check)


def summarised_stages(stderr: str) -> set[str]:
    """Stages that printed a summary line (`<stage>: N files, ...`), i.e. that ran."""
    return set(re.findall(r"^([\w+]+): \d+ files, ", stderr, flags=re.MULTILINE))


def manifest(output_dir: Path) -> dict[str, str]:
    rows = (output_dir / "manifest.tsv").read_text().splitlines()[1:]
    return {path: md5 for path, _, md5 in (row.split("\t") for row in rows)}


@pytest.fixture(scope="session")
def first_run_console(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`make preprocess` as a user runs it: the embedded sample, every default, stdout and
    stderr pipes (not a terminal); its dataset folder and its process with what it printed
    (built once per test run: copy the folder before changing it)."""
    def build(folder: Path) -> None:
        result = preprocess(folder / "dataset", "--nworker=2")
        assert summarised_stages(result.stderr) == STAGES
        (folder / "console.json").write_text(json.dumps([result.stdout, result.stderr]))

    folder = built_once(tmp_path_factory, "sample-dataset", build)
    stdout, stderr = json.loads((folder / "console.json").read_text())
    return folder / "dataset", subprocess.CompletedProcess([], 0, stdout, stderr)


@pytest.fixture(scope="session")
def first_run(first_run_console) -> Path:
    """The dataset folder of `first_run_console`."""
    return first_run_console[0]


def assert_same_dataset(output: Path, reference: Path) -> None:
    """`output`'s manifest is `reference`'s, and every file it lists has that md5 on disk."""
    assert manifest(output) == manifest(reference)
    for path, digest in manifest(output).items():
        assert md5_of(output / path) == digest, path


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` (relative path) with its size and mtime in ns."""
    return {str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
            for path in sorted(root.rglob("*"))}


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
    # The stage whose parameter changed says why it runs; the ones after it simply run.
    assert "eval_10k: finished with other parameters; running it again" in changed.stderr
    assert "manifest: finished with other parameters" not in changed.stderr
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


def test_file_changed_by_hand_is_found_by_verify_and_redone_once_removed(first_run, tmp_path):
    # A re-run trusts an output that is there with its size; a byte changed by hand (size and
    # mtime kept) is make verify's to find (--rehash), and removing the file redoes it.
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    part = output / "results" / "part-00000-of-00500"
    stat = part.stat()
    damaged = bytearray(part.read_bytes())
    damaged[100] ^= 0x20
    part.write_bytes(bytes(damaged))
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert stage_file_counts(preprocess(output, "--nworker=2").stderr) == {}
    assert run_module("cleanup_scripts.artifacts.verify", str(output), check=False).returncode == 0
    rehashed = run_module("cleanup_scripts.artifacts.verify", str(output), "--rehash", check=False)
    assert rehashed.returncode == 1
    assert "changed  results/part-00000-of-00500  [md5 " in rehashed.stdout
    part.unlink()
    assert "gather" in stage_file_counts(preprocess(output, "--nworker=2").stderr)
    assert_same_dataset(output, first_run)


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


def test_not_a_vocab_is_refused_before_any_stage_and_leaves_the_dataset_as_it_was(
        first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    before = tree_state(output)
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("hello\nworld\n")
    result = preprocess(output, f"--vocab_file={bad_vocab}", check=False)
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {bad_vocab}: not a BERT vocab")
    assert tree_state(output) == before


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


# ---- one run at a time, repairable after any interruption ---------------------------------------

def test_second_run_is_refused_while_one_runs_and_a_killed_run_is_repaired(first_run, tmp_path):
    output = tmp_path / "dataset"
    command = [sys.executable, "-m", "cleanup_scripts.preprocess", f"--output_dir={output}",
               "--nworker=2"]
    first = subprocess.Popen(command, env=dict(os.environ, PYTHONPATH=str(REPO)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        lock = output / ".state" / "lock"
        deadline = time.time() + 60
        while not (lock.is_file() and lock.read_text().startswith(f"pid {first.pid} ")):
            assert time.time() < deadline and first.poll() is None, "first run never locked"
            time.sleep(0.05)
        second = preprocess(output, "--nworker=2", check=False)
        assert second.returncode != 0
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"error: {output}: another preprocess is writing into this "
                               f"directory (pid {first.pid} on {socket.gethostname()}, started ")
        assert line.endswith("); wait for it to end or stop it")
        delay = random.Random(7).uniform(0.0, 4.0)
        print(f"first run killed {delay:.2f} s after the second was refused")
        time.sleep(delay)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    preprocess(output, "--nworker=2")
    assert_same_dataset(output, first_run)
    assert not list(output.rglob(".*partial*"))


def test_run_refused_by_the_lock_changes_nothing(first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    leftover = output / "work" / "cleaned" / "AA" / ".wiki_00.partial-1"
    leftover.write_text("left by a killed run")
    with exclusive_lock(output / ".state" / "lock", output, "preprocess"):
        before = tree_state(output)
        refused = preprocess(output, "--num_eval_examples=50", check=False)
        assert tree_state(output) == before
    assert refused.returncode != 0
    [line] = refused.stderr.strip().splitlines()
    assert f"(pid {os.getpid()} on {socket.gethostname()}, started " in line
    once_free = preprocess(output, "--num_eval_examples=50", "--nworker=2")
    assert summarised_stages(once_free.stderr) == {"eval_10k", "manifest"}
    assert not leftover.exists()


def test_finished_stage_whose_record_lacks_a_missing_output_redoes_it(first_run, tmp_path):
    # What two runs writing into one folder at once left behind: segment marked finished by
    # one run after the other had removed a file (so its record lacks it), separate
    # interrupted; every later run failed on "work/sentences/AA/wiki_00: cannot read".
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    (output / "work" / "sentences" / "AA" / "wiki_00").unlink()
    marker = output / ".state" / "segment"
    marker.write_text("".join(line for line in marker.read_text().splitlines(keepends=True)
                              if not line.startswith("work/sentences/AA/wiki_00\t")))
    (output / ".state" / "separate").rename(output / ".state" / "separate.started")
    repaired = preprocess(output, "--nworker=2")
    assert stage_file_counts(repaired.stderr)["segment"] == 1
    assert_same_dataset(output, first_run)


def test_damaged_state_file_is_redone_with_a_warning(first_run, tmp_path):
    # A stage's marker in OUT/.state with bytes that are not UTF-8 (a bad disk, a stray
    # write) is read as no record, not a UnicodeDecodeError traceback at every re-run.
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    marker = output / ".state" / "clean"
    marker.write_bytes(b"\xff\xfe" + marker.read_bytes()[2:])
    rerun = preprocess(output, "--nworker=2")
    assert "Traceback" not in rerun.stderr
    warnings = [line for line in rerun.stderr.splitlines() if str(marker) in line]
    assert len(warnings) == 1 and "not UTF-8" in warnings[0], rerun.stderr[-2000:]
    assert summarised_stages(rerun.stderr) == STAGES - {"extract"}
    assert_same_dataset(output, first_run)
    again = preprocess(output, "--nworker=2")  # the marker was rewritten: nothing to redo
    assert summarised_stages(again.stderr) == set()


@pytest.mark.parametrize("listed", ["../victim.txt", "{victim}"])
def test_state_record_naming_a_file_outside_the_output_deletes_nothing(first_run, tmp_path,
                                                                       listed):
    # A finished stage's record whose output "changed" would have the next run unlink it,
    # wherever it points: an output folder someone shared could delete the user's files.
    output, victim = tmp_path / "dataset", tmp_path / "victim.txt"
    shutil.copytree(first_run, output)
    victim.write_text("not preprocess's\n")
    listed = listed.format(victim=victim)
    marker = output / ".state" / "clean"
    lines = marker.read_text().splitlines()
    marker.write_text("\n".join(lines + [f"{listed}\t1"]) + "\n")  # another size: "changed"
    before = tree_state(output)
    result = preprocess(output, "--nworker=2", check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"error: {marker}:{len(lines) + 1}: '{listed}' is ")
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    assert victim.read_text() == "not preprocess's\n"
    lock = ".state/lock"  # holds the pid of its last holder
    assert {**tree_state(output), lock: None} == {**before, lock: None}


def test_manifest_never_hashes_a_file_a_link_in_the_output_leads_to(first_run, tmp_path):
    output, secret = tmp_path / "dataset", tmp_path / "secret"
    shutil.copytree(first_run, output)
    secret.write_text("not preprocess's\n")
    (output / "results" / "notes").symlink_to(secret)
    (output / ".state" / "manifest").unlink()  # the manifest stage runs again
    result = preprocess(output, "--nworker=2", check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (f"error: {output}: 'results/notes' leads outside "
                                              f"{output} (a link to {secret}); not read")
    assert not (output / "manifest.tsv").exists() and md5_of(secret) not in result.stderr


def test_a_build_without_the_manifests_record_gets_it_from_the_next_run(first_run, tmp_path):
    # A build made before .state/manifest.record existed (or whose manifest stage did not
    # finish): verify refuses its manifest, and the next run redoes only the manifest stage.
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    (output / ".state" / "manifest.record").unlink()
    refused = run_module("cleanup_scripts.artifacts.verify", str(output), check=False)
    assert refused.returncode == 1
    assert refused.stderr.endswith("an older version ran it): run make preprocess again\n")
    assert summarised_stages(preprocess(output, "--nworker=2").stderr) == {"manifest"}
    assert_same_dataset(output, first_run)
    verified = run_module("cleanup_scripts.artifacts.verify", str(output))
    assert verified.stdout.splitlines()[-1].startswith("verify: PASSED: ")


@pytest.mark.parametrize("planted", [".state/lock", ".state", "results", "work", "text",
                                     "work/cleaned/AA"])
def test_a_link_planted_where_preprocess_writes_is_refused_before_anything_is_touched(
        first_run, tmp_path, planted):
    # Followed: a linked .state/lock is overwritten with the lock's text, a linked .state gets
    # the stage records, a linked results/ its parts replaced, a linked work/ loses the train/
    # folder of the link's target, a linked text/ ends in a traceback (rmtree on a link).
    output, elsewhere = tmp_path / "dataset", tmp_path / "elsewhere"
    shutil.copytree(first_run, output)
    for stage in ("extract", "separate"):  # those stages (and all after them) run again
        (output / ".state" / stage).unlink()
    elsewhere.mkdir()
    victim = elsewhere / Path(planted).name
    (output / planted).rename(victim)
    (output / planted).symlink_to(victim)
    before, victim_before = tree_state(output), tree_state(elsewhere)
    result = preprocess(output, "--nworker=2", check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: {output / planted}: is a symbolic link (to {victim}); outputs are never "
        "written through a link: remove it or name another path")
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1
    assert tree_state(elsewhere) == victim_before and tree_state(output) == before


def test_an_output_dir_that_is_itself_a_link_is_used(first_run, tmp_path):
    # The folder a user names may be a link (to another disk): only what is inside is checked.
    real, output = tmp_path / "disk" / "dataset", tmp_path / "dataset"
    shutil.copytree(first_run, real)
    output.symlink_to(real)
    result = preprocess(output, "--nworker=2")
    assert summarised_stages(result.stderr) == set()
    assert_same_dataset(real, first_run)


# ---- flags are checked before the first stage ---------------------------------------------------

@pytest.mark.parametrize("flag, problem", [
    ("--dupe_factor=-2", "must be at least 1"),
    ("--num_eval_examples=0", "must be at least 1"),
    ("--num_test_articles=-1", "must be at least 1"),
    ("--max_predictions_per_seq=0", "must be at least 1 and at most 4096"),
    ("--max_seq_length=4", "must be at least 5 and at most 4096"),
    ("--seed=-1", "must be at least 0"),
    ("--random_seed=-1", "must be at least 0"),
    ("--nworker=-3", "must be between 0 (all cores) and 1024"),
    ("--nworker=1025", "must be between 0 (all cores) and 1024"),
    ("--block_size=nan", "must be a number of MiB greater than 0"),
    ("--block_size=inf", "must be a number of MiB greater than 0"),
    ("--block_size=0", "must be a number of MiB greater than 0"),
    ("--masked_lm_prob=nan", "must be between 0 and 1"),
    ("--short_seq_prob=-inf", "must be between 0 and 1"),
    ("--date=2020-13-01", "expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS"),
])
def test_out_of_range_flag_is_refused_before_the_first_stage(tmp_path, flag, problem):
    output = tmp_path / "dataset"
    result = preprocess(output, flag, check=False)
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {flag.split('=')[0]}=") and line.endswith(problem)
    assert not output.exists()


@pytest.mark.parametrize("flag, problem", [
    ("--dupe_factor=10000000000000", "10,000,000,000,000 instances (at least one per "
     "duplicate of a document) need at least 900,000.0 GB of memory, more than the "),
    ("--num_eval_examples=1000000000000000", "1,000,000,000,000,000 records of at least 2,197 "
     "bytes take at least 2,197,000,000.0 GB, more than the "),
])
def test_flag_beyond_what_the_machine_holds_is_refused_before_the_first_stage(tmp_path, flag,
                                                                             problem):
    # Was: --dupe_factor=10^9 grew ~6.5 MB/s with no output; --num_eval_examples=10^11 ended
    # in a numpy traceback after 4.5 GB, both once the stages before had run.
    output = tmp_path / "dataset"
    result = preprocess_bounded(output, flag)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {flag}: {problem}")
    assert not output.exists()


def test_directory_given_as_dump_is_called_a_directory(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    result = preprocess(tmp_path / "out", f"--dump={folder}", check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: {folder}: is a directory, not a dump file"]
    missing = preprocess(tmp_path / "out", f"--dump={folder / 'dump.xml.bz2'}", check=False)
    assert missing.returncode != 0
    assert missing.stderr.strip().splitlines() == [
        f"error: {folder / 'dump.xml.bz2'}: dump file does not exist"]
    assert not (tmp_path / "out" / "text").exists()


def preprocess_bounded(output: Path, *flags: str) -> subprocess.CompletedProcess:
    """preprocess with a deadline: an input that blocks (a FIFO) fails the test, not hangs."""
    return subprocess.run([sys.executable, "-m", "cleanup_scripts.preprocess",
                           f"--output_dir={output}", *flags], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)


@pytest.mark.parametrize("flag", ["--dump", "--vocab_file"])
def test_device_or_fifo_given_as_an_input_is_named_for_what_it_is(tmp_path, flag):
    # --dump=/dev/zero was "does not exist"; a FIFO would block, /dev/zero fill the memory.
    fifo = tmp_path / "named-pipe.xml"
    os.mkfifo(fifo)
    for special, kind in (("/dev/zero", "a character device"), (fifo, "a FIFO")):
        result = preprocess_bounded(tmp_path / "out", f"{flag}={special}")
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [
            f"error: {special}: is not a regular file ({kind})"]
    assert not (tmp_path / "out" / "text").exists()


def test_special_file_in_the_results_text_folder_is_named(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "part-00000-of-00500").write_text("a sentence.\n")
    os.mkfifo(folder / "eval.txt")
    result = preprocess_bounded(tmp_path / "out", f"--results_text={folder}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {folder / 'eval.txt'}: is not a regular file (a FIFO)")


def test_dump_without_siteinfo_is_refused_before_the_first_stage(sample_dump_xml, tmp_path):
    dump = tmp_path / "headless.xml"
    dump.write_bytes(sample_dump_xml.replace(b"</siteinfo>", b""))
    started = time.monotonic()
    result = preprocess_bounded(tmp_path / "out", f"--dump={dump}")
    print(f"refused in {time.monotonic() - started:.1f} s")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: {dump}: no </siteinfo> in its first 1 MiB: not the header of a MediaWiki dump "
        f"(WikiExtractor would find no pages)"]
    assert not (tmp_path / "out" / "text").exists()


@pytest.fixture(scope="module")
def sample_dump_xml() -> bytes:
    return bz2.decompress(cleanup_scripts.SAMPLE_DUMP.read_bytes())


# ---- a full disk --------------------------------------------------------------------------------

DISK_FULL = ": no space left on device (file too large); free some space and run the same " \
            "command again, it goes on from there"


def preprocess_on_a_full_disk(output: Path, limit: int, *flags: str
                              ) -> subprocess.CompletedProcess:
    """preprocess in a process (and the workers it forks) that cannot make a file larger than
    `limit` bytes: a full disk as an unprivileged test can have it. RLIMIT_FSIZE fails the
    write that crosses the limit with EFBIG once SIGXFSZ, which would kill the writer, is
    ignored; preprocess reports EFBIG as it does ENOSPC."""
    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "cleanup_scripts.preprocess", f"--output_dir={output}",
         "--nworker=2", *flags], env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True, text=True, preexec_fn=limit_file_size, timeout=300)


@pytest.mark.parametrize("limit, failing, redone", [
    (500_000, "text/AA/wiki_00", STAGES),
    (1_050_000, "results/part-00001-of-00500", {"gather", "tfrecords", "eval_10k", "manifest"}),
    (12_000_000, "tfrecords/part-0000[01]-of-00500", {"tfrecords", "eval_10k", "manifest"}),
    (23_000_000, "tfrecords/eval_10k", {"eval_10k", "manifest"}),
], ids=["extract", "gather", "tfrecords", "eval_10k"])
def test_full_disk_stops_with_one_line_and_the_rerun_goes_on(first_run, tmp_path, limit,
                                                             failing, redone):
    output = tmp_path / "dataset"
    full = preprocess_on_a_full_disk(output, limit)
    assert full.returncode != 0
    assert "Traceback" not in full.stderr
    assert re.fullmatch(re.escape(f"error: {output}/") + failing + re.escape(DISK_FULL),
                        full.stderr.strip().splitlines()[-1])
    assert not list(output.rglob(".*partial*"))
    assert not (output / "manifest.tsv").exists()
    for path in output.rglob("*"):  # whatever is under a final name is complete
        if path.is_file() and ".state" not in path.parts:
            assert md5_of(path) == md5_of(first_run / path.relative_to(output)), path
    again = preprocess(output, "--nworker=2")
    assert summarised_stages(again.stderr) == redone
    assert_same_dataset(output, first_run)


def test_repair_stopped_by_a_full_disk_is_finished_by_the_next_run(first_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(first_run, output)
    (output / "results" / "part-00000-of-00500").unlink()
    full = preprocess_on_a_full_disk(output, 1_050_000)
    assert full.stderr.strip().splitlines()[-1] == (
        f"error: {output}/results/part-00001-of-00500{DISK_FULL}")
    again = preprocess(output, "--nworker=2")
    assert "gather" in summarised_stages(again.stderr)
    assert_same_dataset(output, first_run)


def test_full_disk_during_the_dump_download_names_the_partial_file(first_run, tmp_path):
    output = tmp_path / "dataset"
    server = FileServer()
    server.files = {"/dump.xml.bz2": cleanup_scripts.SAMPLE_DUMP.read_bytes()}
    server.thread.start()
    try:
        flags = (f"--dump={server.url}/dump.xml.bz2", "--num_test_articles=20",
                 "--block_size=1.5")
        full = preprocess_on_a_full_disk(output, 300_000, *flags)
        partial = output / "download" / "dump.xml.bz2.partial"
        assert full.stderr.strip().splitlines() == [f"error: {partial}{DISK_FULL}"]
        kept = partial.stat().st_size
        assert 0 < kept <= 300_000
        preprocess(output, "--nworker=2", *flags)
        assert ("/dump.xml.bz2", f"bytes={kept}-") in server.requests
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    assert_same_dataset(output, first_run)
