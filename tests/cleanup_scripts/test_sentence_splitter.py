"""Sentence segmentation is NLTK 3.4.5's, byte for byte (expected outputs made by NLTK 3.4.5,
and differential tests against an NLTK-based oracle, tests/cleanup_scripts/punkt_oracle.py)."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from nltk.tokenize.punkt import PunktSentenceTokenizer

from benchmark.files import InputError
import cleanup_scripts
from cleanup_scripts.do_sentence_segmentation import segment_file, segment_lines
from cleanup_scripts.text import sentence_splitter
from cleanup_scripts.text.sentence_splitter import (PunktSentenceSplitter, get_splitter,
                                                    load_parameters, split_sentences)
from tests.cleanup_scripts.punkt_oracle import PERIOD_CONTEXT, nltk_parameters, oracle_split
from tests.conftest import md5_of, read_md5_manifest, run_module
from tests.corpus import WIKI_EXTRACTED_DIR, cleaned_bytes

SEGMENTATION = Path(__file__).parents[1] / "fixtures" / "segmentation"
REFERENCE = read_md5_manifest(Path(__file__).parents[1] / "fixtures" /
                              "reference-wiki_00-01" / "md5sums.txt")


def _read_cases(name: str) -> list[dict]:
    with open(SEGMENTATION / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _mismatches(cases: list[dict], split) -> list[dict]:
    return [case for case in cases if split(case["text"]) != case["sentences"]]


def test_model_is_the_english_pickle_of_nltk_345():
    params = load_parameters()
    assert (len(params.abbrev_types), len(params.collocations), len(params.sent_starters),
            len(params.ortho_context)) == (156, 37, 39, 20366)
    assert {"mr", "u.s", "dr", "d.c", "calif", ". . "} <= params.abbrev_types
    assert ("##number##", "abreast") in params.collocations
    assert get_splitter() is get_splitter()


def test_reference_wiki_files_segment_to_the_reference_md5(tmp_path):
    for name in ("wiki_00", "wiki_01"):
        # The .2 input comes from our cleanup_file + clean, which test_cleanup_and_clean proves
        # byte-identical to the reference's .2 file.
        source = tmp_path / f"{name}.2"
        source.write_bytes(cleaned_bytes(WIKI_EXTRACTED_DIR / name))
        assert md5_of(source) == REFERENCE[f"text/{name}.2"]
        output = tmp_path / f"{name}.3"
        sentences = segment_file(str(source), str(output))
        assert md5_of(output) == REFERENCE[f"text/{name}.3"], name
        assert sentences > 5000


def test_adversarial_file_matches_nltk_345_output(tmp_path):
    # Mixed \n, \r\n and \r line ends, a last line without newline, blank and one-character
    # lines, 30-60 kB lines, punctuation-only lines, unicode spaces and quotes, real wiki lines.
    output = tmp_path / "adversarial.3"
    sentences = segment_file(str(SEGMENTATION / "adversarial.txt"), str(output))
    expected = (SEGMENTATION / "adversarial.expected").read_bytes()
    assert output.read_bytes() == expected
    assert sentences == sum(1 for line in expected.split(b"\n") if line)


def test_split_sentences_matches_nltk_345_on_adversarial_and_fuzzed_texts():
    cases = _read_cases("cases.jsonl")
    assert len(cases) > 2000
    wrong = _mismatches(cases, split_sentences)
    assert not wrong, f"{len(wrong)} differ, first: {wrong[0]}"


def test_real_wiki_text_where_nltk_310_differs_is_split_the_345_way():
    cases = _read_cases("wiki-nltk-3.10-differs.jsonl")
    # Each of these real Wikipedia lines is split differently by unmodified NLTK 3.10.
    plain_310 = PunktSentenceTokenizer(nltk_parameters()).tokenize
    assert len(_mismatches(cases, plain_310)) == len(cases) > 0
    assert not _mismatches(cases, split_sentences)


@pytest.mark.parametrize("text, sentences", [
    ("He left.\u201d Then she came.", ["He left.\u201d Then she came."]),
    ("! Rank !! City !! Population", ["!", "Rank !!", "City !!", "Population"]),
    ("He left.\u00a0Then. She came.", ["He left.", "Then.", "She came."]),
    ("End of it.\x1cNext one came.", ["End of it.", "Next one came."]),
    ("Mr. Smith went to the U.S. in 1999. He paused... Then he left.",
     ["Mr. Smith went to the U.S. in 1999.", "He paused... Then he left."]),
])
def test_known_differences_from_nltk_310(text, sentences):
    assert split_sentences(text) == sentences


def _candidates(text: str) -> list[tuple[int, int, str | None, int]]:
    """The splitter's candidates as (run start, end, after_tok, next_tok start)."""
    found = []
    for match in sentence_splitter._END_CHARACTER.finditer(text):
        through_space = sentence_splitter._THROUGH_LAST_SPACE.match(text, 0, match.end())
        found.append((through_space.end() if through_space else 0, match.end(),
                      match.group("after_tok"), match.start("next_tok")))
    return found


def test_candidate_finder_equals_the_unanchored_345_pattern():
    # NLTK 3.4.5 searched `\S*[.?!](?=...)` from every position; ours matches the run's last
    # accepted end character and finds the run's start separately. Both must give the same
    # spans and groups.
    rng = random.Random(345)
    alphabet = "aB1.?!\"')(]}*:@;,\u201d \n\t\xa0\x1c\u2028."
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        expected = [(m.start(), m.end(), m.group("after_tok"), m.start("next_tok"))
                    for m in PERIOD_CONTEXT.finditer(text)]
        assert _candidates(text) == expected, text


# Pieces of the random texts of the differential tests: model abbreviations, initials,
# numbers, ellipses, collocations, frequent sentence starters, quotes, brackets, dashes,
# non-ASCII letters, spaces and quotes, and separators that are whitespace only for `re`.
_PIECES = (
    "Mr.", "mr.", "Dr.", "U.S.", "u.s.", "e.g.", "i.e.", "etc.", "Inc.", "Jan.", "St.", "vs.",
    "calif.", "D.C.", "a.m.", "No.", "ca.", "co-ed.", "J.", "A.", "b.", "\u00c9.", "_.", "1.",
    "1990.", "3.5", "2,000.", "-4.", "IV.", "...", "..", ". . .", ".", "?", "!", "?!", "!!",
    ";", ":", ",", "--", "-", "(", ")", "[", "]", "{", "}", "\"", "'", "`", "*", "@", "&", "#",
    "The", "the", "However", "however", "But", "according", "He", "he", "It", "In", "abreast",
    "Business", "business", "Smith", "smith", "Who", "RJ", "B.", "I.", "Pay-Fone", "word",
    "Word.", "word.", "WORD.", "\u00e9t\u00e9.", "\u0130.",
    "caf\u00e9", "x\u0301.", "\u00bd.", "\u00b2.", "\u201cQuoted.\u201d", "\u00abLa\u00bb.",
    "\u2018a.\u2019", "(a.)", "[1].", "\"B.\"", "'c.'", "e.g.,", "U.S.-based", "x.y.z", "a?b",
)
_SEPARATORS = (" ", " ", " ", "  ", "", "\n", "\t", "\xa0", "\u2028", "\x1c", "\r", " \n ",
               "\u3000")


def random_text(rng: random.Random, length: int) -> str:
    """A random text of `length` pieces joined by random separators."""
    parts = []
    for _ in range(length):
        parts.append(rng.choice(_PIECES))
        parts.append(rng.choice(_SEPARATORS))
    return "".join(parts[:-1]) if parts else ""


def test_splitter_equals_the_nltk_based_oracle_on_random_texts():
    rng = random.Random(20200101)
    texts = [random_text(rng, rng.randint(0, 30)) for _ in range(6000)]
    wrong = [text for text in texts if split_sentences(text) != oracle_split(text)]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first: {wrong[0]!r}"


def test_splitter_equals_the_nltk_based_oracle_on_real_wiki_text():
    lines = [line for name in ("wiki_00", "wiki_01")
             for line in cleaned_bytes(WIKI_EXTRACTED_DIR / name).decode("utf-8").split("\n")]
    assert sum(map(len, lines)) > 1_500_000
    wrong = [line for line in lines if split_sentences(line) != oracle_split(line)]
    assert not wrong, f"{len(wrong)} of {len(lines)} lines differ, first: {wrong[0]!r}"
    paragraphs = ["\n".join(lines[start:start + 5]) for start in range(0, 2000, 5)]
    assert all(split_sentences(text) == oracle_split(text) for text in paragraphs)


def test_oracle_matches_nltk_345_fixtures():
    # The oracle itself is checked against NLTK 3.4.5's own output.
    cases = _read_cases("cases.jsonl")
    assert not _mismatches(cases, oracle_split)


def test_emptied_memos_give_the_same_sentences(monkeypatch):
    monkeypatch.setattr(sentence_splitter, "_MEMO_LIMIT", 3)
    splitter = PunktSentenceSplitter(load_parameters())
    rng = random.Random(7)
    for _ in range(500):
        text = random_text(rng, rng.randint(0, 30))
        assert splitter.split(text) == split_sentences(text), text
    assert len(splitter._ending) <= 3 and len(splitter._left) <= 3


def test_long_runs_without_spaces_are_fast():
    # NLTK 3.4.5's own pattern rescans such runs from every position (quadratic time).
    head = "y" * 200_000 + " and " + "a.b" * 100_000 + " end."
    assert split_sentences(head + " Last one.") == [head, "Last one."]
    # Many candidates separated by whitespace other than U+0020, in one long line.
    tabbed = "\t".join(["Ab. Cd.)", "Ef!\u00a0Gh."] * 50_000)
    assert len(split_sentences(tabbed)) == 200_000


def test_segment_lines_writes_blank_lines_between_articles():
    lines = ["First. Second.\n", "\n", "Third one.\n", "x", " \n"]
    assert segment_lines(lines) == ("First.\nSecond.\n\nThird one.\n\nx\n", 4)


def test_altered_model_file_is_a_one_line_input_error(tmp_path):
    model = tmp_path / "english"
    shutil.copytree(cleanup_scripts.PUNKT_ENGLISH_DIR, model)
    with open(model / "sent_starters.txt", "a", encoding="utf-8") as handle:
        handle.write("extra\n")
    with pytest.raises(InputError, match="sent_starters.txt: md5 .* differs") as error:
        load_parameters(model)
    assert "\n" not in str(error.value)
    shutil.copy(cleanup_scripts.PUNKT_ENGLISH_DIR / "sent_starters.txt", model)
    (model / "collocations.tab").unlink()
    with pytest.raises(InputError, match="collocations.tab: cannot read"):
        load_parameters(model)


def test_non_utf8_input_is_an_input_error_without_output(tmp_path):
    bad = tmp_path / "wiki_00.2"
    bad.write_bytes(b"Good line.\n" * 5000 + b"caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        segment_file(str(bad), str(tmp_path / "wiki_00.3"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki_00.2"]


def test_cli_segments_every_matching_file(tmp_path):
    for name in ("wiki_00", "wiki_01"):
        (tmp_path / name).write_text("ignored")
        shutil.copy(SEGMENTATION / "adversarial.txt", tmp_path / f"{name}.2")
    result = run_module("cleanup_scripts.do_sentence_segmentation",
                        f"--data={tmp_path}/wiki_??", "--nworker=2")
    expected = (SEGMENTATION / "adversarial.expected").read_bytes()
    for name in ("wiki_00", "wiki_01"):
        assert (tmp_path / f"{name}.3").read_bytes() == expected
    assert "do_sentence_segmentation: 2 files" in result.stderr


@pytest.mark.parametrize("make_input", ["no_match", "no_suffixed_file"])
def test_cli_missing_input_exits_1_with_one_line_error_and_no_output(tmp_path, make_input):
    if make_input == "no_suffixed_file":
        (tmp_path / "wiki_00").write_text("original")
    result = run_module("cleanup_scripts.do_sentence_segmentation",
                        f"--data={tmp_path}/wiki_??", "--input_suffix=.2",
                        "--output_suffix=.3", "--nworker=1", check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert not list(tmp_path.glob("*.3")) and not list(tmp_path.glob(".*"))
