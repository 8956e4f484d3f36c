"""One problem found in a log or a submission tree, and its one-line form.

Every checker (the log parser, the BERT rules, the official-checker wrappers, the submission
tree check) reports `Problem`s; the CLI prints them as `file:line: rule: message`. Paths and
messages hold text from the input (file names, log values), so everything printed from them
goes through `printable`: a file name with a newline cannot start a line of its own (a fake
verdict) and a log value with a terminal escape cannot clear the screen.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from benchmark.errors import printable

ERROR = "error"
WARNING = "warning"
MAX_MESSAGE_CHARS = 2000  # a message longer than this is cut (a 300-digit number, a long path)


# The source of an error whose check gives none, by the family of its rule (the part of the
# rule's name before "/"): what the official tools and rules read, and where that is said.
FAMILY_SOURCES = {
    "official": "mlperf_logging compliance checker, the round's training_<ruleset>/*.yaml",
    "package": "mlperf_logging package checker (submission layout, seeds, RCPs, system "
               "descriptions)",
    "log": "mllog format (mlcommons/logging): each record a JSON object after ':::MLLOG ' "
           "with key, value, time_ms, event_type and metadata",
    "submission": "MLPerf submission layout read by the package checker: "
                  "<org>/results/<system>/bert/result_*.txt and <org>/systems/<system>.json",
    "rcp": "training_rules.adoc, Reference Convergence Points",
    "input": "the checker's command line: a log, a folder of result_*.txt or a submission tree",
    "internal": "a fault of this checker (please report it): the input was not judged",
}


@dataclass(frozen=True)
class Problem:
    """A rule broken at one place.

    path: the file (or folder) the problem is in, as the user named it.
    line: 1-based line number in that file; 0 when the problem concerns the whole file.
    rule: the rule's name, e.g. "bert/eval-cadence" or "official/run_stop".
    message: what is wrong, one line.
    severity: "error" (makes the check fail) or "warning" (reported only).
    source: the rule text or official YAML an error enforces; when a check gives none, the
        source of its rule's family (`FAMILY_SOURCES`).
    forgiven_by: for an error made a warning (`downgraded`), the note saying why.
    """
    path: str
    line: int
    rule: str
    message: str
    severity: str = ERROR
    source: str = ""
    forgiven_by: str = ""

    def __post_init__(self) -> None:
        if not self.source and self.severity == ERROR:
            family = self.rule.split("/", 1)[0]
            object.__setattr__(self, "source", FAMILY_SOURCES.get(family, ""))

    def format(self) -> str:
        """`path:line: rule: message`, with `warning: ` before the message for warnings and
        the source in brackets after an error's message."""
        text = printable(" ".join(self.message.split()))  # always exactly one line
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS - 3] + "..."
        prefix = "warning: " if self.severity == WARNING else ""
        source = f" [{printable(self.source)}]" if self.source and self.severity == ERROR else ""
        return f"{printable(self.path)}:{self.line}: {printable(self.rule)}: {prefix}{text}{source}"

    def as_dict(self) -> dict:
        """The problem as a JSON-ready dict."""
        return asdict(self)

    def downgraded(self, note: str) -> "Problem":
        """This problem as a warning, with `note` appended to the message and kept as
        `forgiven_by`."""
        return Problem(self.path, self.line, self.rule, f"{self.message} ({note})", WARNING,
                       self.source, note)


def count_errors(problems: list[Problem]) -> int:
    """How many of `problems` are errors."""
    return sum(p.severity == ERROR for p in problems)


def sort_key(problem: Problem) -> tuple:
    """Order problems by file, then line, then rule."""
    return (problem.path, problem.line, problem.rule, problem.message)
