"""cleanup_scripts.records.tokenization gives the reference tokenization.py's tokens and vocabulary.

Expected values in fixtures/pretraining/tokenization.json come from the reference module
itself (see fixtures/pretraining/README.md): token lists for single strings, md5s over the
tokens of the wiki slice and of lines putting (a sample of, or every) Unicode code point in
several word contexts, and the vocabulary's size and (token, id) md5.
"""
from __future__ import annotations

import hashlib
import json
import random
import unicodedata
from array import array

import pytest

from benchmark.files import InputError
from cleanup_scripts import VOCAB_FILE
from cleanup_scripts.records import tokenization
from cleanup_scripts.records.tokenization import (BasicTokenizer, FullTokenizer, WordpieceTokenizer,
                                                  clean_text, load_vocab)
from tests.pretraining_cases import FIXTURES, sweep_lines, write_vocab

DOCUMENT = json.loads((FIXTURES / "tokenization.json").read_text(encoding="utf-8"))
EXPECTED = DOCUMENT["expected"]
SAME_UNICODE = DOCUMENT["unidata_version"] == unicodedata.unidata_version
needs_same_unicode = pytest.mark.skipif(
    not SAME_UNICODE, reason=f"fixtures made with Unicode {DOCUMENT['unidata_version']}")


def tokenizer_for(variant: str, tmp_path) -> FullTokenizer:
    spec = EXPECTED[variant]
    return FullTokenizer(write_vocab(spec["vocab"], tmp_path), spec["do_lower_case"],
                         spec["preserve_unused_tokens"])


def md5_of_lines(tokenizer: FullTokenizer, lines: list[str]) -> str:
    digest = hashlib.md5()
    for line in lines:
        digest.update((" ".join(tokenizer.tokenize(line)) + "\n").encode("utf-8"))
    return digest.hexdigest()


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_vocab_matches_reference(variant, tmp_path):
    vocab = tokenizer_for(variant, tmp_path).vocab
    assert len(vocab) == EXPECTED[variant]["vocab_size"]
    assert hashlib.md5(json.dumps(list(vocab.items())).encode()).hexdigest() == \
        EXPECTED[variant]["vocab_md5"]


@needs_same_unicode
@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_single_strings_match_reference(variant, tmp_path):
    tokenizer = tokenizer_for(variant, tmp_path)
    lists = EXPECTED[variant]["lists"]
    for index, text in enumerate(DOCUMENT["cases"]):
        tokens = tokenizer.tokenize(text)
        if "cases" in lists:
            assert tokens == lists["cases"][index], repr(text)
        else:
            assert hashlib.md5(" ".join(tokens).encode("utf-8")).hexdigest()[:12] == \
                lists["cases_md5"][index], repr(text)


@needs_same_unicode
@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_wiki_slice_and_code_point_sample_match_reference(variant, tmp_path):
    tokenizer = tokenizer_for(variant, tmp_path)
    lines = (FIXTURES / "wiki-slice.txt").read_text(encoding="utf-8").split("\n")
    assert md5_of_lines(tokenizer, lines) == EXPECTED[variant]["md5"]["wiki_slice"]
    assert md5_of_lines(tokenizer, sweep_lines(True)) == EXPECTED[variant]["md5"]["sweep_sample"]


@pytest.mark.slow
@needs_same_unicode
@pytest.mark.parametrize("variant", ["lower", "cased"])
def test_every_code_point_matches_reference(variant, tmp_path):
    tokenizer = tokenizer_for(variant, tmp_path)
    assert md5_of_lines(tokenizer, sweep_lines(False)) == EXPECTED[variant]["md5"]["sweep_full"]


_WORDPIECE: dict[int, WordpieceTokenizer] = {}


def uncached_tokens(text: str, do_lower_case: bool, vocab: dict) -> list[str]:
    """Basic then WordPiece tokenization of a whole line, without the per-word cache."""
    basic = BasicTokenizer(do_lower_case, vocab)
    if id(vocab) not in _WORDPIECE:
        _WORDPIECE[id(vocab)] = WordpieceTokenizer(vocab)
    wordpiece = _WORDPIECE[id(vocab)]
    return [piece for token in basic.tokenize(text) for piece in wordpiece.tokenize(token)]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_per_word_cache_changes_nothing(do_lower_case):
    """Tokens of a word do not depend on its neighbours: cached and uncached paths agree."""
    lines = (FIXTURES / "adversarial.txt").read_text(encoding="utf-8").split("\n")
    lines += (FIXTURES / "wiki-slice.txt").read_text(encoding="utf-8").split("\n")[:200]
    cached = FullTokenizer(VOCAB_FILE, do_lower_case)
    expected = [uncached_tokens(line, do_lower_case, cached.vocab) for line in lines]
    assert [cached.tokenize(line) for line in lines] == expected
    # The same words met in another order and context, after the cache is warm.
    shuffled = list(lines)
    random.Random(3).shuffle(shuffled)
    words = [word for line in shuffled for word in clean_text(line).split()]
    assert [token for word in words for token in cached.tokenize(word)] == \
        [token for word in words for token in uncached_tokens(word, do_lower_case, cached.vocab)]


def test_cache_limit_changes_nothing(monkeypatch):
    monkeypatch.setattr(tokenization, "_CACHE_LIMIT", 5)
    lines = (FIXTURES / "wiki-slice.txt").read_text(encoding="utf-8").split("\n")[:100]
    small = FullTokenizer(VOCAB_FILE)
    assert [small.tokenize(line) for line in lines] == \
        [uncached_tokens(line, True, small.vocab) for line in lines]
    assert len(small._cache) <= 5


def test_wordpiece_limits_and_unknown_words():
    tokenizer = FullTokenizer(VOCAB_FILE)
    assert tokenizer.tokenize("unaffable") == ["una", "##ffa", "##ble"]
    assert tokenizer.tokenize("x" * 200) != ["[UNK]"]
    assert tokenizer.tokenize("x" * 201) == ["[UNK]"]
    assert tokenizer.tokenize("\u00e9" * 201) == ["[UNK]"]  # 201 code points before stripping
    assert tokenizer.tokenize("\U0001F600") == ["[UNK]"]
    assert tokenizer.tokenize("[CLS] [MASK]") == ["[", "cl", "##s", "]", "[", "mask", "]"]
    assert tokenizer.tokenize("a\x00b\ufffdc\u200bd") == tokenizer.tokenize("abcd")
    assert tokenizer.tokenize("a\u2028b c\u00a0d") == ["a", "b", "c", "d"]
    assert tokenizer.tokenize("\u4e2d\u6587") == ["\u4e2d", "\u6587"]
    ids = tokenizer.tokenize_to_ids("Hello, world!")
    assert tokenizer.convert_ids_to_tokens(ids) == ["hello", ",", "world", "!"]
    assert tokenizer.convert_tokens_to_ids(["hello", ",", "world", "!"]) == ids


def test_preserve_unused_tokens():
    keep = FullTokenizer(VOCAB_FILE, preserve_unused_tokens=True)
    split = FullTokenizer(VOCAB_FILE)
    assert keep.tokenize("a [unused5] b") == ["a", "[unused5]", "b"]
    assert split.tokenize("a [unused5] b") == ["a", "[", "unused", "##5", "]", "b"]
    assert keep.tokenize("[unused5]x") == split.tokenize("[unused5]x")
    assert keep.tokenize("[UNUSED5]") == split.tokenize("[UNUSED5]")


def test_bytes_are_decoded_ignoring_errors():
    tokenizer = FullTokenizer(VOCAB_FILE)
    assert tokenizer.tokenize(b"caf\xc3\xa9 \xff ok") == ["cafe", "ok"]


def test_vocab_ids_count_distinct_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n[UNK]\r\n  [CLS]  \n[SEP]\n[PAD]\n\n[MA\rSK]\nb\n\nc")
    assert load_vocab(path) == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "": 4,
                                "[MASK]": 5, "b": 6, "c": 7}


@pytest.mark.parametrize("content, message", [
    (b"", "vocab file is empty"),
    (b" \n\n\t\n", "vocab file is empty"),
    (b"[PAD]\n[UNK]\n\x00\x01\x02\n", "binary file"),
    (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xff\xfe\n", "not UTF-8"),
    (b"[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", "no [MASK] line"),
    (b"hello\nworld\n", "no [PAD], [UNK], [CLS], [SEP], [MASK] line"),
])
def test_not_a_vocab_is_an_input_error(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    with pytest.raises(InputError) as error:
        FullTokenizer(path)
    text = str(error.value)
    assert message in text and str(path) in text and "\n" not in text


def test_missing_vocab_is_an_input_error(tmp_path):
    for path in (tmp_path / "absent.txt", tmp_path):
        with pytest.raises(InputError, match="cannot read vocab file"):
            load_vocab(path)


def adversarial_words(seed: int, count: int) -> list[str]:
    """Random words mixing ASCII (control characters included), accents, CJK, punctuation,
    spaces of other scripts, [unusedN] tokens, and words beyond 200 code points."""
    rng = random.Random(seed)
    pieces = ([chr(cp) for cp in range(128)]
              + list("\u00e9\u00c9\u0301\u0131\u0130\u00df\u1e9e\u2014\u00bf\u3002")
              + list("\u4e2d\u6587\u3042\uac00\u0416\u05d0\u0627\u0e01")
              + ["\u00a0", "\u2028", "\u200b", "\ufffd", "\x00", "\u0085", "\U0001F600"]
              + ["[unused5]", "[unused993]", "[UNUSED5]", "[unused]", "##", "un", "aff", "able"])
    words = []
    for _ in range(count):
        length = rng.choice([1, 2, 3, 8, 30, 199, 200, 201, 250])
        words.append("".join(rng.choice(pieces) for _ in range(length))[:length])
    return words


def test_clean_text_skips_lookups_only_for_printable_ascii():
    words = adversarial_words(1, 2000) + ["".join(map(chr, range(32, 127))), "a\tb", "a\x7fb"]
    for text in words + [" ".join(words[index:index + 7]) for index in range(0, 2000, 7)]:
        assert clean_text(text) == text.translate(tokenization._CLEANING_TABLE), repr(text)


@pytest.mark.parametrize("do_lower_case, preserve", [(True, False), (False, False), (True, True)])
def test_packed_ids_are_the_tokens_ids(do_lower_case, preserve):
    """ids and packed ids equal the vocabulary ids of the uncached tokens."""
    tokenizer = FullTokenizer(VOCAB_FILE, do_lower_case, preserve)
    basic = BasicTokenizer(do_lower_case, tokenizer.vocab, preserve)
    wordpiece = WordpieceTokenizer(tokenizer.vocab)
    words = adversarial_words(2, 3000)
    lines = [" ".join(words[index:index + 5]) for index in range(0, len(words), 5)]
    for line in lines:
        expected = [tokenizer.vocab[token] if basic.preserved(token) else tokenizer.vocab[piece]
                    for token in basic.tokenize(line)
                    for piece in ([token] if basic.preserved(token)
                                  else wordpiece.tokenize_word(token))]
        assert tokenizer.tokenize_to_ids(line) == expected, repr(line)
        assert array(tokenizer.typecode, tokenizer.packed_ids(line)).tolist() == expected


def test_ids_beyond_16_bits_are_packed_in_32(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                               + [f"w{index}" for index in range(70_000)]) + "\n")
    tokenizer = FullTokenizer(vocab)
    assert tokenizer.typecode == "i"
    packed = tokenizer.packed_ids("w69999 w0 zz")
    assert array("i", packed).tolist() == [70_004, 5, 1]
    assert tokenizer.tokenize_to_ids("w69999 w0 zz") == [70_004, 5, 1]
