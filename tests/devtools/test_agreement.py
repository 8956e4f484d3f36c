"""devtools.agreement and devtools.round_checker on the published fixtures: a round's own
checker runs from a git tag in a separate process, verdicts are compared log by log, and
accepted results that break a rule sentence are listed, not counted as disagreements.

The "round's checker" here is the installed mlperf_logging committed under the tags the
rulesets name (no network in tests); its verdicts are the installed checker's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import mlperf_logging
from benchmark.rulesets import RULESETS
from devtools import agreement
from devtools.round_checker import RoundCheckerError, package_source, round_verdicts

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


# --------------------------------------------------------------------------------------------
# Hostile round checkers: small fake mlperf_logging trees, tagged as the 1.0.0 round's checker

PASSING_CHECKER = """
enqueued_configs = []

class _Checker:
    not_overwritable, overwritable = [], {}

def make_checker(ruleset, quiet, werror):
    return _Checker()

def main(path, config, checker):
{body}
    return (True,)
"""


def _fake_logging_repo(root: Path, body: str = "    pass", top: str = "",
                       links: dict[str, str] | None = None) -> Path:
    """A git repository whose tag 1.0.0 holds a fake mlperf_logging: `top` runs at import of
    its compliance checker, `body` in each check (which then passes); `links`: {path in the
    package: symlink target}."""
    package = root / "mlperf_logging" / "compliance_checker"
    package.mkdir(parents=True)
    (root / "mlperf_logging" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "mlp_compliance.py").write_text(top + PASSING_CHECKER.replace("{body}", body))
    for name, target in (links or {}).items():
        (root / "mlperf_logging" / name).symlink_to(target)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fake"], check=True)
    subprocess.run([*git, "tag", RULESETS["1.0.0"].checker_tag], check=True)
    return root


LOGS = [str(GALLERY / "valid" / "closed_bs256.txt"), str(GALLERY / "valid" / "block-gap.txt")]


def test_a_round_checker_printing_to_stdout_does_not_spoil_its_verdicts(tmp_path):
    repo = _fake_logging_repo(tmp_path / "repo", top="print('{\"path\": 1')\n",
                              body="    import os\n    print('[1, 2]')\n"
                                   "    os.write(1, b'not a verdict\\n')")
    verdicts = round_verdicts(LOGS, "1.0.0", repo, tmp_path / "cache")
    assert {path: v.passed for path, v in verdicts.items()} == {path: True for path in LOGS}


@pytest.mark.parametrize("hijack, shown", [
    ("json.dumps = lambda *a, **k: 'garbage'", "printed 'garbage', not its verdict"),
    ("json.dumps = lambda *a, **k: '{\"path\": \"elsewhere\", \"passed\": true, "
     "\"messages\": []}'", "not its verdict"),
    ("json.dumps = lambda *a, **k: '{\"path\": ' + json.JSONEncoder().encode(a[0]['path'])"
     " + ', \"passed\": \"yes\", \"messages\": 5}'", "not its verdict"),
    ("json.dumps = lambda *a, **k: '\"' + 'x' * 3_000_000 + '\"'", "not its verdict")])
def test_output_of_a_round_checker_that_is_not_a_verdict_is_one_line_naming_round_and_log(
        tmp_path, hijack, shown):
    repo = _fake_logging_repo(tmp_path / "repo", top=f"import json\n{hijack}\n")
    with pytest.raises(RoundCheckerError) as caught:
        round_verdicts(LOGS, "1.0.0", repo, tmp_path / "cache")
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600 and "Traceback" not in message
    # the hijack takes effect at the first import, after the first verdict's dumps was looked up
    assert "the 1.0.0 round's checker" in message and f"on {LOGS[1]} (log 2 of 2)" in message
    assert shown in message


@pytest.mark.timeout(60)
def test_a_round_checker_writing_much_to_stderr_is_drained_not_deadlocked(tmp_path):
    """64 MB to stderr per log filled the pipe nobody read: a hang until the 300 s watchdog."""
    repo = _fake_logging_repo(tmp_path / "repo",
                              body="    import os\n    os.write(2, b'x' * (64 << 20))")
    start = time.monotonic()
    verdicts = round_verdicts(LOGS, "1.0.0", repo, tmp_path / "cache")
    assert all(v.passed for v in verdicts.values()) and time.monotonic() - start < 45


def test_a_round_checker_that_dies_is_one_line_with_the_end_of_its_stderr(tmp_path):
    repo = _fake_logging_repo(tmp_path / "repo", body="    import os\n"
                              "    os.write(2, b'noise\\n' * 200_000 + b'the cause\\n')\n"
                              "    os._exit(3)")
    with pytest.raises(RoundCheckerError) as caught:
        round_verdicts(LOGS, "1.0.0", repo, tmp_path / "cache")
    message = str(caught.value)
    assert message.endswith("stopped: the cause") and "\n" not in message
    assert f"on {LOGS[0]} (log 1 of 2)" in message


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../../../etc/passwd"])
def test_a_tag_holding_a_link_out_of_its_tree_is_refused_unpacked(tmp_path, target):
    repo = _fake_logging_repo(tmp_path / "repo", links={"leak.txt": target})
    cache = tmp_path / "cache"
    with pytest.raises(RoundCheckerError, match=r"tag '1\.0\.0' holds what cannot be unpacked "
                                                r"safely .*; not used$"):
        package_source(repo, "1.0.0", cache)
    assert list(cache.iterdir()) == []  # no staging folder, no partial copy


def test_a_cached_checker_holding_a_link_out_of_its_tree_is_not_run(tmp_path):
    repo = _fake_logging_repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    package_source(repo, "1.0.0", cache)
    (cache / "1.0.0" / "mlperf_logging" / "compliance_checker" / "rules").symlink_to("/etc")
    with pytest.raises(RoundCheckerError, match="holds a link out of its tree .*rules -> /etc"):
        round_verdicts(LOGS, "1.0.0", repo, cache)


def _read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write into (root writes through file modes: /sys)."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize("kind", ["file", "read-only", "under a file"])
def test_a_cache_dir_that_cannot_hold_the_checkers_is_one_line(tmp_path, capsys, kind):
    (tmp_path / "a-file").write_text("x")
    cache = {"file": tmp_path / "a-file", "read-only": _read_only_folder(tmp_path),
             "under a file": tmp_path / "a-file" / "cache"}[kind]
    repo = _fake_logging_repo(tmp_path / "repo")
    status = agreement.main(["--logging_repo", str(repo), "--cache_dir", str(cache),
                             f"v1.0={PUBLISHED / 'v1.0'}"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"error: --cache_dir {cache}: "), err
