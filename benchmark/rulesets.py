"""What differs between the MLPerf Training rulesets that have BERT (1.0.0 to 5.1.0).

The BERT numbers are the same in every round (target 0.720, 10,000 eval samples, the eval
interval formula, 10 runs scored olympically; `benchmark.constants`). What changes is the
official ruleset YAML (the name of the LAMB epsilon key, whether `weights_initialization` is
required), whether the published score is RCP-normalized, and where the installed
`mlperf_logging` is stricter than the checker MLCommons ran that round. Those facts live here,
one `Ruleset` per round, so the rules and the folder checks read them instead of testing
version strings.
"""
from __future__ import annotations

from dataclasses import dataclass


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
    """
    version: str
    epsilon_key: str
    rcp_normalized_score: bool
    seedless_folders_pass: bool = False
    score_decimals: int = 3
    lenient_official: tuple[tuple[str, str], ...] = ()


# The 1.1.0 closed_bert.yaml requires a weights_initialization record per tensor; the checker
# used in the v1.1 round reported a mismatch as a warning that may be ignored for 1.1.0, and
# every closed v1.1 result was published with it.
_V11_REASON = ("the v1.1 round's checker reported this as a warning that can be ignored for "
               "1.1.0; mlperf_logging 4.x makes it an error")
_V11_WEIGHTS = (("official/weights_initialization", _V11_REASON),
                ("initialized_tensors", _V11_REASON))

RULESETS: dict[str, Ruleset] = {r.version: r for r in (
    Ruleset("1.0.0", "opt_epsilon", False, True, score_decimals=2),
    Ruleset("1.1.0", "opt_epsilon", False, True, lenient_official=_V11_WEIGHTS),
    Ruleset("2.0.0", "opt_epsilon", False, True),
    Ruleset("2.1.0", "opt_lamb_epsilon", True),
    Ruleset("3.0.0", "opt_lamb_epsilon", True),
    Ruleset("3.1.0", "opt_lamb_epsilon", True),
    Ruleset("4.0.0", "opt_lamb_epsilon", True),
    Ruleset("4.1.0", "opt_lamb_epsilon", True),
    Ruleset("5.0.0", "opt_lamb_epsilon", True),
    Ruleset("5.1.0", "opt_lamb_epsilon", True),
)}
DEFAULT_RULESET = "1.0.0"


def ruleset(version: str) -> Ruleset:
    """The facts of `version`; a KeyError names the rulesets with BERT."""
    try:
        return RULESETS[version]
    except KeyError:
        raise KeyError(f"no BERT ruleset {version!r}; choose from "
                       f"{', '.join(RULESETS)}") from None
