"""Sentence segmentation is NLTK 3.4.5's, byte for byte (expected outputs made by NLTK 3.4.5)."""
from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
from nltk.tokenize.punkt import PunktSentenceTokenizer

import cleanup_scripts
from cleanup_scripts import sentence_splitter
from cleanup_scripts.do_sentence_segmentation import segment_file, segment_lines
from cleanup_scripts.fileio import InputError
from cleanup_scripts.sentence_splitter import get_tokenizer, load_parameters, split_sentences
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
    assert get_tokenizer() is get_tokenizer()


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
    plain_310 = PunktSentenceTokenizer(load_parameters()).tokenize
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


def test_candidate_finder_equals_the_unanchored_345_pattern():
    # NLTK 3.4.5 searched `\S*[.?!](?=...)` from every position; ours starts only at runs of
    # non-space characters. Both must give the same matches and groups.
    unanchored = re.compile(
        sentence_splitter._PERIOD_CONTEXT.pattern.replace(r"(?<!\S)", ""), re.VERBOSE)
    anchored = sentence_splitter._PERIOD_CONTEXT
    rng = random.Random(345)
    alphabet = "aB1.?!\"')(]}*:@;,\u201d \n\t\xa0\x1c\u2028."
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        found = [(m.span(), m.groupdict()) for m in anchored.finditer(text)]
        assert found == [(m.span(), m.groupdict()) for m in unanchored.finditer(text)], text


def test_long_runs_without_spaces_are_fast():
    # NLTK 3.4.5's own pattern rescans such runs from every position (quadratic time).
    head = "y" * 200_000 + " and " + "a.b" * 100_000 + " end."
    assert split_sentences(head + " Last one.") == [head, "Last one."]


def test_segment_lines_writes_blank_lines_between_articles():
    lines = ["First. Second.\n", "\n", "Third one.\n", "x"]
    assert list(segment_lines(lines)) == [
        ("First.\n", True), ("Second.\n", True), ("\n", False), ("Third one.\n", True),
        ("\n", False), ("x\n", True), ("\n", False)]


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
