"""An independent NLTK 3.4.5 sentence splitter, the oracle of the splitter's differential tests.

It is the installed NLTK's own Punkt sentence tokenizer (3.10), given the vendored English model
and put back to 3.4.5's behaviour where later releases changed it (the project's splitter
before it stopped using NLTK): 3.4.5's patterns compiled by `re`, its ASCII-only non-word
characters, and its unanchored candidate pattern searched with finditer. Only the decision
rules come from NLTK itself, so they are an implementation apart from
`cleanup_scripts.text.sentence_splitter`. The unanchored pattern is quadratic in the length of a run
without spaces: use it on ordinary text only.
"""
from __future__ import annotations

import functools
import re
from typing import Iterator

from nltk.tokenize.punkt import (PunktLanguageVars, PunktParameters, PunktSentenceTokenizer,
                                 PunktToken)

from cleanup_scripts.text.sentence_splitter import load_parameters

# NLTK 3.4.5's English Punkt patterns, written out.
NON_WORD = r"""(?:[?!)";}\]*:@'({\[])"""
MULTI_CHAR = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"
WORD_START = r"""[^("`{\[:;&#*@)}\]\-,]"""
WORD_TOKENIZER = re.compile(
    rf"""({MULTI_CHAR}|(?={WORD_START})\S+?(?=\s|$|{NON_WORD}|{MULTI_CHAR}|"""
    rf""",(?=$|\s|{NON_WORD}|{MULTI_CHAR}))|\S)""")
PERIOD_CONTEXT = re.compile(
    rf"""\S*[.?!](?=(?P<after_tok>{NON_WORD}|\s+(?P<next_tok>\S+)))""")
BOUNDARY_REALIGNMENT = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""", re.MULTILINE)
_HAS_LETTER = re.compile(r"[^\W\d]")


class _LanguageVars345(PunktLanguageVars):
    """English language variables with the 3.4.5 character sets and patterns."""

    __slots__ = ()

    _re_non_word_chars = NON_WORD
    re_boundary_realignment = BOUNDARY_REALIGNMENT

    def _word_tokenizer_re(self) -> re.Pattern:
        return WORD_TOKENIZER

    def period_context_re(self) -> re.Pattern:
        return PERIOD_CONTEXT


class _Token345(PunktToken):
    """A token whose type tests use `re`, as in 3.4.5."""

    __slots__ = ()

    _RE_ELLIPSIS = re.compile(r"\.\.+$")
    _RE_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
    _RE_INITIAL = re.compile(r"[^\W\d]\.$")
    _RE_ALPHA = re.compile(r"[^\W\d]+$")

    @property
    def is_non_punct(self):
        """Whether the type holds a letter."""
        return _HAS_LETTER.search(self.type)


class Punkt345Oracle(PunktSentenceTokenizer):
    """NLTK's Punkt sentence tokenizer with 3.4.5's candidates, patterns and character sets."""

    def __init__(self, params: PunktParameters):
        super().__init__(params, lang_vars=_LanguageVars345(), token_cls=_Token345)

    def _match_potential_end_contexts(self, text: str) -> Iterator[tuple[re.Match, str]]:
        """(match, context) for each 3.4.5 candidate, in order."""
        for match in PERIOD_CONTEXT.finditer(text):
            yield match, match.group() + match.group("after_tok")


def nltk_parameters() -> PunktParameters:
    """The vendored English model as NLTK PunktParameters."""
    model = load_parameters()
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context.update(model.ortho_context)
    return params


@functools.lru_cache(maxsize=None)
def oracle() -> Punkt345Oracle:
    """The oracle, built once."""
    return Punkt345Oracle(nltk_parameters())


def oracle_split(text: str) -> list[str]:
    """What NLTK 3.4.5's `sent_tokenize(text)` gave, by the oracle."""
    return oracle().tokenize(text)
