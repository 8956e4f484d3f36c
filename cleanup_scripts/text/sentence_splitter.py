"""English sentence splitting that gives exactly what NLTK 3.4.5's `sent_tokenize` gave.

The benchmark's dataset was segmented with NLTK 3.4.5's Punkt sentence tokenizer (Kiss and
Strunk 2006) and its trained English model. This module applies that model the way 3.4.5 did,
without NLTK: the model's four tables are vendored in `punkt_tab` text form (converted
parameter for parameter from NLTK's `tokenizers/punkt/PY3/english.pickle`, md5
bf902b3488d86a2832f8d434aeb13e17) and checked against their md5 before use.

How a text is split:

1. Candidates. Every place where a sentence may end is found by `_END_CHARACTER`: in each run
   of non-space characters, the last `.`, `?` or `!` that is followed either by one
   punctuation character of `_NON_WORD` or by whitespace and a next run. The *context* of a
   candidate is its run up to and including the end character, plus what follows it.
2. Decision. The context is cut into word tokens by `_WORD_TOKENIZER`. The candidate is a
   sentence break when some token other than the last one is a break given the token after it
   (`PunktSentenceSplitter._pair_is_break`):
   - a token is *first* judged on its own: `.`, `?` and `!` are breaks; a run of two or more
     periods is an ellipsis; a token ending in one period is an abbreviation if the text before
     the period (lower-cased, or its part after the last hyphen) is a model abbreviation, and a
     break otherwise;
   - a token ending in a period is *then* judged with the next token: a model collocation of
     the two types makes it a non-break; an abbreviation or ellipsis that is not an initial
     becomes a break when the orthographic evidence says that the next token starts a
     sentence, or when the next token is capitalised and a frequent sentence starter; an
     initial or a number becomes a non-break when the orthographic evidence says that the next
     token does not start a sentence, and so does an initial followed by a capitalised token
     that the model never saw lower-case, when that evidence is undecided.
3. Sentences. A sentence ends after its break's end character; the next one starts at the next
   token (or at the punctuation directly after the end character); the last one ends at the
   text's last non-space character. Closing quotes and brackets that would open a sentence are
   moved to the end of the previous one (`_BOUNDARY_REALIGNMENT`); empty sentences are dropped.

Where this differs from the Punkt of current NLTK releases (3.10 splits some real Wikipedia
lines differently), 3.4.5's behaviour is the one kept:

* Patterns are compiled by the standard `re` module, whose `\\s`, `\\w` and `\\d` follow
  Python's own Unicode tables (3.10 uses the third-party `regex`: e.g. U+001C..U+001F are
  whitespace for `re` only, and combining marks are word characters for `regex` only).
* The characters that end a word and follow a sentence end are ASCII only (3.10 added the curly
  quotes and guillemets, so `He left.\u201d Then ...` splits in 3.10 but not in 3.4.5).
* Candidates are enumerated with one regex whose match starts with the word material (3.10
  scans back for ASCII whitespace and drops overlapping candidates, which differs on e.g.
  `Rank !! City` and around U+00A0).

What the decision needs of each run and of each token is memoised in bounded dictionaries, so
a repeated word costs one lookup.
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, TypeVar

from benchmark.files import InputError
import cleanup_scripts

# md5 of the vendored English model files.
PUNKT_FILE_MD5 = {
    "abbrev_types.txt": "fee0fcababf5dc8635e5ed67a4264f5a",
    "collocations.tab": "3bbe9a98643599ab5986feae9abf5214",
    "ortho_context.tab": "7e5d8cb58b4665469a1342059afb324d",
    "sent_starters.txt": "f57f2bd17bb846b7b1b41547de8d9bc4",
}

# ---------------------------------------------------------------------------------------------
# The 3.4.5 patterns, written out in full so that no library can change them underneath us.
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

# Every place where a sentence may end. 3.4.5 found them with
#     \S* [.?!] (?=(?P<after_tok> NON_WORD | \s+(?P<next_tok>\S+) ))
# and finditer, and judged each on the match plus `after_tok`. A match of that pattern starts
# where a run of non-space characters starts (a match starting inside a run would also be
# possible from the run's start, which finditer tries first), and the greedy `\S*` makes it
# end at the run's rightmost end character that the lookahead accepts; the rest of the run then
# holds no further candidate. So there is one candidate per run that has such a character, at
# the rightmost one. This pattern matches exactly that end character (its negative lookahead
# rejects an end character when a later one in the same run is accepted), which spares
# rescanning every word of the text from its start; the run's start is found separately.
_END_CHARACTER = re.compile(
    rf"""
    [.?!]                             # a candidate end character,
    (?=(?P<after_tok>                 # decided on what follows it:
        {_NON_WORD}                   #   punctuation directly after it,
      |
        \s+(?P<next_tok>\S+)          #   or whitespace and the next token,
    ))
    (?!\S*?[.?!](?:{_NON_WORD}|\s+\S))  # and the last such character of its run
    """,
    re.VERBOSE,
)
# Everything up to the last whitespace character (matched up to a candidate, it finds where the
# candidate's run starts; the greedy `.*` jumps to the end, so the cost is the run's length).
_THROUGH_LAST_SPACE = re.compile(r".*\s", re.DOTALL)

# Closing quotes and brackets after a break belong to the sentence before it.
_BOUNDARY_REALIGNMENT = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""", re.MULTILINE)
# The characters a realigned run starts with (a cheap test before the pattern).
_CLOSING = frozenset("\"')]}")

# Token classes.
_ELLIPSIS = re.compile(r"\.\.+$")
_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
_INITIAL = re.compile(r"[^\W\d]\.$")
_NUMBER_TYPE = "##number##"
_SENTENCE_END_TOKENS = frozenset(".?!")
# A token that is one of these characters never starts a sentence.
_PUNCTUATION_TOKENS = frozenset(";:,.!?")

# Orthographic context flags of a word type in the model: seen upper- or lower-case at the
# beginning of a sentence, in the middle of one, or where it was unknown which.
_ORTHO_BEG_UC, _ORTHO_MID_UC, _ORTHO_UNK_UC = 1 << 1, 1 << 2, 1 << 3
_ORTHO_BEG_LC, _ORTHO_MID_LC, _ORTHO_UNK_LC = 1 << 4, 1 << 5, 1 << 6
_ORTHO_UC = _ORTHO_BEG_UC | _ORTHO_MID_UC | _ORTHO_UNK_UC
_ORTHO_LC = _ORTHO_BEG_LC | _ORTHO_MID_LC | _ORTHO_UNK_LC

Memoised = TypeVar("Memoised")

# Entries a memo dictionary may hold before it is emptied: this bounds a worker's memory (a
# full memo of ordinary words takes about 15 MB; there are four).
_MEMO_LIMIT = 100_000


@dataclass(frozen=True)
class PunktParameters:
    """A trained Punkt model.

    `abbrev_types`: abbreviations, lower-case, without their final period. `collocations`:
    (type, next type) pairs whose period is not a break. `sent_starters`: types that often
    start a sentence. `ortho_context`: per type, the `_ORTHO_*` flags of where it was seen.
    """

    abbrev_types: frozenset[str]
    collocations: frozenset[tuple[str, str]]
    sent_starters: frozenset[str]
    ortho_context: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class _LeftToken:
    """What the decision needs of a token followed by another one.

    `fixed`: the decision when it does not depend on the next token, else None. `type`: the
    token's type without its final period. `first_pass_break`: its break decision on its own.
    `abbreviation_like`: an abbreviation or ellipsis that is not an initial. `initial_or_number`
    and `initial`: whether it is a number type or a one-letter initial.
    """

    fixed: bool | None
    type: str
    first_pass_break: bool
    abbreviation_like: bool
    initial_or_number: bool
    initial: bool


@dataclass(frozen=True, slots=True)
class _RightToken:
    """What the decision needs of the token after a candidate token.

    `type`: its type, without a final period if it is a break on its own. `starts_sentence`:
    the orthographic evidence (True: starts a sentence, False: does not, None: undecided).
    `capitalised_starter`: capitalised and a frequent sentence starter. `never_lower`:
    capitalised and never seen lower-case by the model.
    """

    type: str
    starts_sentence: bool | None
    capitalised_starter: bool
    never_lower: bool


def _first_pass(token: str, abbreviations: frozenset[str]) -> tuple[str, bool, bool, bool]:
    """A token judged on its own: (type, break, abbreviation, ellipsis).

    The type is lower-case, `##number##` for a number. `.`, `?` and `!` are breaks; two or more
    periods are an ellipsis; a token ending in one period is an abbreviation when the text
    before the period (lower-cased, or its part after the last hyphen) is in `abbreviations`,
    and a break otherwise.
    """
    word_type = _NUMERIC.sub(_NUMBER_TYPE, token.lower())
    if token in _SENTENCE_END_TOKENS:
        return word_type, True, False, False
    if _ELLIPSIS.match(token):
        return word_type, False, False, True
    if token[-1] == "." and not token.endswith(".."):
        stem = token[:-1].lower()
        abbreviation = stem in abbreviations or stem.split("-")[-1] in abbreviations
        return word_type, not abbreviation, abbreviation, False
    return word_type, False, False, False


def _without_final_period(word_type: str) -> str:
    """`word_type` without one final period (a lone "." is kept)."""
    return word_type[:-1] if len(word_type) > 1 and word_type[-1] == "." else word_type


@dataclass(frozen=True, slots=True)
class _EndingRun:
    """A run of non-space characters that ends at a candidate, as the decision sees it.

    `has_break`: a word token other than the last is a break given the token after it.
    `last`: the last token.
    """

    has_break: bool
    last: _LeftToken


@dataclass(frozen=True, slots=True)
class _NextRun:
    """The run after a candidate's whitespace, as the decision sees it.

    `first`: its first word token. `has_break`: a token other than the last is a break given
    the token after it.
    """

    first: _RightToken
    has_break: bool


class PunktSentenceSplitter:
    """Splits text into sentences with a Punkt model, exactly as NLTK 3.4.5 did.

    A candidate's context is its run (up to the end character) plus either one punctuation
    character or whitespace and the next run. Word tokens never span whitespace, and a run's
    tokens do not depend on the text after the run, so the context's tokens are the run's
    followed by the next run's. Each run is analysed once for its role (memoised), as is each
    token, and the decision combines the two runs.
    """

    def __init__(self, params: PunktParameters):
        self.params = params
        self._collocation_firsts = frozenset(first for first, _ in params.collocations)
        self._ending: dict[str, _EndingRun] = {}
        self._next: dict[str, _NextRun] = {}
        self._left: dict[str, _LeftToken] = {}
        self._right: dict[str, _RightToken] = {}

    def split(self, text: str) -> list[str]:
        """The sentences of `text`, as slices of it (not stripped), in order."""
        spans = []
        start = 0
        realign = False
        for match in _END_CHARACTER.finditer(text):  # groups: 1 after_tok, 2 next_tok
            end = match.end()
            next_start = match.start(2)
            if next_start < 0:
                is_break = self._run_ending_at(text, end, match.group(1)).has_break
            else:
                is_break = self._is_break(self._run_ending_at(text, end, ""),
                                          text[next_start:match.end(2)])
            if is_break:
                spans.append((start, end))
                start = next_start if next_start >= 0 else end
                realign = realign or text[start] in _CLOSING
        stop = len(text.rstrip())
        spans.append((start, stop))
        if realign:
            return _realigned_sentences(text, spans)
        return [text[start:stop] for start, stop in spans if start < stop]

    def _is_break(self, ending: _EndingRun, next_characters: str) -> bool:
        """Whether a candidate is a break: the run `ending` at it, whitespace, then the run
        `next_characters`."""
        if ending.has_break:
            return True
        left = ending.last
        if left.fixed is None:
            following = self._next_run(next_characters)
            return self._pair_is_break(left, following.first) or following.has_break
        return left.fixed or self._next_run(next_characters).has_break

    def _run_ending_at(self, text: str, end: int, suffix: str) -> _EndingRun:
        """The run of non-space characters of `text` that ends at `end`, with `suffix` (the
        punctuation after it, or "") appended (memoised)."""
        through_space = _THROUGH_LAST_SPACE.match(text, 0, end)
        characters = text[through_space.end() if through_space else 0:end] + suffix
        return self._ending.get(characters) or self._analyse_ending(characters)

    def _analyse_ending(self, characters: str) -> _EndingRun:
        """Analyse and memoise a run that ends at a candidate."""
        tokens = _WORD_TOKENIZER.findall(characters)
        run = _EndingRun(len(tokens) > 1 and self._has_inner_break(tokens),
                         self._left_token(tokens[-1]))
        return _memoise(self._ending, characters, run)

    def _next_run(self, characters: str) -> _NextRun:
        """The run after a candidate's whitespace (memoised)."""
        run = self._next.get(characters)
        if run is None:
            tokens = _WORD_TOKENIZER.findall(characters)
            run = _memoise(self._next, characters, _NextRun(
                self._right_token(tokens[0]), len(tokens) > 1 and self._has_inner_break(tokens)))
        return run

    def _has_inner_break(self, tokens: list[str]) -> bool:
        """Whether a token of `tokens` other than the last is a break given the next one."""
        return any(self._pair_is_break(self._left_token(token), self._right_token(after))
                   for token, after in zip(tokens, tokens[1:]))

    def _left_token(self, token: str) -> _LeftToken:
        """What the decision needs of `token` when another token follows it (memoised)."""
        left = self._left.get(token)
        if left is None:
            word_type, is_break, is_abbreviation, is_ellipsis = _first_pass(
                token, self.params.abbrev_types)
            left_type = _without_final_period(word_type)
            initial = bool(_INITIAL.match(token))
            abbreviation_like = (is_abbreviation or is_ellipsis) and not initial
            initial_or_number = initial or left_type == _NUMBER_TYPE
            depends_on_next = token[-1] == "." and (
                left_type in self._collocation_firsts or abbreviation_like or initial_or_number)
            left = _memoise(self._left, token, _LeftToken(
                None if depends_on_next else is_break, left_type, is_break, abbreviation_like,
                initial_or_number, initial))
        return left

    def _right_token(self, token: str) -> _RightToken:
        """What the decision needs of `token` when it follows a candidate token (memoised)."""
        right = self._right.get(token)
        if right is None:
            params = self.params
            word_type, is_break, _, _ = _first_pass(token, params.abbrev_types)
            if is_break:
                word_type = _without_final_period(word_type)
            ortho = params.ortho_context.get(word_type, 0)
            upper, lower = token[0].isupper(), token[0].islower()
            if token in _PUNCTUATION_TOKENS:
                starts_sentence = False
            elif upper and ortho & _ORTHO_LC and not ortho & _ORTHO_MID_UC:
                starts_sentence = True
            elif lower and (ortho & _ORTHO_UC or not ortho & _ORTHO_BEG_LC):
                starts_sentence = False
            else:
                starts_sentence = None
            right = _memoise(self._right, token, _RightToken(
                word_type, starts_sentence, upper and word_type in params.sent_starters,
                upper and not ortho & _ORTHO_LC))
        return right

    def _pair_is_break(self, left: _LeftToken, right: _RightToken) -> bool:
        """Whether the token described by `left` is a break when `right` follows it."""
        if left.fixed is not None:
            return left.fixed
        if (left.type, right.type) in self.params.collocations:
            return False
        if left.abbreviation_like and (right.starts_sentence or right.capitalised_starter):
            return True
        if left.initial_or_number:
            if right.starts_sentence is False:
                return False
            if right.starts_sentence is None and left.initial and right.never_lower:
                return False
        return left.first_pass_break


def _memoise(memo: dict[str, Memoised], key: str, value: Memoised) -> Memoised:
    """Store `value` under `key` in `memo` (emptied first when full); returns `value`."""
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value
    return value


def _realigned_sentences(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The non-empty sentences of `text` for `spans` (start, stop), each gaining the closing
    quotes and brackets that begin the span after it (which then starts after them)."""
    sentences = []
    shift = 0
    last = len(spans) - 1
    for index, (start, stop) in enumerate(spans):
        start += shift
        shift = 0
        if index < last:
            next_start, next_stop = spans[index + 1]
            if next_start < next_stop and text[next_start] in _CLOSING:
                closing = _BOUNDARY_REALIGNMENT.match(text, next_start, next_stop)
                if closing:
                    sentences.append(text[start:next_start + len(closing.group().rstrip())])
                    shift = closing.end() - next_start
                    continue
        if start < stop:
            sentences.append(text[start:stop])
    return sentences


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
    """Read the English Punkt model from a `punkt_tab` directory.

    `directory` defaults to `cleanup_scripts.PUNKT_ENGLISH_DIR`. Each of its four files must
    have the md5 in `PUNKT_FILE_MD5`; otherwise, or if one cannot be read, InputError.
    """
    directory = Path(directory or cleanup_scripts.PUNKT_ENGLISH_DIR)
    ortho_context = {}
    for line in _model_lines(directory, "ortho_context.tab"):
        word_type, flags = line.rsplit("\t", 1)
        ortho_context[word_type] = int(flags)
    return PunktParameters(
        abbrev_types=frozenset(_model_lines(directory, "abbrev_types.txt")),
        collocations=frozenset(tuple(line.split("\t"))
                               for line in _model_lines(directory, "collocations.tab")),
        sent_starters=frozenset(_model_lines(directory, "sent_starters.txt")),
        ortho_context=ortho_context)


@functools.lru_cache(maxsize=None)
def get_splitter() -> PunktSentenceSplitter:
    """The English splitter of this process, built on first use.

    Raises InputError if the vendored model files are missing or altered.
    """
    return PunktSentenceSplitter(load_parameters())


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences exactly as NLTK 3.4.5's `nltk.sent_tokenize(text)` did.

    Uses the English Punkt model; returns the sentences as slices of `text` (not stripped),
    in order. Raises InputError if the vendored model files are missing or altered.
    """
    return get_splitter().split(text)
