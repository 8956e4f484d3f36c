"""`make check`: check BERT logs or a submission tree against the official and the BERT rules.

    python -m benchmark.check LOG [LOG ...]              one or more result logs
    python -m benchmark.check results/<system>/bert      a folder of result_*.txt (+ RCP check)
    python -m benchmark.check --submission submissions/<org>
                              [--ruleset X.Y.Z] [--format text|json|csv|markdown]
                              [--plot accuracy.png] [--verbose] [--no-official]

Prints one line per error, `file:line: rule: message [source]` (line 0: the whole file), the
warnings grouped by rule (a count and the first few; --verbose lists all), a table of the
runs with the olympic score, and one verdict line naming the ruleset used (`--ruleset`, else
for each log the round its innermost `training_results_vX.Y` folder names, else the one its
`:::MLLOG` records point to; a result folder or a tree is checked under its first log's).
With --format json everything is one JSON object on stdout; with csv or markdown the table goes
to stdout and the problem lines to stderr. Text from the input (file names, log values) is
printed escaped (`benchmark.errors.printable`) in every format, and output never fails on
the terminal's encoding (backslash escapes). Whatever the tree, a check reads it in bounded
memory and time (`benchmark.submission`) and ends in exactly one verdict line.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence, TextIO

from tqdm import tqdm

from benchmark import summary
from benchmark.errors import UserError, printable
from benchmark.files import walk_files
from benchmark.log_check import LogReport, check_log
from benchmark.mllog_parse import ReadBudget
from benchmark.official import PackageOutcome, RcpOutcome, available_rulesets
from benchmark.problems import ERROR, Problem, count_errors, sort_key
from benchmark.rulesets import (DEFAULT_RULESET, GIVEN, LAST_BERT_ROUND, NOT_GIVEN, RULESETS,
                               ruleset as ruleset_facts)
from benchmark.submission import RESULT_NAME, check_result_folder, check_submission

FORMATS = ("text", "json", "csv", "markdown")
PROGRESS_FROM = 20  # logs; fewer are checked without a progress bar
PLOT_FORMATS = (".png", ".pdf", ".svg")  # what --plot writes (matplotlib picks by suffix)
EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_CODES = ("exit status: 0 no errors (warnings allowed); 1 errors found; 2 the command could "
              "not run (bad arguments, --plot impossible); 3 an internal error of the checker")
WARNINGS_SHOWN = 3  # per rule, without --verbose
MAX_TREE_DEPTH = 8  # folders below a given path searched for logs (<org>/results/<s>/bert: 3)
# Errors that explain the rest of their log: the log holds no records, or more than one run
# (resumed). Without --verbose they lead, and the other problems of that log are not listed.
ROOT_CAUSES = ("log/empty", "bert/single-run")


class UsageError(UserError):
    """The command line cannot be acted on; the message is the one line to print."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (and exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmark.check`."""
    parser = _Parser(prog="python -m benchmark.check",
                     description="Check MLPerf BERT result logs or a submission tree.",
                     epilog=EXIT_CODES)
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="a result log, a folder of result_*.txt, or a submission tree")
    parser.add_argument("--submission", action="append", default=[], metavar="ORG_DIR",
                        help="a submission tree: ORG_DIR/results/<system>/bert/result_N.txt "
                             "and ORG_DIR/systems/<system>.json")
    parser.add_argument("--ruleset", default=None, metavar="X.Y.Z",
                        help=f"the round's ruleset: {', '.join(RULESETS)} (BERT left MLPerf "
                             f"Training after {LAST_BERT_ROUND}). Default: the round of a "
                             f"training_results_vX.Y folder, else {LAST_BERT_ROUND} for logs "
                             f"that name opt_lamb_epsilon (rulesets 3.0.0 on), else "
                             f"{DEFAULT_RULESET}, for each log (a result folder or tree: for its "
                             f"first log); the verdict line names the ones used")
    parser.add_argument("--format", default="text", choices=FORMATS,
                        help="output format of the results (default text)")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="save eval accuracy vs samples trained per run (needs matplotlib)")
    parser.add_argument("--verbose", action="store_true",
                        help=f"list every warning (default: the first {WARNINGS_SHOWN} per rule)")
    parser.add_argument("--no_official", "--no-official", dest="official",
                        action="store_false",
                        help="skip the mlperf_logging checkers (BERT rules only)")
    return parser


@dataclass
class Group:
    """Runs that share a table and a score (a result folder, or the logs given one by one)."""
    label: str
    reports: list[LogReport]
    scored: list[bool]
    rcp: RcpOutcome | None = None
    package: PackageOutcome | None = None
    ruleset: str = DEFAULT_RULESET


@dataclass
class Verdict:
    """Everything one invocation found."""
    problems: list[Problem] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    ruleset: str = DEFAULT_RULESET
    ruleset_note: str = "given"

    @property
    def errors(self) -> int:
        """Number of errors."""
        return count_errors(self.problems)


def _is_submission(path: Path) -> bool:
    """A folder holding results/ (a submission tree)."""
    return path.is_dir() and (path / "results").is_dir()


def _is_result_folder(path: Path) -> bool:
    """A folder holding result_* files (one benchmark's runs)."""
    try:
        return path.is_dir() and any(p.name.startswith("result_") for p in path.iterdir())
    except OSError:
        return False


def _logs_under(folder: Path) -> Iterator[Path]:
    """The result_*.txt files under `folder`, at most MAX_TREE_DEPTH folders down (no
    recursion, no linked folders)."""
    return (path for path, _ in walk_files(folder, MAX_TREE_DEPTH)
            if RESULT_NAME.fullmatch(path.name))


def ruleset_line(given: str | None, reports: Sequence[LogReport]) -> tuple[str, str]:
    """(ruleset, why) for the verdict line: `given`; else the one every log was checked under
    and why (`benchmark.rulesets.detect`); else, logs of several rounds, each ruleset with
    its count of logs."""
    if given:
        return given, GIVEN
    chosen = Counter((r.ruleset, r.ruleset_why) for r in reports)
    if not chosen:
        return DEFAULT_RULESET, NOT_GIVEN
    if len(chosen) == 1:
        return next(iter(chosen))
    counts = Counter(r.ruleset for r in reports)
    if len(counts) == 1:
        return next(iter(counts)), "from the path of some logs, the records of the others"
    return "per log", ", ".join(f"{version} for {count} log(s)"
                                for version, count in sorted(counts.items())) + \
        ", each from its path or records (a result folder or tree: its first log's); give " \
        "--ruleset for one"


def _count_logs(paths: Sequence[str], submissions: Sequence[str]) -> int:
    """How many logs the paths name (result_*.txt under folders and trees, files as given)."""
    total = 0
    for raw in [*paths, *submissions]:
        path = Path(raw)
        if path.is_dir():
            total += sum(1 for _ in _logs_under(path))
        else:
            total += 1
    return total


def run_checks(paths: Sequence[str], submissions: Sequence[str], ruleset: str | None,
               official: bool) -> Verdict:
    """Check every path (log, result folder or submission tree) and submission tree, with a
    progress bar on stderr when it is a terminal and there are many logs. ruleset: the one
    of every log, or None: each log, result folder or tree under its own
    (`benchmark.rulesets.detect`); the verdict's ruleset line says which."""
    total = _count_logs(paths, submissions)
    with tqdm(total=total, unit="log", file=sys.stderr, desc="check",
              disable=total < PROGRESS_FROM or not sys.stderr.isatty()) as bar:
        return _run_checks(paths, submissions, ruleset, official, lambda: bar.update(1))


def _run_checks(paths: Sequence[str], submissions: Sequence[str], ruleset: str | None,
                official: bool, tick) -> Verdict:
    verdict = Verdict()
    budget = ReadBudget()  # the logs of this check together
    loose: list[LogReport] = []
    for raw in paths:
        path = Path(raw)
        if _is_submission(path):
            submissions = [*submissions, raw]
        elif path.is_dir() and _is_result_folder(path):
            folder = check_result_folder(raw, ruleset, official, tick, budget=budget)
            verdict.problems += folder.all_problems()
            verdict.groups.append(Group(raw, folder.logs, folder.scored, folder.rcp,
                                        ruleset=folder.ruleset))
        elif path.is_dir():
            verdict.problems.append(Problem(raw, 0, "input/path",
                                            "a folder with neither result_*.txt files nor a "
                                            "results/ tree; nothing to check"))
        else:
            report = check_log(raw, ruleset, official, budget)
            tick()
            loose.append(report)
            verdict.problems += report.problems
    if loose:
        label = loose[0].path if len(loose) == 1 else f"{len(loose)} logs"
        verdict.groups.insert(0, Group(label, loose, [True] * len(loose),
                                       ruleset=loose[0].ruleset))
    for org in submissions:
        report = check_submission(org, ruleset, official, tick, budget)
        verdict.problems += report.all_problems()
        for i, folder in enumerate(report.folders):
            verdict.groups.append(Group(folder.folder, folder.logs, folder.scored, folder.rcp,
                                        report.package if i == 0 else None, report.ruleset))
        if not report.folders and report.package is not None:
            verdict.groups.append(Group(org, [], [], None, report.package, report.ruleset))
    verdict.problems = sorted(set(verdict.problems), key=sort_key)
    verdict.ruleset, verdict.ruleset_note = ruleset_line(
        ruleset, [log for group in verdict.groups for log in group.reports])
    return verdict


def _rcp_line(rcp: RcpOutcome) -> str:
    if not rcp.ran:
        return f"RCP check: skipped ({rcp.message})"
    result = "passed" if rcp.passed else "FAILED"
    scale = f"; score normalization factor {rcp.norm_factor:.4f}" if rcp.norm_factor != 1 else ""
    numbers = f"; {rcp.numbers}" if rcp.numbers else ""
    return f"RCP check: {result} ({rcp.message}{numbers}){scale}"


def _facts(group: Group, score: summary.Score | None) -> list[str]:
    """The one-line results of a group: score, RCP-normalized score, RCP, package checker."""
    lines = []
    facts = ruleset_facts(group.ruleset)
    if score is not None:
        lines.append(summary.render_score(score, facts.score_decimals))
        if score.minutes is not None and group.rcp and group.rcp.ran \
                and math.isfinite(group.rcp.norm_factor) and group.rcp.norm_factor != 1:
            published = " (the published result in this round)" if facts.rcp_normalized_score \
                else ""
            normalized = score.minutes * group.rcp.norm_factor
            lines.append(f"RCP-normalized score: {normalized:.{facts.score_decimals}f} "
                         f"minutes{published}")
    if group.rcp is not None:
        lines.append(_rcp_line(group.rcp))
    if group.package is not None:
        lines.append(f"package checker: {'passed' if group.package.passed else 'FAILED'}")
    return lines


def _group_text(group: Group, fmt: str) -> str:
    """A group as text (title, table, facts) or markdown (heading, table, bullet facts)."""
    table = summary.runs_table(group.reports, group.scored) if group.reports else None
    facts = _facts(group, summary.table_score(table) if table is not None else None)
    title = f"{printable(group.label)}: {len(group.reports)} run(s)"
    if fmt == "markdown":
        parts = [f"### {title}"]
        if table is not None:
            parts.append(summary.render_table(table, "markdown"))
        parts.append("\n".join(f"- {fact}" for fact in facts))
        return "\n\n".join(parts)
    parts = [f"== {title} =="]
    if table is not None:
        parts.append(summary.render_table(table, "text"))
    return "\n".join(parts + facts)


def _groups_csv(groups: list[Group]) -> str:
    """Every run of every group as one CSV table, with a leading "group" column."""
    import pandas as pd
    tables = [summary.runs_table(g.reports, g.scored).assign(group=g.label)
              for g in groups if g.reports]
    if not tables:
        return ",".join(["group", *summary.COLUMNS])
    table = pd.concat(tables, ignore_index=True)
    return summary.render_table(table[["group", *summary.COLUMNS]], "csv")


def _verdict_line(verdict: Verdict, folded: int = 0) -> str:
    """The last line: PASSED or FAILED, the counts (and how many problems `folded` left out,
    see `_fold`), the ruleset and why."""
    errors = verdict.errors
    warnings = len(verdict.problems) - errors
    word = "FAILED" if errors else "PASSED"
    note = "" if verdict.ruleset_note == "given" else f", {verdict.ruleset_note}"
    hidden = (f"; {folded} of them follow from the first error shown for their log "
              "(--verbose lists them)") if folded else ""
    return (f"{word}: {errors} error(s), {warnings} warning(s){hidden} "
            f"(ruleset {verdict.ruleset}{note})")


def _fold(problems: Sequence[Problem]) -> tuple[list[Problem], list[Problem], int]:
    """(the ROOT_CAUSES errors, the problems of the logs without one, how many problems of
    the logs with one are left out)."""
    causes = [p for p in problems if p.severity == ERROR and p.rule in ROOT_CAUSES]
    explained = {p.path for p in causes}
    rest = [p for p in problems if p.path not in explained]
    return causes, rest, len(problems) - len(causes) - len(rest)


def _problem_lines(problems: Sequence[Problem], verbose: bool) -> tuple[list[str], int]:
    """(the lines, the problems left out). Every error on its own line; warnings grouped by
    rule, each group a count and its first WARNINGS_SHOWN instances (all with `verbose`).
    Without `verbose` a log with a ROOT_CAUSES error shows that error first and nothing
    else."""
    causes, folded = [], 0
    if not verbose:
        causes, problems, folded = _fold(problems)
    lines = [p.format() for p in causes]
    lines += [p.format() for p in problems if p.severity == ERROR]
    by_rule: dict[str, list[Problem]] = defaultdict(list)
    for problem in problems:
        if problem.severity != ERROR:
            by_rule[problem.rule].append(problem)
    for rule, found in sorted(by_rule.items()):
        logs = len({p.path for p in found})
        lines.append(f"warnings: {rule}: {len(found)} in {logs} file(s)")
        shown = found if verbose else found[:WARNINGS_SHOWN]
        lines += [f"  {p.format()}" for p in shown]
        if len(found) > len(shown):
            lines.append(f"  ... {len(found) - len(shown)} more (--verbose lists them)")
    return lines, folded


def _json_rows(table) -> list[dict]:
    """Table rows as JSON-ready dicts: missing values and non-finite floats become null."""
    rows = []
    for row in table.astype(object).to_dict(orient="records"):
        clean = {}
        for key, value in row.items():
            value = value.item() if hasattr(value, "item") else value  # numpy scalars
            missing = value is None or (isinstance(value, float) and not math.isfinite(value))
            clean[key] = None if missing or (not isinstance(value, (str, bool, int, float))) \
                else value
        rows.append(clean)
    return rows


def render_json(verdict: Verdict) -> str:
    """The verdict as one JSON object."""
    groups = []
    for group in verdict.groups:
        table = summary.runs_table(group.reports, group.scored)
        entry = {"label": group.label, "runs": _json_rows(table),
                 "score": summary.score_dict(summary.table_score(table))}
        if group.rcp is not None:
            norm = group.rcp.norm_factor
            entry["rcp"] = {"ran": group.rcp.ran, "passed": group.rcp.passed,
                            "message": group.rcp.message,
                            "norm_factor": norm if math.isfinite(norm) else None}
        if group.package is not None:
            entry["package_checker"] = {"passed": group.package.passed}
        groups.append(entry)
    errors = verdict.errors
    return json.dumps({"verdict": "fail" if errors else "pass", "errors": errors,
                       "ruleset": verdict.ruleset, "ruleset_note": verdict.ruleset_note,
                       "warnings": len(verdict.problems) - errors,
                       "problems": [p.as_dict() for p in verdict.problems],
                       "groups": groups}, indent=2, allow_nan=False)


class _Printable:
    """A text stream that writes through `printable` (newlines kept): whatever slipped
    through unescaped, no control character reaches the terminal."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text, keep_newlines=True))

    def flush(self) -> None:
        self._stream.flush()


def emit(verdict: Verdict, fmt: str, out: TextIO | None = None,
         err: TextIO | None = None, verbose: bool = False, notes: Sequence[str] = ()) -> None:
    """Print the verdict in `fmt` to `out` (default stdout) and `err` (default stderr);
    `verbose`: every warning, not the first few per rule; `notes`: lines printed just before
    the verdict line (where a plot went), on stderr with --format json."""
    out = _Printable(out or sys.stdout)
    err = _Printable(err or sys.stderr)
    if fmt == "json":
        print(render_json(verdict), file=out)
        for note in notes:
            print(note, file=err)
        return
    side = out if fmt == "text" else err  # csv/markdown keep stdout for the table
    lines, folded = _problem_lines(verdict.problems, verbose)
    for line in lines:
        print(line, file=side)
    if fmt == "csv":
        print(_groups_csv(verdict.groups), file=out)
        for group in verdict.groups:
            table = summary.runs_table(group.reports, group.scored) if group.reports else None
            for fact in _facts(group, summary.table_score(table) if table is not None else None):
                print(f"{printable(group.label)}: {fact}", file=err)
    else:
        for group in verdict.groups:
            print(file=out)
            print(_group_text(group, fmt), file=out)
    for note in notes:
        print(note, file=side)
    print(_verdict_line(verdict, folded), file=side)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checker; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        if not args.paths and not args.submission:
            raise UsageError("give a log, a result folder or --submission ORG_DIR "
                             "(make check LOG=path or SUBMISSION=submissions/<org>)")
        missing = [raw for raw in [*args.paths, *args.submission] if not os.path.lexists(raw)]
        if missing:
            raise UsageError(f"no such file or folder: {missing[0]}")
        ruleset = args.ruleset
        try:
            ruleset_facts(ruleset or DEFAULT_RULESET)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
        if args.official and ruleset and ruleset not in available_rulesets():
            raise UsageError(f"the installed mlperf_logging has no BERT rules for {ruleset}; "
                             f"it has {', '.join(available_rulesets())}")
        if args.plot:
            reason = summary.plot_available()
            if reason:
                raise UsageError(reason)
            plot = Path(args.plot)
            if plot.is_dir():
                raise UsageError(f"--plot {args.plot} is a folder; give a file name such as "
                                 f"{plot / 'accuracy.png'}")
            if plot.suffix.lower() not in PLOT_FORMATS:
                raise UsageError(f"--plot {args.plot}: give a file name ending in "
                                 f"{', '.join(PLOT_FORMATS)}")
            if not plot.resolve().parent.is_dir():
                raise UsageError(f"cannot write the plot: no folder {plot.parent}")
    except UsageError as exc:
        print(f"check: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    verdict = run_checks(args.paths, args.submission, ruleset, args.official)
    notes, status = [], EXIT_ERRORS if verdict.errors else EXIT_OK
    if args.plot:
        try:
            drawn = summary.plot_runs([r for g in verdict.groups for r in g.reports], args.plot)
            notes.append(f"plot: {drawn} run(s) drawn in {args.plot}")
        except summary.PlotError as exc:
            notes.append(f"check: {exc}")
            status = EXIT_USAGE
    emit(verdict, args.format, verbose=args.verbose, notes=notes)
    return status


def entry_point() -> None:
    """`python -m benchmark.check`: main() with a one-line message for anything unexpected;
    output never fails on the terminal's encoding (LANG=C, PYTHONIOENCODING=ascii)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        status = main()
    except KeyboardInterrupt:
        print("check: interrupted", file=sys.stderr)
        status = 130
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = EXIT_ERRORS
    except Exception as exc:  # noqa: BLE001 - never a traceback, whatever the input
        print(f"check: internal error: {type(exc).__name__}: {printable(exc)}"[:2000],
              file=sys.stderr)
        status = EXIT_INTERNAL
    sys.exit(status)


if __name__ == "__main__":
    entry_point()
