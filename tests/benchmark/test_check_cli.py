"""`python -m benchmark.check`: exit status, output formats, one-line errors."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark import check
from tests.benchmark import gallery
from tests.benchmark.helpers import build_submission

VALID = str(gallery.LOGS / gallery.CLOSED)
SKIPPED = str(gallery.LOGS / "broken" / "cadence-skipped-eval.txt")


def run_main(capsys, *args):
    status = check.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_valid_log_passes_with_a_table(capsys):
    status, out, _ = run_main(capsys, VALID)
    assert status == 0
    assert "closed_bs256.txt" in out and "2,700,000" in out and out.rstrip().endswith(
        "PASSED: 0 error(s), 0 warning(s) (ruleset 1.0.0, assumed: no --ruleset given; give "
        "--ruleset for another round)")


def test_broken_log_fails_with_file_line_rule_message_and_source(capsys):
    status, out, _ = run_main(capsys, SKIPPED)
    assert status == 1
    first = out.splitlines()[0]
    assert first.startswith(f"{SKIPPED}:44: bert/eval-cadence: no eval at 600,000 samples: the "
                            "eval at 750,000 comes after 1 skipped due point(s)")
    assert first.endswith('[training_rules.adoc, Quality measure: "The quality measure must be '
                          'evaluated at the same frequency (in terms of number of training items '
                          'between test sets) ... as in the reference implementation. Where '
                          'applicable, the required evaluation point may be rounded up to the '
                          'nearest batch size."; BERT: "eval_interval_samples=FLOOR(0.05*(230.23*'
                          'GBS+3000000), 25000), skipping 0"]')


def test_json_format_is_one_document(capsys):
    status, out, _ = run_main(capsys, VALID, SKIPPED, "--format", "json")
    doc = json.loads(out)
    assert status == 1 and doc["verdict"] == "fail"
    assert {p["rule"] for p in doc["problems"]} == {"bert/eval-cadence"}
    assert all(p["source"].startswith("training_rules.adoc") for p in doc["problems"])
    assert [r["status"] for r in doc["groups"][0]["runs"]] == ["success", "success"]


def test_csv_goes_to_stdout_and_problems_to_stderr(capsys):
    status, out, err = run_main(capsys, VALID, SKIPPED, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out.strip())))
    assert [r["run"] for r in rows] == [VALID, SKIPPED]
    assert "bert/eval-cadence" in err and status == 1


def test_result_folder_and_submission_get_score_rcp_and_package_verdict(tmp_path, capsys):
    org = build_submission(tmp_path)
    status, out, _ = run_main(capsys, "--submission", str(org), "--plot",
                              str(tmp_path / "acc.png"), "--format", "markdown")
    assert status == 0
    assert "olympic score:" in out and "RCP check: passed" in out
    assert "package checker: passed" in out and "| result_9.txt |" in out
    assert (tmp_path / "acc.png").stat().st_size > 0
    status, out, _ = run_main(capsys, str(org / "results" / "1xSyntheticA100x8" / "bert"))
    assert status == 0 and "RCP check: passed" in out and "package checker" not in out


@pytest.mark.parametrize("args, fragment", [
    ([], "give a log"),
    (["--ruleset", "0.0.1", VALID], "no BERT ruleset '0.0.1'; choose from 1.0.0, 1.1.0"),
    (["--ruleset", "5.1.0", VALID], "ruleset 5.1.0 has no BERT: BERT left MLPerf Training "
                                    "after round 5.0"),
    (["--ruleset", "6.0.0", VALID], "ruleset 6.0.0 has no BERT"),
    (["--format", "yaml", VALID], "invalid choice"),
    (["--plot", "/no/such/dir/x.png", VALID], "no folder"),
    (["--plot", "/tmp", VALID], "is a folder; give a file name such as /tmp/accuracy.png"),
    (["--plot", "accuracy", VALID], "give a file name ending in .png, .pdf, .svg"),
])
def test_usage_errors_are_one_line_and_status_2(capsys, args, fragment):
    status, out, err = run_main(capsys, *args)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err


def test_missing_file_and_empty_folder_are_problems(capsys, tmp_path):
    status, out, _ = run_main(capsys, str(tmp_path / "nope.txt"), str(tmp_path))
    assert status == 1
    assert f"{tmp_path / 'nope.txt'}:0: log/read: cannot read: no such file" in out
    assert f"{tmp_path}:0: input/path:" in out


def test_plot_without_matplotlib_fails_with_one_line(capsys, monkeypatch):
    monkeypatch.setattr(check.summary, "plot_available", lambda: "--plot needs matplotlib, "
                        "which is not installed in this environment")
    status, out, err = run_main(capsys, VALID, "--plot", "x.png")
    assert status == 2 and err.strip() == ("check: --plot needs matplotlib, which is not "
                                           "installed in this environment")


def test_module_entry_point(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmark.check", VALID, "--no-official"],
                            capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(gallery.LOGS.parents[2])})
    assert result.returncode == 0 and "PASSED" in result.stdout and result.stderr == ""


def test_make_check_with_json_format_prints_only_json(tmp_path):
    """make echoes no command line, so `make check CHECK_ARGS="--format json"` is one document."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(["make", "-C", str(root), "--no-print-directory", "check",
                             f"PY={sys.executable}", f"LOG={VALID}",
                             "CHECK_ARGS=--format json --ruleset 1.0.0"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "pass"
