"""An --output_dir belongs to one run: a second trainer started into a folder that a live
trainer holds is refused (a lock the OS releases when its holder dies, kill -9 included), a
started run whose checkpoints are all damaged is refused rather than restarted from scratch
into the same folder and log, and a link planted where a run writes is refused before anything
is written. Real trainer subprocesses on the tiny synthetic data set.
"""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from benchmark.files import RefusedOutput
from reference.preflight import check_output_dir_holds_no_input
from reference.run_options import UsageError
from reference.run_log import LogFile
from reference.run_outputs import output_dir_lock
from tests import forked
from tests.conftest import REPO
from tests.reference import synthetic_data
from tests.reference.test_bad_inputs import assert_one_error_line
from tests.reference.test_crash_resume import checkpoint_steps
from tests.reference.test_run_pretraining import read_mllog
from tests.reference.test_untrusted_inputs import checked, flag_list, run_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("guards") / "data",
                                        train_files=2, train_records=256, eval_records=200)


def run_starts(out: Path) -> int:
    return [r["key"] for r in read_mllog(out / "mlperf.log")].count("run_start")


def test_a_second_trainer_into_a_held_output_dir_is_refused_and_a_killed_holder_blocks_nothing(
        data, tmp_path):
    # Unlocked, both trainers run, interleave one mlperf.log and write each other's checkpoints.
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    holder = forked.start([sys.executable, "-m", "reference.run_pretraining",
                           *flag_list(data, out, num_train_steps=100_000)],
                          env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not ((out / "mlperf.log").exists() and run_starts(out)):
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never ran"
            time.sleep(0.2)
        log_before = (out / "mlperf.log").read_text()
        second = run_cli(data, out)
        lines = second.stderr.strip().splitlines()
        assert lines[-1].startswith(f"error: --output_dir={out}: another trainer is writing "
                                    f"into this directory (pid {holder.pid} on ")
        assert_one_error_line(second, lines[-1])
        assert holder.poll() is None  # the holder trains on
        assert (out / "mlperf.log").read_text().startswith(log_before)
        assert run_starts(out) == 1
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    # The lock of a process killed with -9 is gone with it: the next run (the holder's flags,
    # whether or not it saved a checkpoint before the kill) resumes and ends.
    result = run_cli(data, out, num_train_steps=100_000,
                     stop_steps=max([4, *checkpoint_steps(out)]) + 4)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_started_run_whose_checkpoints_are_all_damaged_is_refused(data, tmp_path):
    # Unguarded, the run starts again from random weights in the same folder and appends a
    # second run_start to the old log.
    out = tmp_path / "out"
    first = run_cli(data, out, stop_steps=8)
    assert first.returncode == 0, first.stderr[-2000:]
    assert checkpoint_steps(out) == [4, 8]
    for step in (4, 8):
        data_file = out / f"model.ckpt-{step}.data-00000-of-00001"
        data_file.write_bytes(data_file.read_bytes()[:100])
    log_before = (out / "mlperf.log").read_text()
    result = run_cli(data, out)
    assert_one_error_line(result, f"error: --output_dir: {out}: every checkpoint of the run "
                                  f"that {out / 'mlperf.log'} shows started is damaged "
                                  "(model.ckpt-8, model.ckpt-4; the warnings above say how); "
                                  "restore one or use a new --output_dir")
    assert (out / "mlperf.log").read_text() == log_before


def test_output_dir_that_holds_the_training_data_is_refused_before_anything_is_written(
        data, tmp_path):
    folder = Path(data["bert_config_file"]).parent
    before = sorted(folder.iterdir())
    result = run_cli(data, folder)
    assert_one_error_line(result, f"error: --output_dir={folder}: holds "
                                  f"{folder / 'part-00000-of-00002'} of --input_file; a training "
                                  "run writes into a folder of its own")
    assert sorted(folder.iterdir()) == before


@pytest.mark.parametrize("output, flag, held", [
    ("link", "--input_file", "part-00000-of-00002"),  # the data folder through a link
    ("..", "--input_file", "part-00000-of-00002"),     # a folder above it
    ("eval_10k", "--eval_file", "eval_10k"),           # an input file itself
    ("out", "--init_checkpoint", "out/model.ckpt-28252"),
])
def test_output_dir_that_is_or_holds_an_input_is_refused(data, tmp_path, output, flag, held):
    folder = Path(data["bert_config_file"]).parent
    (folder / "link").unlink(missing_ok=True)
    (folder / "link").symlink_to(folder)
    extra = {}
    if flag == "--init_checkpoint":
        extra["init_checkpoint"] = folder / "out" / "model.ckpt-28252"
    with pytest.raises(UsageError, match=f"^--output_dir={re.escape(str(folder / output))}: "
                                         f"holds {re.escape(str(folder / held))} of {flag}; "):
        check_output_dir_holds_no_input(str(folder / output), [
            ("--input_file", sorted(str(p) for p in folder.glob("part-*"))),
            ("--eval_file", [str(folder / "eval_10k")]),
            ("--init_checkpoint", [str(extra["init_checkpoint"])] if extra else [])])
    check_output_dir_holds_no_input(str(tmp_path / "elsewhere"), [
        ("--input_file", [str(folder / "part-00000-of-00002")])])


def _plant(out: Path, name: str, victim: Path) -> None:
    """`out/name` a link to `victim` (a folder for TensorBoard's and the save folders, else a
    file holding a line of its own)."""
    out.mkdir(exist_ok=True)
    if name in ("train", "eval") or name.endswith("_temp"):
        victim.mkdir()
        (victim / "keep").write_text("not the run's\n")
    else:
        victim.write_text("not the run's\n")
    (out / name).symlink_to(victim)


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under `root`, not followed: its kind, size, mtime and bytes."""
    return {str(path.relative_to(root)): (path.lstat().st_mode, path.lstat().st_size,
                                          path.lstat().st_mtime_ns,
                                          path.read_bytes() if path.is_file()
                                          and not path.is_symlink() else None)
            for path in sorted(root.rglob("*"))}


def _link_line(path: Path, victim: Path) -> str:
    return (f"{path}: is a symbolic link (to {victim}); outputs are never written through a "
            "link: remove it or name another path")


@pytest.mark.parametrize("name", [".lock", "tensorflow.log"])
def test_a_link_planted_where_a_run_writes_is_refused_before_anything_is_written(
        data, tmp_path, name):
    # Followed, the link would let the lock's text overwrite its target, and TensorFlow's
    # messages be appended to it when the run ended.
    out, victim = tmp_path / "out", tmp_path / "victim"
    _plant(out, name, victim)
    before = _tree(tmp_path)
    result = run_cli(data, out)
    assert_one_error_line(result, f"error: {_link_line(out / name, victim)}")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("name", ["mlperf.log", "eval_history.csv", "train", "eval",
                                  "eval_results.txt", "model.ckpt-8_temp", ".lock-worker-1",
                                  ".worker-1", "checkpoint"])
def test_every_entry_a_run_writes_or_deletes_is_checked_for_links(data, tmp_path, name):
    # Followed, a link would take mlperf.log's and eval_history.csv's lines to its target,
    # TensorBoard's events into a linked train/, and the orphan sweep at the start would empty
    # a linked save folder (model.ckpt-N_temp). Preflight refuses each, before any write.
    out, victim = tmp_path / "out", tmp_path / "victim"
    _plant(out, name, victim)
    with pytest.raises(RefusedOutput, match=f"^{re.escape(_link_line(out / name, victim))}$"):
        checked(data, out)


def test_the_log_and_the_lock_are_never_opened_through_a_link(tmp_path):
    # At open time too (a link planted after the check): O_NOFOLLOW, the target untouched.
    victim = tmp_path / "victim"
    victim.write_text("not the run's\n")
    for name in ("mlperf.log", ".lock"):
        (tmp_path / name).symlink_to(victim)
    with pytest.raises(RefusedOutput, match="mlperf.log: is a symbolic link"):
        LogFile(str(tmp_path / "mlperf.log"))
    with pytest.raises(RefusedOutput, match=r"\.lock: is a symbolic link"):
        with output_dir_lock(str(tmp_path), 0):
            pass
    assert victim.read_text() == "not the run's\n"
