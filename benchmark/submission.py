"""Check a BERT result folder (10 runs) and a whole submission tree.

A submission tree is `<org>/results/<system>/bert/result_0.txt ... result_9.txt` plus
`<org>/systems/<system>.json`. `check_result_folder` checks one folder of runs (each log,
the set of 10, cross-run consistency, the RCP check); `check_submission` checks the tree
around it (layout, system descriptions) and adds the official package checker's verdict.
Neither raises on any input.

A tree is someone else's files: only regular files are read (a FIFO or a device never), each
up to its limit (a log: `benchmark.mllog_parse.MAX_LOG_BYTES`; a system description or a
package_checker_params: 1 MiB), a link leading out of the tree is refused, and the logs of one
check share a `ReadBudget`; each refusal is one line naming the file.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmark import log_keys as k
from benchmark.files import RefusedFile, link_outside, read_regular, size_words
from benchmark.log_check import LogReport, check_log
from benchmark.mllog_parse import MAX_DEPTH, ReadBudget, _too_deep, json_error
from benchmark.official import (LONGEST_LINE, MAX_SMALL_FILE_BYTES, PackageOutcome,
                                RcpOutcome, PARAMS_FILE, over_copy_limit, run_package_checker,
                                run_rcp, system_description_problems, untrusted_values)
from benchmark.problems import ERROR, WARNING, Problem
from benchmark.rulesets import (DEFAULT_RULESET, FROM_KEYS, GIVEN, NOT_GIVEN, detect,
                               round_from_path)

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
# The fields of a system description the official checker joins as text (a number or a list
# there makes it raise TypeError).
JOINED_FIELDS = ("submitter", "system_name", "host_processor_model_name",
                 "host_processor_core_count", "accelerator_model_name", "accelerators_per_node",
                 "framework")
MAX_SYSTEMS_BYTES = 16 << 20  # all systems/*.json of one tree together (published: < 0.2 MB)


@dataclass
class ResultFolder:
    """The verdict on one folder of runs.

    folder: the folder as given.
    logs: each result file's report, in run order.
    scored: per log, whether its time counts in the score (False: failed, counted as infinite).
    division: the division the runs log ("closed" when unknown).
    rcp: the RCP check's outcome (None when not run: open division).
    problems: folder-level problems (missing files, consistency, RCP).
    ruleset, ruleset_why: the ruleset of all its runs and why that one.
    """
    folder: str
    logs: list[LogReport] = field(default_factory=list)
    scored: list[bool] = field(default_factory=list)
    division: str = "closed"
    rcp: RcpOutcome | None = None
    problems: list[Problem] = field(default_factory=list)
    ruleset: str = DEFAULT_RULESET
    ruleset_why: str = GIVEN

    def all_problems(self) -> list[Problem]:
        """Folder problems followed by every log's problems."""
        return self.problems + [p for log in self.logs for p in log.problems]


@dataclass
class SubmissionReport:
    """The verdict on a submission tree: its own problems, its result folders, the package
    checker's outcome (None when the official checkers are off), the ruleset of the whole
    tree and why that one."""
    org_dir: str
    problems: list[Problem] = field(default_factory=list)
    folders: list[ResultFolder] = field(default_factory=list)
    package: PackageOutcome | None = None
    ruleset: str = DEFAULT_RULESET
    ruleset_why: str = GIVEN

    def all_problems(self) -> list[Problem]:
        """Tree problems, package problems, then each folder's problems."""
        package = self.package.problems if self.package else []
        return self.problems + package + [p for f in self.folders for p in f.all_problems()]


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


def _result_files(folder: str, root: str | None = None) -> tuple[list[str], list[Problem]]:
    """The result files of `folder` (every result_*.txt, as the package checker globs them)
    in run order, and problems with the set of files. A result_*.txt that is not a regular
    file is listed (reading it is refused, in one line); a link leading out of `root` (the
    tree; default `folder`) is not."""
    problems: list[Problem] = []
    try:
        entries = sorted(Path(folder).iterdir(), key=lambda p: _run_order(p.name))
    except OSError as exc:
        return [], [Problem(folder, 0, "submission/result-files",
                            f"cannot list the folder: {exc.strerror or exc}")]
    runs = []
    for entry in entries:
        outside = link_outside(entry, root or folder)
        if RESULT_NAME.fullmatch(entry.name) and outside:
            problems.append(Problem(str(entry), 0, "submission/result-files",
                                    f"a link to {outside}, outside {root or folder}; not read"))
        elif RESULT_NAME.fullmatch(entry.name) and not entry.is_dir():
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
            lines = read_regular(place / PARAMS_FILE, MAX_SMALL_FILE_BYTES).decode().splitlines()
        except (OSError, UnicodeDecodeError, RefusedFile):
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


def _log_rulesets(folder: ResultFolder) -> list[Problem]:
    """A warning when the folder's ruleset came from its first run's records and other runs'
    records point to another (all runs of a result are checked under one)."""
    if folder.ruleset_why not in (FROM_KEYS, NOT_GIVEN):
        return []
    other = [Path(log.path).name for log in folder.logs if log.view is not None and detect(
        log.path, (r.key for r in log.view.parsed.records))[0] != folder.ruleset]
    if not other:
        return []
    shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
    return [Problem(folder.folder, 0, "submission/ruleset",
                    f"{len(other)} run(s) ({shown}) "
                    f"point to another ruleset by their records; all runs of a result are "
                    f"checked under {folder.ruleset}, the one of the first; give --ruleset",
                    WARNING)]


def _folder_logs(result: ResultFolder, paths: list[str], ruleset: str | None, why: str,
                 official: bool, tick: Callable[[], None], budget: ReadBudget) -> None:
    """Check the logs `paths` of `result` under `ruleset` (None: its path's round, else the one
    its first readable log points to), setting result.ruleset and ruleset_why."""
    if not ruleset and round_from_path(result.folder):
        ruleset, why = detect(result.folder, None)
    for path in paths:
        log = check_log(path, ruleset, official, budget, why)
        result.logs.append(log)
        if not ruleset and log.view is not None:
            ruleset, why = log.ruleset, log.ruleset_why
        tick()
    if not ruleset:
        ruleset, why = detect(result.folder, None)
    result.ruleset, result.ruleset_why = ruleset, why
    for log in result.logs:  # the unreadable ones read before the ruleset was known
        log.ruleset, log.ruleset_why = ruleset, why


def check_result_folder(folder: str, ruleset: str | None = DEFAULT_RULESET,
                        official: bool = True, tick: Callable[[], None] = _no_tick,
                        system_division: str | None = None, root: str | None = None,
                        budget: ReadBudget | None = None, why: str = GIVEN) -> ResultFolder:
    """Check a folder of BERT runs (`result_0.txt` ... `result_9.txt`).

    Each log gets the BERT rules and the compliance checker; the set gets the file-count,
    consistency and (closed division, a batch size with RCPs) RCP checks. As in the
    official package checker, one failing run of ten is accepted (its problems become
    warnings) and scored as not converged. `tick` is called after each log (progress).
    system_division: the division of the system description, when the folder is part of a
    submission tree; the package checker runs the RCP check only when it says closed.
    root: the tree the folder is part of (a link out of it is not read; default the folder).
    budget: what the logs of this check may still hold (default: a new `ReadBudget`).
    ruleset: the one of all its runs (`why`: the reason shown), or None for the round of the
    folder's path, else the one the records of its first readable run point to.
    """
    result = ResultFolder(folder)
    paths, result.problems = _result_files(folder, root)
    budget = budget if budget is not None else ReadBudget()
    _folder_logs(result, paths, ruleset, why, official, tick, budget)
    ruleset = result.ruleset
    result.problems += _log_rulesets(result)
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
    too_long = _too_long_for_official_tools(result.logs) or over_copy_limit(
        [log.view.parsed for log in result.logs if log.view is not None])
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


class _NonFinite(ValueError):
    """NaN or Infinity in a JSON text (Python reads them; JSON has no such numbers)."""


def _no_constant(name: str):
    raise _NonFinite(name)


def read_system_json(path: Path, root: Path, budget: list[int] | None = None
                     ) -> tuple[dict | None, list[Problem]]:
    """(the description, []) for a systems/*.json the official checkers can read, else
    (None, [one problem naming the file]): a link out of `root`, not a regular file, over
    1 MiB (or what is left of `budget`, [bytes], which it spends), not UTF-8, not JSON, NaN,
    nested deeper than MAX_DEPTH, not an object, or a field the official checker joins as text
    that is not a string. A missing file is (None, [])."""
    shown = str(path)

    def refuse(message: str, line: int = 0) -> tuple[None, list[Problem]]:
        return None, [Problem(shown, line, "submission/system-json", message)]
    outside = link_outside(path, root)
    if outside and os.path.lexists(path):
        return refuse(f"a link to {outside}, outside {root}; not read")
    limit = MAX_SMALL_FILE_BYTES if budget is None else min(MAX_SMALL_FILE_BYTES, budget[0])
    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        return None, []
    except RefusedFile as exc:
        if budget is not None and limit < MAX_SMALL_FILE_BYTES:
            return refuse(f"not read: the system descriptions of this tree already take "
                          f"{size_words(MAX_SYSTEMS_BYTES - budget[0])}, the most read")
        return refuse(exc.reason)
    except OSError as exc:
        return refuse(f"cannot read: {exc.strerror or type(exc).__name__}")
    if budget is not None:
        budget[0] -= len(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return refuse(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start:,})")
    try:
        contents = json.loads(text, parse_constant=_no_constant)
    except _NonFinite as exc:
        return refuse(f"holds {exc.args[0]}, which is not a JSON number (JSON has no NaN or "
                      "Infinity)")
    except json.JSONDecodeError as exc:
        return refuse(f"not valid JSON: {exc.msg} (column {exc.colno})", exc.lineno)
    except (ValueError, RecursionError) as exc:
        return refuse(json_error(exc, text))
    if not isinstance(contents, dict):
        return refuse(f"holds a JSON {type(contents).__name__}, not an object", 1)
    if _too_deep(contents):
        return refuse(f"nests lists or objects more than {MAX_DEPTH} levels deep")
    for name in JOINED_FIELDS:
        value = contents.get(name, "")
        if not isinstance(value, str):
            shown_value = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            return refuse(f"{name} is {shown_value} ({type(value).__name__}), not a string; "
                          "the official checkers join it as text")
    return contents, []


def _system_files(org: Path) -> list[Path]:
    """systems/*.json as the package checker globs them (hidden names excluded), any kind."""
    try:
        return sorted(p for p in (org / "systems").iterdir()
                      if p.name.endswith(".json") and not p.name.startswith("."))
    except OSError:
        return []


def _system_json(path: Path, contents: dict | None, refused: list[Problem], system: str,
                 ruleset: str, official: bool, divisions: set[str]) -> list[Problem]:
    """Problems with systems/<system>.json (read by `read_system_json`): missing, refused,
    fields, division."""
    shown = str(path)
    if refused:
        return refused
    if contents is None:
        return [Problem(shown, 0, "submission/system-json",
                        f"missing: every results/{system} needs systems/{system}.json")]
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
        problems += system_description_problems(shown, contents, ruleset)
    return problems


def _subfolders(folder: Path, root: Path, report: SubmissionReport) -> list[Path]:
    """The folders in `folder`, sorted; a link leading out of `root` is reported and left
    out."""
    try:
        entries = sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError as exc:
        report.problems.append(Problem(str(folder), 0, "submission/layout",
                                       f"cannot list the folder: {exc.strerror or exc}"))
        return []
    kept = []
    for entry in entries:
        outside = link_outside(entry, root)
        if outside:
            report.problems.append(Problem(str(entry), 0, "submission/layout",
                                           f"a link to {outside}, outside {root}; not read"))
        else:
            kept.append(entry)
    return kept


def check_submission(org_dir: str, ruleset: str | None = DEFAULT_RULESET,
                     official: bool = True, tick: Callable[[], None] = _no_tick,
                     budget: ReadBudget | None = None) -> SubmissionReport:
    """Check the submission tree at `org_dir` (`<org>/results/...`, `<org>/systems/...`);
    `tick` is called after each log (progress); `budget`: what the logs of this check may
    still hold (default: a new `ReadBudget`). ruleset: the one of the whole tree, or None for
    the round of its path, else the one its first result folder's runs point to."""
    why = GIVEN
    if not ruleset:
        ruleset, why = detect(org_dir, None)
        ruleset = ruleset if round_from_path(org_dir) else None
    report = SubmissionReport(org_dir)
    report.ruleset, report.ruleset_why = ruleset or DEFAULT_RULESET, why
    org = Path(org_dir)
    results = org / "results"
    budget = budget if budget is not None else ReadBudget()
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
    systems_left = [MAX_SYSTEMS_BYTES]
    descriptions = {path.name: read_system_json(path, org, systems_left)
                    for path in _system_files(org)}
    layout: list[tuple[str, list[str]]] = []
    for system in _subfolders(results, org, report):
        divisions: set[str] = set()
        json_path = org / "systems" / f"{system.name}.json"
        contents, refused = descriptions.get(json_path.name, (None, []))
        division = contents.get("division") if contents else None
        for bench in _subfolders(system, org, report):
            if bench.name != k.BENCHMARK_NAME:
                report.problems.append(Problem(str(bench), 0, "submission/layout",
                                               "not a BERT result; not checked", WARNING))
                continue
            folder = check_result_folder(str(bench), ruleset, official, tick,
                                         division if isinstance(division, str) else None,
                                         org_dir, budget, why)
            if not ruleset and any(log.view is not None for log in folder.logs):
                ruleset, why = folder.ruleset, folder.ruleset_why
                report.ruleset, report.ruleset_why = ruleset, why
            report.folders.append(folder)
            layout.append((str(bench), [log.path for log in folder.logs]))
            divisions |= {log.view.division for log in folder.logs
                          if log.view is not None and log.view.division_logged}
        report.problems += _system_json(json_path, contents, refused, system.name,
                                        report.ruleset, official, divisions)
    for name, (_, refused) in descriptions.items():
        if refused and not (results / name[:-len(".json")]).is_dir():
            report.problems += refused  # a description no result uses, still read by the checker
    if not report.folders:
        report.problems.append(Problem(str(results), 0, "submission/layout",
                                       "no results/<system>/bert folder"))
    logs = [log for f in report.folders for log in f.logs]
    refused_systems = sorted(name for name, (_, refused) in descriptions.items() if refused)
    unsafe = _too_long_for_official_tools(logs) or _untrusted_log(logs) or over_copy_limit(
        [log.view.parsed for log in logs if log.view is not None]) or (
        f"systems/{refused_systems[0]} cannot be read by it (see its line)"
        if refused_systems else None)
    if official and unsafe:
        report.package = PackageOutcome(False, [Problem(org_dir, 0, "package/checker",
                                                        f"package checker not run: {unsafe}")])
    elif official:
        checked = [(log.view.parsed, log.official.passed) for log in logs
                   if log.view is not None and log.official is not None]
        systems = {name: contents for name, (contents, _) in descriptions.items()
                   if contents is not None}
        report.package = run_package_checker(org_dir, layout, systems, checked,
                                             report.ruleset)
    return report
