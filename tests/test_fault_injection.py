"""Fault injection across the pipeline (slow): `python -m cleanup_scripts.preprocess` and then
`python -m reference.run_pretraining` on its TFRecords are each killed with SIGKILL at random
points several times and run again to completion; the dataset (manifest.tsv) and the training
outcome (final checkpoint, eval_results.txt, the evals of the MLPerf log) equal those of
uninterrupted runs. Kill times come from a fixed random.Random seed and are printed.
"""
from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_module
from tests.reference.test_crash_resume import (assert_same_outcome, kill_at_random_points,
                                               log_sections, run_to_the_budget, start,
                                               trainer_command, trainer_env)

# The make-preprocess output trains a tiny model with the real vocabulary, dropout on.
BERT_CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
               "intermediate_size": 64, "max_position_embeddings": 512,
               "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
               "vocab_size": 30522}
EVAL_FREQUENCY = 160  # samples: evals at micro-steps 20 and 40
TRAIN_FLAGS = {"do_train": "true", "do_eval": "true", "train_batch_size": 8,
               "eval_batch_size": 50, "max_eval_steps": 2, "learning_rate": 0.01,
               "num_train_steps": 40, "num_warmup_steps": 0, "iterations_per_loop": 2,
               "save_checkpoints_steps": 4, "keep_checkpoint_max": 3,
               "eval_frequency_samples": EVAL_FREQUENCY, "noncompliant_eval_frequency": "true",
               "target_mlm_accuracy": 0.999, "seed": 3}


def manifest(output_dir: Path) -> dict[str, str]:
    """manifest.tsv as {path: md5}."""
    rows = (output_dir / "manifest.tsv").read_text().splitlines()[1:]
    return {path: md5 for path, _, md5 in (row.split("\t") for row in rows)}


def kill_preprocess(output_dir: Path, rng: random.Random, kills: int) -> None:
    """Start preprocess into `output_dir` `kills` times, each SIGKILLed (with its workers) at a
    random time in a window that shrinks as the work left does: the first run takes ~8 s,
    attempt i is killed within 4 / (i + 1) s."""
    command = [sys.executable, "-m", "cleanup_scripts.preprocess", f"--output_dir={output_dir}",
               "--nworker=2"]
    for attempt in range(kills):
        [process] = start([command], [dict(os.environ, PYTHONPATH=str(REPO))])
        delay = rng.uniform(0.3, 4.0 / (attempt + 1))
        time.sleep(delay)
        alive = process.poll() is None
        if alive:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        print(f"preprocess kill {attempt + 1}: at {delay:.2f} s "
              f"({'killed' if alive else 'had exited'})")


def train_flags(dataset: Path, config: Path, output_dir: Path) -> dict:
    return {"bert_config_file": config, "input_file": dataset / "tfrecords" / "part-*",
            "eval_file": dataset / "tfrecords" / "eval_10k", "output_dir": output_dir,
            **TRAIN_FLAGS}


@pytest.mark.slow
def test_preprocess_then_training_killed_at_random_points_end_as_uninterrupted(tmp_path):
    rng = random.Random(20261122)
    clean = tmp_path / "clean"
    run_module("cleanup_scripts.preprocess", f"--output_dir={clean}", "--nworker=2")
    dataset = tmp_path / "dataset"
    kill_preprocess(dataset, rng, kills=3)
    run_module("cleanup_scripts.preprocess", f"--output_dir={dataset}", "--nworker=2")
    assert manifest(dataset) == manifest(clean)

    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(BERT_CONFIG))
    baseline = tmp_path / "baseline"
    run_to_the_budget(trainer_command(train_flags(clean, config, baseline)))
    out = tmp_path / "out"
    command = trainer_command(train_flags(dataset, config, out))
    kill_at_random_points(lambda: start([command], [trainer_env()]), out, rng, kills=3,
                          anytime=(5.0, 40.0))
    run_to_the_budget(command)
    assert_same_outcome(out, baseline, EVAL_FREQUENCY)
    assert len(log_sections(out / "mlperf.log")) >= 2
