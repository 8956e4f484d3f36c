"""One problem found in a log or a submission tree, and its one-line form.

Every checker (the log parser, the BERT rules, the official-checker wrappers, the submission
tree check) reports `Problem`s; the CLI prints them as `file:line: rule: message`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """A rule broken at one place.

    path: the file (or folder) the problem is in, as the user named it.
    line: 1-based line number in that file; 0 when the problem concerns the whole file.
    rule: the rule's name, e.g. "bert/eval-cadence" or "official/run_stop".
    message: what is wrong, one line.
    severity: "error" (makes the check fail) or "warning" (reported only).
    source: the rule text or official YAML an error enforces ("" where the rule's name says
        it: official/..., log/..., submission/...).
    """
    path: str
    line: int
    rule: str
    message: str
    severity: str = ERROR
    source: str = ""

    def format(self) -> str:
        """`path:line: rule: message`, with `warning: ` before the message for warnings and
        the source in brackets after an error's message."""
        text = " ".join(self.message.split())  # always exactly one line
        prefix = "warning: " if self.severity == WARNING else ""
        source = f" [{self.source}]" if self.source and self.severity == ERROR else ""
        return f"{self.path}:{self.line}: {self.rule}: {prefix}{text}{source}"

    def as_dict(self) -> dict:
        """The problem as a JSON-ready dict."""
        return asdict(self)

    def downgraded(self, note: str) -> "Problem":
        """This problem as a warning, with `note` appended to the message."""
        return Problem(self.path, self.line, self.rule, f"{self.message} ({note})", WARNING,
                       self.source)


def count_errors(problems: list[Problem]) -> int:
    """How many of `problems` are errors."""
    return sum(p.severity == ERROR for p in problems)


def sort_key(problem: Problem) -> tuple:
    """Order problems by file, then line, then rule."""
    return (problem.path, problem.line, problem.rule, problem.message)
