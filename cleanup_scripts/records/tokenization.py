"""BERT WordPiece tokenization, token for token the one the MLPerf reference data was made with.

The pipeline is the usual BERT one, applied to a line of text:

1. cleaning: code points 0 and U+FFFD and every control character (categories Cc and Cf,
   except tab, newline and carriage return) are dropped; tab, newline, carriage return and
   every space separator (category Zs) become a plain space;
2. every CJK ideograph gets a space on either side;
3. the text is split with Python's `str.split()` (which also splits on U+2028 and U+2029:
   they are neither removed nor turned into spaces by step 1);
4. for an uncased vocabulary each word is lower-cased (Python `str.lower`, per word) and its
   accents stripped (NFD, then every nonspacing mark, category Mn, dropped);
5. the word is cut before and after every punctuation character (all ASCII characters that
   are not letters, digits or space, plus every Unicode category P*);
6. each piece becomes WordPiece tokens by greedy longest match ("##" marks a continuation);
   a piece of more than `max_input_chars_per_word` code points (200), or one that cannot be
   covered by the vocabulary, becomes `[UNK]`.

Steps 4-6 look at one whitespace-free word of step 3 at a time and at nothing else, so the
tokens of a word never depend on its neighbours: `FullTokenizer` caches the token ids of each
word it has seen (packed as bytes, so a line's ids are one join of its words'), which makes
tokenizing a corpus about as fast as splitting it.

With `preserve_unused_tokens=True` (off by default, as in the reference), a word that is an
`[unusedN]` token of the vocabulary is kept whole: neither lower-cased nor split.

The vocabulary file is read the way the reference's `tf.gfile` reader reads it: lines end at
"\\n", every "\\r" is dropped, the text must be UTF-8, each line is `str.strip()`-ed, and a token
listed twice keeps the id of its first line, so ids are consecutive in order of first
appearance (a duplicate line shifts the ids of every later token). A file that is not a BERT
vocabulary raises `InputError`.
"""
from __future__ import annotations

import os
import re
import unicodedata
from array import array
from typing import Callable, Iterable, Sequence

from benchmark.files import InputError, refuse_special_file

VOCAB_LIMIT = 64 << 20  # bytes: a vocabulary 300 times BERT's (226 KiB) is no vocabulary

UNK_TOKEN = "[UNK]"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_INPUT_CHARS_PER_WORD = 200

_UNUSED_TOKEN = re.compile(r"^\[unused\d+\]$")
# Words cached per tokenizer before the cache is emptied (bounds memory on huge corpora).
_CACHE_LIMIT = 2_000_000


# ---- character classes --------------------------------------------------------------------------

def is_whitespace(char: str) -> bool:
    """Space, tab, newline, carriage return, or a Unicode space separator (Zs)."""
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """A control or format character (Cc, Cf), tab/newline/carriage return excepted."""
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char: str) -> bool:
    """Any ASCII symbol or punctuation mark (33-47, 58-64, 91-96, 123-126) or a P* character."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_cjk(cp: int) -> bool:
    """A code point of the CJK ideograph blocks that BERT puts spaces around."""
    return any(low <= cp <= high for low, high in _CJK_RANGES)


class _CleaningTable(dict):
    """A `str.translate` table for steps 1-2, filled in lazily one code point at a time."""

    def __missing__(self, cp: int):
        char = chr(cp)
        if cp == 0 or cp == 0xFFFD or is_control(char):
            value = None
        elif is_whitespace(char):
            value = " "
        elif is_cjk(cp):
            value = f" {char} "
        else:
            value = char
        self[cp] = value
        return value


_CLEANING_TABLE = _CleaningTable()


def clean_text(text: str) -> str:
    """Steps 1-2: drop invalid and control characters, normalise spaces, space out CJK.

    Printable ASCII (space to "~") is left as it is by both steps, so such text is returned
    without a lookup per character.
    """
    if text.isascii() and text.isprintable():
        return text
    return text.translate(_CLEANING_TABLE)


def strip_accents(text: str) -> str:
    """NFD-decompose `text` and drop its nonspacing marks (Mn)."""
    return "".join(char for char in unicodedata.normalize("NFD", text)
                   if unicodedata.category(char) != "Mn")


class _PunctuationTable(dict):
    """{code point: is_punctuation}, filled in lazily."""

    def __missing__(self, char: str) -> bool:
        value = self[char] = is_punctuation(char)
        return value


_PUNCTUATION = _PunctuationTable()
# A word of ASCII letters and digits only: nothing to split, no accents to strip.
_PLAIN_ASCII = re.compile(r"[A-Za-z0-9]+")


def split_on_punctuation(text: str) -> list[str]:
    """Cut `text` around each punctuation character, which becomes a piece of its own."""
    if _PLAIN_ASCII.fullmatch(text):
        return [text]
    punctuation = _PUNCTUATION
    pieces: list[str] = []
    start = 0
    for index, char in enumerate(text):
        if punctuation[char]:
            if start < index:
                pieces.append(text[start:index])
            pieces.append(char)
            start = index + 1
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def to_text(text: str | bytes) -> str:
    """`text` as str; bytes are decoded as UTF-8 with undecodable bytes dropped."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise TypeError(f"expected str or bytes, got {type(text).__name__}")


# ---- vocabulary ---------------------------------------------------------------------------------

def read_vocab_tokens(vocab_file: str | os.PathLike) -> list[str]:
    """The token of every line of `vocab_file`, in order, duplicates included.

    Lines end at "\\n"; "\\r" characters are removed anywhere (as the reference's reader does);
    each line is stripped of surrounding whitespace. InputError if the file cannot be read or
    is empty, binary, not UTF-8, larger than VOCAB_LIMIT or no regular file.
    """
    refuse_special_file(vocab_file)  # /dev/zero, a FIFO: named, never read
    try:
        with open(vocab_file, "rb") as handle:
            data = handle.read(VOCAB_LIMIT + 1)
    except OSError as err:
        raise InputError(f"{vocab_file}: cannot read vocab file ({err.strerror})") from err
    if len(data) > VOCAB_LIMIT:
        raise InputError(f"{vocab_file}: larger than {VOCAB_LIMIT >> 20} MiB, not a BERT vocab "
                         f"(one token per line; BERT's has 30,522 in 226 KiB)")
    if not data.strip():
        raise InputError(f"{vocab_file}: vocab file is empty")
    if b"\0" in data:
        raise InputError(f"{vocab_file}: binary file, not a BERT vocab (one token per line)")
    try:
        text = data.replace(b"\r", b"").decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{vocab_file}: not UTF-8 text at byte {err.start}, "
                         "not a BERT vocab") from err
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def load_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """{token: id} for `vocab_file`; a repeated token keeps the id of its first line.

    Ids count distinct tokens in order of first appearance (so they equal line numbers only
    when no token repeats). InputError unless the file is a BERT vocabulary holding the
    special tokens [PAD], [UNK], [CLS], [SEP] and [MASK].
    """
    vocab: dict[str, int] = {}
    for token in read_vocab_tokens(vocab_file):
        if token not in vocab:
            vocab[token] = len(vocab)
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise InputError(f"{vocab_file}: not a BERT vocab (no {', '.join(missing)} line)")
    return vocab


def convert_by_vocab(vocab: dict, items: Iterable) -> list:
    """Map each item through `vocab` (tokens to ids or ids to tokens)."""
    return [vocab[item] for item in items]


# ---- tokenizers ---------------------------------------------------------------------------------

class BasicTokenizer:
    """Steps 1-5: cleaning, CJK spacing, whitespace split, lower case and accents, punctuation."""

    def __init__(self, do_lower_case: bool = True, vocab: dict[str, int] | None = None,
                 preserve_unused_tokens: bool = False):
        self.do_lower_case = do_lower_case
        self.vocab = vocab if vocab is not None else {}
        self.preserve_unused_tokens = preserve_unused_tokens

    def preserved(self, word: str) -> bool:
        """Whether `word` is an [unusedN] vocabulary token kept whole (only when enabled)."""
        return (self.preserve_unused_tokens and word in self.vocab
                and _UNUSED_TOKEN.match(word) is not None)

    def split_word(self, word: str) -> list[str]:
        """Steps 4-5 for one whitespace-free word of the cleaned text."""
        if self.preserved(word):
            return [word]
        if self.do_lower_case:
            word = word.lower()
            if not word.isascii():
                word = strip_accents(word)
        # Lower-casing and NFD could in principle yield whitespace: split once more.
        return " ".join(split_on_punctuation(word)).split()

    def tokenize(self, text: str | bytes) -> list[str]:
        """The basic tokens of `text`."""
        tokens: list[str] = []
        for word in clean_text(to_text(text)).split():
            tokens.extend(self.split_word(word))
        return tokens


class WordpieceTokenizer:
    """Step 6: greedy longest-match-first WordPiece over a vocabulary."""

    def __init__(self, vocab: dict[str, int], unk_token: str = UNK_TOKEN,
                 max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # No substring longer than the longest token can match: the search starts there.
        self._longest = max((len(token) for token in vocab), default=0)

    def tokenize_word(self, word: str) -> list[str]:
        """The word pieces of one whitespace-free piece of text."""
        if len(word) > self.max_input_chars_per_word:
            return [self.unk_token]
        vocab, longest = self.vocab, self._longest
        pieces: list[str] = []
        start, length = 0, len(word)
        while start < length:
            end = min(length, start + longest)
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            else:
                return [self.unk_token]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str | bytes) -> list[str]:
        """The word pieces of each whitespace-separated word of `text`."""
        pieces: list[str] = []
        for word in to_text(text).split():
            pieces.extend(self.tokenize_word(word))
        return pieces


class _WordIds(dict):
    """{word: its token ids, packed as the bytes of an array of `typecode`}: a missing word is
    tokenized by `word_ids` and kept, the whole cache being emptied first once it holds
    _CACHE_LIMIT words (bounding memory)."""

    def __init__(self, word_ids: Callable[[str], tuple[int, ...]], typecode: str):
        super().__init__()
        self._word_ids = word_ids
        self._typecode = typecode

    def __missing__(self, word: str) -> bytes:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        ids = self[word] = array(self._typecode, self._word_ids(word)).tobytes()
        return ids


class FullTokenizer:
    """Text to BERT tokens or ids, with a per-word cache; see the module docstring."""

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True,
                 preserve_unused_tokens: bool = False):
        self.vocab_file = str(vocab_file)
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {index: token for token, index in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case, self.vocab, preserve_unused_tokens)
        self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab)
        # Ids are packed in arrays of this type: 16 bits when the vocabulary allows.
        self.typecode = "H" if len(self.vocab) <= 1 << 16 else "i"
        self._cache = _WordIds(self._word_ids, self.typecode)

    def __len__(self) -> int:
        """Distinct tokens of the vocabulary (ids run from 0 to len - 1)."""
        return len(self.vocab)

    def _word_ids(self, word: str) -> tuple[int, ...]:
        """Token ids of one whitespace-free word of the cleaned text (uncached)."""
        ids: list[int] = []
        vocab = self.vocab
        for token in self.basic_tokenizer.split_word(word):
            if self.basic_tokenizer.preserved(token):
                ids.append(vocab[token])
            else:
                ids.extend(vocab[piece] for piece in self.wordpiece_tokenizer.tokenize_word(token))
        return tuple(ids)

    def packed_ids(self, text: str | bytes) -> bytes:
        """The token ids of `text` as the bytes of an array of `typecode`, word by word from
        the word cache."""
        return b"".join(map(self._cache.__getitem__, clean_text(to_text(text)).split()))

    def tokenize_to_ids(self, text: str | bytes) -> list[int]:
        """The token ids of `text` (the ids of `tokenize(text)`)."""
        return array(self.typecode, self.packed_ids(text)).tolist()

    def tokenize(self, text: str | bytes) -> list[str]:
        """The WordPiece tokens of `text`."""
        inv_vocab = self.inv_vocab
        return [inv_vocab[index] for index in self.tokenize_to_ids(text)]

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        """Ids of `tokens` (KeyError for a token not in the vocabulary)."""
        return convert_by_vocab(self.vocab, tokens)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """Tokens of `ids`."""
        return convert_by_vocab(self.inv_vocab, ids)
