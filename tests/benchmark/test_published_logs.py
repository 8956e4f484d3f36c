"""The checker on results MLCommons accepted and published (tests/fixtures/published/, see its
README): each submitter's log style passes where the round's official checker passes it,
runs named result_1..10 or result_<id>_<n> are all read, and the olympic score printed is the
published one."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark import check
from benchmark.log_check import check_log
from benchmark.submission import check_result_folder

PUBLISHED = Path(__file__).resolve().parents[1] / "fixtures" / "published"
LOGS = sorted(PUBLISHED.glob("v*/*/results/*/bert/result_*.txt"))
GOOGLE = PUBLISHED / "v1.0" / "Google"
INSPUR_BERT = PUBLISHED / "v1.0" / "Inspur" / "results" / "nf5488a5_pytorch" / "bert"
# The one published Inspur run that did not reach the target (accepted: olympic scoring).
UNCONVERGED = {"v1.0/Inspur/results/nf5488a5_pytorch/bert/result_1.txt",
               "v4.0/NVIDIA/results/eos_n8_ngc23.04_pytorch/bert/result_4.txt"}
# Accepted results whose evals are not at the rule's frequency (training_rules.adoc, Quality
# measure: "at the same frequency"): the rule text decides, they fail bert/eval-cadence only.
# (log, the interval it keeps, the batch sizes whose interval that is)
BREAKING_CADENCE = {
    "v2.1/Dell/results/8xR750xax4A100-PCIE-80GB/bert/result_0.txt": ("175,104", "2,172-4,343"),
    "v2.1/HPE/results/HPE-ProLiant-XL675d-Gen10-Plus_A100-SXM-80GB_16N_pytorch/bert/result_1.txt":
        ("172,032", "2,172-4,343"),
    "v4.1/Clemson/results/6x8xH100-SXM5-80GB/bert/result_0.txt": ("200,", "4,344-6,515"),
}
V40_NVIDIA = PUBLISHED / "v4.0/NVIDIA/results/eos_n8_ngc23.04_pytorch/bert"


def _name(path: Path) -> str:
    return str(path.relative_to(PUBLISHED))


def _ruleset(path: Path) -> str:
    return path.relative_to(PUBLISHED).parts[0][1:] + ".0"  # v2.1 -> 2.1.0


@pytest.mark.parametrize("path", LOGS, ids=_name)
def test_published_log_passes_exactly_when_the_rounds_checker_does(path):
    report = check_log(str(path), _ruleset(path))
    assert report.official.passed == (_name(path) not in UNCONVERGED)
    if _name(path) in BREAKING_CADENCE:
        errors = [p for p in report.problems if p.severity == "error"]
        assert {p.rule for p in errors} == {"bert/eval-cadence"}
        interval, batches = BREAKING_CADENCE[_name(path)]
        assert f"the evals come every {interval}" in errors[0].message
        assert f"the interval the rule gives global_batch_size {batches}" in errors[0].message
        return
    assert report.passed == report.official.passed, [p.format() for p in report.problems]
    assert all(p.source for p in report.problems if p.severity == "error"
               and p.rule.startswith("bert/"))


def test_the_v11_weights_initialization_quirk_is_followed_and_said():
    path = PUBLISHED / "v1.1/NVIDIA/results/dgxa100_n8_ngc21.09_pytorch/bert/result_0.txt"
    report = check_log(str(path), "1.1.0")
    assert report.official.installed_passed is False and report.passed
    quirk = [p for p in report.problems if p.rule == "official/weights_initialization"]
    assert quirk and all(p.severity == "warning" and "v1.1 round" in p.message for p in quirk)
    assert not check_log(str(path), "2.0.0").passed  # other rounds keep the installed verdict


@pytest.mark.parametrize("relative, samples", [
    # epoch_num 1 on every eval: the samples come from train_samples after the run.
    ("v1.0/NVIDIA/results/dgxa100_n8_ngc21.05_pytorch/bert/result_0.txt", 3_151_872),
    # train_samples written as a one-element list.
    ("v1.1/Graphcore/results/ipu-pod128-POPART-closed/bert/result_0.txt", 3_800_000),
    # a configured train_samples before run_start is not the samples trained.
    ("v1.1/Intel-HabanaLabs/results/HLS-1H-N16/bert/result_0.txt", 2_626_560),
])
def test_samples_to_converge_are_read_from_each_style(relative, samples):
    view = check_log(str(PUBLISHED / relative), _ruleset(PUBLISHED / relative)).view
    assert view.samples_to_converge == samples


def test_nvidia_v20_late_first_eval_is_a_warning_naming_the_lateness():
    path = PUBLISHED / "v2.0/NVIDIA/results/dgxa100_n8_ngc22.04_pytorch/bert/result_1.txt"
    cadence = [p for p in check_log(str(path), "2.0.0").problems if p.rule == "bert/eval-cadence"]
    assert cadence and all(p.severity == "warning" for p in cadence)
    assert ("eval at 199,680 samples is 24,576 samples (8.0 steps) late for its due point "
            "175,000 (175,104 at a step boundary)") in cadence[0].message


def test_google_tree_checks_like_make_check_and_prints_the_published_score(capsys):
    status = check.main(["--submission", str(GOOGLE)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "olympic score: 4.06 minutes" in out
    assert "RCP check: passed" in out and "package checker: passed" in out


def test_runs_named_result_1_to_10_are_all_scored_with_one_unconverged():
    folder = check_result_folder(str(INSPUR_BERT), "1.0.0")
    names = [Path(log.path).name for log in folder.logs]
    assert names == [f"result_{n}.txt" for n in range(1, 11)]
    assert not [p for p in folder.all_problems() if p.severity == "error"]
    notes = [p for p in folder.all_problems() if "olympic" in p.message]
    assert notes and {Path(p.path).name for p in notes} == {"result_1.txt"}


def test_runs_named_result_id_n_are_read_and_scored_the_same(tmp_path, capsys):
    bert = tmp_path / "bert"
    bert.mkdir()
    for log in (GOOGLE / "results" / "tpu-v4-128-TF" / "bert").glob("result_*.txt"):
        n = int(log.stem.split("_")[1]) + 1
        shutil.copy(log, bert / f"result_220520100725096152634_{n}.txt")
    status = check.main([str(bert)])
    out = capsys.readouterr().out
    assert status == 0 and "10 run(s)" in out and "olympic score: 4.06 minutes" in out


def test_submitter_trees_as_published_pass_make_check_in_one_call():
    trees = [str(GOOGLE), str(INSPUR_BERT.parents[2])]
    result = subprocess.run([sys.executable, "-m", "benchmark.check", "--ruleset", "1.0.0",
                             *trees], capture_output=True, text=True,
                            cwd=Path(__file__).parents[2])
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stdout[-2000:]
    assert result.stdout.count("package checker: passed") == 2


def test_jitter_and_drift_of_accepted_packed_runs_are_not_errors():
    for relative in ("v3.0/Supermicro/results/AS-8125GS-TNHR/bert/result_1.txt",
                     "v2.0/Google/results/cloud-tpu-v4-8192-TF/bert/result_0.txt"):
        report = check_log(str(PUBLISHED / relative), _ruleset(PUBLISHED / relative))
        assert not [p for p in report.problems if p.rule == "bert/eval-cadence"
                    and p.severity == "error"], relative


def test_more_eval_samples_than_the_reference_is_as_thorough():
    path = PUBLISHED / "v5.0/tinycorp/results/tinybox_red/bert/result_0.txt"
    found = [p for p in check_log(str(path), "5.0.0").problems if p.rule == "bert/eval-samples"]
    assert [(p.severity, p.message) for p in found] == [
        ("warning", "eval_samples is 10,080; BERT's eval set holds 10,000 samples")]


def test_without_ruleset_a_round_is_chosen_from_the_logs_or_the_path_and_named(capsys, tmp_path):
    """The issue's case: v4.0 NVIDIA under the 1.0.0 default failed its RCP check silently."""
    assert check.main([str(V40_NVIDIA)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(
        "(ruleset 5.0.0, assumed: the logs name opt_lamb_epsilon, a key of rulesets "
        "3.0.0-5.0.0; give --ruleset for another round)")
    assert check.main([str(V40_NVIDIA), "--ruleset", "1.0.0"]) == 1
    out = capsys.readouterr().out
    rcp = [line for line in out.splitlines() if "rcp/convergence" in line]
    assert rcp and "samples to converge 2,877,120" in rcp[0] and "bound " in rcp[0]
    copy = tmp_path / "training_results_v4.0" / "NVIDIA"
    shutil.copytree(PUBLISHED / "v4.0" / "NVIDIA", copy)
    assert check.main(["--submission", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "(ruleset 4.0.0, from the path (training_results_v4.0))" in out
    assert "package checker: passed" in out
    # its system description says status "onprem", which only the v4.0 round's checker took
    assert "status 'onprem': the 4.0.0 round's system-description checker accepted it" in out
