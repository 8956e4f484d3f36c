"""mt_stream answers random.Random's calls exactly, one at a time and in bulk."""
from __future__ import annotations

import random

import numpy as np
import pytest

from cleanup_scripts.records.mt_stream import (ShuffleScanner, WordStream, randbelow_bulk,
                                               random_below, random_floats, shuffle_heads)


def test_words_are_the_generators():
    """The stream's words are getrandbits(32)'s, from wherever the Random had got to."""
    rng, reference = random.Random(7), random.Random(7)
    for generator in (rng, reference):
        generator.random()
        generator.getrandbits(5)
    stream = WordStream(rng, chunk_words=1000)
    expected = [reference.getrandbits(32) for _ in range(1000)]
    assert stream.words.tolist() == expected
    assert stream.high.tolist() == [word >> 16 for word in expected]
    assert [ord(char) for char in stream.chars(9)] == [word >> 23 for word in expected]


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_calls_match_random_across_refills(seed):
    """Mixed calls, a chunk of 61 words, `keep` moving forward: the same values as Random."""
    stream, reference = WordStream(random.Random(seed), chunk_words=61), random.Random(seed)
    plan = random.Random(seed + 1)
    for _ in range(3000):
        stream.keep = stream.tell() - plan.randint(0, min(stream.pos, 20))
        call = plan.randrange(5)
        if call == 0:
            assert stream.random() == reference.random()
        elif call == 1:
            low = plan.randint(-5, 5)
            width = plan.choice([1, 2, 3, 7, 1000, 1 << 16, (1 << 31) + 1, (1 << 32) - 1])
            assert low + stream.randbelow(width) == reference.randint(low, low + width - 1)
        elif call == 2:
            items = list(range(plan.choice([0, 1, 2, 5, 64, 130])))
            expected = list(items)
            stream.shuffle(items)
            reference.shuffle(expected)
            assert items == expected
        elif call == 3:
            count = plan.randint(0, 90)
            assert stream.coin_flips(count) == [reference.random() < 0.5 for _ in range(count)]
        else:
            count = plan.randint(0, 100)
            stream.reserve(count)
            stream.pos += count
            for _ in range(count):
                reference.getrandbits(32)
    assert stream.random() == reference.random()


def test_randbelow_rejects_more_than_32_bits():
    with pytest.raises(ValueError, match="more than 32 bits"):
        WordStream(random.Random(0)).randbelow(1 << 32)


def test_refill_refuses_to_drop_words_not_yet_kept():
    stream = WordStream(random.Random(0), chunk_words=10)
    stream.pos = 8
    stream.keep = stream.tell() + 1
    with pytest.raises(ValueError, match="outside the words not yet read"):
        stream.reserve(5)


def test_before_refill_is_called_while_the_old_words_are_there():
    stream = WordStream(random.Random(3), chunk_words=16)
    seen = []
    stream.before_refill = lambda: seen.append((stream.base, stream.words.tolist()))
    stream.pos = 10
    stream.keep = stream.tell()
    old = stream.words.tolist()
    stream.reserve(20)
    assert seen == [(0, old)]
    assert stream.base == 10 and stream.pos == 0 and stream.words.tolist()[:6] == old[10:]


def reference_shuffle(rng: random.Random, length: int) -> list[int]:
    items = list(range(length))
    rng.shuffle(items)
    return items


@pytest.mark.parametrize("longest", [2, 3, 16, 17, 509, 1030])
def test_shuffles_counted_and_redone(longest):
    """ShuffleScanner counts each shuffle's words; shuffle_heads redoes them all at once."""
    seed = 1000 + longest
    stream, reference = WordStream(random.Random(seed), chunk_words=1 << 16), random.Random(seed)
    scanner = ShuffleScanner(longest)
    lengths = sorted({2, longest, max(2, longest - 1), max(2, longest // 2)}) * 3
    lengths += [random.Random(seed).randint(2, longest) for _ in range(40)]
    starts, used, expected = [], [], []
    for length in lengths:
        starts.append(stream.pos)
        used.append(scanner.count(stream, length))
        stream.pos += used[-1]
        stream.pos += 3  # words drawn between shuffles
        expected.append(reference_shuffle(reference, length))
        for _ in range(3):
            reference.getrandbits(32)
    assert stream.random() == reference.random()
    heads = min(longest, 80)
    items = shuffle_heads(stream.high, np.array(starts), np.array(used), np.array(lengths), heads)
    for row, length, shuffled in zip(items.tolist(), lengths, expected):
        assert row[:min(heads, length)] == shuffled[:heads]


def test_shuffle_scanner_limits():
    with pytest.raises(ValueError):
        ShuffleScanner(1 << 15)
    assert ShuffleScanner(1).count(WordStream(random.Random(0)), 1) == 0


def test_bulk_random_floats_and_randbelow():
    reference = random.Random(99)
    stream = WordStream(random.Random(99), chunk_words=5000)
    positions = np.arange(0, 4000, 2)
    expected = [reference.random() for _ in range(2000)]
    assert random_floats(stream.words, positions).tolist() == expected
    for n in (1, 2, 3, 30522, 70005, (1 << 31) + 5, (1 << 32) - 1):
        reference = random.Random(5)
        stream = WordStream(random.Random(5), chunk_words=5000)
        starts, expected = [], []
        for _ in range(300):
            starts.append(stream.pos)
            expected.append(stream.randbelow(n))
            assert expected[-1] == reference._randbelow(n)
        values, ends = randbelow_bulk(stream.words, np.array(starts), n)
        assert values.tolist() == expected
        assert ends.tolist() == starts[1:] + [stream.pos]


@pytest.mark.parametrize("threshold", [0.8, 0.5, 0.1, 1 / 3, 1.0, 1e-9])
def test_random_below_decides_like_random(threshold):
    """random_below(threshold) is random() < threshold, first words on the edge included."""
    rng = np.random.default_rng(1)
    edge = int(threshold * 2.0 ** 27)
    first = np.concatenate((rng.integers(0, 1 << 32, 500),
                            np.uint32(min(edge, (1 << 27) - 1) << 5) + rng.integers(0, 32, 500)))
    second = rng.integers(0, 1 << 32, 1000)
    second[::7] = (1 << 32) - 1
    second[::11] = 0
    words = np.stack((first, second), axis=1).astype(np.uint32).reshape(-1)
    expected = [((a >> 5) * 67108864.0 + (b >> 6)) * (1.0 / 9007199254740992.0) < threshold
                for a, b in zip(first.tolist(), second.tolist())]
    assert random_below(words, np.arange(0, 2000, 2), threshold).tolist() == expected
