"""A `random.Random`'s draws made in bulk: its Mersenne Twister words read ahead a chunk at a time,
and its calls answered from them exactly.

CPython's `random.Random` (3.11) makes every value from one stream of 32-bit Mersenne Twister
(MT19937) words:

- `getrandbits(k)`, k <= 32: one word, shifted right by 32 - k (its k high bits);
- `random()`: two words a, b, giving ((a >> 5) * 2**26 + (b >> 6)) / 2**53;
- `_randbelow(n)`: `getrandbits(n.bit_length())` again until the value is below n, and
  `randint(low, high)` is low + _randbelow(high - low + 1);
- `shuffle(x)`: for i from len(x) - 1 down to 1, swaps x[i] with x[_randbelow(i + 1)].

`WordStream` takes over a `Random`'s state (numpy's MT19937 is the same generator), makes the
words ahead of use, and answers those calls from them in order, so each returns what the `Random`
would have returned. Three kinds of reader share the words: Python code calls `random`,
`randbelow` (randint's draw), `shuffle` and `coin_flips`; regular expressions over `chars(bits)`
(one character per word: its `bits` high bits) count the words a whole run of draws takes (as
`ShuffleScanner` does for a shuffle); numpy reads `words` and `high` to redo many counted draws
at once (`shuffle_heads`, `random_floats`, `random_below`, `randbelow_bulk`). Positions are word
indices: `pos` indexes the current chunk, `base + pos` counts every word drawn since the stream
began.
"""
from __future__ import annotations

import codecs
import re
from random import Random
from typing import Callable

import numpy as np

# Most high bits of a word `WordStream.chars` can hold (code points stay below the surrogates).
MAX_CHAR_BITS = 15
# Lists up to this long can be counted by ShuffleScanner: every draw of their shuffle takes at
# most 15 high bits of a word (getrandbits(k), k <= 15), which a character holds exactly.
MAX_SHUFFLE_LENGTH = 1 << MAX_CHAR_BITS
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53
# Steps of `_shuffle_draws` whose words are gathered at once.
_STEP_BLOCK = 64


def _nothing() -> None:
    """The default `WordStream.before_refill`: no reader holds positions into the chunk."""


class WordStream:
    """The Mersenne Twister words of a `random.Random`, read ahead in chunks.

    Once built, the stream replaces `rng`: the draws it answers continue `rng`'s sequence, and
    `rng` itself must not be used again. `before_refill` is called before a refill drops the
    words before `keep` (a global word index), so a reader can finish with them first.
    """

    def __init__(self, rng: Random, chunk_words: int = 1 << 20):
        _, state, _ = rng.getstate()
        bits = np.random.MT19937()
        bits.state = {"bit_generator": "MT19937",
                      "state": {"key": np.array(state[:-1], dtype=np.uint32), "pos": state[-1]}}
        self._generator = np.random.Generator(bits)
        self._chunk_words = chunk_words
        self.before_refill: Callable[[], None] = _nothing
        self.keep = 0
        self.base = 0
        self.pos = 0
        self._set_words(self._fresh(chunk_words))

    def _fresh(self, count: int) -> np.ndarray:
        """The next `count` words of the generator (uint32)."""
        return self._generator.integers(0, 1 << 32, size=count, dtype=np.uint32)

    def _set_words(self, words: np.ndarray) -> None:
        """Make `words` the chunk, with its Python-int view, 16 high bits and 15-bit characters."""
        self.words = words
        self.size = len(words)
        self.view = memoryview(words)
        self.high = np.ascontiguousarray(words.astype("<u4", copy=False).view("<u2")[1::2])
        self._chars: dict[int, str] = {}

    def chars(self, bits: int) -> str:
        """The chunk as a string, one character per word: its `bits` (1 to 15) high bits."""
        text = self._chars.get(bits)
        if text is None:
            if not 1 <= bits <= MAX_CHAR_BITS:
                raise ValueError(f"chars({bits}): between 1 and {MAX_CHAR_BITS} bits")
            text = self._chars[bits] = codecs.utf_16_le_decode(
                (self.high >> (16 - bits)).astype("<u2", copy=False))[0]
        return text

    def reserve(self, count: int) -> None:
        """Make sure words `pos` to `pos + count` are in the chunk (refilling if needed)."""
        if self.pos + count > self.size:
            self.before_refill()
            start = self.keep - self.base
            if not 0 <= start <= self.pos:
                raise ValueError(f"keep={self.keep} is outside the words not yet read")
            fresh = max(self._chunk_words, self.pos + count - self.size)
            kept = self.words[start:]
            self._set_words(kept[:0])  # the old chunk's derived copies go before the new ones
            self._set_words(np.concatenate((kept, self._fresh(fresh))))
            self.base += start
            self.pos -= start

    def words_matched(self, pattern: re.Pattern, bits: int, prefix: str, window: int
                      ) -> int | None:
        """How many words from `pos` a match of `pattern` over `prefix` followed by
        `chars(bits)` of the next `window` words takes (None: no match). Not consumed."""
        if self.pos + window > self.size:
            self.reserve(window)
        start = self.pos
        if prefix:
            match = pattern.match(prefix + self.chars(bits)[start:start + window])
            return None if match is None else match.end() - len(prefix)
        match = pattern.match(self.chars(bits), start, start + window)
        return None if match is None else match.end() - start

    def tell(self) -> int:
        """Global index of the next word."""
        return self.base + self.pos

    def random(self) -> float:
        """`Random.random()`: a float in [0, 1) from the next two words."""
        if self.pos + 2 > self.size:
            self.reserve(2)
        pos, view = self.pos, self.view
        self.pos = pos + 2
        return ((view[pos] >> 5) * 67108864.0 + (view[pos + 1] >> 6)) * _TO_UNIT

    def randbelow(self, n: int) -> int:
        """`Random._randbelow(n)` for 1 <= n < 2**32: an int in [0, n)."""
        shift = 32 - n.bit_length()
        if shift < 0:
            raise ValueError(f"randbelow({n}): more than 32 bits")
        while True:
            if self.pos >= self.size:
                self.reserve(1)
            value = self.view[self.pos] >> shift
            self.pos += 1
            if value < n:
                return value

    def shuffle(self, items: list) -> None:
        """`Random.shuffle(items)`, in place."""
        randbelow = self.randbelow
        for i in reversed(range(1, len(items))):
            j = randbelow(i + 1)
            items[i], items[j] = items[j], items[i]

    def coin_flips(self, count: int) -> list[bool]:
        """`[random() < 0.5 for _ in range(count)]`.

        random() < 0.5 exactly when the first of its two words is below 2**31, so only those
        words are read.
        """
        self.reserve(2 * count)
        pos = self.pos
        self.pos = pos + 2 * count
        return [word < 0x80000000 for word in self.view[pos:pos + 2 * count:2]]


class ShuffleScanner:
    """Counts the words `Random.shuffle` takes for a list of up to `longest` items, in one match.

    With b = longest.bit_length(), the draw for index i accepts a word exactly when its b high
    bits are below (i + 1) << (b - (i + 1).bit_length()), so "rejected characters, then an
    accepted one" per index, from longest - 1 down to 1, is a regular expression over
    `WordStream.chars(b)`. A shorter list is matched with a prefix of "\\0" characters, each
    accepted by one of the leading indices it does not have.
    """

    def __init__(self, longest: int):
        if not 1 <= longest < MAX_SHUFFLE_LENGTH:
            raise ValueError(f"ShuffleScanner({longest}): between 1 and {MAX_SHUFFLE_LENGTH - 1}")
        bits = self.bits = longest.bit_length()
        items = []
        for index in range(longest - 1, 0, -1):
            limit = (index + 1) << (bits - (index + 1).bit_length())
            items.append(f"[\\u{limit:04x}-\\u{(1 << bits) - 1:04x}]*+[\\x00-\\u{limit - 1:04x}]")
        self.longest = longest
        self._pattern = re.compile("".join(items))

    def count(self, stream: WordStream, length: int) -> int:
        """Words the shuffle of a `length`-item list takes from `stream.pos` (not consumed)."""
        skip = self.longest - length
        window = 2 * length + 64
        while True:
            used = stream.words_matched(self._pattern, self.bits, "\0" * skip, window)
            if used is not None:
                return used
            window *= 2


def shuffle_heads(high: np.ndarray, starts: np.ndarray, used: np.ndarray, lengths: np.ndarray,
                  heads: int) -> np.ndarray:
    """The first `heads` items of `Random.shuffle(list(range(length)))` for many shuffles.

    Shuffle r takes the `used[r]` words from `starts[r]` (indices into `high`, the words' 16
    high bits) and shuffles `lengths[r]` (2 to 2**15 - 1) items. Returns an int16 array
    (shuffles, heads): row r holds the shuffled list's first min(heads, lengths[r]) items, then
    padding.
    """
    count = len(starts)
    width = int(lengths.max())
    by_length = np.argsort(-lengths, kind="stable")
    row_of = np.empty(count, dtype=np.int64)
    row_of[by_length] = np.arange(count)
    draws = _shuffle_draws(high, starts, used, lengths, row_of, width)
    items = np.tile(np.arange(width, dtype=np.int16), (count, 1))
    flat_items = items.reshape(-1)
    row_cell = np.arange(0, count * width, width)
    sorted_lengths = lengths[by_length]
    active = 0
    for i in range(width - 1, 0, -1):
        while active < count and sorted_lengths[active] > i:
            active += 1
        cells = row_cell[:active] + draws[:active, i]
        other = flat_items.take(cells)
        flat_items.put(cells, items[:active, i])
        if i < heads:
            items[:active, i] = other
    return items[row_of, :heads]


def _shuffle_draws(high: np.ndarray, starts: np.ndarray, used: np.ndarray, lengths: np.ndarray,
                   row_of: np.ndarray, width: int) -> np.ndarray:
    """draws[row_of[r], i]: the index that shuffle r swaps with index i (int16, rows of `width`).

    One step per word for all shuffles at once: shuffle r's current index i accepts the word
    when its 16 high bits are below (i + 1) << (16 - (i + 1).bit_length()), and the draw is
    those bits shifted right by 16 - (i + 1).bit_length().
    """
    count = len(starts)
    shift = 16 - np.array([(i + 1).bit_length() for i in range(width)], dtype=np.uint16)
    limit = (np.arange(1, width + 1, dtype=np.uint16) << shift).astype(np.uint16)
    accepted = np.zeros((count, width), dtype=np.uint16)  # high bits of the word taken for i
    flat = accepted.reshape(-1)
    by_used = np.argsort(-used, kind="stable")
    lane_start = starts[by_used].astype(np.int64)
    lane_used = used[by_used]
    current = (lengths[by_used] - 1).astype(np.int64)
    lane_cell = row_of[by_used] * width
    steps, last_word = int(lane_used[0]), len(high) - 1
    active = count
    for block in range(0, steps, _STEP_BLOCK):
        while lane_used[active - 1] <= block:
            active -= 1
        block_steps = np.arange(block, min(steps, block + _STEP_BLOCK))[:, None]
        window = high.take(np.minimum(lane_start[:active] + block_steps, last_word))
        for step, words in zip(block_steps[:, 0].tolist(), window):
            while lane_used[active - 1] <= step:
                active -= 1
            word, index = words[:active], current[:active]
            flat[lane_cell[:active] + index] = word
            index -= word < limit.take(index)
    if current.any():
        raise AssertionError("shuffle_heads: a shuffle did not take the words it was said to")
    return (accepted >> shift).astype(np.int16)


def random_floats(words: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """`random()` made from the two words at each of `positions` (float64, bit for bit)."""
    first = words.take(positions) >> np.uint32(5)
    second = words.take(positions + 1) >> np.uint32(6)
    return (first * 67108864.0 + second) * _TO_UNIT


def random_below(words: np.ndarray, positions: np.ndarray, threshold: float) -> np.ndarray:
    """`random() < threshold` for the draws at each of `positions` (bool array), exactly.

    random() * 2**53 is (a >> 5) * 2**26 + (b >> 6) for the draw's words a, b, so the top 27
    bits of a decide, unless they equal threshold * 2**27 rounded down: those few draws are
    settled by `random_floats`.
    """
    top = words.take(positions) >> np.uint32(5)
    undecided_top = int(threshold * 2.0 ** 27)
    below = top < undecided_top
    undecided = np.flatnonzero(top == undecided_top)
    if undecided.size:
        below[undecided] = random_floats(words, positions[undecided]) < threshold
    return below


def randbelow_bulk(words: np.ndarray, positions: np.ndarray, n: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """`_randbelow(n)` from each of `positions`: (values, position after the last word taken)."""
    shift = np.uint32(32 - n.bit_length())
    positions = positions.copy()
    values = words.take(positions) >> shift
    retry = np.flatnonzero(values >= n)
    while retry.size:
        positions[retry] += 1
        values[retry] = words.take(positions[retry]) >> shift
        retry = retry[values[retry] >= n]
    return values.astype(np.int64), positions + 1
