"""Every log in the gallery (tests/fixtures/logs/) gets the verdict and the rules its manifest
names, the official checker agrees with the manifest, and we never pass what it fails."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmark.log_check import check_log
from tests.benchmark import gallery
from tests.benchmark.helpers import official_verdict

MANIFEST = json.loads(gallery.MANIFEST.read_text())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_gallery_log_verdict_rules_and_official_agreement(name):
    expected = MANIFEST[name]
    path = gallery.LOGS / name
    report = check_log(str(path))
    rules = {p.rule for p in report.problems}
    errors = {p.rule for p in report.problems if p.severity == "error"}

    assert ("pass" if report.passed else "fail") == expected["verdict"], report.problems
    assert set(expected["rules"]) <= rules, (expected["rules"], report.problems)
    if expected["verdict"] == "fail":
        assert set(expected["rules"]) & errors
    assert not any(r.startswith("internal/") for r in rules)

    official = official_verdict(path)
    assert ("pass" if official else "fail") == expected["official"]
    assert report.official.passed == official          # our wrapper keeps its verdict
    if not official:                                   # what it rejects, we reject
        assert not report.passed
        assert any(r.startswith("official/") for r in errors)
    else:
        assert not any(r.startswith("official/") for r in errors)


def test_every_problem_is_one_line_with_file_and_line():
    for name in MANIFEST:
        for problem in check_log(str(gallery.LOGS / name)).problems:
            text = problem.format()
            assert "\n" not in text
            path, line, rule, message = text.split(":", 3)
            assert path.endswith(name) and line.isdigit() and rule.strip() and message.strip()


def test_cadence_and_stop_violations_are_flagged_where_official_passes():
    """The point of the BERT rules: mutations the official checker accepts. In the closed
    division they fail the log; in the open division an off-formula cadence is a warning."""
    watched = {"bert/eval-cadence", "bert/stop-at-target", "bert/run-stop-status"}
    for name, expected in MANIFEST.items():
        if expected["official"] == "pass" and watched & set(expected["rules"]):
            report = check_log(str(gallery.LOGS / name))
            assert watched & {p.rule for p in report.problems}, name
            assert report.passed == (expected["verdict"] == "pass"), name


def test_committed_gallery_is_what_the_generator_makes(tmp_path, monkeypatch):
    for name, spec in gallery.VALID_SPECS.items():
        fresh = tmp_path / name.replace("/", "_")
        gallery.write_run(fresh, spec)
        assert fresh.read_bytes() == (gallery.LOGS / name).read_bytes(), name
    for case in gallery.CASES:
        assert gallery.render_case(case).encode("latin-1") == gallery.case_path(case).read_bytes()
    assert json.loads(gallery.MANIFEST.read_text()) == gallery.manifest()


@pytest.mark.parametrize("name", ["valid/closed_bs256.txt", "broken/missing-run_stop.txt",
                                  "broken/wrong-type-eval_accuracy.txt"])
def test_in_process_official_verdict_matches_its_command_line(name, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
         "--ruleset", "1.0.0", "--log_output", str(tmp_path / "cc.log"),
         str(gallery.LOGS / name)], cwd=tmp_path, capture_output=True, text=True)
    assert (result.returncode == 0) == official_verdict(gallery.LOGS / name)
