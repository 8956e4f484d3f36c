"""English sentence splitting that gives exactly what NLTK 3.4.5's `sent_tokenize` gave.

The benchmark's dataset was segmented with NLTK 3.4.5 and its English Punkt model. We run on
current NLTK (pinned 3.10.4) with the same model parameters, vendored in the `punkt_tab` text
format, and put back the 3.4.5 behaviour wherever later NLTK releases changed it. Every
decision rule of Punkt (first-pass abbreviation/ellipsis marking, collocations, the
orthographic and sentence-starter heuristics, boundary realignment) is still inherited from
NLTK; only these pieces are replaced:

1. Regular-expression engine. NLTK 3.10 compiles Punkt's patterns with the third-party
   `regex` module (through `nltk.redos`), whose `\\s`, `\\w` and `\\d` follow its own Unicode
   tables: e.g. U+001C..U+001F are whitespace for `re` but not for `regex`, and combining
   marks are word characters for `regex` only. 3.4.5 used the standard `re`; so do we, for
   every pattern (word tokenizer, candidate contexts, boundary realignment, token classes).
2. Characters that cannot be inside a word. 3.10 added the curly quotes U+2018/U+2019/
   U+201C/U+201D and the guillemets U+00AB/U+00BB to this set and to the closing punctuation
   that is realigned onto the previous sentence, so `He left.\u201d Then ...` splits in 3.10
   but not in 3.4.5. We use the 3.4.5 sets (ASCII only).
3. Candidate contexts. 3.4.5 found each possible boundary with one regex whose match started
   with the word material before the `.`/`?`/`!`; 3.10 matches the punctuation alone and
   rebuilds the preceding word by scanning back for ASCII whitespace, then drops overlapping
   candidates. The two disagree on, among others, a run that starts with the end character
   (`Rank !! City` gives 3.10 an extra break between the two `!`), and on text around
   non-ASCII spaces such as U+00A0. We enumerate candidates the 3.4.5 way (see
   `_PERIOD_CONTEXT`).

The four parameter files are checked against their md5 before use; the tokenizer is built
once per process.
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Iterator

from nltk.tokenize.punkt import (PunktLanguageVars, PunktParameters, PunktSentenceTokenizer,
                                 PunktToken)

import cleanup_scripts
from cleanup_scripts.fileio import InputError

# md5 of the vendored English model files (converted parameter for parameter from NLTK's
# tokenizers/punkt/PY3/english.pickle, md5 bf902b3488d86a2832f8d434aeb13e17).
PUNKT_FILE_MD5 = {
    "abbrev_types.txt": "fee0fcababf5dc8635e5ed67a4264f5a",
    "collocations.tab": "3bbe9a98643599ab5986feae9abf5214",
    "ortho_context.tab": "7e5d8cb58b4665469a1342059afb324d",
    "sent_starters.txt": "f57f2bd17bb846b7b1b41547de8d9bc4",
}

# ---------------------------------------------------------------------------------------------
# The 3.4.5 patterns. They are NLTK's English Punkt definitions of that release, written out
# here in full so that a later NLTK cannot change them underneath us.
# ---------------------------------------------------------------------------------------------

# Characters that end a word token and that may directly follow a sentence-end character:
# ? ! ) " ; } ] * : @ ' ( { [   (3.4.5 had no typographic quotes here).
_NON_WORD = r"""(?:[?!)";}\]*:@'({\[])"""

# Runs of two or more hyphens, of two or more periods, or of spaced periods (". . .").
_MULTI_CHAR = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"

# A word token cannot start with any of: ( " ` { [ : ; & # * @ ) } ] - ,
_WORD_START = r"""[^("`{\[:;&#*@)}\]\-,]"""

_WORD_TOKENIZER = re.compile(
    rf"""(
        {_MULTI_CHAR}                 # a dash or dot sequence is one token
      |
        (?={_WORD_START})\S+?         # otherwise take word characters, lazily,
        (?=                           # up to the first place where a word ends:
            \s | $                    #   whitespace or the end of the text,
          | {_NON_WORD} | {_MULTI_CHAR}   # punctuation,
          | ,(?=$|\s|{_NON_WORD}|{_MULTI_CHAR})  # or a comma that closes the word
        )
      |
        \S                            # any other single non-space character
    )""",
    re.VERBOSE,
)

# Every place where a sentence may end, with the text Punkt looks at to decide. 3.4.5 used
#     \S* [.?!] (?=(?P<after_tok> NON_WORD | \s+(?P<next_tok>\S+) ))
# with finditer. Such a match always begins where a run of non-space characters begins (a
# match starting inside a run would also be possible from the run's start, which finditer
# tries first, and after a match the rest of its run holds no further candidate), and the
# greedy `\S*` makes it end at the run's last candidate. Anchoring the start to the beginning
# of a run therefore finds exactly the same matches, while sparing the original pattern's
# quadratic rescanning of long runs that contain no candidate.
_PERIOD_CONTEXT = re.compile(
    rf"""
    (?<!\S) \S*                       # the word material of the run, from its start
    [.?!]                             # the candidate end character (rightmost in the run)
    (?=(?P<after_tok>                 # decided on what follows it:
        {_NON_WORD}                   #   punctuation directly after it,
      |
        \s+(?P<next_tok>\S+)          #   or whitespace and the next token
    ))""",
    re.VERBOSE,
)

# Closing quotes and brackets after a break belong to the sentence before it.
_BOUNDARY_REALIGNMENT = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""", re.MULTILINE)

_HAS_LETTER = re.compile(r"[^\W\d]")


class _LanguageVars345(PunktLanguageVars):
    """English Punkt language variables with the 3.4.5 character sets, compiled by `re`."""

    __slots__ = ()

    _re_non_word_chars = _NON_WORD
    re_boundary_realignment = _BOUNDARY_REALIGNMENT

    def _word_tokenizer_re(self) -> re.Pattern:
        return _WORD_TOKENIZER

    def period_context_re(self) -> re.Pattern:
        return _PERIOD_CONTEXT


class _Token345(PunktToken):
    """A Punkt token whose type tests (ellipsis, number, initial, alphabetic) use `re`."""

    __slots__ = ()

    _RE_ELLIPSIS = re.compile(r"\.\.+$")
    _RE_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
    _RE_INITIAL = re.compile(r"[^\W\d]\.$")
    _RE_ALPHA = re.compile(r"[^\W\d]+$")

    @property
    def is_non_punct(self):
        """Whether the type holds a letter (numbers are typed `##number##`, so they count)."""
        return _HAS_LETTER.search(self.type)


class Punkt345Tokenizer(PunktSentenceTokenizer):
    """NLTK's Punkt sentence tokenizer, behaving as in NLTK 3.4.5 for the given parameters."""

    def __init__(self, params: PunktParameters):
        super().__init__(params, lang_vars=_LanguageVars345(), token_cls=_Token345)

    def _match_potential_end_contexts(self, text: str) -> Iterator[tuple[re.Match, str]]:
        """Yield (match, context) for each possible break: the 3.4.5 candidates, in order.

        The context is the run of word material ending at the candidate plus what follows it
        (one punctuation character, or the whitespace and the next token).
        """
        for match in self._lang_vars.period_context_re().finditer(text):
            yield match, match.group() + match.group("after_tok")


def _model_lines(directory: Path, name: str) -> list[str]:
    """The lines of one model file (UTF-8, "\\n"-terminated), after checking its md5."""
    path = directory / name
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read the Punkt model file ({err.strerror})") from err
    digest = hashlib.md5(data).hexdigest()
    if digest != PUNKT_FILE_MD5[name]:
        raise InputError(f"{path}: md5 {digest} differs from the vendored English Punkt "
                         f"model's {PUNKT_FILE_MD5[name]}")
    text = data.decode("utf-8")
    return text[:-1].split("\n") if text else []


def load_parameters(directory: str | Path | None = None) -> PunktParameters:
    """Read the English Punkt parameters from a `punkt_tab` directory into PunktParameters.

    `directory` defaults to `cleanup_scripts.PUNKT_ENGLISH_DIR`. Each of its four files must
    have the md5 in `PUNKT_FILE_MD5`; otherwise, or if one cannot be read, InputError.
    """
    directory = Path(directory or cleanup_scripts.PUNKT_ENGLISH_DIR)
    params = PunktParameters()
    params.abbrev_types = set(_model_lines(directory, "abbrev_types.txt"))
    params.sent_starters = set(_model_lines(directory, "sent_starters.txt"))
    params.collocations = {tuple(line.split("\t"))
                           for line in _model_lines(directory, "collocations.tab")}
    for line in _model_lines(directory, "ortho_context.tab"):
        word_type, flags = line.rsplit("\t", 1)
        params.ortho_context[word_type] = int(flags)
    return params


@functools.lru_cache(maxsize=None)
def get_tokenizer() -> Punkt345Tokenizer:
    """The English 3.4.5-compatible tokenizer of this process, built on first use.

    Raises InputError if the vendored model files are missing or altered.
    """
    return Punkt345Tokenizer(load_parameters())


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences exactly as NLTK 3.4.5's `nltk.sent_tokenize(text)` did.

    Uses the English Punkt model; returns the sentences as slices of `text` (not stripped),
    in order. Raises InputError if the vendored model files are missing or altered.
    """
    return get_tokenizer().tokenize(text)
