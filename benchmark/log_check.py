"""Check one BERT log: parse it, apply the BERT rules and the official compliance checker.

`check_log(path)` never raises: an unreadable file is a `log/read` problem.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from benchmark.log_view import LogView, build_view
from benchmark.log_view import MAX_RUN_MINUTES, PLAUSIBLE_TIME_MS
from benchmark.mllog_parse import LogReadError, ParsedLog, ReadBudget, parse_log
from benchmark.official import ComplianceOutcome, run_compliance
from benchmark.rulesets import DEFAULT_RULESET, GIVEN, detect
from benchmark.problems import Problem, count_errors, sort_key
from benchmark.rules import NOT_LOGGED, run_rules


@dataclass
class LogReport:
    """The verdict on one log.

    path: the log file.
    view: what the log says about the run (None if the file could not be read).
    official: the official compliance checker's outcome (None if not run).
    problems: everything found, sorted by line.
    ruleset, ruleset_why: the ruleset it was checked under and why that one
        (`benchmark.rulesets.detect`; "given").
    """
    path: str
    view: LogView | None = None
    official: ComplianceOutcome | None = None
    problems: list[Problem] = field(default_factory=list)
    ruleset: str = DEFAULT_RULESET
    ruleset_why: str = GIVEN

    @property
    def errors(self) -> int:
        """Number of error-severity problems."""
        return count_errors(self.problems)

    @property
    def passed(self) -> bool:
        """No errors."""
        return self.errors == 0


def _drop_official_duplicates(problems: list[Problem], official: list[Problem]) -> list[Problem]:
    """`problems` without the missing hyperparameters the official checker already reports
    (one line per problem)."""
    reported = {p.rule.split("/", 1)[1] for p in official}
    kept = []
    for problem in problems:
        if problem.rule == "bert/hyperparameters" and problem.message.startswith(NOT_LOGGED):
            keys = [key for key in problem.message[len(NOT_LOGGED):].split(", ")
                    if key not in reported]
            if not keys:
                continue
            problem = Problem(problem.path, problem.line, problem.rule,
                              NOT_LOGGED + ", ".join(keys), problem.severity)
        kept.append(problem)
    return kept


def _implausible_times(view: LogView) -> list[Problem]:
    """run_start and run_stop must be milliseconds of a date 1990-2100 and at most
    MAX_RUN_MINUTES apart: the run time is read from them, and a value such as 1e308 would
    otherwise be printed as a 300-digit number of minutes."""
    problems = []
    low, high = PLAUSIBLE_TIME_MS
    for record in (view.run_start, view.run_stop):
        if record is not None and not low <= record.time_ms < high:
            problems.append(Problem(
                view.path, record.line, "log/time-ms",
                f"{record.key} at time_ms {record.time_ms:.6g} is not a time of 1990-2100 in "
                "milliseconds since the epoch; the run time cannot be read from it"))
    start, stop = view.run_start, view.run_stop
    if not problems and start is not None and stop is not None \
            and stop.time_ms - start.time_ms > MAX_RUN_MINUTES * 60_000:
        problems.append(Problem(
            view.path, stop.line, "log/time-ms",
            f"run_stop is {(stop.time_ms - start.time_ms) / 86_400_000:,.0f} days after "
            f"run_start (line {start.line}); a run longer than "
            f"{MAX_RUN_MINUTES // 1440} days is not a time to train BERT"))
    return problems


def check_parsed(parsed: ParsedLog, ruleset: str = DEFAULT_RULESET,
                 official: bool = True) -> LogReport:
    """Apply the BERT rules and (if `official`) the official checker to a parsed log."""
    view = build_view(parsed, ruleset)
    problems = list(parsed.problems) + run_rules(view) + _implausible_times(view)
    outcome = None
    if official:
        outcome = run_compliance(parsed, ruleset)
        problems = _drop_official_duplicates(problems, outcome.problems) + outcome.problems
    unique = sorted(set(problems), key=sort_key)
    return LogReport(parsed.path, view, outcome, unique, ruleset)


def check_log(path: str, ruleset: str | None = DEFAULT_RULESET, official: bool = True,
              budget: ReadBudget | None = None, why: str = GIVEN) -> LogReport:
    """Check the log at `path` (see `check_parsed`); never raises. budget: what the logs of
    this check may still hold together (`benchmark.mllog_parse.ReadBudget`).
    ruleset: the one to check it under (`why`: the reason shown), or None for the one its
    path or its records point to (`benchmark.rulesets.detect`)."""
    try:
        parsed = parse_log(path, budget)
    except LogReadError as exc:
        ruleset, why = (ruleset, why) if ruleset else detect(path, None)
        return LogReport(path, problems=[Problem(path, 0, "log/read", f"cannot read: {exc}")],
                         ruleset=ruleset, ruleset_why=why)
    if not ruleset:
        ruleset, why = detect(path, (record.key for record in parsed.records))
    try:
        report = check_parsed(parsed, ruleset, official)
    except Exception as exc:  # noqa: BLE001 - one odd log must not stop the others
        report = LogReport(path, problems=[Problem(
            path, 0, "internal/crash",
            f"the checker failed on this log ({type(exc).__name__}: {exc}); please report it")])
    report.ruleset, report.ruleset_why = ruleset, why
    return report
