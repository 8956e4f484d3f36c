"""Whole published rounds (slow; `make test-all` with MLPERF_RESULTS set): every BERT log of
local copies of mlcommons/training_results_vX.Y gets the official verdict of its round, and
the olympic scores equal the published ones.

    MLPERF_RESULTS="v1.0=/data/training_results_v1.0,v1.1=...,v2.0=..." make test-all
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmark.agreement import agree

ROUNDS = dict(item.split("=", 1) for item in os.environ.get("MLPERF_RESULTS", "").split(",")
              if "=" in item)
# Published olympic scores (minutes) of the MLPerf Training results tables.
PUBLISHED = {
    ("v1.0", "Google/results/tpu-v4-128-TF/bert"): 4.06,
    ("v1.0", "Google/results/tpu-v4-4096-TF/bert"): 0.32,
    ("v1.0", "Google/results/tpu-v4-6912-TF/bert"): 0.28,
    ("v1.0", "NVIDIA/results/dgxa100_ngc21.05_pytorch/bert"): 21.69,
    ("v1.1", "NVIDIA/results/dgxa100_n128_ngc21.09_pytorch/bert"): 0.558,
}
DECIMALS = {"v1.0": 2}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not ROUNDS, reason="set MLPERF_RESULTS to local results copies")]


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_every_published_log_gets_its_rounds_official_verdict(name):
    result = agree(name, Path(ROUNDS[name]))
    assert result.logs > 0
    assert result.false_errors == [] and result.false_passes == []
    for (round_name, folder), minutes in PUBLISHED.items():
        path = str(Path(ROUNDS[name]) / folder)
        if round_name == name and path in result.scores:
            assert round(result.scores[path], DECIMALS.get(name, 3)) == minutes, folder
