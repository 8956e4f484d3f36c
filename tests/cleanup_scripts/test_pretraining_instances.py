"""create_instances makes the instances a plain, draw-by-draw implementation makes.

`plain_instances` below follows the reference's algorithm with one `random.Random`, a call at a
time, on token lists; create_instances (counting in one pass, redoing draws in bulk in another,
from words read ahead) must agree with it on every span, masked position and replacement, and
on the write order, whatever the flags, vocabulary size and chunk size of the word stream.
"""
from __future__ import annotations

import functools
import random
from array import array

import numpy as np
import pytest

from cleanup_scripts.records import mt_stream, pretraining_instances
from cleanup_scripts.records.pretraining_instances import (KEEP, Corpus, MaskingConfig,
                                                           MaskingScanner, create_instances,
                                                           masking_draws, truncated)

CLS, SEP = -1, -2


def plain_document(documents: list[list[list[int]]], index: int, config: MaskingConfig,
                   rng: random.Random) -> list[tuple]:
    """(tokens, random_next, {position: new id}) of each instance of one document."""
    document = documents[index]
    max_tokens = config.max_seq_length - 3
    target = max_tokens
    if rng.random() < config.short_seq_prob:
        target = rng.randint(2, max_tokens)
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [token for sentence in chunk[:a_end] for token in sentence]
            if len(chunk) == 1 or rng.random() < 0.5:
                random_next = True
                for _ in range(10):
                    other = rng.randint(0, len(documents) - 1)
                    if other != index:
                        break
                b = []
                for sentence in documents[other][rng.randint(0, len(documents[other]) - 1):]:
                    b.extend(sentence)
                    if len(b) >= target - len(a):
                        break
                i -= len(chunk) - a_end
            else:
                random_next = False
                b = [token for sentence in chunk[a_end:] for token in sentence]
            while len(a) + len(b) > max_tokens:
                longer = a if len(a) > len(b) else b
                if rng.random() < 0.5:
                    del longer[0]
                else:
                    longer.pop()
            tokens = [CLS] + a + [SEP] + b + [SEP]
            candidates = [p for p, token in enumerate(tokens) if token not in (CLS, SEP)]
            rng.shuffle(candidates)
            count = min(config.max_predictions_per_seq,
                        max(1, int(round(len(tokens) * config.masked_lm_prob))))
            masked = {}
            for position in candidates[:count]:
                if rng.random() < 0.8:
                    masked[position] = config.mask_id
                elif rng.random() < 0.5:
                    masked[position] = tokens[position]
                else:
                    masked[position] = rng.randint(0, config.vocab_size - 1)
            instances.append((tokens, random_next, masked))
            chunk, length = [], 0
        i += 1
    return instances


def plain_instances(sentences: list[list[list[int]]], config: MaskingConfig, dupe_factor: int,
                    seed: int) -> list[tuple]:
    """Every instance, in the order written."""
    rng = random.Random(seed)
    documents = list(sentences)
    rng.shuffle(documents)
    instances = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances.extend(plain_document(documents, index, config, rng))
    rng.shuffle(instances)
    return instances


def corpus_of(sentences: list[list[list[int]]]) -> Corpus:
    corpus = Corpus(array("i"))
    for document in sentences:
        corpus.documents.append((len(corpus.sentence_lengths), len(document)))
        for sentence in document:
            corpus.tokens.extend(sentence)
            corpus.sentence_lengths.append(len(sentence))
    return corpus


def instances_as_plain(corpus: Corpus, config: MaskingConfig, dupe_factor: int,
                       seed: int) -> list[tuple]:
    """create_instances' instances in the form of plain_instances'."""
    out, order = create_instances(corpus, config, dupe_factor, random.Random(seed))
    tokens = corpus.tokens.tolist()
    mask_offset = np.cumsum(out.mask_count) - np.array(out.mask_count)
    result = []
    for k in order:
        a = tokens[out.a_start[k]:out.a_start[k] + out.a_length[k]]
        b = tokens[out.b_start[k]:out.b_start[k] + out.b_length[k]]
        row = [CLS] + a + [SEP] + b + [SEP]
        first, count = mask_offset[k], out.mask_count[k]
        positions = out.mask_position[first:first + count].tolist()
        assert positions == sorted(set(positions))
        masked = {position: row[position] if new == KEEP else new for position, new in
                  zip(positions, out.mask_id[first:first + count].tolist())}
        result.append((row, bool(out.random_next[k]), masked))
    return result


def random_sentences(seed: int, documents: int, longest_sentence: int) -> list[list[list[int]]]:
    rng = random.Random(seed)
    def sentence() -> list[int]:
        return [rng.randrange(1000)
                for _ in range(rng.choice([1, 2, rng.randint(1, longest_sentence)]))]

    return [[sentence() for _ in range(rng.choice([1, 1, 2, rng.randint(1, 30)]))]
            for _ in range(documents)]


CONFIGS = [
    # max_seq_length, max_predictions_per_seq, masked_lm_prob, short_seq_prob, vocab_size
    (512, 76, 0.15, 0.1, 30522),
    (128, 20, 0.15, 0.1, 30522),
    (64, 10, 0.2, 0.5, 70005),
    (16, 3, 0.15, 0.0, 5),
    (5, 1, 0.15, 1.0, 1 << 15),
    (16, 20, 1.0, 0.5, (1 << 15) + 1),
    (200, 50, 0.5, 0.3, 1000003),
]


@pytest.mark.parametrize("chunk_words", [97, 1 << 21])
@pytest.mark.parametrize("config_values", CONFIGS)
def test_instances_match_plain_draws(config_values, chunk_words, monkeypatch):
    monkeypatch.setattr(pretraining_instances, "WordStream",
                        functools.partial(mt_stream.WordStream, chunk_words=chunk_words))
    seq = config_values[0]
    config = MaskingConfig(*config_values[:4], vocab_size=config_values[4], mask_id=4)
    sentences = random_sentences(seq, 40, max(2, seq // 3))
    sentences.append([[7] * (3 * seq)])  # one sentence longer than any sequence
    corpus = corpus_of(sentences)
    for seed in (1, 12345):
        assert instances_as_plain(corpus, config, 2, seed) == \
            plain_instances(sentences, config, 2, seed)


def test_masking_draws_undecided_by_characters_are_made_in_python():
    """A first word whose 15 high bits do not decide random() < 0.8 makes the regular
    expression fail; the draws are then made one by one, and still agree with numpy's."""
    vocab_size = 30522
    scanner = MaskingScanner(76, vocab_size)
    limit = 0.8 * 2.0 ** 53
    undecided = next(char for char in range(1 << 15)
                     if (char << 38) < limit <= ((char + 1) << 38) - 1)
    stream = mt_stream.WordStream(random.Random(2), chunk_words=1 << 20)
    chars = stream.chars(15)
    starts = [stream.pos + chars.index(chr(undecided)) - 2 * offset for offset in range(3)]
    starts = [start for start in starts if start >= 0]
    ends = []
    for start in starts:
        stream.pos = start
        scanner.skip(stream, 5)
        ends.append(stream.pos)
        reference = mt_stream.WordStream(random.Random(2), chunk_words=1 << 20)
        reference.pos = start
        for _ in range(5):
            if reference.random() >= 0.8 and reference.random() >= 0.5:
                reference.randbelow(vocab_size)
        assert stream.pos == reference.pos
    _, bulk_ends = masking_draws(stream.words, np.array(starts), np.full(len(starts), 5),
                                 vocab_size, 4)
    assert bulk_ends.tolist() == ends


def test_truncation_in_closed_form():
    """truncated() removes the tokens the reference's one-at-a-time loop removes."""
    rng = random.Random(4)
    for _ in range(3000):
        a_length, b_length = rng.randint(1, 40), rng.randint(1, 40)
        fronts = [rng.random() < 0.5 for _ in range(rng.randint(0, a_length + b_length - 2))]
        a, b = list(range(a_length)), list(range(100, 100 + b_length))
        for front in fronts:
            longer = a if len(a) > len(b) else b
            del longer[0 if front else -1]
        a_start, a_count, b_start, b_count = truncated(0, a_length, 100, b_length, fronts)
        assert (list(range(a_start, a_start + a_count)), list(range(b_start, b_start + b_count))) \
            == (a, b)
