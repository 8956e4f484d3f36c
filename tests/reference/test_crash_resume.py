"""Training crash safety: a run killed at any point and started again with the same command
resumes from its last complete checkpoint and ends exactly as an uninterrupted run.

What makes a resumed run equal an uninterrupted one, bit for bit, with dropout on:
- the training stream is rebuilt with the run's seed (stored in the checkpoint) and skips the
  micro-batches already trained on (`train_dataset(skip_batches=...)`);
- dropout masks are stateless, keyed by (run seed, micro-step, replica, layer) (`KeyedDropout`);
- the eval schedule continues from the restored sample count.
A checkpoint whose files do not read back whole is skipped for the one before it. The MLPerf
log says that the run resumed, counts samples on from the checkpoint, and `benchmark.check`
reports it as not a valid result.

The fast tests run the trainer in-process (`reference.run_loop.train`), interrupted with
--stop_steps; the slow ones kill `python -m reference.run_pretraining` with SIGKILL at random
times (a fixed random.Random seed; the kill times are logged) and compare with an
uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from benchmark.log_check import check_log
from cleanup_scripts.records.pretraining_features import RecordLayout
from reference import checkpoint as ckpt
from reference import input_pipeline
from reference.bert_config import load_bert_config
from reference.model import BertPretrainingModel, dummy_features
from reference.preflight import preflight
from reference.run_flags import define_flags
from reference.run_log import end_partial_line
from reference.run_loop import RunResult, train
from reference.run_options import options_from_flags
from reference.run_pretraining import EXIT_INTERRUPTED, EXIT_TARGET_NOT_REACHED
from reference.trainer import CHECKPOINT_NAME, DropoutKeys, KeyedDropout, use_keyed_dropout
from tests import forked
from tests.conftest import REPO
from tests.reference import synthetic_data

# 30 micro-steps of 32 records, dropout on; a checkpoint every 10 steps (320 samples), an eval
# every 480 samples (15 steps), so a resumed segment starts between two evals.
RUN_FLAGS = {"do_train": "true", "do_eval": "true", "train_batch_size": 32,
             "eval_batch_size": 100, "max_eval_steps": 2, "learning_rate": 0.01,
             "num_train_steps": 30, "num_warmup_steps": 0, "iterations_per_loop": 5,
             "save_checkpoints_steps": 10, "keep_checkpoint_max": 0,
             "eval_frequency_samples": 480, "noncompliant_eval_frequency": "true",
             "target_mlm_accuracy": 0.999, "dropout_override": 0.1}
SEED = 5


# ------------------------------------------------------------------------------ helpers
def train_in_process(data: dict, out: Path, **extra) -> RunResult:
    """`run_loop.train` with RUN_FLAGS, `extra` flags and the data flags."""
    values = {**data, **RUN_FLAGS, "output_dir": out, **extra}
    flag_values = define_flags(flags.FlagValues())
    flag_values(["run_pretraining", *(f"--{k}={v}" for k, v in values.items())])
    options = options_from_flags(flag_values)
    return train(options, preflight(options))


def checkpoint_values(prefix: str) -> dict[str, np.ndarray]:
    """Every variable of a training checkpoint (model, optimizer slots, counters)."""
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.endswith("VARIABLE_VALUE") and not name.startswith("save_counter")}


def assert_same_checkpoint(ours: str, theirs: str) -> None:
    """Bit-identical variables."""
    a, b = checkpoint_values(ours), checkpoint_values(theirs)
    assert a.keys() == b.keys() and len(a) > 50
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def log_sections(path: Path) -> list[list[dict]]:
    """The MLPerf log cut into the sections each process wrote (each starts with
    submission_benchmark). Lines a killed process left unfinished are dropped."""
    sections: list[list[dict]] = []
    for line in path.read_text().splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            record = json.loads(line[len(":::MLLOG "):])
        except json.JSONDecodeError:
            continue
        if record["key"] == "submission_benchmark" or not sections:
            sections.append([])
        sections[-1].append(record)
    return sections


def evals(records: list[dict]) -> list[tuple[int, float]]:
    """(epoch_num, masked-LM accuracy) of each eval_accuracy record."""
    return [(r["metadata"]["epoch_num"], r["value"]) for r in records
            if r["key"] == "eval_accuracy"]


def first(records: list[dict], key: str) -> dict | None:
    return next((r for r in records if r["key"] == key), None)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("crash") / "data",
                                        train_files=2, train_records=200, eval_records=200)


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    result = train_in_process(data, out, seed=SEED)
    assert (result.status, result.step, result.samples) == ("aborted", 30, 960)
    return out


# ------------------------------------------------------------------------------ pieces
def test_keyed_dropout_masks_depend_only_on_key_and_layer():
    keys = DropoutKeys()
    x = tf.ones([8, 64])
    layer0, layer1 = KeyedDropout(keys, 0), KeyedDropout(keys, 1)
    with keys.using(tf.constant([5, 10], tf.int64)):
        mask = layer0.dropout(x, 0.5).numpy()
        again = layer0.dropout(x, 0.5).numpy()
        other_layer = layer1.dropout(x, 0.5).numpy()
    with keys.using(tf.constant([5, 11], tf.int64)):
        next_step = layer0.dropout(x, 0.5).numpy()
    assert set(np.unique(mask)) == {0.0, 2.0}  # dropped, or kept and scaled by 1 / (1 - 0.5)
    np.testing.assert_array_equal(mask, again)
    assert not np.array_equal(mask, other_layer)
    assert not np.array_equal(mask, next_step)
    with pytest.raises(RuntimeError, match="outside a training step"):
        layer0.dropout(x, 0.5)


def test_model_dropout_follows_the_step_key(data):
    config = dataclasses.replace(load_bert_config(data["bert_config_file"]),
                                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    model = BertPretrainingModel(config, name="keyed")
    keys = DropoutKeys()
    assert use_keyed_dropout(model, keys) == 1 + 3 * config.num_hidden_layers
    features = dummy_features(batch_size=4, seq_length=16, max_predictions=4)

    def logits(key):
        with keys.using(tf.constant(key, tf.int64)):
            return model(features, training=True)["masked_lm_logits"].numpy()

    np.testing.assert_array_equal(logits([1, 7]), logits([1, 7]))
    assert not np.array_equal(logits([1, 7]), logits([1, 8]))
    inference = [model(features, training=False)["masked_lm_logits"].numpy() for _ in "ab"]
    np.testing.assert_array_equal(*inference)  # no dropout, no key needed


@pytest.mark.parametrize("pipelines, files, steps_per_update", [
    (1, 2, 1), (1, 2, 2), (2, 1, 1), (2, 2, 2)])
def test_skipped_stream_continues_exactly_where_the_full_stream_is(tmp_path, pipelines, files,
                                                                   steps_per_update):
    # 2 x 16 records, batches of 4: an epoch is 8 batches, so the skip crosses epochs (each
    # reshuffled) and the shuffle buffer (1000) holds a whole epoch.
    paths = [str(synthetic_data.write_tfrecord(tmp_path / f"part-{i}", 16, seed=i))
             for i in range(files)]
    n = steps_per_update
    for pipeline in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines,
                                             input_pipeline_id=pipeline,
                                             num_replicas_in_sync=pipelines)

        def stream(skip, count):
            dataset = input_pipeline.train_dataset(
                paths, 4, RecordLayout.unpacked(synthetic_data.SEQ_LENGTH,
                                                synthetic_data.MAX_PREDICTIONS), seed=9,
                steps_per_update=n, input_context=context, skip_batches=skip * n)
            return [element["input_ids"].numpy() for element in dataset.take(count)]

        full, resumed = stream(0, 14), stream(5, 9)
        for a, b in zip(full[5:], resumed, strict=True):
            np.testing.assert_array_equal(a, b)


def test_latest_complete_checkpoint_skips_each_kind_of_damage(tmp_path, caplog):
    step = tf.Variable(0, dtype=tf.int64)
    weights = tf.Variable(tf.zeros([256]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step, weights=weights),
                                         str(tmp_path), max_to_keep=None,
                                         checkpoint_name=CHECKPOINT_NAME)
    for number in (10, 20, 30, 40, 50):
        weights.assign(tf.fill([256], float(number)))
        manager.save(checkpoint_number=number)
    prefix = str(tmp_path / CHECKPOINT_NAME)
    assert ckpt.latest_complete_checkpoint(str(tmp_path), CHECKPOINT_NAME) == (f"{prefix}-50",
                                                                              [])
    data_file = tmp_path / f"{CHECKPOINT_NAME}-50.data-00000-of-00001"
    data_file.write_bytes(data_file.read_bytes()[:200])                     # truncated
    (tmp_path / f"{CHECKPOINT_NAME}-40.index").unlink()                     # index lost
    flipped = bytearray((tmp_path / f"{CHECKPOINT_NAME}-30.data-00000-of-00001").read_bytes())
    flipped[100] ^= 0xFF                                                    # a bad byte
    (tmp_path / f"{CHECKPOINT_NAME}-30.data-00000-of-00001").write_bytes(bytes(flipped))
    (tmp_path / "checkpoint").unlink()  # the state file gone too: found from the files
    with caplog.at_level(logging.WARNING):
        found, skipped = ckpt.latest_complete_checkpoint(str(tmp_path), CHECKPOINT_NAME)
    assert found == f"{prefix}-20"
    # Without the state file, step 40 (no index) is not even a candidate.
    assert skipped == [f"{prefix}-50", f"{prefix}-30"]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"{prefix}-50" in warned and f"{prefix}-30" in warned and "Checksum" in warned


def test_latest_complete_checkpoint_reads_the_state_file_entries(tmp_path):
    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path),
                                         max_to_keep=None, checkpoint_name=CHECKPOINT_NAME)
    for number in (10, 20):
        manager.save(checkpoint_number=number)
    (tmp_path / f"{CHECKPOINT_NAME}-20.index").unlink()
    found, skipped = ckpt.latest_complete_checkpoint(str(tmp_path), CHECKPOINT_NAME)
    prefix = str(tmp_path / CHECKPOINT_NAME)
    assert (found, skipped) == (f"{prefix}-10", [f"{prefix}-20"])
    assert ckpt.latest_complete_checkpoint(str(tmp_path / "empty"), CHECKPOINT_NAME) == (None,
                                                                                         [])


def test_folders_of_saves_that_never_finished_are_removed(tmp_path):
    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path),
                                         max_to_keep=None, checkpoint_name=CHECKPOINT_NAME)
    manager.save(checkpoint_number=10)
    orphan = tmp_path / f"{CHECKPOINT_NAME}-20_temp"  # as a save killed before its merge
    orphan.mkdir()
    (orphan / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 100)
    assert ckpt.remove_orphan_save_folders(str(tmp_path), CHECKPOINT_NAME) == [str(orphan)]
    assert not orphan.exists()
    assert checkpoint_steps(tmp_path) == [10]
    assert ckpt.remove_orphan_save_folders(str(tmp_path), CHECKPOINT_NAME) == []


def test_an_unfinished_last_log_line_is_ended_before_appending(tmp_path):
    log = tmp_path / "mlperf.log"
    assert not end_partial_line(str(log))  # no file yet
    log.write_text(':::MLLOG {"key": "a"}\n:::MLLOG {"key": "b", "va')
    assert end_partial_line(str(log))
    assert not end_partial_line(str(log))
    assert log.read_text().endswith('"va\n')


# ------------------------------------------------------------------------------ resumed runs
@pytest.fixture(scope="module")
def stopped_at_10(data, tmp_path_factory) -> Path:
    """The output folder of the run stopped at micro-step 10 (--stop_steps=10, --seed):
    copy it before going on from it."""
    out = tmp_path_factory.mktemp("stopped_at_10") / "out"
    assert train_in_process(data, out, seed=SEED, stop_steps=10).step == 10
    return out


@pytest.fixture(scope="module")
def resumed(data, stopped_at_10, tmp_path_factory) -> Path:
    """The same run stopped at micro-steps 10 and 20 and resumed; the later segments are
    started without --seed (a fresh random seed each), as a user re-running the command."""
    out = tmp_path_factory.mktemp("resumed") / "out"
    shutil.copytree(stopped_at_10, out)
    assert train_in_process(data, out, stop_steps=20).step == 20
    result = train_in_process(data, out)
    assert (result.status, result.step, result.samples) == ("aborted", 30, 960)
    return out


def test_resumed_run_is_bit_identical_to_the_uninterrupted_run(resumed, uninterrupted):
    assert_same_checkpoint(str(resumed / f"{CHECKPOINT_NAME}-30"),
                           str(uninterrupted / f"{CHECKPOINT_NAME}-30"))
    assert (resumed / "eval_results.txt").read_text() == \
        (uninterrupted / "eval_results.txt").read_text()
    reference_evals = evals(log_sections(uninterrupted / "mlperf.log")[0])
    assert [s for s, _ in reference_evals] == [480, 960]
    assert [e for section in log_sections(resumed / "mlperf.log") for e in evals(section)] \
        == reference_evals


def test_resumed_log_sections_continue_the_samples_and_the_eval_schedule(resumed):
    sections = log_sections(resumed / "mlperf.log")
    assert len(sections) == 3
    assert first(sections[0], "resume") is None
    for section, (step, samples) in zip(sections[1:], [(10, 320), (20, 640)]):
        meta = first(section, "resume")["metadata"]
        assert (meta["global_step"], meta["samples"]) == (step, samples)
        assert meta["checkpoint"].endswith(f"{CHECKPOINT_NAME}-{step}")
        assert "skipped_checkpoints" not in meta
        assert first(section, "seed")["value"] == SEED  # the run's seed, from the checkpoint
    # Blocks start at the restored sample count and end at the next eval (480, 960) or stop.
    blocks = [[(r["metadata"]["first_epoch_num"], r["metadata"]["epoch_count"])
               for r in section if r["key"] == "block_start"] for section in sections]
    assert blocks == [[(0, 320)], [(320, 160), (480, 160)], [(640, 320)]]
    assert [[s for s, _ in evals(section)] for section in sections] == [[], [480], [960]]
    assert [first(s, "train_samples")["value"] for s in sections] == [320, 640, 960]
    assert [first(s, "run_stop")["metadata"]["status"] for s in sections] == ["aborted"] * 3


def test_checker_reports_a_resumed_log_as_not_a_valid_result(resumed, uninterrupted):
    report = check_log(str(resumed / "mlperf.log"))
    single = [p for p in report.problems if p.rule == "bert/single-run"]
    assert len(single) == 2 and all(p.severity == "error" for p in single)
    assert "resumed from checkpoint" in single[0].message
    assert "320 samples" in single[0].message and "not a valid result" in single[0].message
    assert not report.passed
    assert not [p for p in check_log(str(uninterrupted / "mlperf.log")).problems
                if p.rule == "bert/single-run"]


def test_checker_reports_a_second_run_appended_without_resume(uninterrupted, tmp_path):
    # As when every checkpoint was damaged and the run started over in the same folder.
    lines = (uninterrupted / "mlperf.log").read_text().splitlines()
    records = [json.loads(line[len(":::MLLOG "):]) for line in lines]
    later = [":::MLLOG " + json.dumps({**r, "time_ms": r["time_ms"] + 60_000}) for r in records]
    log = tmp_path / "mlperf.log"
    log.write_text("\n".join(lines + later) + "\n")
    second_start = len(lines) + [r["key"] for r in records].index("run_start") + 1
    found = [(p.line, p.message) for p in check_log(str(log), official=False).problems
             if p.rule == "bert/single-run"]
    assert len(found) == 1 and found[0][0] == second_start
    assert "a second run starts here" in found[0][1]


def test_damaged_newest_checkpoints_are_skipped_and_the_run_still_ends_identical(
        data, uninterrupted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)
    # The finished run's last two checkpoints damaged: step 30's data file cut in half, step
    # 20's index file gone. Neither may be restored; the run goes on from step 10.
    data_30 = out / f"{CHECKPOINT_NAME}-30.data-00000-of-00001"
    data_30.write_bytes(data_30.read_bytes()[:data_30.stat().st_size // 2])
    (out / f"{CHECKPOINT_NAME}-20.index").unlink()
    result = train_in_process(data, out)
    assert (result.step, result.samples) == (30, 960)
    resume = first(log_sections(out / "mlperf.log")[-1], "resume")["metadata"]
    assert resume["checkpoint"] == str(out / f"{CHECKPOINT_NAME}-10")
    assert resume["skipped_checkpoints"] == [str(out / f"{CHECKPOINT_NAME}-{s}")
                                             for s in (30, 20)]
    assert_same_checkpoint(str(out / f"{CHECKPOINT_NAME}-30"),
                           str(uninterrupted / f"{CHECKPOINT_NAME}-30"))
    assert evals(log_sections(out / "mlperf.log")[-1]) == \
        evals(log_sections(uninterrupted / "mlperf.log")[0])


# ------------------------------------------------------------------------------ full disk
# Bytes any one file may grow to: above the MLPerf log, summaries and eval results of these
# runs, below the ~166 KB data file of one of their checkpoints.
FILE_SIZE_LIMIT = 64 * 1024


def test_checkpoint_save_on_a_full_disk_is_one_line_and_the_rerun_resumes(
        data, uninterrupted, stopped_at_10, tmp_path):
    # A full disk without privileges: RLIMIT_FSIZE, with SIGXFSZ ignored, makes the write that
    # crosses the limit fail with EFBIG ("File too large") where a full disk gives ENOSPC; the
    # save fails half-way through the checkpoint's data file, as on a disk that fills.
    out = tmp_path / "out"
    shutil.copytree(stopped_at_10, out)
    limited = forked.run(trainer_command({**data, **RUN_FLAGS, "seed": SEED, "output_dir": out}),
                         env=trainer_env(), timeout=600, file_size_limit=FILE_SIZE_LIMIT)
    assert limited.returncode == 1 and "Traceback" not in limited.stderr, limited.stderr[-2000:]
    assert limited.stderr.strip().splitlines()[-1] == (
        f"error: --output_dir: {out / CHECKPOINT_NAME}-20: cannot write (File too large)")
    failed = log_sections(out / "mlperf.log")[-1]
    assert [s for s, _ in evals(failed)] == [480]  # it trained on past the eval at step 15
    assert failed[-1]["key"] == "run_stop" and failed[-1]["metadata"]["status"] == "aborted"
    assert checkpoint_steps(out) == [10]  # step 20's files never reached their place

    result = train_in_process(data, out)  # the disk has room again: the same command
    assert (result.status, result.step, result.samples) == ("aborted", 30, 960)
    assert not (out / f"{CHECKPOINT_NAME}-20_temp").exists()
    assert first(log_sections(out / "mlperf.log")[-1], "resume")["metadata"]["global_step"] == 10
    assert_same_checkpoint(str(out / f"{CHECKPOINT_NAME}-30"),
                           str(uninterrupted / f"{CHECKPOINT_NAME}-30"))
    assert evals(log_sections(out / "mlperf.log")[-1]) == \
        evals(log_sections(uninterrupted / "mlperf.log")[0])  # from step 10: both evals


# ------------------------------------------------------------------------------ SIGKILL
# Long enough to be killed mid-training: 240 micro-steps, 2 per host call, a checkpoint every
# 4 (so kills often land in a save), an eval every 960 samples; 8 evals, the last at the end.
KILL_FLAGS = {**RUN_FLAGS, "num_train_steps": 240, "iterations_per_loop": 2,
              "save_checkpoints_steps": 4, "keep_checkpoint_max": 3,
              "eval_frequency_samples": 960, "seed": 7}
KILL_SETUPS = {"default": {},
               "mirrored-accumulation": {"cpu_devices": 2, "steps_per_update": 2}}


def checkpoint_steps(out: Path) -> list[int]:
    """Steps of the checkpoint index files in `out`, ascending."""
    prefix = f"{CHECKPOINT_NAME}-"
    return sorted(int(p.name[len(prefix):-len(".index")]) for p in out.glob(f"{prefix}*.index"))


def trainer_command(flag_values: dict) -> list[str]:
    return [sys.executable, "-m", "reference.run_pretraining",
            *(f"--{k}={v}" for k, v in flag_values.items())]


def start(commands: list[list[str]], envs: list[dict]) -> list:
    """Start processes (one per worker), each in a session of its own."""
    return [forked.start(command, env, start_new_session=True)
            for command, env in zip(commands, envs)]


def trainer_env(**extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **extra)


def run_to_the_budget(command: list[str]) -> None:
    """Run `command` to its --num_train_steps; its target (0.999) is out of reach, so it
    ends with the exit status that says so."""
    result = forked.run(command, env=trainer_env())
    assert result.returncode == EXIT_TARGET_NOT_REACHED, result.stderr[-3000:]


def kill_at_random_points(launch, out: Path, rng: random.Random, kills: int,
                          anytime: tuple[float, float]) -> None:
    """Start the run `kills` times (`launch()` returns its processes) and SIGKILL it: on even
    attempts within 2 s after it wrote a checkpoint newer than those it started with, on odd
    ones at a random time in `anytime` seconds after the start (in start-up, training, an
    eval or a save). Prints one line per kill."""
    for attempt in range(kills):
        before = (checkpoint_steps(out) or [0])[-1]
        processes = launch()
        started = time.monotonic()
        if attempt % 2 == 0:
            while all(p.poll() is None for p in processes) and time.monotonic() - started < 300 \
                    and (checkpoint_steps(out) or [0])[-1] <= before:
                time.sleep(0.02)
            delay, when = rng.uniform(0.0, 2.0), "after a new checkpoint"
        else:
            delay, when = rng.uniform(*anytime), "after the start"
        time.sleep(delay)
        running = [p for p in processes if p.poll() is None]
        for process in running:
            os.killpg(process.pid, signal.SIGKILL)
        for process in processes:
            process.wait()
        print(f"kill {attempt + 1}: {delay:.2f} s {when} ({time.monotonic() - started:.1f} s "
              f"in; {'killed' if running else 'had exited'}); checkpoints on disk "
              f"{checkpoint_steps(out)}")


def assert_same_outcome(out: Path, baseline: Path, eval_frequency: int) -> None:
    """A killed and resumed run ended as the uninterrupted `baseline`: the same final checkpoint
    (bit for bit), eval_results.txt and evals; every section of its log evaluates at the
    cadence from where it resumed, with the baseline's values, and no eval is missing."""
    final, _ = ckpt.latest_complete_checkpoint(str(out), CHECKPOINT_NAME)
    expected_final, _ = ckpt.latest_complete_checkpoint(str(baseline), CHECKPOINT_NAME)
    assert Path(final).name == Path(expected_final).name
    assert_same_checkpoint(final, expected_final)
    assert (out / "eval_results.txt").read_text() == (baseline / "eval_results.txt").read_text()
    text = (out / "mlperf.log").read_text()
    assert all(line.count(":::MLLOG") <= 1 for line in text.splitlines())  # no glued records
    [reference] = log_sections(baseline / "mlperf.log")
    expected = dict(evals(reference))
    sections = log_sections(out / "mlperf.log")
    seen = set()
    for section in sections:
        samples = [s for s, _ in evals(section)]
        assert samples == sorted(set(samples))  # none repeated within a process
        assert all(expected[s] == value for s, value in evals(section))
        resume = first(section, "resume")
        if resume is not None and samples:
            restored = resume["metadata"]["samples"]
            assert samples[0] == (restored // eval_frequency + 1) * eval_frequency
        seen.update(samples)
    assert seen == set(expected)
    assert first(sections[-1], "run_stop")["metadata"]["status"] == \
        first(reference, "run_stop")["metadata"]["status"]
    assert first(sections[-1], "train_samples")["value"] == \
        first(reference, "train_samples")["value"]


@pytest.fixture(scope="module")
def kill_data(tmp_path_factory) -> dict:
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("kill") / "data",
                                        train_files=2, train_records=300, eval_records=200)


@pytest.mark.slow
@pytest.mark.parametrize("setup", sorted(KILL_SETUPS))
def test_sigkill_at_random_points_then_rerun_equals_the_uninterrupted_run(kill_data, tmp_path,
                                                                         setup):
    flag_values = {**kill_data, **KILL_FLAGS, **KILL_SETUPS[setup]}
    baseline = tmp_path / "baseline"
    run_to_the_budget(trainer_command({**flag_values, "output_dir": baseline}))
    out = tmp_path / "out"
    command = trainer_command({**flag_values, "output_dir": out})
    kill_at_random_points(lambda: start([command], [trainer_env()]), out,
                          random.Random(f"crash-{setup}"), kills=3, anytime=(4.0, 20.0))
    run_to_the_budget(command)
    assert_same_outcome(out, baseline, KILL_FLAGS["eval_frequency_samples"])
    assert len(log_sections(out / "mlperf.log")) >= 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def launch_two_workers(command: list[str]) -> list:
    """`command` as the two workers of a MultiWorkerMirroredStrategy cluster on localhost."""
    cluster = {"worker": [f"localhost:{free_port()}", f"localhost:{free_port()}"]}
    envs = [trainer_env(TF_CONFIG=json.dumps({"cluster": cluster,
                                              "task": {"type": "worker", "index": index}}))
            for index in range(2)]
    return start([command, command], envs)


def run_two_workers(command: list[str]) -> None:
    workers = launch_two_workers(command)
    for worker in workers:
        assert worker.wait(timeout=600) == EXIT_TARGET_NOT_REACHED


@pytest.mark.slow
def test_two_workers_killed_then_rerun_equal_the_uninterrupted_run(kill_data, tmp_path):
    flag_values = {**kill_data, **KILL_FLAGS, "num_train_steps": 120}
    baseline = tmp_path / "baseline"
    run_two_workers(trainer_command({**flag_values, "output_dir": baseline}))
    out = tmp_path / "out"
    command = trainer_command({**flag_values, "output_dir": out})
    kill_at_random_points(lambda: launch_two_workers(command), out, random.Random("workers"),
                          kills=2, anytime=(8.0, 30.0))
    run_two_workers(command)
    assert not (out / ".worker-1").exists()
    assert_same_outcome(out, baseline, KILL_FLAGS["eval_frequency_samples"])


# ------------------------------------------------------------------------------ SIGINT
def eval_history_steps(path: Path) -> list[int]:
    """The global_step column of an eval_history.csv."""
    return [int(line.split(",")[0]) for line in path.read_text().splitlines()[1:]]


def test_ctrl_c_before_the_first_checkpoint_then_the_same_command_is_one_valid_run(data,
                                                                                   tmp_path):
    # An eval at 0 samples (written before training starts), no checkpoint before the end,
    # and a target that the run reaches: the rerun is a whole run whose log `make check`
    # passes, while the interrupted run's log and evals are kept aside, renamed.
    out = tmp_path / "out"
    command = trainer_command({**data, **RUN_FLAGS, "seed": SEED, "output_dir": out,
                               "eval_at_start": "true", "save_checkpoints_steps": 1000,
                               "target_mlm_accuracy": 0.25})
    process = forked.start(command, env=trainer_env())
    deadline = time.monotonic() + 300
    while not (out / "eval_history.csv").exists() and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr[-3000:]
    assert re.fullmatch(r"interrupted at step \d+; run the same command to start over \(no "
                        r"checkpoint was saved yet; this run's log and evals are then renamed "
                        r"to \*\.interrupted-N\)", stderr.rstrip("\n").splitlines()[-1]), \
        stderr[-2000:]
    assert checkpoint_steps(out) == []
    interrupted = {name: (out / name).read_bytes() for name in ("mlperf.log", "eval_history.csv")}
    assert [first(s, "run_stop")["metadata"]["status"]
            for s in log_sections(out / "mlperf.log")] == ["aborted"]

    rerun = forked.run(command, env=trainer_env(), timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "no checkpoint to resume from: the run starts over" in rerun.stderr
    for name, content in interrupted.items():
        assert (out / f"{name}.interrupted-1").read_bytes() == content
    assert (out / "train.interrupted-1").is_dir() and (out / "eval.interrupted-1").is_dir()
    [section] = log_sections(out / "mlperf.log")
    assert first(section, "run_stop")["metadata"]["status"] == "success"
    steps = eval_history_steps(out / "eval_history.csv")
    assert steps[0] == 0 and steps == sorted(set(steps))  # this run's evals, each once
    check = subprocess.run([sys.executable, "-m", "benchmark.check", str(out / "mlperf.log")],
                           env=trainer_env(), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-3000:]


class CtrlCMidSave(tf.train.CheckpointManager):
    """A CheckpointManager that is sent SIGINT once its save has begun (after the checkpoint's
    files, before its state file: the window where a Ctrl-C left no checkpoint to resume)."""

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        path = self._checkpoint.write(os.path.join(self.directory, "model.ckpt-scratch"))
        os.kill(os.getpid(), signal.SIGINT)
        assert path  # the save goes on after the signal
        return super().save(checkpoint_number, check_interval, options)


@pytest.fixture
def python_sigint():
    """SIGINT raising KeyboardInterrupt in this process while the test runs, as in a program
    started from a terminal: a test process started in the background of a non-interactive
    shell inherits SIGINT ignored (Python then keeps it ignored, and `interrupts` leaves it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_a_checkpoint_is_saved_waits_for_the_save_to_end(tmp_path, python_sigint):
    from reference.run_outputs import save_checkpoint
    variable = tf.Variable([1.0, 2.0])
    manager = CtrlCMidSave(tf.train.Checkpoint(v=variable), str(tmp_path), max_to_keep=None,
                           checkpoint_name=CHECKPOINT_NAME)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(manager, 7)
    assert manager.latest_checkpoint == str(tmp_path / f"{CHECKPOINT_NAME}-7")
    assert tf.train.load_variable(manager.latest_checkpoint, "v/.ATTRIBUTES/VARIABLE_VALUE"
                                  ).tolist() == [1.0, 2.0]
    with pytest.raises(KeyboardInterrupt):  # Python's own handler is back
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop
def test_a_ctrl_c_that_python_drops_in_a_gc_callback_is_raised_at_the_next_host_call(
        python_sigint):
    # Python drops a KeyboardInterrupt raised inside a garbage-collector callback (JAX, which
    # TensorFlow imports, installs one): a run once trained on to its end after a Ctrl-C.
    from reference import interrupts
    sent = []

    def ctrl_c_during_gc(phase, info):
        if phase == "start" and not sent:
            sent.append(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs here, inside the callback

    gc.callbacks.append(ctrl_c_during_gc)
    try:
        with interrupts.noticed():
            gc.collect()  # no KeyboardInterrupt comes out of it
            assert sent
            with pytest.raises(KeyboardInterrupt):
                interrupts.raise_if_pressed()
    finally:
        gc.callbacks.remove(ctrl_c_during_gc)
    interrupts.raise_if_pressed()  # outside the run: forgotten


def test_check_of_a_resumed_log_leads_with_its_one_cause(resumed, capsys):
    from benchmark import check
    assert check.main([str(resumed / "mlperf.log")]) == 1
    lines = capsys.readouterr().out.splitlines()
    problems = [line for line in lines if line.startswith(str(resumed))]
    # Only the cause (one line per resume); what follows from it is counted in the verdict.
    assert len(problems) == 2 and problems == lines[:2]
    assert all(": bert/single-run: " in line and "not a valid result" in line
               for line in problems)
    assert not [line for line in lines if line.startswith("warnings:")]
    assert "of them follow from the first error shown for their log (--verbose lists them)" \
        in lines[-1]
    assert check.main([str(resumed / "mlperf.log"), "--verbose"]) == 1
    assert "follow from" not in capsys.readouterr().out
