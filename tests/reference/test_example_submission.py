"""The committed example submission (ten real runs of our trainer) passes `make check`."""
from __future__ import annotations

import json

from benchmark.official import SYSTEM_FIELDS
from reference.example_submission import system_description
from tests.conftest import REPO, run_module

EXAMPLE = REPO / "submissions" / "MLPerfHarness"


def test_example_submission_passes_the_checker():
    result = run_module("benchmark.check", "--submission", str(EXAMPLE), "--format", "json",
                        check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "pass" and verdict["errors"] == 0
    # What it warns about is exactly what the open-division demo changes.
    assert {p["rule"] for p in verdict["problems"]} <= {"bert/eval-samples", "bert/eval-cadence"}


def test_example_submission_has_ten_real_runs():
    results = sorted((EXAMPLE / "results").glob("*/bert/result_*.txt"))
    assert [p.name for p in results] == [f"result_{i}.txt" for i in range(10)]
    for path in results:
        text = path.read_text()
        assert '"key": "run_stop"' in text and '"status": "success"' in text
        assert '"key": "noncompliant"' in text  # the demo says it is an open-division run


def test_system_description_has_every_required_field():
    description = system_description("Org", "open", "1xCPU")
    assert set(SYSTEM_FIELDS) <= set(description)
    assert description["submitter"] == "Org" and description["division"] == "open"


def test_help_is_for_users_and_free_of_tensorflow_start_up_lines():
    result = run_module("reference.example_submission", "--help")
    assert result.stderr == "" and "cuInit" not in result.stdout
    assert result.stdout.startswith("usage: ")
