"""BERT pretraining instances: the reference's draws, made in two passes over the random words.

`create_instances` turns a `Corpus` into `Instances` exactly as the reference
create_pretraining_data.py does with one `random.Random(random_seed)` (see that module's
docstring for the sequence of draws). The generator's words are read ahead a chunk at a time
(`mt_stream.WordStream`); over each chunk, `InstanceMaker.add_document` makes in Python the few
draws that decide each instance's spans (target length, split, random next, truncation) and only
counts the words of its candidate shuffle and masking draws, with regular expressions over the
words' high bits (`ShuffleScanner`, `MaskingScanner`); before the chunk is dropped,
`InstanceMaker.resolve` redoes those shuffles and masking draws for all its instances at once
with numpy (`shuffle_heads`, `masking_draws`).

The regular expression that counts a shuffle of n candidates grows with n * 2**ceil(log2 n)
(about a second to compile for n = 4093), so --max_seq_length is limited to MAX_SEQ_LENGTH.
"""
from __future__ import annotations

import bisect
import random
import re
from array import array
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from tqdm import tqdm

from cleanup_scripts.pipeline.runner import inner_bar_disabled
from cleanup_scripts.records.mt_stream import (MAX_CHAR_BITS, ShuffleScanner, WordStream,
                                               randbelow_bulk, random_below, shuffle_heads)

# Longest --max_seq_length (see the module docstring).
MAX_SEQ_LENGTH = 4096
# The masking draws are counted over characters of MAX_CHAR_BITS high bits: 0 .. CHAR_COUNT - 1.
CHAR_COUNT = 1 << MAX_CHAR_BITS
KEEP = -1  # Instances.mask_id of a masked position whose token is kept
# The reference's choice per masked position: [MASK] when random() < MASK_BELOW; else the token
# is kept when random() < KEEP_BELOW; else a random word.
MASK_BELOW, KEEP_BELOW = 0.8, 0.5


@dataclass
class Corpus:
    """Tokenized documents: every sentence's ids in one array, sentences as spans of it."""

    tokens: array
    sentence_lengths: array = field(default_factory=lambda: array("q"))
    # (first sentence, number of sentences) of each non-empty document, in reading order.
    documents: list[tuple[int, int]] = field(default_factory=list)

    def sentence_starts(self) -> list[int]:
        """Start of each sentence in `tokens`, plus the end of the last one."""
        starts = np.zeros(len(self.sentence_lengths) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.sentence_lengths, dtype=np.int64), out=starts[1:])
        return starts.tolist()


@dataclass
class Instances:
    """Training instances, each as two spans of `Corpus.tokens` plus its masked positions.

    Instance k is [CLS] tokens[a_start[k]:+a_length[k]] [SEP] tokens[b_start[k]:+b_length[k]]
    [SEP]; its `mask_count[k]` masked positions follow those of the instances before it in
    `mask_position` (increasing), with the id written at each in `mask_id` (KEEP: the original
    token is kept).
    """

    a_start: array = field(default_factory=lambda: array("q"))
    a_length: array = field(default_factory=lambda: array("q"))
    b_start: array = field(default_factory=lambda: array("q"))
    b_length: array = field(default_factory=lambda: array("q"))
    random_next: array = field(default_factory=lambda: array("q"))
    mask_count: array = field(default_factory=lambda: array("q"))
    mask_position: array = field(default_factory=lambda: array("H"))
    mask_id: array = field(default_factory=lambda: array("i"))

    def __len__(self) -> int:
        return len(self.a_start)


@dataclass(frozen=True)
class MaskingConfig:
    """What the masking needs to know about the vocabulary and the flags."""

    max_seq_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    short_seq_prob: float
    vocab_size: int
    mask_id: int


def _char_class(low: int, high: int) -> str:
    """A regular expression for one stream character in [low, high) (none when empty)."""
    return f"[\\u{low:04x}-\\u{high - 1:04x}]" if low < high else "(?!)"


def _decided_by_char(largest: Callable[[int], object], smallest: Callable[[int], object]
                     ) -> tuple[int, int]:
    """(true_end, false_start) of a test that is monotone in the word: every word of a character
    below true_end passes (`largest(c)`, the test on the character's largest word, is True),
    every word of a character from false_start on fails (`smallest(c)` is False)."""
    chars = range(CHAR_COUNT)
    true_end = bisect.bisect_left(chars, True, key=lambda char: not largest(char))
    false_start = bisect.bisect_left(chars, True, key=lambda char: not smallest(char))
    return true_end, false_start


class MaskingScanner:
    """Counts the words of the masking draws of up to `longest` positions, in one match.

    Per masked position the reference draws random() < MASK_BELOW ([MASK]); if not, random() <
    KEEP_BELOW (the token is kept); if not, randint(0, vocab_size - 1) (a random word). Whether
    random() is below a threshold is decided by its first word's 15 high bits except for one
    character value at most, and so is each try of randint: a regular expression over
    `WordStream.chars(MAX_CHAR_BITS)` counts the words, and a character it cannot decide makes
    the match fail (the draws are then made in Python). Fewer positions are matched with a
    prefix of "\\0\\0" pairs, each a [MASK] draw.
    """

    def __init__(self, longest: int, vocab_size: int):
        word_shift = 32 - MAX_CHAR_BITS  # a character's words: [c << word_shift, +2**word_shift)
        draw_shift = 32 - vocab_size.bit_length()
        mask = self._random_below(MASK_BELOW)
        keep = self._random_below(KEEP_BELOW)
        accept = _decided_by_char(
            lambda char: ((((char + 1) << word_shift) - 1) >> draw_shift) < vocab_size,
            lambda char: ((char << word_shift) >> draw_shift) < vocab_size)
        # The branches of a draw start with disjoint classes: no backtracking can succeed.
        draw = (f"(?:{_char_class(0, mask[0])}.|{_char_class(mask[1], CHAR_COUNT)}."
                f"(?:{_char_class(0, keep[0])}.|{_char_class(keep[1], CHAR_COUNT)}."
                f"{_char_class(accept[1], CHAR_COUNT)}*+{_char_class(0, accept[0])}))")
        self.longest, self.vocab_size = longest, vocab_size
        self._pattern = re.compile(f"(?:{draw}){{{longest}}}", re.DOTALL)

    @staticmethod
    def _random_below(threshold: float) -> tuple[int, int]:
        """`_decided_by_char` for random() < threshold: for the first words a of character c,
        random() * 2**53 = (a >> 5) * 2**26 + (b >> 6) runs over [c << s, (c + 1) << s), with
        s = 53 - MAX_CHAR_BITS."""
        limit = threshold * 2.0 ** 53
        shift = 53 - MAX_CHAR_BITS
        return _decided_by_char(lambda char: ((char + 1) << shift) - 1 < limit,
                                lambda char: (char << shift) < limit)

    def skip(self, stream: WordStream, positions: int) -> None:
        """Advance `stream` past the masking draws of `positions` positions."""
        used = stream.words_matched(self._pattern, MAX_CHAR_BITS,
                                    "\0\0" * (self.longest - positions), 6 * positions + 64)
        if used is not None:
            stream.pos += used
            return
        for _ in range(positions):
            if stream.random() >= MASK_BELOW and stream.random() >= KEEP_BELOW:
                stream.randbelow(self.vocab_size)


def masking_draws(words: np.ndarray, starts: np.ndarray, counts: np.ndarray, vocab_size: int,
                  mask_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The masking draws of many instances, redone from the stream's words with numpy.

    Instance r draws for `counts[r]` positions from word `starts[r]` on (see MaskingScanner).
    Returns (ids, ends): ids[r, t] is what position t gets (mask_id, KEEP or a random word id),
    ends[r] the word after instance r's last draw.
    """
    count = len(starts)
    width = int(counts.max()) if count else 0
    by_count = np.argsort(-counts, kind="stable")
    lane_counts = counts[by_count]
    cursor = starts[by_count].astype(np.int64)
    ids = np.empty((count, width), dtype=np.int64)
    active = count
    for column in range(width):
        while lane_counts[active - 1] <= column:
            active -= 1
        at = cursor[:active]
        masked = random_below(words, at, MASK_BELOW)
        rest = np.flatnonzero(~masked)
        kept = random_below(words, at[rest] + 2, KEEP_BELOW)
        drawn = rest[~kept]
        values, ends = randbelow_bulk(words, at[drawn] + 4, vocab_size)
        chosen = np.full(active, mask_id, dtype=np.int64)
        chosen[rest[kept]] = KEEP
        chosen[drawn] = values
        ids[:active, column] = chosen
        at += 2
        at[rest] += 2
        at[drawn] = ends
    out_ids = np.empty_like(ids)
    out_ids[by_count] = ids
    ends = np.empty_like(cursor)
    ends[by_count] = cursor
    return out_ids, ends


def truncated(a_start: int, a_length: int, b_start: int, b_length: int, fronts: list[bool]
              ) -> tuple[int, int, int, int]:
    """The pair (spans of tokens) after the reference's truncation by len(fronts) tokens.

    The reference removes one token at a time from the longer side (B when they tie), from its
    front when that token's coin (`fronts`) is True, else from its back. So the longer side
    alone loses the first |a_length - b_length| tokens; then B and A take turns, B first.
    """
    first = min(len(fronts), abs(a_length - b_length))
    a_cuts, b_cuts = fronts[first + 1::2], fronts[first::2]
    if a_length > b_length:
        a_cuts = fronts[:first] + a_cuts
    else:
        b_cuts = fronts[:first] + b_cuts
    return (a_start + sum(a_cuts), a_length - len(a_cuts),
            b_start + sum(b_cuts), b_length - len(b_cuts))


class InstanceMaker:
    """Creates the instances of documents with exactly the reference's draws, in two passes.

    `add_document` makes the draws that decide each instance's spans (target length, split,
    random next, truncation) in Python, and only counts the words of its candidate shuffle and
    masking draws, with regular expressions. Before the stream drops those words (and at the
    end), `resolve` redoes the shuffles and masking draws of all pending instances at once with
    numpy and stores their masked positions.
    """

    def __init__(self, corpus: Corpus, documents: list[tuple[int, int]], config: MaskingConfig,
                 stream: WordStream):
        self.documents = documents
        self.starts = corpus.sentence_starts()
        self.config = config
        self.stream = stream
        self.out = Instances()
        self.shuffles = ShuffleScanner(config.max_seq_length - 3)
        self.maskings = MaskingScanner(config.max_predictions_per_seq, config.vocab_size)
        # Masked positions of an instance of n candidates (n + 3 tokens), by n.
        self._positions = [min(size, config.max_predictions_per_seq,
                               max(1, int(round((size + 3) * config.masked_lm_prob))))
                           for size in range(config.max_seq_length - 2)]
        # Per instance whose draws are counted but not yet redone: its spans (a_start,
        # a_length, b_start, b_length, random_next), then the shuffle's first word (a global
        # index) and word count, the masking draws' first word, their positions, and the word
        # after them.
        self._pending: list[tuple[int, ...]] = []
        stream.before_refill = self.resolve

    def add_document(self, document_index: int) -> None:
        """Append the instances of one document (reference `create_instances_from_document`).

        The reference grows a chunk one sentence at a time until it reaches the target length
        or the document's end; the chunk's last sentence is found here by bisecting the
        sentence starts instead.
        """
        config, stream, documents = self.config, self.stream, self.documents
        randbelow = stream.randbelow  # randint(low, high) is low + randbelow(high - low + 1)
        starts = self.starts
        first, count = documents[document_index]
        end = first + count
        max_num_tokens = config.max_seq_length - 3
        target_length = max_num_tokens
        if stream.random() < config.short_seq_prob:
            target_length = 2 + randbelow(max_num_tokens - 1)

        chunk_first = first
        while chunk_first < end:
            chunk_end = bisect.bisect_left(starts, starts[chunk_first] + target_length,
                                           chunk_first + 1, end)
            chunk_size = chunk_end - chunk_first
            a_end = 1
            if chunk_size >= 2:
                a_end = 1 + randbelow(chunk_size - 1)
            a_start = starts[chunk_first]
            a_length = starts[chunk_first + a_end] - a_start

            if chunk_size == 1 or stream.random() < 0.5:
                random_next = 1
                for _ in range(10):
                    other = randbelow(len(documents))
                    if other != document_index:
                        break
                other_first, other_count = documents[other]
                sentence = other_first + randbelow(other_count)
                b_start = starts[sentence]
                b_end = bisect.bisect_left(starts, b_start + target_length - a_length,
                                           sentence + 1, other_first + other_count)
                b_length = starts[b_end] - b_start
                # The chunk's unused sentences go back to the document.
                chunk_end = chunk_first + a_end
            else:
                random_next = 0
                b_start = starts[chunk_first + a_end]
                b_length = starts[chunk_end] - b_start

            excess = a_length + b_length - max_num_tokens
            if excess > 0:
                a_start, a_length, b_start, b_length = truncated(
                    a_start, a_length, b_start, b_length, stream.coin_flips(excess))
            self._count_draws(a_start, a_length, b_start, b_length, random_next)
            chunk_first = chunk_end

    def _count_draws(self, a_start: int, a_length: int, b_start: int, b_length: int,
                     random_next: int) -> None:
        """Advance past one instance's candidate shuffle and masking draws, and queue it."""
        stream = self.stream
        size = a_length + b_length
        shuffle_start = stream.tell()
        stream.keep = shuffle_start  # a refill from here on keeps this instance's words
        used = self.shuffles.count(stream, size)
        stream.pos += used
        positions = self._positions[size]
        mask_start = stream.tell()
        self.maskings.skip(stream, positions)
        self._pending.append((a_start, a_length, b_start, b_length, random_next, shuffle_start,
                              used, mask_start, positions, stream.tell()))

    def resolve(self) -> None:
        """Redo the pending instances' shuffles and masking draws; store the instances."""
        if not self._pending:
            return
        stream, config, out = self.stream, self.config, self.out
        table = np.array(self._pending, dtype=np.int64)
        self._pending = []
        for values, column in zip((out.a_start, out.a_length, out.b_start, out.b_length,
                                   out.random_next), table.T):
            values.frombytes(column.tobytes())
        a_length, b_length = table[:, 1], table[:, 3]
        shuffle_start, used, mask_start, positions, mask_end = table[:, 5:].T
        heads = int(positions.max())
        items = shuffle_heads(stream.high, shuffle_start - stream.base, used,
                              a_length + b_length, heads)
        ids, ends = masking_draws(stream.words, mask_start - stream.base, positions,
                                  config.vocab_size, config.mask_id)
        if not np.array_equal(ends, mask_end - stream.base):
            raise AssertionError("masking draws disagree with their counted words")
        # Candidate k is token position k + 1 in A, k + 2 in B ([CLS] and the first [SEP]).
        token_positions = items + 1 + (items >= a_length[:, None])
        masked = np.arange(heads) < positions[:, None]
        token_positions[~masked] = config.max_seq_length  # sorts after every real position
        order = np.argsort(token_positions, axis=1, kind="stable")
        out.mask_count.frombytes(positions.tobytes())
        out.mask_position.frombytes(
            np.take_along_axis(token_positions, order, axis=1)[masked].astype(np.uint16).tobytes())
        out.mask_id.frombytes(
            np.take_along_axis(ids, order, axis=1)[masked].astype(np.int32).tobytes())


def create_instances(corpus: Corpus, config: MaskingConfig, dupe_factor: int,
                     rng: random.Random) -> tuple[Instances, list[int]]:
    """All instances of `corpus`, and the order in which they are written."""
    documents = list(corpus.documents)
    rng.shuffle(documents)
    stream = WordStream(rng)
    maker = InstanceMaker(corpus, documents, config, stream)
    with tqdm(total=dupe_factor * len(documents), desc="instances", unit="doc",
              disable=inner_bar_disabled(), leave=False) as bar:
        for _ in range(dupe_factor):
            for document_index in range(len(documents)):
                maker.add_document(document_index)
            bar.update(len(documents))
    maker.resolve()
    stream.keep = stream.tell()
    order = list(range(len(maker.out)))
    stream.shuffle(order)
    return maker.out, order
