"""What differs between the MLPerf Training rulesets that have BERT (1.0.0 to 5.0.0).

The BERT numbers are the same in every round (target 0.720, 10,000 eval samples, the eval
interval formula, 10 runs scored olympically; `benchmark.constants`). What changes is the
official ruleset YAML (the name of the LAMB epsilon key, whether `weights_initialization` is
required), whether the published score is RCP-normalized, and where the installed
`mlperf_logging` is stricter than the checker MLCommons ran that round. Those facts live here,
one `Ruleset` per round, so the rules and the folder checks read them instead of testing
version strings. `detect` says which ruleset a log is checked under when none is given.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Ruleset:
    """One round's BERT facts.

    version: the ruleset name the official tools take, e.g. "1.0.0".
    epsilon_key: the LAMB epsilon hyperparameter key its closed_bert.yaml requires.
    rcp_normalized_score: the published result is the olympic score times the RCP
        normalization factor (training rules, "Reference Convergence Points": from v2.1
        accepted submissions faster than the RCP mean are normalized to it).
    seedless_folders_pass: the round's package checker passed a result folder in which no
        run logs a seed (its seed checker only warned then; mlperf_logging 4.x fails each
        such run). Checked in the checkers of the v1.0, v1.1 and v2.0 rounds.
    score_decimals: decimal places of the minutes in the round's published results table
        (v1.0: 4.06; from v1.1: 0.558).
    lenient_official: (marker, reason) pairs: an official finding whose rule or message
        contains the marker was only a warning in the checker MLCommons ran that round; it
        is downgraded, with the reason shown to the user.
    checker_tag: the git tag (or commit) of mlcommons/logging whose checker MLCommons ran
        that round: the round's last release tag, unless it cannot check BERT logs
        (`devtools.round_checker` runs it).
    status_aliases: (value, canonical) pairs: a systems/*.json status the round's
        system-description checker accepted (compared in lower case) that the installed one
        refuses, and the value the installed one takes for it.
    """
    version: str
    epsilon_key: str
    rcp_normalized_score: bool
    seedless_folders_pass: bool = False
    score_decimals: int = 3
    lenient_official: tuple[tuple[str, str], ...] = ()
    checker_tag: str = ""
    status_aliases: tuple[tuple[str, str], ...] = ()


# The 1.1.0 closed_bert.yaml requires a weights_initialization record per tensor; the checker
# used in the v1.1 round reported a mismatch as a warning that may be ignored for 1.1.0, and
# every closed v1.1 result was published with it.
_V11_REASON = ("the v1.1 round's checker reported this as a warning that can be ignored for "
               "1.1.0; mlperf_logging 4.x makes it an error")
_V11_WEIGHTS = (("official/weights_initialization", _V11_REASON),
                ("initialized_tensors", _V11_REASON))

# The 2.1.0 closed_bert.yaml of the v2.1 round's checker (tag 2.1.0) required opt_epsilon;
# mlperf_logging 3.0 and later require opt_lamb_epsilon of 2.1.0 logs instead.
_V21_REASON = ("the v2.1 round's checker required opt_epsilon instead; mlperf_logging 3.0 and "
               "later ask opt_lamb_epsilon of 2.1.0 logs")
_V21_EPSILON = (("official/opt_lamb_epsilon", _V21_REASON),)

# The v4.0 round's system-description checker took these statuses, in any case; mlperf_logging
# 4.1 and later take only the four canonical ones for rulesets from 4.0.0 on.
_RDI = "Research, Development, or Internal (RDI)"
_V40_STATUS = tuple((alias, canonical) for canonical, aliases in (
    ("Available on-premise", ("available on-premise", "onprem", "available", "available onprem")),
    ("Available cloud", ("available cloud", "cloud")),
    (_RDI, (_RDI.lower(), "rdi", "research", "development", "internal")),
    ("Preview", ("preview",))) for alias in aliases)

RULESETS: dict[str, Ruleset] = {r.version: r for r in (
    Ruleset("1.0.0", "opt_epsilon", False, True, score_decimals=2, checker_tag="1.0.0"),
    Ruleset("1.1.0", "opt_epsilon", False, True, lenient_official=_V11_WEIGHTS,
            checker_tag="1.1.0-rc4"),
    Ruleset("2.0.0", "opt_epsilon", False, True, checker_tag="2.0.0"),
    Ruleset("2.1.0", "opt_epsilon", True, lenient_official=_V21_EPSILON, checker_tag="2.1.0"),
    Ruleset("3.0.0", "opt_lamb_epsilon", True, checker_tag="3.0.0-rc2"),
    # The 3.1.0-rc3 tag fails every log (its parser reads "AT_LEAST_ONE" as AT_LEAST(n));
    # the fix landed two hours later, and the round ran master of 2023-10-05.
    Ruleset("3.1.0", "opt_lamb_epsilon", True,
            checker_tag="9b25d4a86ac7507c56d86075a04bd2c1b99fb2b9"),
    Ruleset("4.0.0", "opt_lamb_epsilon", True, checker_tag="4.0.0-rc3-rcp-prunning",
            status_aliases=_V40_STATUS),
    Ruleset("4.1.0", "opt_lamb_epsilon", True, checker_tag="4.1.0-rc4"),
    Ruleset("5.0.0", "opt_lamb_epsilon", True, checker_tag="5.0.0-rc3"),
)}
# training_rules.adoc, Deprecated benchmarks: BERT's "Latest version available" is v5.0.
LAST_BERT_ROUND = "5.0.0"
DEFAULT_RULESET = "1.0.0"


def _version_key(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def ruleset(version: str) -> Ruleset:
    """The facts of `version`; a KeyError (one line) names the rulesets with BERT, or says
    that BERT had left the suite by `version`."""
    if version in RULESETS:
        return RULESETS[version]
    key, last = _version_key(version), _version_key(LAST_BERT_ROUND)
    if key is not None and last is not None and key > last:
        raise KeyError(f"ruleset {version} has no BERT: BERT left MLPerf Training after round "
                       f"{LAST_BERT_ROUND[:3]} (training_rules.adoc lists its latest version as "
                       f"v{LAST_BERT_ROUND[:3]}); check BERT logs with --ruleset "
                       f"{LAST_BERT_ROUND} or earlier")
    raise KeyError(f"no BERT ruleset {version!r}; choose from {', '.join(RULESETS)}")


# A folder named for a round's results repository (a clone, or GitHub's download, -main).
ROUND_FOLDER = re.compile(r"training_results_v(\d+)\.(\d+)(?![\d.])")
GIVEN = "given"
NOT_GIVEN = "assumed: no --ruleset given; give --ruleset for another round"
FROM_KEYS = (f"assumed: the logs name opt_lamb_epsilon, a key of rulesets 3.0.0-"
             f"{LAST_BERT_ROUND}; give --ruleset for another round")


def round_from_path(path: str | os.PathLike) -> str | None:
    """The ruleset of the round the innermost `training_results_vX.Y` folder of `path` (made
    absolute, links not followed) names; None when there is none or that round has no BERT."""
    for part in reversed(os.path.abspath(path).split(os.sep)):
        match = ROUND_FOLDER.match(part)
        if match:
            version = f"{match[1]}.{match[2]}.0"
            return version if version in RULESETS else None
    return None


def detect(path: str | os.PathLike, keys: Iterable[str] | None) -> tuple[str, str]:
    """(ruleset, why) for a log or folder at `path` whose `:::MLLOG` records have `keys`
    (None: not read): the round of its innermost training_results_vX.Y folder, else
    LAST_BERT_ROUND when a record is opt_lamb_epsilon (a key of rulesets 3.0.0 on), else
    DEFAULT_RULESET."""
    from_path = round_from_path(path)
    if from_path is not None:
        return from_path, f"from the path (training_results_v{from_path[:-2]})"
    if keys is not None and "opt_lamb_epsilon" in keys:
        return LAST_BERT_ROUND, FROM_KEYS
    return DEFAULT_RULESET, NOT_GIVEN
