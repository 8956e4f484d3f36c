"""`python -m benchmark.check`: exit status, output formats, one-line errors."""
from __future__ import annotations

import csv
import io
import json
import os
import re
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
    status, out, err = run_main(capsys, "--submission", str(org), "--plot",
                                str(tmp_path / "acc.png"), "--format", "markdown")
    assert status == 0
    assert "olympic score:" in out and "RCP check: passed" in out
    assert "package checker: passed" in out and "| result_9.txt |" in out
    assert (tmp_path / "acc.png").stat().st_size > 0
    # markdown keeps stdout for the tables: the plot's line and the verdict go to stderr
    assert err.splitlines()[-2] == f"plot: 10 run(s) drawn in {tmp_path / 'acc.png'}"
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


def test_a_mistyped_path_is_a_usage_error_and_an_empty_folder_a_problem(capsys, tmp_path):
    status, out, err = run_main(capsys, VALID, str(tmp_path / "nope.txt"))
    assert (status, out, err) == (2, "", f"check: no such file or folder: {tmp_path}/nope.txt\n")
    status, out, _ = run_main(capsys, "--submission", str(tmp_path / "org"))
    assert status == 2
    status, out, _ = run_main(capsys, str(tmp_path))
    assert status == 1
    assert f"{tmp_path}:0: input/path:" in out


@pytest.mark.parametrize("name", ["empty-file.txt", "binary-garbage.txt"])
def test_a_log_without_records_is_one_error_line_and_the_verdict_counts_the_rest(capsys, name):
    path = str(gallery.LOGS / "broken" / name)
    status, out, _ = run_main(capsys, path)
    lines = out.splitlines()
    problems = [line for line in lines if line.startswith(path)]
    assert status == 1 and problems == [lines[0]]
    assert lines[0].startswith(f"{path}:0: log/empty: no ':::MLLOG ' lines in the file")
    assert not [line for line in lines if line.startswith("warnings:")]
    assert re.match(r"FAILED: (\d+) error\(s\), 0 warning\(s\); \d+ of them follow from the "
                    r"first error shown for their log \(--verbose lists them\)", lines[-1])
    status, out, _ = run_main(capsys, path, "--verbose")
    assert "official/run_start" in out and "follow from" not in out


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


def make_check(*variables: str) -> subprocess.CompletedProcess:
    """`make check VARIABLE=value ...`, stdout and stderr in the order they were written."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(["make", "-C", str(root), "--no-print-directory", "check",
                           f"PY={sys.executable}", *variables], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)


def test_a_plot_that_fails_leaves_no_file_and_says_so_before_the_verdict(capsys, tmp_path):
    empty = str(gallery.LOGS / "broken" / "empty-file.txt")
    status, out, _ = run_main(capsys, empty, "--plot", str(tmp_path / "acc.png"))
    lines = out.splitlines()
    assert status == 2 and lines[-2].startswith("check: nothing to plot")
    assert lines[-1].startswith("FAILED") and list(tmp_path.iterdir()) == []


def test_make_check_ends_with_the_verdict_then_only_makes_error_line(tmp_path):
    result = make_check(f"LOG={SKIPPED}", "CHECK_ARGS=--no-official")
    lines = result.stdout.splitlines()
    assert result.returncode == 2  # make's status for any failing recipe
    assert lines[-2].startswith("FAILED: 1 error(s)") and lines[-1].startswith("make: *** ")
    assert subprocess.run([sys.executable, "-m", "benchmark.check", SKIPPED, "--no-official"],
                          capture_output=True).returncode == 1  # the checker's own status


def test_make_check_passes_log_and_submission_paths_with_spaces_whole(tmp_path):
    folder = tmp_path / "my logs" / "it's here"
    folder.mkdir(parents=True)
    log = folder / "run 1.txt"
    log.write_bytes(Path(VALID).read_bytes())
    result = make_check(f"LOG={log}", "CHECK_ARGS=--no-official")
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith("PASSED: 0 error(s)")
    result = make_check(f"SUBMISSION={folder}", "CHECK_ARGS=--no-official")
    assert f"{folder}/results:0: submission/layout" in result.stdout  # one path, not two


def test_make_check_with_a_mistyped_log_is_one_usage_line(tmp_path):
    result = make_check(f"LOG={tmp_path}/nope.txt")
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == f"check: no such file or folder: {tmp_path}/nope.txt"
    assert len(result.stdout.splitlines()) == 2  # and make's own Error line


def test_make_check_with_json_format_prints_only_json(tmp_path):
    """make echoes no command line, so `make check CHECK_ARGS="--format json"` is one document."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(["make", "-C", str(root), "--no-print-directory", "check",
                             f"PY={sys.executable}", f"LOG={VALID}",
                             "CHECK_ARGS=--format json --ruleset 1.0.0"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "pass"
