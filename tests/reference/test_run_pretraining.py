"""`python -m reference.run_pretraining` end to end, on tiny learnable TFRecords.

Runs are processes of their own (`tests/forked.py`); each test names the behaviour it checks. The
closed-division run is honest: a tiny model reaches the benchmark's real target (0.720) on a
10,000-record eval set at the benchmark's cadence (150,000 samples for batch 2048), and its log
passes the official compliance checker's closed rules.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf

from reference.run_pretraining import EXIT_INTERRUPTED, EXIT_TARGET_NOT_REACHED
from tests.conftest import REPO
from tests import forked
from tests.reference import synthetic_data

MODULE = "reference.run_pretraining"


def run_trainer(*args: str, env: dict | None = None, check: bool = True,
                cwd: Path | None = None, timeout: float | None = None
                ) -> subprocess.CompletedProcess:
    """Run the trainer CLI; fails the test (with its stderr tail) if check and it fails, or if
    it runs longer than `timeout` seconds."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
                    **(env or {}))
    result = forked.run([sys.executable, "-m", MODULE, *args], env=full_env, cwd=cwd,
                        timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{MODULE} failed ({result.returncode}):\n"
                             f"{result.stderr[-3000:]}")
    return result


def as_flags(values: dict) -> list[str]:
    return [f"--{key}={value}" for key, value in values.items()]


def read_mllog(path: Path) -> list[dict]:
    """The :::MLLOG records of a log file, parsed."""
    records = []
    for line in path.read_text().splitlines():
        if line.startswith(":::MLLOG "):
            records.append(json.loads(line[len(":::MLLOG "):]))
    return records


def values(records: list[dict], key: str) -> list:
    return [r["value"] for r in records if r["key"] == key]


def metadata(records: list[dict], key: str) -> list[dict]:
    return [r["metadata"] for r in records if r["key"] == key]


def read_eval_results(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        key, value = line.split(" = ")
        out[key] = float(value)
    return out


def compliance(log: Path, cwd: Path) -> subprocess.CompletedProcess:
    """The official checker (it writes compliance_checker.log into its working folder)."""
    return subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage",
                           "training", "--ruleset", "1.0.0", str(log)], cwd=cwd,
                          capture_output=True, text=True)


def scalars(folder: Path, tag: str) -> dict[int, float]:
    """TensorBoard scalars `tag` written under `folder`, by step (Summary simple_values, what
    TensorBoard's scalar readers list)."""
    out = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == tag:
                    assert value.WhichOneof("value") == "simple_value", tag
                    out[event.step] = value.simple_value
    return out


# ------------------------------------------------------------------------------ closed run
CLOSED_FLAGS = {"do_train": "true", "do_eval": "true", "train_batch_size": 2048,
                "eval_batch_size": 2000, "max_eval_steps": 5, "learning_rate": 0.05,
                "num_train_steps": 148, "num_warmup_steps": 0, "iterations_per_loop": 37,
                "save_checkpoints_steps": 37, "seed": 1, "submission_org": "tests",
                "submission_platform": "1xCPU"}


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("closed")
    data = synthetic_data.write_dataset(root / "data", train_files=2, train_records=512,
                                        eval_records=10_000)
    out = root / "out"
    result = run_trainer(*as_flags(data), *as_flags(CLOSED_FLAGS), f"--output_dir={out}")
    return {"root": root, "data": data, "out": out, "result": result}


def test_closed_run_stops_with_success_at_the_first_eval_at_target(closed_run):
    assert "success at step 74, 151552 samples" in closed_run["result"].stdout
    records = read_mllog(closed_run["out"] / "mlperf.log")
    assert values(records, "submission_division") == ["closed"]
    assert values(records, "global_batch_size") == [2048]
    assert values(records, "eval_samples") == [10_000]
    # eval_frequency(2048) = 150,000 samples: the first eval at the next step, 74 * 2048.
    blocks = metadata(records, "block_start")
    assert [(b["first_epoch_num"], b["epoch_count"]) for b in blocks] == [(0, 151_552)]
    accuracy = values(records, "eval_accuracy")
    assert len(accuracy) == 1 and accuracy[0] >= 0.720
    assert [m["epoch_num"] for m in metadata(records, "eval_accuracy")] == [151_552]
    assert values(records, "train_samples") == [151_552]
    assert [m["status"] for m in metadata(records, "run_stop")] == ["success"]
    keys = [r["key"] for r in records]
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("block_start")
    assert keys[-2:] == ["train_samples", "run_stop"]


def test_closed_run_log_passes_the_official_checker(closed_run):
    checked = compliance(closed_run["out"] / "mlperf.log", closed_run["root"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout + checked.stderr
    assert "closed_bert.yaml" in checked.stdout + checked.stderr


def test_closed_run_writes_results_checkpoints_and_summaries(closed_run):
    out = closed_run["out"]
    results = read_eval_results(out / "eval_results.txt")
    assert set(results) == {"global_step", "masked_lm_accuracy", "masked_lm_loss",
                            "next_sentence_accuracy", "next_sentence_loss"}
    assert results["global_step"] == 74
    records = read_mllog(out / "mlperf.log")
    assert results["masked_lm_accuracy"] == pytest.approx(values(records, "eval_accuracy")[0])
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-74")
    assert (out / "model.ckpt-37.index").exists()  # --save_checkpoints_steps=37
    losses = scalars(out / "train", "total_loss")  # one per host call: calls end at saves
    assert {37, 74} <= set(losses) and max(losses) == 74 and losses[74] < losses[min(losses)]
    assert scalars(out / "eval", "masked_lm_accuracy")[74] == pytest.approx(
        results["masked_lm_accuracy"], rel=1e-6)


def test_eval_only_uses_the_latest_checkpoint_and_matches_the_training_eval(closed_run,
                                                                           tmp_path):
    out = tmp_path / "out"
    shutil.copytree(closed_run["out"], out, ignore=shutil.ignore_patterns("eval_results.txt"))
    data = closed_run["data"]
    run_trainer(f"--bert_config_file={data['bert_config_file']}",
                f"--input_file={data['eval_file']}", f"--output_dir={out}", "--do_eval",
                "--nodo_train", "--eval_batch_size=500", "--max_eval_steps=20",
                "--max_seq_length=16", "--max_predictions_per_seq=4")
    ours = read_eval_results(out / "eval_results.txt")
    trained = read_eval_results(closed_run["out"] / "eval_results.txt")
    assert ours["global_step"] == 74
    assert ours["masked_lm_accuracy"] == trained["masked_lm_accuracy"]
    for key in ("masked_lm_loss", "next_sentence_loss", "next_sentence_accuracy"):
        assert ours[key] == pytest.approx(trained[key], abs=1e-6), key


def test_eval_only_skips_a_damaged_newest_checkpoint(closed_run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(closed_run["out"], out, ignore=shutil.ignore_patterns("eval_results.txt"))
    steps = sorted(int(p.name.split("-")[1].split(".")[0]) for p in out.glob("model.ckpt-*.index"))
    assert len(steps) >= 2
    for data_file in out.glob(f"model.ckpt-{steps[-1]}.data-*"):
        data_file.write_bytes(data_file.read_bytes()[:100])
    data = closed_run["data"]
    run_trainer(f"--bert_config_file={data['bert_config_file']}",
                f"--input_file={data['eval_file']}", f"--output_dir={out}", "--do_eval",
                "--nodo_train", "--eval_batch_size=500", "--max_eval_steps=20",
                "--max_seq_length=16", "--max_predictions_per_seq=4")
    assert read_eval_results(out / "eval_results.txt")["global_step"] == steps[-2]
    assert not list(out.glob("eval_results.txt.partial-*"))


def test_eval_only_of_the_reference_checkpoint_gives_the_reference_metrics(tmp_path, ref_dir,
                                                                           ref_results):
    run_trainer(f"--bert_config_file={ref_dir / ref_results['bert_config']}",
                f"--init_checkpoint={ref_dir / ref_results['tf1_checkpoint']}",
                f"--input_file={ref_dir / 'eval.tfrecord'}", f"--output_dir={tmp_path}",
                "--do_eval", "--nodo_train", "--eval_batch_size=8", "--max_eval_steps=100",
                f"--max_seq_length={ref_results['seq_length']}",
                f"--max_predictions_per_seq={ref_results['max_predictions_per_seq']}")
    ours = read_eval_results(tmp_path / "eval_results.txt")
    for key, value in ref_results["eval_metrics"].items():
        tol = 1e-6 if "accuracy" in key else 2e-5
        assert ours[key] == pytest.approx(value, abs=tol), key


# ------------------------------------------------------------------------------ stop and resume
@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("small") / "data",
                                        train_files=2, train_records=256, eval_records=200)


RESUME_FLAGS = {"do_train": "true", "do_eval": "true", "train_batch_size": 64,
                "eval_batch_size": 100, "max_eval_steps": 2, "learning_rate": 0.01,
                "num_train_steps": 40, "num_warmup_steps": 0, "iterations_per_loop": 5,
                "save_checkpoints_steps": 10, "keep_checkpoint_max": 2, "seed": 3,
                "eval_frequency_samples": 640, "noncompliant_eval_frequency": "true",
                "target_mlm_accuracy": 0.999}


def test_stop_steps_then_resume_continues_the_run(small_data, tmp_path):
    out = tmp_path / "out"
    flags = [*as_flags(small_data), *as_flags(RESUME_FLAGS), f"--output_dir={out}"]
    first = run_trainer(*flags, "--stop_steps=20")
    assert "aborted at step 20, 1280 samples" in first.stdout
    assert "stopped at --stop_steps=20" in first.stdout  # a pause asked for: exit status 0
    # The console: no MLPerf records, no TensorFlow start-up noise (it is in tensorflow.log),
    # a warning for the random start, a line per eval; the history of evals beside
    # eval_results.txt.
    assert ":::MLLOG" not in first.stdout + first.stderr
    assert "oneDNN" not in first.stderr and "cuda" not in first.stderr.lower()
    assert (out / "tensorflow.log").stat().st_size > 0
    assert first.stderr.count("warning: no --init_checkpoint") == 1
    assert "eval 2 at step 20 (1,280 samples): masked_lm_accuracy" in first.stderr
    history = (out / "eval_history.csv").read_text().splitlines()
    assert history[0].startswith("global_step,samples,masked_lm_accuracy")
    assert [row.split(",")[:2] for row in history[1:]] == [["10", "640"], ["20", "1280"]]
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-20")
    assert sorted(p.name for p in out.glob("*.index")) == ["model.ckpt-10.index",
                                                          "model.ckpt-20.index"]
    # The schedule spans --num_train_steps=40: the 20th update (micro-step 19) uses
    # 0.01 * (1 - 19/40), not the rate of a 20-step schedule.
    assert scalars(out / "train", "learning_rate")[20] == pytest.approx(0.01 * 21 / 40,
                                                                        rel=1e-6)
    records = read_mllog(out / "mlperf.log")
    assert values(records, "opt_learning_rate_training_steps") == [40]
    assert values(records, "submission_division") == ["open"]  # non-compliant cadence
    assert len(values(records, "noncompliant")) == 3  # cadence, 200-record eval, target
    assert values(records, "target_accuracy") == [0.999]  # the open run's own target
    assert [m["epoch_num"] for m in metadata(records, "eval_accuracy")] == [640, 1280]
    assert [m["status"] for m in metadata(records, "run_stop")] == ["aborted"]

    second = run_trainer(*flags, check=False)
    assert second.returncode == EXIT_TARGET_NOT_REACHED, second.stderr[-2000:]
    assert second.stdout.rstrip().endswith(
        "aborted at step 40, 2560 samples, masked_lm_accuracy "
        f"{read_eval_results(out / 'eval_results.txt')['masked_lm_accuracy']:.5f}: the step "
        "budget (--num_train_steps=40) ran out before the target 0.999 (exit status 4)")
    assert "no --init_checkpoint" not in second.stderr and "resumed from" in second.stderr
    records = read_mllog(out / "mlperf.log")
    resume = metadata(records, "resume")
    assert len(resume) == 1 and resume[0]["global_step"] == 20 and resume[0]["samples"] == 1280
    assert [m["epoch_num"] for m in metadata(records, "eval_accuracy")] == [640, 1280, 1920,
                                                                          2560]
    assert [m["first_epoch_num"] for m in metadata(records, "block_start")] == [0, 640, 1280,
                                                                              1920]
    assert len(values(records, "run_start")) == 2  # two segments: honestly not one result
    assert compliance(out / "mlperf.log", tmp_path).returncode != 0
    assert read_eval_results(out / "eval_results.txt")["global_step"] == 40

    third = run_trainer(*flags)
    assert "already finished at step 40" in third.stdout
    assert len(read_mllog(out / "mlperf.log")) == len(records)  # nothing appended


def test_ctrl_c_ends_with_one_line_saying_how_to_resume_and_the_same_command_resumes(
        small_data, tmp_path):
    out = tmp_path / "out"
    flags = [*as_flags(small_data), *as_flags({**RESUME_FLAGS, "num_train_steps": 4000,
                                               "keep_checkpoint_max": 0}),
             f"--output_dir={out}"]
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    process = forked.start([sys.executable, "-m", MODULE, *flags], env=env)
    deadline = time.monotonic() + 300
    while not list(out.glob("model.ckpt-10.index")) and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    last = stderr.rstrip("\n").splitlines()[-1]
    match = re.fullmatch(r"interrupted at step (\d+); run the same command to resume from "
                         r"(.*model\.ckpt-(\d+))", last)
    assert match, stderr[-2000:]
    step, saved = int(match[1]), int(match[3])
    assert 10 <= saved <= step
    records = read_mllog(out / "mlperf.log")
    assert [m["status"] for m in metadata(records, "run_stop")] == ["aborted"]
    again = run_trainer(*flags, f"--stop_steps={saved + 10}")  # the same run, 10 steps more
    resume = metadata(read_mllog(out / "mlperf.log"), "resume")
    assert [r["global_step"] for r in resume] == [saved]
    assert f"stopped at --stop_steps={saved + 10}" in again.stdout


# ------------------------------------------------------------------------------ bad inputs
def test_missing_eval_file_is_reported_before_training(small_data, tmp_path):
    data = dict(small_data, eval_file=str(tmp_path / "nowhere" / "eval_10k"))
    result = run_trainer(*as_flags(data), *as_flags(RESUME_FLAGS),
                         f"--output_dir={tmp_path / 'out'}", check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"error: --eval_file: {data['eval_file']}: no file matches"
    assert not (tmp_path / "out" / "mlperf.log").exists()


def test_config_that_does_not_fit_the_checkpoint_is_one_line(small_data, tmp_path, ref_dir,
                                                            ref_results):
    result = run_trainer(*as_flags(small_data), *as_flags(RESUME_FLAGS),
                         f"--init_checkpoint={ref_dir / ref_results['tf1_checkpoint']}",
                         f"--output_dir={tmp_path / 'out'}", check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    # The synthetic config has 1 layer (and another vocabulary) against the checkpoint's 2.
    assert last.startswith("error: ") and "holds encoder layer 1" in last
    assert f"--bert_config_file={small_data['bert_config_file']}" in last
    assert "Traceback" not in result.stderr


def test_help_is_for_users_and_states_the_exit_statuses():
    result = run_trainer("--help", check=False)  # absl's --help exits with status 1
    assert "docstring" not in result.stdout and "For maintainers" not in result.stdout
    assert "4 the step\nbudget (--num_train_steps) ran out before the target" in result.stdout
    assert "130 interrupted (Ctrl-C)" in result.stdout
    assert "cuInit" not in result.stdout + result.stderr
