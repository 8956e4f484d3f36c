"""`python -m reference.bench`: our side on a tiny config, and the argument errors.

The reference side needs a checkout of the reference (not part of this project), so only our
side runs here; the table is checked for positive numbers.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reference import bench

ROOT = Path(__file__).resolve().parents[2]
TINY = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
        "max_position_embeddings": 64, "num_attention_heads": 2, "num_hidden_layers": 1,
        "type_vocab_size": 2, "vocab_size": 100}


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(TINY))
    return path


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference.bench", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_our_side_reports_positive_numbers(tiny_config, tmp_path):
    output = tmp_path / "out" / "train.md"
    report = bench.main([f"--bert_config_file={tiny_config}", "--ours_only", "--batch_size=4",
                         "--seq_length=32", "--max_predictions=5", "--steps=2",
                         "--eval_examples=10", "--repeats=1", f"--output={output}"])
    assert output.read_text() == report
    assert "batch 4, sequence 32, 5 predictions" in report
    rows = [line for line in report.splitlines() if line.startswith("| ")][1:]
    assert [row.split("|")[1].strip() for row in rows] == [
        "training sequences/s", "eval of 10 records, s",
        "eval of 10,000 samples, s (extrapolated)"]
    for row in rows:
        cells = [cell.strip() for cell in row.split("|")[2:5]]
        assert cells[0] == "-" and cells[2] == "-"  # no reference side, no ratio
        assert float(cells[1]) > 0


def test_ratios_are_ours_over_reference(tiny_config):
    spec = {"bert_config_file": str(tiny_config), "batch_size": 8, "seq_length": 32,
            "max_predictions": 5, "steps": 10, "eval_examples": 100, "eval_batch_size": 10}
    ours = {"train_s": 1.0, "eval_s": 2.0, "tensorflow": "2.x"}
    reference = {"train_s": 2.0, "eval_s": 4.0, "tensorflow": "2.x"}
    report = bench.format_report(spec, ours, reference, "today")
    assert "| training sequences/s | 40.00 | 80.00 | 2.00 |" in report
    assert "| eval of 10,000 samples, s (extrapolated) | 400.0 | 200.0 | 0.50 |" in report


def test_median_of_repeats():
    runs = [{"train_s": t, "eval_s": e, "tensorflow": "2.x"}
            for t, e in [(3.0, 1.0), (1.0, 5.0), (2.0, 2.0)]]
    assert bench.median_result(runs) == {"train_s": 2.0, "eval_s": 2.0, "tensorflow": "2.x",
                                         "runs": 3}


def test_synthetic_batches_are_seeded_and_in_range():
    first = bench.synthetic_batches(2, 3, 16, 4, 50, seed=7)
    second = bench.synthetic_batches(2, 3, 16, 4, 50, seed=7)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] == b[key]).all()
    batch = first[0]
    assert batch["input_ids"].shape == (3, 16) and batch["masked_lm_ids"].shape == (3, 4)
    assert batch["input_ids"].max() < 50 and batch["masked_lm_ids"].max() < 50
    assert (batch["masked_lm_positions"] < batch["input_mask"].sum(axis=1)[:, None]).all()


@pytest.mark.parametrize("args, message", [
    ([], "--reference_dir is required"),
    (["--reference_dir=/nonexistent/bert"], "not the reference's BERT folder"),
])
def test_missing_reference_dir_is_a_one_line_error(args, message):
    result = _bench(*args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert result.stdout == ""


def test_bad_config_is_a_one_line_error(tmp_path):
    result = _bench("--ours_only", f"--bert_config_file={tmp_path / 'missing.json'}")
    assert result.returncode == 1
    assert re.fullmatch(r"error: --bert_config_file=\S+: cannot read a BERT config .*",
                        result.stderr.strip())
