"""Which ruleset a log is checked under when no --ruleset is given (issue 32): the round of
its innermost training_results_vX.Y folder, else what its `:::MLLOG` records point to, decided
for each log (a result folder or tree: its first readable log), and the verdict line says so.
Published logs keep their rounds' verdicts (tests/benchmark/test_published_logs.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

from benchmark import check
from benchmark.rulesets import round_from_path
from benchmark.submission import check_result_folder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
V10_LOG = FIXTURES / "logs" / "valid" / "closed_bs256.txt"  # no opt_lamb_epsilon: 1.0.0
V40_LOG = FIXTURES / "published/v4.0/NVIDIA/results/eos_n8_ngc23.04_pytorch/bert/result_0.txt"
NOT_GIVEN = "assumed: no --ruleset given; give --ruleset for another round"


def _verdict_line(capsys) -> str:
    return capsys.readouterr().out.rstrip().splitlines()[-1]


def test_a_non_log_line_naming_opt_lamb_epsilon_does_not_change_the_round(tmp_path, capsys):
    """A raw-bytes search switched this v1.0 log to ruleset 5.0.0, where it fails."""
    log = tmp_path / "result_0.txt"
    log.write_text('note: "opt_lamb_epsilon" is not logged in 1.0.0\n' + V10_LOG.read_text()
                   + 'a stray "opt_lamb_epsilon": 1e-06\n')
    assert check.main([str(log)]) == 0
    assert _verdict_line(capsys).endswith(f"(ruleset 1.0.0, {NOT_GIVEN})")


def test_a_log_record_naming_opt_lamb_epsilon_still_points_to_the_last_round(capsys):
    assert check.main([str(V40_LOG)]) == 0
    assert "(ruleset 5.0.0, assumed: the logs name opt_lamb_epsilon" in _verdict_line(capsys)


def test_the_innermost_training_results_folder_names_the_round(tmp_path, capsys):
    inner = tmp_path / "training_results_v4.0" / "archive" / "training_results_v1.0-main"
    inner.mkdir(parents=True)
    shutil.copy(V10_LOG, inner / "result_0.txt")
    assert round_from_path(inner / "result_0.txt") == "1.0.0"
    assert check.main([str(inner / "result_0.txt")]) == 0
    assert _verdict_line(capsys).endswith("(ruleset 1.0.0, from the path (training_results_v1.0))")
    # a round without BERT innermost: the records decide, not an outer folder
    assert round_from_path(tmp_path / "training_results_v4.0" / "training_results_v5.1" / "x") \
        is None


def test_logs_of_different_rounds_in_one_call_are_each_checked_under_their_own(capsys):
    """One ruleset for both failed one of them (a 1.0.0 log lacks 5.0.0's opt_lamb_epsilon)."""
    assert check.main([str(V10_LOG), str(V40_LOG)]) == 0
    line = _verdict_line(capsys)
    assert line.startswith("PASSED") and line.endswith(
        "(ruleset per log, 1.0.0 for 1 log(s), 5.0.0 for 1 log(s), each from its path or "
        "records (a result folder or tree: its first log's); give --ruleset for one)")
    verdict = check.run_checks([str(V10_LOG), str(V40_LOG)], [], None, False)
    assert [log.ruleset for log in verdict.groups[0].reports] == ["1.0.0", "5.0.0"]


def test_runs_of_one_result_pointing_to_other_rounds_are_said_in_one_line(tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    shutil.copy(V10_LOG, folder / "result_0.txt")
    shutil.copy(V40_LOG, folder / "result_1.txt")
    result = check_result_folder(str(folder), None, official=False)
    assert (result.ruleset, [log.ruleset for log in result.logs]) == ("1.0.0", ["1.0.0"] * 2)
    said = [p for p in result.problems if p.rule == "submission/ruleset"]
    assert [p.message for p in said] == [
        "1 run(s) (result_1.txt) point to another ruleset by their records; all runs of a "
        "result are checked under 1.0.0, the one of the first; give --ruleset"]
