"""A synthetic submission tree passes; each way of breaking it is reported."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from benchmark import summary
from benchmark.submission import OLYMPIC_NOTE, check_result_folder, check_submission
from devtools import agreement
from tests.benchmark.helpers import SYSTEM, build_submission


@pytest.fixture(scope="module")
def valid_tree(tmp_path_factory):
    return build_submission(tmp_path_factory.mktemp("submission"))


@pytest.fixture
def tree(valid_tree, tmp_path):
    """A private copy of the valid tree to break."""
    return shutil.copytree(valid_tree, tmp_path / valid_tree.name)


def errors(report):
    return [p for p in report.all_problems() if p.severity == "error"]


def test_valid_tree_passes_every_check(valid_tree):
    report = check_submission(str(valid_tree))
    assert errors(report) == []
    assert report.package.passed
    folder, = report.folders
    assert len(folder.logs) == 10 and all(folder.scored)
    assert folder.rcp.ran and folder.rcp.passed, folder.rcp.message
    assert not list(valid_tree.rglob("scaling.json"))  # the official tools wrote nothing here


def test_missing_result_file_is_reported(tree):
    (tree / "results" / SYSTEM / "bert" / "result_3.txt").unlink()
    report = check_submission(str(tree))
    found = {(p.path.rsplit("/", 1)[-1], p.rule, p.message.split(" ", 1)[0])
             for p in errors(report)}
    assert ("bert", "submission/result-files", "9") in found
    assert not report.package.passed  # the package checker counts files too


def test_corrupted_system_json_is_reported_with_its_line(tree):
    path = tree / "systems" / f"{SYSTEM}.json"
    path.write_text('{\n  "submitter": "ExampleOrg",\n  "division": \n}\n')
    report = check_submission(str(tree))
    problem, = [p for p in errors(report) if p.rule == "submission/system-json"]
    assert problem.path == str(path) and problem.line == 4
    assert not report.package.passed


def test_missing_system_json_and_fields_are_reported(tree):
    path = tree / "systems" / f"{SYSTEM}.json"
    desc = json.loads(path.read_text())
    del desc["cooling"]
    path.write_text(json.dumps(desc))
    rules = {p.rule for p in errors(check_submission(str(tree)))}
    assert "official/system-desc" in rules
    path.unlink()
    assert "submission/system-json" in {p.rule for p in errors(check_submission(str(tree)))}


def test_one_unconverged_run_is_accepted_and_unscored_two_are_errors(tree):
    bert = tree / "results" / SYSTEM / "bert"
    for n in (2, 5):
        log = bert / f"result_{n}.txt"
        log.write_text(log.read_text().replace('"status": "success"', '"status": "aborted"'))
        folder = check_result_folder(str(bert))
        failing = [i for i, ok in enumerate(folder.scored) if not ok]
        table = summary.runs_table(folder.logs, folder.scored)
        unscored = [i for i, ok in enumerate(table["scored"]) if not ok]
        if n == 2:
            assert failing == [] and unscored == [2] and errors(folder) == []
            assert any(p.severity == "warning" and "scored as not converged" in p.message
                       for p in folder.all_problems())
        else:
            assert unscored == [2, 5]
            assert {p.rule for p in errors(folder)} == {"submission/olympic",
                                                        "rcp/convergence"}


def test_one_failing_run_is_forgiven_as_a_warning_that_keeps_its_rule(tree):
    log = tree / "results" / SYSTEM / "bert" / "result_3.txt"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True)
                           if '"eval_samples"' not in line))
    folder = check_result_folder(str(tree / "results" / SYSTEM / "bert"))
    assert errors(folder) == [] and folder.scored.count(False) == 1
    forgiven = [p for p in folder.logs[3].problems if p.forgiven_by]
    assert forgiven and {p.forgiven_by for p in forgiven} == {OLYMPIC_NOTE}
    assert all(p.severity == "warning" and p.message.endswith(f"({OLYMPIC_NOTE})")
               for p in forgiven)
    # devtools.agreement counts the forgiven errors as the run's own.
    assert {p.rule for p in forgiven} <= agreement._error_rules(folder.logs[3])


def test_runs_must_agree_and_use_distinct_seeds(tree):
    bert = tree / "results" / SYSTEM / "bert"
    shutil.copy(bert / "result_0.txt", bert / "result_1.txt")
    rules = {p.rule for p in errors(check_result_folder(str(bert)))}
    assert "submission/seeds" in rules


def test_not_a_submission_is_one_problem(tmp_path):
    report = check_submission(str(tmp_path))
    assert [p.rule for p in report.problems] == ["submission/layout"]


def _rewrite(bert, edit) -> None:
    for log in bert.glob("result_*.txt"):
        log.write_text("\n".join(edit(line) for line in log.read_text().splitlines()) + "\n")


def test_failed_rcp_is_an_error_unless_the_submitter_bypasses_it(tree):
    """Runs converging far faster than the reference fail the RCP test in either reading of
    the samples; an rcp-bypass params file (the rules' audit route) makes it a warning."""
    bert = tree / "results" / SYSTEM / "bert"

    def halve(line: str) -> str:
        if '"train_samples"' in line or '"epoch_num"' in line:
            obj = json.loads(line.split(":::MLLOG ", 1)[1])
            for field in ("epoch_num", "first_epoch_num", "epoch_count"):
                if field in obj["metadata"]:
                    obj["metadata"][field] //= 4
            if obj["key"] == "train_samples":
                obj["value"] //= 4
            return ":::MLLOG " + json.dumps(obj)
        return line
    _rewrite(bert, halve)
    folder = check_result_folder(str(bert))
    rcp = [p for p in folder.problems if p.rule == "rcp/convergence"]
    assert [p.severity for p in rcp] == ["error"] and "bypass" in rcp[0].message
    (tree / "package_checker_params").write_text("rcp_bypass\n")
    rcp = [p for p in check_result_folder(str(bert)).problems if p.rule == "rcp/convergence"]
    assert [p.severity for p in rcp] == ["warning"] and "audit" in rcp[0].message


@pytest.mark.parametrize("ruleset, passes", [("1.0.0", True), ("2.1.0", False)])
def test_a_folder_logging_no_seed_passes_the_package_check_as_its_round_did(tree, ruleset,
                                                                           passes):
    bert = tree / "results" / SYSTEM / "bert"
    _rewrite(bert, lambda line: "" if '"key": "seed"' in line else line)
    report = check_submission(str(tree), ruleset)
    assert report.package.passed == passes, report.package.problems
    messages = " ".join(p.message for p in report.package.problems)
    assert ("seed checker passed such a folder" in messages) == passes
    assert ("logs no seed" in messages) == (not passes)


def test_a_checker_message_about_a_deep_path_keeps_its_verdict(valid_tree, tmp_path):
    # "Result file PATH logs no seed." cut at 200 characters from its end would lose "logs no
    # seed" for a submission in a deep folder (as under pytest-xdist's longer tmp paths).
    tree = shutil.copytree(valid_tree, tmp_path / ("deep-" * 30) / valid_tree.name)
    bert = tree / "results" / SYSTEM / "bert"
    _rewrite(bert, lambda line: "" if '"key": "seed"' in line else line)
    problem = next(p for p in check_submission(str(tree), "2.1.0").package.problems
                   if "Seed checker failed and found" in p.message)
    assert problem.message.startswith("Seed checker failed and found the following errors: "
                                      "Result file /")
    assert re.search(r"/bert/result_\d\.txt logs no seed\.$", problem.message), problem.message
    assert " ... " in problem.message
    assert len(problem.message) <= 200
