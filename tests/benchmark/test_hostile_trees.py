"""The checker reads other people's files (issue 24): whatever a log or a submission tree holds
(special files, sparse giants, links out of the tree, deep nesting, control characters in names
and values), a check ends in bounded time, memory and temporary disk, says what it refused in one
line naming the file, never prints raw control characters, and prints exactly one verdict."""
from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark import check, mllog_parse, official
from benchmark.log_check import check_log
from benchmark.submission import check_submission
from tests.benchmark import gallery
from tests.benchmark.helpers import SYSTEM, build_submission
from tests.conftest import read_peak_rss, reporting_peak_rss

ROOT = Path(__file__).resolve().parents[2]
VERDICT = re.compile(r"^(PASSED|FAILED): \d+ error\(s\), \d+ warning\(s\)")
GiB = 1 << 30
pytestmark = pytest.mark.timeout(120)


def _bert(org: Path) -> Path:
    return org / "results" / SYSTEM / "bert"


def _system_json(org: Path) -> Path:
    return org / "systems" / f"{SYSTEM}.json"


def _cli(args: list[str], tmp: Path, timeout: float = 60, env: dict | None = None,
         memory: int = 3 * GiB, file_size: int | None = None) -> tuple[int, str, str, dict]:
    """Run `python -m benchmark.check ARGS` with its own TMPDIR (tmp/scratch), at most
    `memory` bytes of address space and files of at most `file_size` bytes; returns (exit
    status, stdout, stderr, {"seconds", "rss" (peak bytes)}). A hang fails the test."""
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    full_env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT), **(env or {})}
    report = tmp / "check-peak-rss.txt"
    start = time.monotonic()
    proc = subprocess.Popen(reporting_peak_rss([sys.executable, "-m", "benchmark.check", *args],
                                               report),
                            cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=limits, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the check did not finish in {timeout} s")
    seconds = time.monotonic() - start
    status, peak = read_peak_rss(report)
    return status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), \
        {"seconds": seconds, "rss": peak}


def _one_verdict(out: str, err: str) -> str:
    lines = [line for line in (out + err).splitlines() if VERDICT.match(line)]
    assert len(lines) == 1, (out + err)[-3000:]
    return lines[0]


def _lines_about(text: str, fragment: str) -> list[str]:
    return [line for line in text.splitlines() if fragment in line]


# --------------------------------------------------------------------------------------------
# 1. Big logs: refused by size before reading; streamed; bounded lines per log and per check

def test_a_sparse_3_gb_log_is_refused_in_one_line_without_being_read(tmp_path):
    org = build_submission(tmp_path)
    with open(_bert(org) / "result_0.txt", "r+b") as f:
        f.truncate(3 * GiB)  # sparse: 3 GB apparent, nothing on disk
    status, out, err, used = _cli(["--submission", str(org)], tmp_path, file_size=300 << 20)
    refusal, = _lines_about(out, "result_0.txt:0:")
    assert "over the limit of 268,435,456 bytes (256.0 MiB)" in refusal
    assert "3,221,225,472 bytes" in refusal
    _one_verdict(out, err)
    assert used["seconds"] < 60 and used["rss"] < 2 * GiB
    assert list((tmp_path / "scratch").iterdir()) == []  # the scratch folders are gone


def test_a_log_with_more_mllog_lines_than_any_bert_log_is_refused(tmp_path):
    text = gallery.base_text(gallery.CLOSED)
    line = next(l for l in text.splitlines() if '"eval_accuracy"' in l)
    log = tmp_path / "result_0.txt"
    log.write_text(text + (line + "\n") * mllog_parse.MAX_MLLOG_LINES)
    report = check_log(str(log))
    problem, = report.problems
    assert problem.rule == "log/read" and "more than 100,000 ':::MLLOG' lines" in problem.message
    assert report.view is None


def test_the_logs_of_one_check_share_a_budget(tmp_path):
    log = tmp_path / "result_0.txt"
    log.write_text(gallery.base_text(gallery.CLOSED))
    budget = mllog_parse.ReadBudget()
    first = check_log(str(log), budget=budget)
    assert first.view is not None and budget.lines < mllog_parse.MAX_TOTAL_MLLOG_LINES
    for left in (0, 10):  # spent, or less left than this log holds
        budget.lines = left
        second = check_log(str(log), budget=budget)
        problem, = second.problems
        assert "the most one check reads (500,000" in problem.message and second.view is None
    os.mkfifo(tmp_path / "result_1.txt")  # a refusal of its own is said as such
    assert "FIFO" in check_log(str(tmp_path / "result_1.txt"), budget=budget).problems[0].message


def test_a_long_line_is_not_read_and_the_engine_does_not_see_it(tmp_path):
    text = gallery.base_text(gallery.CLOSED)
    huge = ':::MLLOG {"key": "x", "value": "' + "a" * (mllog_parse.MAX_LINE_CHARS + 1) + \
        '", "time_ms": 1, "metadata": {}}'
    parsed = mllog_parse.parse_text(text + huge + "\n")
    problem, = [p for p in parsed.problems if p.rule == "log/malformed-line"]
    assert "over the limit of 1,048,576" in problem.message
    assert parsed.mllog_texts[-1] == mllog_parse.ENGINE_STUB


# --------------------------------------------------------------------------------------------
# 2-4. Special files: never opened for reading, never copied for the package checker

def test_a_fifo_as_system_description_is_refused_not_waited_on(tmp_path):
    org = build_submission(tmp_path)
    _system_json(org).unlink()
    os.mkfifo(_system_json(org))
    status, out, err, _ = _cli(["--submission", str(org)], tmp_path, timeout=30)
    line, = _lines_about(out, f"{SYSTEM}.json:0: submission/system-json")
    assert "is a FIFO, not a regular file; not read" in line
    assert _one_verdict(out, err).startswith("FAILED") and status == 1


def test_a_fifo_as_a_result_log_is_refused_not_waited_on(tmp_path):
    org = build_submission(tmp_path)
    (_bert(org) / "result_3.txt").unlink()
    os.mkfifo(_bert(org) / "result_3.txt")
    status, out, err, _ = _cli(["--submission", str(org)], tmp_path, timeout=30)
    assert _lines_about(out, "result_3.txt:0: log/read")
    assert "FIFO" in _lines_about(out, "result_3.txt:0: log/read")[0]
    _one_verdict(out, err)


def test_a_system_description_linked_to_dev_zero_is_refused(tmp_path):
    org = build_submission(tmp_path)
    _system_json(org).unlink()
    _system_json(org).symlink_to("/dev/zero")
    status, out, err, used = _cli(["--submission", str(org)], tmp_path, timeout=60,
                                  memory=2 * GiB)
    line, = _lines_about(out, f"{SYSTEM}.json:0: submission/system-json")
    assert "/dev/zero" in line and "not read" in line
    assert _one_verdict(out, err).startswith("FAILED") and status == 1


def test_a_result_log_linked_to_dev_zero_reaches_neither_checker(tmp_path):
    org = build_submission(tmp_path)
    (_bert(org) / "result_0.txt").unlink()
    (_bert(org) / "result_0.txt").symlink_to("/dev/zero")
    status, out, err, _ = _cli(["--submission", str(org)], tmp_path, timeout=60,
                               memory=2 * GiB)
    line, = _lines_about(out, "result_0.txt:0:")
    assert "a link to /dev/zero, outside" in line and "not read" in line
    assert "MemoryError" not in out + err and "internal error" not in err
    _one_verdict(out, err)


def test_a_special_file_in_the_tree_never_reaches_the_package_checker(tmp_path):
    """A FIFO named like a result: refused in one line, left out of the package checker's
    copy (which then holds the ten real runs)."""
    org = build_submission(tmp_path)
    os.mkfifo(_bert(org) / "result_10.txt")
    report = check_submission(str(org))
    line, = [p for p in report.all_problems() if p.path.endswith("result_10.txt")]
    assert "FIFO" in line.message
    assert report.package is not None and report.package.passed, report.package.problems


# --------------------------------------------------------------------------------------------
# 5. Temporary disk: the copy holds only what the package checker reads, within a budget,
#    in a folder a later run removes if the process was killed

def test_a_sparse_giant_anywhere_in_the_tree_is_not_copied(tmp_path):
    org = build_submission(tmp_path)
    for place in (_bert(org) / "notes.bin", org / "systems" / "big.bin",
                  org / "results" / SYSTEM / "big.bin", org / "results" / "big.bin"):
        with open(place, "wb") as f:
            f.truncate(3 * GiB)
    # A file over 300 MB written anywhere (the scratch copy included) fails the check.
    status, out, err, used = _cli(["--submission", str(org)], tmp_path, file_size=300 << 20)
    assert "package checker: passed" in out, (out + err)[-2000:]
    _one_verdict(out, err)
    assert used["seconds"] < 60


def test_the_copy_has_a_byte_budget(tmp_path, monkeypatch):
    org = build_submission(tmp_path)
    monkeypatch.setattr(official, "MAX_COPY_BYTES", 10_000)
    report = check_submission(str(org))
    line, = [p.message for p in report.package.problems]
    assert line.startswith("package checker not run:") and "over the limit of" in line


def test_a_scratch_folder_left_by_a_killed_check_is_removed_by_the_next(tmp_path):
    org = build_submission(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    scratch = tmp_path / "scratch"
    left = scratch / f"bert-check-{dead.pid}-abc123" / "ExampleOrg" / "results"
    left.mkdir(parents=True)
    (left / "result_0.txt").write_text("x" * 1000)
    alive = scratch / f"bert-check-{os.getpid()}-def456"
    alive.mkdir()
    recent = scratch / f"bert-check-{dead.pid}-ghi789"  # maybe another pid namespace's
    recent.mkdir()
    hours_ago = time.time() - 2 * 3600
    for folder in (left.parents[1], alive):
        os.utime(folder, (hours_ago, hours_ago))
    status, out, err, _ = _cli(["--submission", str(org)], tmp_path)
    assert {p.name for p in scratch.iterdir()} == {alive.name, recent.name}


# --------------------------------------------------------------------------------------------
# Only known names reach the engine: for every record it reads, not only those we keep

def test_a_path_hidden_in_a_record_nested_too_deep_never_reaches_the_engine(tmp_path,
                                                                             monkeypatch):
    """Our parser drops a record nested deeper than 32 levels; the official parser would read
    it, and with it a division naming a file path the guard never saw."""
    from mlperf_logging.compliance_checker.mlp_parser import ruleset_100
    seen = []
    real = ruleset_100.string_to_logline

    def spy(lineno, string):
        logline = real(lineno, string)
        seen.append((logline.key, logline.value["value"]))
        return logline
    monkeypatch.setattr(ruleset_100, "string_to_logline", spy)
    deep = {"a": 1}
    for _ in range(40):
        deep = {"d": deep}
    crafted = json.dumps({"key": "submission_division", "value": "../" * 24 + "tmp/evil",
                          "time_ms": 1763800355000, "event_type": "POINT_IN_TIME",
                          "metadata": deep})
    lines = gallery.base_text(gallery.CLOSED).splitlines()
    at = next(i for i, l in enumerate(lines) if '"submission_division"' in l)
    lines[at] = ":::MLLOG " + crafted
    log = tmp_path / "result_0.txt"
    log.write_text("\n".join(lines) + "\n")
    report = check_log(str(log), "1.0.0")
    assert seen, "the engine parsed nothing"
    divisions = [value for key, value in seen if key == "submission_division"]
    assert all(value in ("closed", "open") for value in divisions), divisions
    assert any(p.rule == "log/malformed-line" and p.line == at + 1 for p in report.problems)
    assert not report.passed


# --------------------------------------------------------------------------------------------
# Output: escaped in every format, never failing on the encoding, one verdict line

FAKE = "x\nPASSED: 0 error(s), 0 warning(s) (ruleset 1.0.0)\n\x1b[2J.txt"


@pytest.mark.parametrize("fmt", ["text", "csv", "markdown"])
def test_control_characters_from_the_input_are_printed_escaped(tmp_path, capsys, fmt):
    org = build_submission(tmp_path)
    (_bert(org) / FAKE).write_text("stray")
    log = _bert(org) / "result_2.txt"
    log.write_text("\n".join(gallery.set_meta("run_stop", "status", "\x1b[2J\x1b]0;pwned\x07")(
        log.read_text().splitlines())) + "\n")
    check.main(["--submission", str(org), "--format", fmt])
    captured = capsys.readouterr()
    both = captured.out + captured.err
    assert "\x1b" not in both and "\x07" not in both
    assert "\\x1b[2J" in both
    _one_verdict(captured.out, captured.err)


def test_a_file_name_that_is_not_utf8_under_an_ascii_terminal_still_gives_a_verdict(tmp_path):
    org = build_submission(tmp_path)
    os.close(os.open(os.fsencode(_bert(org)) + b"/notes_\xff\xfe.txt", os.O_CREAT | os.O_WRONLY))
    status, out, err, _ = _cli(["--submission", str(org)], tmp_path,
                               env={"PYTHONIOENCODING": "ascii:strict", "LANG": "C",
                                    "LC_ALL": "C"})
    assert "UnicodeEncodeError" not in err and status in (0, 1), err[-2000:]
    assert _lines_about(out, "notes_\\udcff\\udcfe.txt")
    _one_verdict(out, err)


# --------------------------------------------------------------------------------------------
# Weak cases: one clear line each

def test_a_result_log_linked_outside_the_tree_is_refused(tmp_path):
    org = build_submission(tmp_path)
    outside = tmp_path / "elsewhere.txt"
    (_bert(org) / "result_4.txt").rename(outside)
    (_bert(org) / "result_4.txt").symlink_to(outside)
    report = check_submission(str(org))
    line, = [p for p in report.all_problems() if p.path.endswith("result_4.txt")]
    assert line.severity == "error" and f"a link to {outside}, outside" in line.message
    assert all(not log.path.endswith("result_4.txt") for f in report.folders for log in f.logs)


def _remove_chain(top: Path) -> None:
    """Remove a chain top/d/d/... deepest first, without recursion."""
    depth = 0
    os.chdir(top)
    while os.path.isdir("d"):
        os.chdir("d")
        depth += 1
    for _ in range(depth):
        os.chdir("..")
        os.rmdir("d")
    os.chdir(ROOT)


def test_a_deep_folder_chain_ends_in_a_verdict_not_a_recursion_error(tmp_path):
    org = build_submission(tmp_path)
    deep = org / "results" / SYSTEM
    os.chdir(deep)
    try:
        for _ in range(600):  # deeper than a recursive walk gets (its frames per level)
            os.mkdir("d")
            os.chdir("d")
        os.chdir(ROOT)
        status, out, err, used = _cli(["--submission", str(org)], tmp_path)
    finally:
        _remove_chain(deep)  # pytest's own clean-up of tmp_path recurses
    assert "RecursionError" not in out + err and status in (0, 1), err[-2000:]
    _one_verdict(out, err)


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ('{"a": ' * 40 + "1" + "}" * 40, "more than 32 levels"),
    ('{"submitter": "x", "number_of_nodes": NaN}', "NaN, which is not a JSON number"),
    ('{"submitter": "x", "framework": ["TF", 2]}', "framework is ['TF', 2] (list), not a string"),
    ('{"submitter": "x", "accelerators_per_node": 8}', "accelerators_per_node is 8 (int)"),
    ("\xff\xfe", "not UTF-8 text"),
])
def test_a_bad_system_description_is_one_line_naming_it(tmp_path, text, fragment):
    org = build_submission(tmp_path)
    _system_json(org).write_bytes(text.encode("latin-1"))
    report = check_submission(str(org))
    lines = [p for p in report.all_problems() if p.path == str(_system_json(org))]
    assert len(lines) == 1 and fragment in lines[0].message, lines
    line, = [p.message for p in report.package.problems]
    assert line.startswith("package checker not run:") and SYSTEM in line


def test_a_stray_file_in_systems_that_is_not_json_is_named(tmp_path):
    org = build_submission(tmp_path)
    stray = org / "systems" / "notes.json"
    stray.write_text("hello\n")
    report = check_submission(str(org))
    line, = [p for p in report.all_problems() if p.path == str(stray)]
    assert "not valid JSON" in line.message and line.severity == "error"
    assert not any("JSONDecodeError" in p.message for p in report.all_problems())


def test_a_run_stop_at_an_impossible_time_is_an_error_and_no_300_digit_minutes(tmp_path,
                                                                               capsys):
    log = tmp_path / "result_0.txt"
    log.write_text("\n".join(gallery.set_time("run_stop", 1e308)(
        gallery.base_text(gallery.CLOSED).splitlines())) + "\n")
    report = check_log(str(log))
    line, = [p for p in report.problems if p.rule == "log/time-ms"]
    assert "not a time of 1990-2100" in line.message and line.severity == "error"
    assert report.view.minutes is None
    check.main([str(log)])
    assert not re.search(r"\d{40}", capsys.readouterr().out)


def test_a_run_of_months_is_an_error(tmp_path):
    log = tmp_path / "result_0.txt"
    text = gallery.base_text(gallery.CLOSED)
    stop = next(json.loads(l.split(":::MLLOG ", 1)[1]) for l in text.splitlines()
                if '"run_stop"' in l)
    log.write_text("\n".join(gallery.set_time("run_stop", stop["time_ms"] + 90 * 86_400_000)(
        text.splitlines())) + "\n")
    report = check_log(str(log))
    line, = [p for p in report.problems if p.rule == "log/time-ms"]
    assert "90 days after run_start" in line.message and report.view.minutes is None


def test_a_number_of_5000_digits_is_called_that(tmp_path):
    text = gallery.base_text(gallery.CLOSED)
    lines = text.splitlines()
    at = next(i for i, l in enumerate(lines) if '"eval_samples"' in l)
    lines[at] = re.sub(r'"value": \d+', '"value": ' + "9" * 5000, lines[at])
    parsed = mllog_parse.parse_text("\n".join(lines) + "\n")
    problem, = [p for p in parsed.problems if p.line == at + 1]
    assert "a number with 5,000 digits" in problem.message


# --------------------------------------------------------------------------------------------
# 7. Time linear in the logs of a tree (issue 32: 50,000 logs gave no verdict in 2 minutes)

def _tree_of_small_logs(root: Path, logs: int) -> Path:
    """<root>/org/results/s<i>/bert/result_0..9.txt: `logs` logs of 8 records each (the first
    lines of a closed run), ten to a folder, and an empty systems/."""
    head = "".join(gallery.base_text(gallery.CLOSED).splitlines(keepends=True)[:8])
    org = root / "org"
    (org / "systems").mkdir(parents=True)
    for i in range(logs):
        folder = org / "results" / f"s{i // 10}" / "bert"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"result_{i % 10}.txt").write_text(head)
    return org


def _check_cpu_seconds(org: Path) -> float:
    """CPU seconds of this process for checking the tree `org` (and printing the verdict)."""
    start = time.process_time()
    verdict = check.run_checks([], [str(org)], None, True)
    check.emit(verdict, "text", out=open(os.devnull, "w"), err=open(os.devnull, "w"))
    return time.process_time() - start


def test_checker_time_grows_linearly_with_the_logs_of_a_tree(tmp_path):
    """CPU time, not wall time (a busy machine); 4x the logs must take well under the 16x of
    a quadratic part (measured: 4.0-4.3x, 2.5-3 ms of CPU a small log)."""
    _check_cpu_seconds(_tree_of_small_logs(tmp_path / "warm", 20))  # imports, YAML, RCPs
    small = _check_cpu_seconds(_tree_of_small_logs(tmp_path / "small", 150))
    large = _check_cpu_seconds(_tree_of_small_logs(tmp_path / "large", 600))
    assert large / small < 7, (small, large)
