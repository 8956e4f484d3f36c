"""benchmark.agreement and benchmark.round_checker on the published fixtures: a round's own
checker runs from a git tag in a separate process, verdicts are compared log by log, and
accepted results that break a rule sentence are listed, not counted as disagreements.

The "round's checker" here is the installed mlperf_logging committed under the tags the
rulesets name (no network in tests); its verdicts are the installed checker's.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import mlperf_logging
from benchmark import agreement
from benchmark.round_checker import RoundCheckerError, package_source, round_verdicts
from benchmark.rulesets import RULESETS

PUBLISHED = Path(__file__).resolve().parents[1] / "fixtures" / "published"
GALLERY = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


@pytest.fixture(scope="module")
def logging_repo(tmp_path_factory) -> Path:
    """A git repository holding the installed mlperf_logging, tagged as each round's checker."""
    repo = tmp_path_factory.mktemp("logging")
    shutil.copytree(Path(mlperf_logging.__file__).parent, repo / "mlperf_logging",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "installed"], check=True)
    for facts in RULESETS.values():
        if len(facts.checker_tag) != 40:  # a commit id cannot be recreated; tags can
            subprocess.run([*git, "tag", facts.checker_tag], check=True)
    return repo


def test_round_verdicts_come_from_the_tags_package_in_its_own_process(logging_repo, tmp_path):
    logs = [GALLERY / "valid" / "closed_bs256.txt", GALLERY / "broken" / "missing-eval_samples.txt"]
    verdicts = round_verdicts([str(p) for p in logs], "1.0.0", logging_repo, tmp_path)
    assert [verdicts[str(p)].passed for p in logs] == [True, False]
    assert any("eval_samples" in m for m in verdicts[str(logs[1])].messages)
    assert (tmp_path / "1.0.0" / "mlperf_logging" / "__init__.py").is_file()


def test_a_missing_tag_is_one_line(logging_repo, tmp_path):
    with pytest.raises(RoundCheckerError, match="no tag 'no-such-tag'"):
        package_source(logging_repo, "no-such-tag", tmp_path)


def test_agreement_counts_breaches_apart_from_disagreements(logging_repo, tmp_path, capsys):
    status = agreement.main(["--logging_repo", str(logging_repo), "--cache_dir", str(tmp_path),
                             f"v4.0={PUBLISHED / 'v4.0'}", f"v4.1={PUBLISHED / 'v4.1'}"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| v4.0 | 4.0.0 | mlperf_logging 4.0.0-rc3-rcp-prunning | 10 |" in out
    assert "| v4.1 | 4.1.0 | mlperf_logging 4.1.0-rc4 | 1 | 1 | 1 | 0 | 0 | 0 | 1 |" in out
    assert "accepted, breaking bert/eval-cadence: " in out and "6x8xH100-SXM5-80GB" in out
    assert out.rstrip().endswith("AGREE: 11 logs, 0 disagreement(s)")


def test_agreement_refuses_a_round_without_bert(capsys):
    with pytest.raises(SystemExit):
        agreement.main(["v5.1=/tmp"])
    assert "no BERT ruleset for round 'v5.1'" in capsys.readouterr().err
