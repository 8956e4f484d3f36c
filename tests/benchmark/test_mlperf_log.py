"""The log writer produces what the official checker and our rules accept."""
from __future__ import annotations

import inspect
import io
import json

import pytest

from benchmark.log_check import check_log
from benchmark.mlperf_log import BertLogger, Hyperparameters
from benchmark import log_keys
from tests.benchmark.helpers import official_verdict
from tests.benchmark.synthetic import HYPERPARAMETERS_256, RunSpec, write_run


def test_a_written_run_passes_both_checkers(tmp_path):
    path = tmp_path / "result_0.txt"
    write_run(path, RunSpec(seed=3, converge_at=4))
    assert official_verdict(path)
    report = check_log(str(path))
    assert report.passed and report.problems == []


def test_an_aborted_run_is_logged_as_aborted(tmp_path):
    path = tmp_path / "result_0.txt"
    write_run(path, RunSpec(seed=3, converge_at=None, max_evals=3))
    report = check_log(str(path))
    assert report.view.status == "aborted"
    assert {p.rule for p in report.problems} >= {"bert/target-reached",
                                                 "official/eval_accuracy"}


def test_records_carry_the_callers_file_and_line():
    stream = io.StringIO()
    log = BertLogger(stream=stream, clock_ms=lambda: 5)
    log.seed(42)
    caller_line = inspect.currentframe().f_lineno - 1
    log.close()
    record = json.loads(stream.getvalue().split(":::MLLOG ", 1)[1])
    assert record["metadata"]["file"].endswith("test_mlperf_log.py")
    assert record["metadata"]["lineno"] == caller_line
    assert record["time_ms"] == 5 and record["key"] == "seed" and record["value"] == 42


def test_hyperparameters_log_every_required_key_once():
    stream = io.StringIO()
    with BertLogger(stream=stream, clock_ms=lambda: 0) as log:
        log.hyperparameters(HYPERPARAMETERS_256)
    keys = [json.loads(line.split(" ", 1)[1])["key"] for line in stream.getvalue().splitlines()]
    assert keys == [*log_keys.HYPERPARAMETER_KEYS, "eval_samples"]


def test_hyperparameters_are_plain_data():
    hp = Hyperparameters(global_batch_size=24, opt_base_learning_rate=1e-4, opt_epsilon=1e-6,
                         opt_learning_rate_training_steps=107538,
                         opt_learning_rate_warmup_steps=1562, num_warmup_steps=1562,
                         start_warmup_step=0, opt_lamb_beta_1=0.9, opt_lamb_beta_2=0.999,
                         opt_lamb_weight_decay_rate=0.01)
    assert dict(hp.items())["gradient_accumulation_steps"] == 1


def test_run_stop_rejects_unknown_status():
    with BertLogger(stream=io.StringIO()) as log, pytest.raises(ValueError):
        log.run_stop("done")


def test_records_name_the_calling_file_relative_to_the_repository():
    stream = io.StringIO()
    BertLogger(stream=stream).cache_clear()
    record = json.loads(stream.getvalue().split(":::MLLOG ", 1)[1])
    assert record["metadata"]["file"] == "tests/benchmark/test_mlperf_log.py"
