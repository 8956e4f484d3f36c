"""How far `make check` agrees with MLCommons on published results: one table per round.

    python -m benchmark.agreement v1.0=/data/training_results_v1.0 v1.1=... v2.0=...

Each argument names a round and a local copy of its results repository
(github.com/mlcommons/training_results_vX.Y). Every BERT result folder in it
(`<submitter>/results/<system>/bert/`) is checked under the round's ruleset, every log by
both our checker and the official compliance engine. A log's official verdict is the one of
the checker MLCommons ran that round (the installed one, with that round's known leniency,
`benchmark.rulesets`); the installed package's own verdict is shown beside it. Our checker
agrees when it fails exactly the logs the official verdict fails. Exit status 1 when any log
disagrees, 0 otherwise.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from benchmark import summary
from benchmark.rulesets import RULESETS
from benchmark.submission import ResultFolder, check_result_folder


@dataclass
class RoundAgreement:
    """The counts of one round (see `agree`)."""
    name: str
    ruleset: str
    logs: int = 0
    installed_pass: int = 0
    official_pass: int = 0
    ours_pass: int = 0
    false_errors: list[str] = field(default_factory=list)
    false_passes: list[str] = field(default_factory=list)
    folders: int = 0
    scored_folders: int = 0
    seconds: float = 0.0
    scores: dict[str, float | None] = field(default_factory=dict)

    def row(self) -> list[str]:
        """The round as a row of `COLUMNS`."""
        per_log = self.seconds / self.logs if self.logs else 0.0
        return [self.name, self.ruleset, f"{self.logs:,}", f"{self.installed_pass:,}",
                f"{self.official_pass:,}", f"{self.ours_pass:,}", str(len(self.false_errors)),
                str(len(self.false_passes)), f"{self.scored_folders}/{self.folders}",
                f"{per_log:.3f}"]


COLUMNS = ["round", "ruleset", "logs", "official (installed) passes",
           "official (round's checker) passes", "ours passes", "ours fails, official passes",
           "ours passes, official fails", "folders with a score", "s/log"]


def ruleset_of(round_name: str) -> str:
    """"v1.0" -> "1.0.0"; a KeyError if the round has no BERT ruleset."""
    version = round_name.lstrip("v") + ".0"
    if version not in RULESETS:
        raise KeyError(f"no BERT ruleset for round {round_name!r}")
    return version


def result_folders(repository: Path) -> list[Path]:
    """Every `<submitter>/results/<system>/bert` folder holding result files."""
    return sorted(p for p in repository.glob("*/results/*/bert")
                  if any(p.glob("result_*.txt")))


def _tally(result: RoundAgreement, folder: ResultFolder) -> None:
    """Add one checked folder's logs and score to `result`."""
    result.folders += 1
    for log, ours in zip(folder.logs, folder.scored):  # scored: our verdict before olympic
        official = log.official.passed if log.official else ours
        result.logs += 1
        result.installed_pass += bool(log.official and log.official.installed_passed)
        result.official_pass += official
        result.ours_pass += ours
        if official and not ours:
            result.false_errors.append(log.path)
        if ours and not official:
            result.false_passes.append(log.path)
    score = summary.table_score(summary.runs_table(folder.logs, folder.scored)).minutes
    result.scores[folder.folder] = score
    result.scored_folders += score is not None


def agree(name: str, repository: Path, progress: bool = False) -> RoundAgreement:
    """Check every BERT result of `repository` (round `name`) and count the agreement."""
    result = RoundAgreement(name, ruleset_of(name))
    folders = result_folders(repository)
    total = sum(len(list(f.glob("result_*.txt"))) for f in folders)
    start = time.perf_counter()
    with tqdm(total=total, unit="log", desc=name, file=sys.stderr,
              disable=not progress) as bar:
        for folder in folders:
            _tally(result, check_result_folder(str(folder), result.ruleset, True,
                                               lambda: bar.update(1)))
    result.seconds = time.perf_counter() - start
    return result


def markdown(rounds: Sequence[RoundAgreement]) -> str:
    """The rounds as a markdown table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r.row()) + " |" for r in rounds]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the agreement table of the rounds given; 1 if any log disagrees."""
    parser = argparse.ArgumentParser(prog="python -m benchmark.agreement",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="+", metavar="vX.Y=DIR",
                        help="a round and a local copy of its training_results repository")
    args = parser.parse_args(argv)
    results = []
    for item in args.rounds:
        name, _, folder = item.partition("=")
        try:
            ruleset_of(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
        if not Path(folder).is_dir():
            parser.error(f"{folder!r} is not a folder")
        results.append(agree(name, Path(folder), progress=sys.stderr.isatty()))
    print(markdown(results))
    for result in results:
        for path in result.false_errors:
            print(f"{path}: failed by us, passed by the official checker")
        for path in result.false_passes:
            print(f"{path}: passed by us, failed by the official checker")
    disagreements = sum(len(r.false_errors) + len(r.false_passes) for r in results)
    print(f"{'AGREE' if not disagreements else 'DISAGREE'}: "
          f"{sum(r.logs for r in results):,} logs, {disagreements} disagreement(s)")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
