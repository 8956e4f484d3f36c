"""A log is untrusted input: no value in it may make the official engine load a YAML file of
the submitter's choosing and run its code (issue: a division `../../x` ran `x_common.yaml`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlperf_logging.compliance_checker import mlp_compliance

from benchmark.adapters import mlperf_logging
from benchmark.log_check import check_log
from tests.benchmark import gallery
from tests.benchmark.helpers import build_submission

UP = "../" * 24  # more than the depth of any install folder: the path resolves from /


def _evil_yaml(folder: Path, marker: Path) -> Path:
    """A ruleset file whose BEGIN block writes `marker`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "x_common.yaml"
    path.write_text("- BEGIN:\n    CODE: >\n        open(%r, 'w').write('ran')\n" % str(marker))
    return path


def _crafted(text: str, key: str, value: str) -> str:
    return "\n".join(gallery.set_value(key, value)(text.splitlines())) + "\n"


@pytest.mark.parametrize("key", ["submission_division", "submission_benchmark"])
def test_a_path_in_a_log_value_runs_nothing_and_is_one_error(tmp_path, key):
    marker = tmp_path / "marker"
    _evil_yaml(tmp_path / "evil", marker)
    log = tmp_path / "crafted.txt"
    value = f"{UP}{tmp_path.relative_to('/')}/evil/x"
    log.write_text(_crafted(gallery.base_text(gallery.CLOSED), key, value))
    report = check_log(str(log))
    assert not marker.exists()
    problem, = [p for p in report.problems if p.rule == f"official/{key}"]
    assert problem.severity == "error" and "unknown" in problem.message
    assert "the official checker was not run" in problem.message


def test_the_engine_only_loads_yaml_shipped_with_mlperf_logging(tmp_path, monkeypatch):
    """Second guard, below the first: even handed a path, the engine refuses the file. Without
    the guard the same call runs the file's code (so the test can fail)."""
    marker = tmp_path / "marker"
    evil = _evil_yaml(tmp_path / "evil", marker)
    checker = mlp_compliance.make_checker("training", "1.0.0", False, False)
    monkeypatch.setattr(mlp_compliance, "yaml", mlperf_logging.PackageYaml(__import__("yaml")))
    with pytest.raises(PermissionError):
        checker.configured_checks([], str(evil))
    assert not marker.exists()
    monkeypatch.setattr(mlp_compliance, "yaml", __import__("yaml"))
    checker.configured_checks([], str(evil))
    assert marker.read_text() == "ran"


def test_make_check_on_a_crafted_submission_tree_runs_nothing(tmp_path):
    org = build_submission(tmp_path)
    marker = tmp_path / "marker"
    _evil_yaml(org / "evil", marker)  # the tree carries both the YAML and the log
    log = org / "results" / "1xSyntheticA100x8" / "bert" / "result_4.txt"
    value = f"{UP}{org.relative_to('/')}/evil/x"
    log.write_text(_crafted(log.read_text(), "submission_division", value))
    result = subprocess.run([sys.executable, "-m", "benchmark.check", "--submission", str(org)],
                            capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.returncode == 1 and not marker.exists()
    assert f"{log}:" in result.stdout and "unknown division" in result.stdout
    assert "package checker not run" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
