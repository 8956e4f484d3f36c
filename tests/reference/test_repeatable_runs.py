"""The same training command, run again on the same data and machine, gives the same bytes:
every checkpoint variable, eval_results.txt, eval_history.csv and the MLPerf log's evals.

The runs are the CPU smoke preset (the demo model: 2 layers of 128, the real 30,522-word
vocabulary, batch 16 of 512 tokens) on the TFRecords `make preprocess` writes from the
repository's Wikipedia slice, for 4 steps and one eval. With TensorFlow's ops side by side
(--nodeterministic, and every run before that flag), about one process in three to one in two
ended with other last bits (a variant fixed early in the process: more steps did not make it
likelier, more processes do), so three runs start together; smaller shapes (the tests' tiny
synthetic model, or batches of 16 records) gave the same bytes either way.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_module, with_machine_threads
from tests.reference.test_crash_resume import (checkpoint_values, evals, log_sections,
                                               trainer_command, trainer_env)

# 4 steps of 16 records, an eval after them (64 samples) over the preset's 100 records.
RUN_FLAGS = {"preset": "smoke", "stop_steps": 4, "eval_frequency_samples": 64}


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory) -> Path:
    """The TFRecords of `make preprocess` (the slice in the repository)."""
    dataset = tmp_path_factory.mktemp("slice") / "dataset"
    run_module("cleanup_scripts.preprocess", f"--output_dir={dataset}", "--nworker=2")
    return dataset / "tfrecords"


@pytest.mark.slow
def test_the_same_command_run_again_gives_the_same_checkpoint_and_evals(tfrecords, tmp_path):
    outs = [tmp_path / f"run-{index}" for index in range(3)]
    runs = [subprocess.Popen(trainer_command({**RUN_FLAGS, "data_dir": tfrecords,
                                              "output_dir": out}),
                             env=with_machine_threads(trainer_env()), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for out in outs]
    for run in runs:
        _, stderr = run.communicate(timeout=900)
        assert run.returncode == 0, stderr[-3000:]
    first = checkpoint_values(str(outs[0] / "model.ckpt-4"))
    assert len(first) > 100
    [section] = log_sections(outs[0] / "mlperf.log")
    assert [samples for samples, _ in evals(section)] == [64]
    for out in outs[1:]:
        other = checkpoint_values(str(out / "model.ckpt-4"))
        assert other.keys() == first.keys()
        differing = [name for name in first
                     if np.asarray(first[name]).tobytes() != np.asarray(other[name]).tobytes()]
        assert not differing, f"{out.name}: {len(differing)} of {len(first)} variables " \
                              f"differ from {outs[0].name}'s: {differing[:5]}"
        for name in ("eval_results.txt", "eval_history.csv"):
            assert (out / name).read_bytes() == (outs[0] / name).read_bytes(), name
        assert [evals(s) for s in log_sections(out / "mlperf.log")] == [evals(section)]
