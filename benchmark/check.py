"""`make check`: check BERT logs or a submission tree against the official and the BERT rules.

    python -m benchmark.check LOG [LOG ...]              one or more result logs
    python -m benchmark.check results/<system>/bert      a folder of result_*.txt (+ RCP check)
    python -m benchmark.check --submission submissions/<org>
                              [--ruleset 1.0.0] [--format text|json|csv|markdown]
                              [--plot accuracy.png] [--no-official]

Prints one line per problem, `file:line: rule: message` (line 0: the whole file), then a table
of the runs and the olympic score. Exit status: 0 no errors (warnings allowed), 1 errors found,
2 the command itself could not run (bad arguments, --plot impossible).
With --format json everything is one JSON object on stdout; with csv or markdown the table goes
to stdout and the problem lines to stderr.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, TextIO

from tqdm import tqdm

from benchmark.errors import UserError
from benchmark.log_check import LogReport, check_log
from benchmark.official import PackageOutcome, RcpOutcome, available_rulesets
from benchmark.rulesets import DEFAULT_RULESET, ruleset as ruleset_facts
from benchmark.problems import Problem, count_errors, sort_key
from benchmark.submission import check_result_folder, check_submission
from benchmark import summary

FORMATS = ("text", "json", "csv", "markdown")
PROGRESS_FROM = 20  # logs; fewer are checked without a progress bar
PLOT_FORMATS = (".png", ".pdf", ".svg")  # what --plot writes (matplotlib picks by suffix)
EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2


class UsageError(UserError):
    """The command line cannot be acted on; the message is the one line to print."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line (and exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m benchmark.check`."""
    parser = _Parser(prog="python -m benchmark.check",
                     description="Check MLPerf BERT result logs or a submission tree.")
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="a result log, a folder of result_*.txt, or a submission tree")
    parser.add_argument("--submission", action="append", default=[], metavar="ORG_DIR",
                        help="a submission tree: ORG_DIR/results/<system>/bert/result_N.txt "
                             "and ORG_DIR/systems/<system>.json")
    parser.add_argument("--ruleset", default=DEFAULT_RULESET,
                        help=f"official ruleset for the mlperf_logging checkers "
                             f"(default {DEFAULT_RULESET})")
    parser.add_argument("--format", default="text", choices=FORMATS,
                        help="output format of the results (default text)")
    parser.add_argument("--plot", metavar="OUT.png",
                        help="save eval accuracy vs samples trained per run (needs matplotlib)")
    parser.add_argument("--no-official", dest="official", action="store_false",
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


def _count_logs(paths: Sequence[str], submissions: Sequence[str]) -> int:
    """How many logs the paths name (result_*.txt under folders and trees, files as given)."""
    total = 0
    for raw in [*paths, *submissions]:
        path = Path(raw)
        if path.is_dir():
            total += sum(1 for p in path.rglob("result_*.txt") if p.is_file())
        else:
            total += 1
    return total


def run_checks(paths: Sequence[str], submissions: Sequence[str], ruleset: str,
               official: bool) -> Verdict:
    """Check every path (log, result folder or submission tree) and submission tree, with a
    progress bar on stderr when it is a terminal and there are many logs."""
    total = _count_logs(paths, submissions)
    with tqdm(total=total, unit="log", file=sys.stderr, desc="check",
              disable=total < PROGRESS_FROM or not sys.stderr.isatty()) as bar:
        return _run_checks(paths, submissions, ruleset, official, lambda: bar.update(1))


def _run_checks(paths: Sequence[str], submissions: Sequence[str], ruleset: str,
                official: bool, tick) -> Verdict:
    verdict = Verdict()
    loose: list[LogReport] = []
    for raw in paths:
        path = Path(raw)
        if _is_submission(path):
            submissions = [*submissions, raw]
        elif path.is_dir() and _is_result_folder(path):
            folder = check_result_folder(raw, ruleset, official, tick)
            verdict.problems += folder.all_problems()
            verdict.groups.append(Group(raw, folder.logs, folder.scored, folder.rcp,
                                        ruleset=ruleset))
        elif path.is_dir():
            verdict.problems.append(Problem(raw, 0, "input/path",
                                            "a folder with neither result_*.txt files nor a "
                                            "results/ tree; nothing to check"))
        else:
            report = check_log(raw, ruleset, official)
            tick()
            loose.append(report)
            verdict.problems += report.problems
    if loose:
        label = loose[0].path if len(loose) == 1 else f"{len(loose)} logs"
        verdict.groups.insert(0, Group(label, loose, [True] * len(loose), ruleset=ruleset))
    for org in submissions:
        report = check_submission(org, ruleset, official, tick)
        verdict.problems += report.all_problems()
        for i, folder in enumerate(report.folders):
            verdict.groups.append(Group(folder.folder, folder.logs, folder.scored, folder.rcp,
                                        report.package if i == 0 else None, ruleset))
        if not report.folders and report.package is not None:
            verdict.groups.append(Group(org, [], [], None, report.package, ruleset))
    verdict.problems = sorted(set(verdict.problems), key=sort_key)
    return verdict


def _rcp_line(rcp: RcpOutcome) -> str:
    if not rcp.ran:
        return f"RCP check: skipped ({rcp.message})"
    result = "passed" if rcp.passed else "FAILED"
    scale = f"; score normalization factor {rcp.norm_factor:.4f}" if rcp.norm_factor != 1 else ""
    return f"RCP check: {result} ({rcp.message}){scale}"


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
            lines.append(f"RCP-normalized score: {score.minutes * group.rcp.norm_factor:.{facts.score_decimals}f} "
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
    title = f"{group.label}: {len(group.reports)} run(s)"
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


def _verdict_line(verdict: Verdict) -> str:
    errors = verdict.errors
    warnings = len(verdict.problems) - errors
    word = "FAILED" if errors else "PASSED"
    return f"{word}: {errors} error(s), {warnings} warning(s)"


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
                       "warnings": len(verdict.problems) - errors,
                       "problems": [p.as_dict() for p in verdict.problems],
                       "groups": groups}, indent=2, allow_nan=False)


def emit(verdict: Verdict, fmt: str, out: TextIO | None = None,
         err: TextIO | None = None) -> None:
    """Print the verdict in `fmt` to `out` (default stdout) and `err` (default stderr)."""
    out = out or sys.stdout
    err = err or sys.stderr
    if fmt == "json":
        print(render_json(verdict), file=out)
        return
    side = out if fmt == "text" else err  # csv/markdown keep stdout for the table
    for problem in verdict.problems:
        print(problem.format(), file=side)
    if fmt == "csv":
        print(_groups_csv(verdict.groups), file=out)
        for group in verdict.groups:
            table = summary.runs_table(group.reports, group.scored) if group.reports else None
            for fact in _facts(group, summary.table_score(table) if table is not None else None):
                print(f"{group.label}: {fact}", file=err)
    else:
        for group in verdict.groups:
            print(file=out)
            print(_group_text(group, fmt), file=out)
    print(_verdict_line(verdict), file=side)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checker; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        if not args.paths and not args.submission:
            raise UsageError("give a log, a result folder or --submission ORG_DIR "
                             "(make check LOG=path or SUBMISSION=submissions/<org>)")
        rulesets = available_rulesets()
        if args.ruleset not in rulesets:
            raise UsageError(f"unknown ruleset {args.ruleset!r}; choose from "
                             f"{', '.join(rulesets)}")
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
        print(f"check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    verdict = run_checks(args.paths, args.submission, args.ruleset, args.official)
    emit(verdict, args.format)
    if args.plot:
        try:
            summary.plot_runs([r for g in verdict.groups for r in g.reports], args.plot)
        except summary.PlotError as exc:
            print(f"check: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_ERRORS if verdict.errors else EXIT_OK


def entry_point() -> None:
    """`python -m benchmark.check`: main() with a one-line message for anything unexpected."""
    try:
        status = main()
    except KeyboardInterrupt:
        print("check: interrupted", file=sys.stderr)
        status = 130
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = EXIT_ERRORS
    except Exception as exc:  # noqa: BLE001 - never a traceback, whatever the input
        print(f"check: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = 3
    sys.exit(status)


if __name__ == "__main__":
    entry_point()
