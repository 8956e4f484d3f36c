"""How far `make check` agrees with MLCommons on published results: one table row per round.

    python -m devtools.agreement --logging_repo DIR v1.0=DIR v1.1=DIR ... v5.0=DIR

Each positional argument names a round and a local copy of its results repository
(github.com/mlcommons/training_results_vX.Y). Every BERT result folder in it
(`<submitter>/results/<system>/bert/`) is checked under the round's ruleset by our checker,
and every log by the compliance checker MLCommons ran that round: the `mlperf_logging` of
the round's tag in a clone of github.com/mlcommons/logging (`--logging_repo`,
`devtools.round_checker`). Without a clone the round's verdict is approximated by the
installed checker with the round's known leniency (`benchmark.rulesets`), and the output says
so. Our checker agrees on a log when it fails exactly the logs the round's checker fails. A
log the round's checker passed that we fail only for a training-rule sentence the compliance
checker does not test (`benchmark.rules.Rule.beyond_official`) is an accepted result breaking
that rule: listed by rule and folder, not counted as a disagreement. Exit status 1 when any
log disagrees, 0 otherwise.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from benchmark import summary
from benchmark.errors import UserError, printable
from benchmark.log_check import LogReport
from benchmark.official import untrusted_values
from benchmark.problems import ERROR
from benchmark.rules import BEYOND_OFFICIAL
from benchmark.rulesets import RULESETS
from benchmark.submission import OLYMPIC_NOTE, ResultFolder, check_result_folder
from devtools.round_checker import RoundVerdict, cache_folder, round_verdicts

DEFAULT_CACHE = Path("build/round_checkers")


@dataclass
class RoundAgreement:
    """The counts of one round (see `agree`).

    official_pass: logs the round's checker passed (`round_checker` says which checker).
    scores: {folder: olympic score in minutes}; published: {folder: the score as the round's
        results table gives it (from v2.1 RCP-normalized), at full precision}.
    breaches: {rule: {folder: logs}} of logs the round's checker passed that break a rule
        sentence only our checker tests.
    """
    name: str
    ruleset: str
    round_checker: str = ""
    logs: int = 0
    installed_pass: int = 0
    official_pass: int = 0
    ours_pass: int = 0
    false_errors: list[str] = field(default_factory=list)
    false_passes: list[str] = field(default_factory=list)
    breaches: dict[str, dict[str, int]] = field(default_factory=dict)
    folders: int = 0
    scored_folders: int = 0
    seconds: float = 0.0
    scores: dict[str, float | None] = field(default_factory=dict)
    published: dict[str, float | None] = field(default_factory=dict)

    def row(self) -> list[str]:
        """The round as a row of `COLUMNS`."""
        per_log = self.seconds / self.logs if self.logs else 0.0
        breaking = sum(sum(f.values()) for f in self.breaches.values())
        return [self.name, self.ruleset, self.round_checker, f"{self.logs:,}",
                f"{self.installed_pass:,}", f"{self.official_pass:,}", f"{self.ours_pass:,}",
                str(len(self.false_errors)), str(len(self.false_passes)), str(breaking),
                f"{self.scored_folders}/{self.folders}", f"{per_log:.3f}"]


COLUMNS = ["round", "ruleset", "round's checker", "logs", "installed 4.1.68 passes",
           "round's checker passes", "ours passes", "ours fails, round passes",
           "ours passes, round fails", "accepted, breaking a rule", "folders with a score",
           "s/log"]


def ruleset_of(round_name: str) -> str:
    """"v1.0" -> "1.0.0"; a KeyError if the round has no BERT ruleset."""
    version = round_name.lstrip("v") + ".0"
    if version not in RULESETS:
        raise KeyError(f"no BERT ruleset for round {round_name!r} (BERT rounds: "
                       f"{', '.join('v' + v[:-2] for v in RULESETS)})")
    return version


def result_folders(repository: Path) -> list[Path]:
    """Every `<submitter>/results/<system>/bert` folder holding result files."""
    return sorted(p for p in repository.glob("*/results/*/bert")
                  if any(p.glob("result_*.txt")))


def _error_rules(log: LogReport) -> set[str]:
    """The rules of our errors on `log`, counting those downgraded by olympic scoring."""
    return {p.rule for p in log.problems if p.severity == ERROR or p.forgiven_by == OLYMPIC_NOTE}


def _tally(result: RoundAgreement, folder: ResultFolder,
           verdicts: dict[str, RoundVerdict] | None) -> None:
    """Add one checked folder's logs and score to `result`."""
    result.folders += 1
    for log, ours in zip(folder.logs, folder.scored):  # scored: our verdict before olympic
        installed = log.official
        if verdicts is None:
            official = installed.passed if installed else ours
        else:
            official = log.path in verdicts and verdicts[log.path].passed
        result.logs += 1
        result.installed_pass += bool(installed and installed.installed_passed)
        result.official_pass += official
        result.ours_pass += ours
        if official and not ours:
            rules = _error_rules(log)
            if rules and rules <= BEYOND_OFFICIAL:
                for rule in rules:
                    counts = result.breaches.setdefault(rule, {})
                    counts[folder.folder] = counts.get(folder.folder, 0) + 1
            else:
                result.false_errors.append(log.path)
        if ours and not official:
            result.false_passes.append(log.path)
    score = summary.table_score(summary.runs_table(folder.logs, folder.scored)).minutes
    result.scores[folder.folder] = score
    norm = folder.rcp.norm_factor if folder.rcp is not None and folder.rcp.ran else 1.0
    normalized = RULESETS[result.ruleset].rcp_normalized_score and math.isfinite(norm)
    result.published[folder.folder] = score * norm if score is not None and normalized else score
    result.scored_folders += score is not None


def agree(name: str, repository: Path, logging_repo: Path | None = None,
          cache_dir: Path = DEFAULT_CACHE, progress: bool = False) -> RoundAgreement:
    """Check every BERT result of `repository` (round `name`) and count the agreement with
    the round's checker (from `logging_repo`; None: the installed one with leniency)."""
    ruleset = ruleset_of(name)
    result = RoundAgreement(name, ruleset)
    folders = result_folders(repository)
    total = sum(len(list(f.glob("result_*.txt"))) for f in folders)
    start = time.perf_counter()
    with tqdm(total=total * (2 if logging_repo else 1), unit="log", desc=name,
              file=sys.stderr, disable=not progress) as bar:
        checked = [check_result_folder(str(f), ruleset, True, lambda: bar.update(1))
                   for f in folders]
        verdicts = None
        if logging_repo is not None:
            trusted = [log.path for folder in checked for log in folder.logs
                       if log.view is not None and not untrusted_values(log.view.parsed)]
            verdicts = round_verdicts(trusted, ruleset, logging_repo, cache_dir,
                                      lambda: bar.update(1))
            tag = RULESETS[ruleset].checker_tag
            result.round_checker = f"mlperf_logging {tag[:10] if len(tag) == 40 else tag}"
        else:
            result.round_checker = "installed, with the round's leniency"
    for folder in checked:
        _tally(result, folder, verdicts)
    result.seconds = time.perf_counter() - start
    return result


def markdown(rounds: Sequence[RoundAgreement]) -> str:
    """The rounds as a markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r.row()) + " |" for r in rounds]
    return "\n".join(lines)


def breaches_text(rounds: Sequence[RoundAgreement]) -> list[str]:
    """One line per rule and folder of accepted results that break a rule sentence."""
    by_rule: dict[str, list[str]] = defaultdict(list)
    for result in rounds:
        for rule, folders in sorted(result.breaches.items()):
            by_rule[rule] += [f"{folder} ({logs} log(s))"
                              for folder, logs in sorted(folders.items())]
    return [f"accepted, breaking {rule}: {entry}" for rule, entries in sorted(by_rule.items())
            for entry in entries]


def _parse(argv: Sequence[str] | None) -> tuple[list[tuple[str, Path]], argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m devtools.agreement",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="+", metavar="vX.Y=DIR",
                        help="a round and a local copy of its training_results repository")
    parser.add_argument("--logging_repo", type=Path, metavar="DIR",
                        help="a clone of github.com/mlcommons/logging (with tags): each round's "
                             "own checker gives the official verdicts")
    parser.add_argument("--cache_dir", type=Path, default=DEFAULT_CACHE, metavar="DIR",
                        help=f"where the rounds' checkers are unpacked (default {DEFAULT_CACHE})")
    args = parser.parse_args(argv)
    rounds = []
    for item in args.rounds:
        name, _, folder = item.partition("=")
        try:
            ruleset_of(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
        if not Path(folder).is_dir():
            parser.error(f"{folder!r} is not a folder")
        rounds.append((name, Path(folder)))
    if args.logging_repo is not None and not args.logging_repo.is_dir():
        parser.error(f"--logging_repo {args.logging_repo}: not a folder")
    return rounds, args


def main(argv: Sequence[str] | None = None) -> int:
    """Print the agreement table of the rounds given; 1 if any log disagrees."""
    rounds, args = _parse(argv)
    try:
        if args.logging_repo is not None:
            cache_folder(args.cache_dir)
        results = [agree(name, folder, args.logging_repo, args.cache_dir, sys.stderr.isatty())
                   for name, folder in rounds]
    except UserError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    print(markdown(results))
    for result in results:
        for path in result.false_errors:
            print(f"{path}: failed by us, passed by the round's checker")
        for path in result.false_passes:
            print(f"{path}: passed by us, failed by the round's checker")
    for line in breaches_text(results):
        print(line)
    disagreements = sum(len(r.false_errors) + len(r.false_passes) for r in results)
    print(f"{'AGREE' if not disagreements else 'DISAGREE'}: "
          f"{sum(r.logs for r in results):,} logs, {disagreements} disagreement(s)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
