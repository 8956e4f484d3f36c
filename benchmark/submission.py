"""Check a BERT result folder (10 runs) and a whole submission tree.

A submission tree is `<org>/results/<system>/bert/result_0.txt ... result_9.txt` plus
`<org>/systems/<system>.json`. `check_result_folder` checks one folder of runs (each log,
the set of 10, cross-run consistency, the RCP check); `check_submission` checks the tree
around it (layout, system descriptions) and adds the official package checker's verdict.
Neither raises on any input.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmark import log_keys as k
from benchmark.log_check import LogReport, check_log
from benchmark.official import (LONGEST_LINE, PackageOutcome, RcpOutcome,
                                PARAMS_FILE, run_package_checker, run_rcp,
                                system_description_problems, untrusted_values)
from benchmark.problems import ERROR, WARNING, Problem
from benchmark.rulesets import DEFAULT_RULESET

RUNS_PER_RESULT = 10  # BERT runs per result (training rules, Benchmark Results)
# The package checker takes every result_*.txt; published trees use result_0..9,
# result_1..10 and result_<id>_<n>.
RESULT_NAME = re.compile(r"result_.*\.txt")
TOOL_FILES = {PARAMS_FILE, "scaling.json"}  # files the official tools read/write
RCP_BYPASS = {"rcp-bypass", "rcp_bypass"}  # a line of package_checker_params
SRC_RCP_MATCH = ("training_rules.adoc, Reference Convergence Points: \"At submission time, the "
                 "submission is matched to an RCP based on the submission batch size.\"")
SRC_RCP = ("training_rules.adoc, Reference Convergence Points: \"If this does not violate the "
           "maximum acceptable speedup condition when compared to the reference then the "
           "submission is accepted, otherwise it may be rejected.\"")
SRC_OLYMPIC = ("training_rules.adoc, Benchmark Results: \"a single non-converging run may be "
               "treated as the slowest run and dropped. A benchmark result is invalid if there "
               "is more than one non-converging run.\"")
SRC_RUN_COUNT = ("training_rules.adoc, Deprecated benchmarks results: NLP \"Minimum Number of "
                 "Runs\" 10; the package checker: \"The number of result files must be an "
                 "exact number.\"")
OLYMPIC_NOTE = ("accepted under olympic scoring: one run of ten may fail; this run is scored "
                "as not converged")


@dataclass
class ResultFolder:
    """The verdict on one folder of runs.

    folder: the folder as given.
    logs: each result file's report, in run order.
    scored: per log, whether its time counts in the score (False: failed, counted as infinite).
    division: the division the runs log ("closed" when unknown).
    rcp: the RCP check's outcome (None when not run: open division).
    problems: folder-level problems (missing files, consistency, RCP).
    """
    folder: str
    logs: list[LogReport] = field(default_factory=list)
    scored: list[bool] = field(default_factory=list)
    division: str = "closed"
    rcp: RcpOutcome | None = None
    problems: list[Problem] = field(default_factory=list)

    def all_problems(self) -> list[Problem]:
        """Folder problems followed by every log's problems."""
        return self.problems + [p for log in self.logs for p in log.problems]


@dataclass
class SubmissionReport:
    """The verdict on a submission tree: its own problems, its result folders, the package
    checker's outcome (None when the official checkers are off)."""
    org_dir: str
    problems: list[Problem] = field(default_factory=list)
    folders: list[ResultFolder] = field(default_factory=list)
    package: PackageOutcome | None = None

    def all_problems(self) -> list[Problem]:
        """Tree problems, package problems, then each folder's problems."""
        package = self.package.problems if self.package else []
        return self.problems + package + [p for f in self.folders for p in f.all_problems()]


def _join(folder: str, name: str) -> str:
    return str(Path(folder) / name)


def _first_values(logs: list[LogReport], key: str) -> dict[str, list[str]]:
    """{repr of the first value of `key`: [log paths]} over logs that log it."""
    values: dict[str, list[str]] = {}
    for log in logs:
        if log.view is not None and log.view.first(key) is not None:
            values.setdefault(repr(log.view.value(key)), []).append(log.path)
    return values


def _consistency(folder: str, logs: list[LogReport]) -> list[Problem]:
    """The runs of one result must agree on batch size, division, org and benchmark; seeds
    must differ."""
    problems = []
    for key in (k.GLOBAL_BATCH_SIZE, k.SUBMISSION_DIVISION, k.SUBMISSION_ORG,
                k.SUBMISSION_BENCHMARK, k.SUBMISSION_PLATFORM):
        values = _first_values(logs, key)
        if len(values) > 1:
            shown = "; ".join(f"{v} in {len(paths)} run(s)" for v, paths in values.items())
            # The RCP and package checks read the batch size, division and benchmark of one
            # run for all; org and platform names only label the result.
            binding = key in (k.GLOBAL_BATCH_SIZE, k.SUBMISSION_DIVISION, k.SUBMISSION_BENCHMARK)
            problems.append(Problem(folder, 0, "submission/consistency",
                                    f"the runs disagree on {key}: {shown}",
                                    ERROR if binding else WARNING,
                                    SRC_RCP_MATCH if binding else ""))
    for value, paths in _first_values(logs, k.SEED).items():
        if len(paths) > 1:
            names = ", ".join(Path(p).name for p in paths)
            problems.append(Problem(folder, 0, "submission/seeds",
                                    f"seed {value} is used by {len(paths)} runs ({names}); "
                                    "each run needs its own seed"))
    return problems


def _run_order(name: str) -> tuple:
    """Sort key putting result_2.txt before result_10.txt."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _result_files(folder: str) -> tuple[list[str], list[Problem]]:
    """The result files of `folder` (every result_*.txt, as the package checker globs them)
    in run order, and problems with the set of files."""
    problems: list[Problem] = []
    try:
        entries = sorted(Path(folder).iterdir(), key=lambda p: _run_order(p.name))
    except OSError as exc:
        return [], [Problem(folder, 0, "submission/result-files",
                            f"cannot list the folder: {exc.strerror or exc}")]
    runs = []
    for entry in entries:
        if RESULT_NAME.fullmatch(entry.name) and entry.is_file():
            runs.append(str(entry))
        elif entry.name not in TOOL_FILES:
            problems.append(Problem(str(entry), 0, "submission/result-files",
                                    "not a result_*.txt file; the package checker ignores it",
                                    WARNING))
    if len(runs) != RUNS_PER_RESULT:
        problems.append(Problem(folder, 0, "submission/result-files",
                                f"{len(runs)} result_*.txt file(s); a BERT result is exactly "
                                f"{RUNS_PER_RESULT} runs", source=SRC_RUN_COUNT))
    return runs, problems


def _too_long_for_official_tools(logs: list[LogReport]) -> str | None:
    """Why the official file-reading tools cannot be run on `logs` (None: they can).

    They apply a regex to each `:::MLLOG` line that takes time quadratic in its length
    (minutes for a 200 kB garbage line); such a line is never a valid record.
    """
    for log in logs:
        if log.view is None:
            continue
        parsed = log.view.parsed
        for line, text in zip(parsed.mllog_lines, parsed.mllog_texts):
            if len(text) > LONGEST_LINE:
                return (f"{log.path} line {line} is {len(text):,} characters long; the "
                        "official tools would take minutes on it")
    return None


def _no_tick() -> None:
    """The default progress callback: nothing."""


def _train_samples_logged(logs: list[LogReport]) -> bool:
    """Every run logs a train_samples record (what BERT's train-samples RCP mode reads)."""
    return bool(logs) and all(log.view is not None and log.view.all(k.TRAIN_SAMPLES)
                              for log in logs)


def _rcp_bypassed(folder: str) -> bool:
    """A package_checker_params of the result folder, its system folder or the submitter's
    folder asks to bypass the RCP test ("rcp-bypass", mlperf_logging 4.x; "rcp_bypass",
    the v2.0 round's submitter-level file)."""
    here = Path(folder)
    for place in (here, here.parent, here.parent.parent.parent):
        try:
            lines = (place / PARAMS_FILE).read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        if RCP_BYPASS & {line.strip() for line in lines}:
            return True
    return False


def _untrusted_log(logs: list[LogReport]) -> str | None:
    """Why the package checker must not see `logs` (None: it may): a log names a division or
    benchmark the official engine would turn into a file path."""
    for log in logs:
        if log.view is not None and untrusted_values(log.view.parsed):
            return f"{log.path} logs an unknown division or benchmark"
    return None


def check_result_folder(folder: str, ruleset: str = DEFAULT_RULESET, official: bool = True,
                        tick: Callable[[], None] = _no_tick,
                        system_division: str | None = None) -> ResultFolder:
    """Check a folder of BERT runs (`result_0.txt` ... `result_9.txt`).

    Each log gets the BERT rules and the compliance checker; the set gets the file-count,
    consistency and (closed division, a batch size with RCPs) RCP checks. As in the
    official package checker, one failing run of ten is accepted (its problems become
    warnings) and scored as not converged. `tick` is called after each log (progress).
    system_division: the division of the system description, when the folder is part of a
    submission tree; the package checker runs the RCP check only when it says closed.
    """
    result = ResultFolder(folder)
    paths, result.problems = _result_files(folder)
    result.logs = []
    for path in paths:
        result.logs.append(check_log(path, ruleset, official))
        tick()
    result.scored = [log.passed for log in result.logs]
    result.problems += _consistency(folder, result.logs)

    failing = [i for i, log in enumerate(result.logs) if not log.passed]
    if len(result.logs) == RUNS_PER_RESULT and len(failing) == 1:
        log = result.logs[failing[0]]
        log.problems = [p.downgraded(OLYMPIC_NOTE) if p.severity == ERROR else p
                        for p in log.problems]

    unscored = [Path(log.path).name for log in result.logs
                if not (log.passed and log.view is not None and log.view.reached_goal)]
    if len(unscored) > 1:
        result.problems.append(Problem(
            folder, 0, "submission/olympic",
            f"{len(unscored)} runs did not converge or failed their checks "
            f"({', '.join(unscored)}); at most one may", source=SRC_OLYMPIC))

    divisions = [log.view.division for log in result.logs
                 if log.view is not None and log.view.division_logged]
    result.division = divisions[0] if divisions else "closed"
    too_long = _too_long_for_official_tools(result.logs)
    if official and too_long:
        result.problems.append(Problem(folder, 0, "rcp/convergence",
                                       f"RCP check not run: {too_long}"))
    elif official and result.division == "closed" and system_division not in (None, "closed"):
        result.problems.append(Problem(
            folder, 0, "rcp/convergence",
            f"RCP check not run: the system description says division {system_division!r}, and "
            "the package checker runs it only for 'closed'", WARNING))
    elif official and result.division == "closed" and result.logs:
        batches = [log.view.batch_size for log in result.logs
                   if log.view is not None and log.view.batch_size is not None]
        parsed = [log.view.parsed for log in result.logs if log.view is not None]
        # The training rules let the submitter have the RCP check read the samples to
        # converge from train_samples ("RCP rules", --rcp-bert-train-samples) instead of the
        # evals' epoch_num; where every run logs train_samples both readings are open to them
        # (accepted results pass in one of the two only: Google v2.0 in the first, Habana
        # v1.1 in the second), so the folder passes if either does.
        for train_samples in ([True, False] if _train_samples_logged(result.logs) else [False]):
            result.rcp = run_rcp(folder, batches[0] if batches else None, parsed, ruleset,
                                 train_samples)
            if result.rcp.passed or not result.rcp.ran:
                break
        if result.rcp.ran and not result.rcp.passed:
            bypassed = _rcp_bypassed(folder)
            result.problems.append(Problem(
                folder, 0, "rcp/convergence",
                f"RCP check failed: {result.rcp.message}"
                + (f" ({result.rcp.numbers})" if result.rcp.numbers else "") + (
                    f"; bypassed by {PARAMS_FILE} (the result must be defended in the review "
                    "audit)" if bypassed else "; a submitter may bypass it (rcp-bypass in "
                    f"{PARAMS_FILE}) and defend the result in the review audit"),
                WARNING if bypassed else ERROR, "" if bypassed else SRC_RCP))
        elif not result.rcp.ran:
            result.problems.append(Problem(folder, 0, "rcp/convergence",
                                           f"RCP check skipped: {result.rcp.message}", WARNING))
    return result


def _system_division(org: Path, system: str) -> str | None:
    """The division systems/<system>.json names (None: unreadable or not given)."""
    try:
        contents = json.loads((org / "systems" / f"{system}.json").read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    division = contents.get("division") if isinstance(contents, dict) else None
    return division if isinstance(division, str) else None


def _system_json(org: Path, system: str, ruleset: str, official: bool,
                 divisions: set[str]) -> list[Problem]:
    """Problems with systems/<system>.json: missing, not JSON, fields, division."""
    path = org / "systems" / f"{system}.json"
    shown = str(path)
    if not path.is_file():
        return [Problem(shown, 0, "submission/system-json",
                        f"missing: every results/{system} needs systems/{system}.json")]
    try:
        contents = json.loads(path.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as exc:
        return [Problem(shown, exc.lineno, "submission/system-json",
                        f"not valid JSON: {exc.msg} (column {exc.colno})")]
    except (UnicodeDecodeError, OSError) as exc:
        return [Problem(shown, 0, "submission/system-json", f"cannot read: {exc}")]
    if not isinstance(contents, dict):
        return [Problem(shown, 1, "submission/system-json",
                        f"holds a JSON {type(contents).__name__}, not an object")]
    problems = []
    division = contents.get("division")
    if division not in k.DIVISIONS:
        problems.append(Problem(shown, 0, "submission/system-json",
                                f"division is {division!r}, not 'closed' or 'open'; the package "
                                "checker then treats the result as open (no RCP or seed "
                                "checks)", WARNING))
    elif divisions and division not in divisions:
        problems.append(Problem(shown, 0, "submission/division",
                                f"division is {division!r} but the runs log "
                                f"{' and '.join(sorted(divisions))}; the package checker "
                                "goes by this file", WARNING))
    if official:
        problems += system_description_problems(shown, ruleset)
    return problems


def check_submission(org_dir: str, ruleset: str = DEFAULT_RULESET, official: bool = True,
                     tick: Callable[[], None] = _no_tick) -> SubmissionReport:
    """Check the submission tree at `org_dir` (`<org>/results/...`, `<org>/systems/...`);
    `tick` is called after each log (progress)."""
    report = SubmissionReport(org_dir)
    org = Path(org_dir)
    results = org / "results"
    if not org.is_dir():
        report.problems.append(Problem(org_dir, 0, "submission/layout", "not a folder"))
        return report
    if not results.is_dir():
        report.problems.append(Problem(str(results), 0, "submission/layout",
                                       "missing: a submission holds results/<system>/bert/"))
        return report
    if not (org / "systems").is_dir():
        report.problems.append(Problem(str(org / "systems"), 0, "submission/layout",
                                       "missing: a submission holds systems/<system>.json"))
    systems = sorted(p for p in results.iterdir() if p.is_dir())
    for system in systems:
        divisions: set[str] = set()
        for bench in sorted(p for p in system.iterdir() if p.is_dir()):
            if bench.name != k.BENCHMARK_NAME:
                report.problems.append(Problem(str(bench), 0, "submission/layout",
                                               "not a BERT result; not checked", WARNING))
                continue
            folder = check_result_folder(str(bench), ruleset, official, tick,
                                         _system_division(org, system.name))
            report.folders.append(folder)
            divisions |= {log.view.division for log in folder.logs
                          if log.view is not None and log.view.division_logged}
        report.problems += _system_json(org, system.name, ruleset, official, divisions)
    if not report.folders:
        report.problems.append(Problem(str(results), 0, "submission/layout",
                                       "no results/<system>/bert folder"))
    logs = [log for f in report.folders for log in f.logs]
    unsafe = _too_long_for_official_tools(logs) or _untrusted_log(logs)
    if official and unsafe:
        report.package = PackageOutcome(False, [Problem(org_dir, 0, "package/checker",
                                                        f"package checker not run: {unsafe}")])
    elif official:
        checked = [(log.view.parsed, log.official.passed) for log in logs
                   if log.view is not None and log.official is not None]
        report.package = run_package_checker(org_dir, checked, ruleset)
    return report

