"""cleanup_file and clean give the reference's bytes (fixtures made by the reference scripts)."""
from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

from cleanup_scripts.cleanup_file import strip_doc_markup
from cleanup_scripts.text import clean
from cleanup_scripts.text.clean import clean_bytes, clean_line
from tests.conftest import md5_of, read_md5_manifest, run_module

REFERENCE = read_md5_manifest(Path(__file__).parents[1] / "fixtures" /
                              "reference-wiki_00-01" / "md5sums.txt")


def test_cli_stages_match_reference_on_sample_wiki(tmp_path, fixtures_dir):
    for name in ("wiki_00", "wiki_01"):
        shutil.copy(fixtures_dir / "wiki-extracted" / name, tmp_path / name)
    run_module("cleanup_scripts.cleanup_file", f"--data={tmp_path}/wiki_??",
               "--output_suffix=.1", "--nworker=2")
    for name in ("wiki_00", "wiki_01"):
        run_module("cleanup_scripts.text.clean", str(tmp_path / f"{name}.1"),
                   str(tmp_path / f"{name}.2"))
        assert md5_of(tmp_path / f"{name}.1") == REFERENCE[f"text/{name}.1"]
        assert md5_of(tmp_path / f"{name}.2") == REFERENCE[f"text/{name}.2"]


def test_clean_matches_reference_sed_chain_on_adversarial_and_fuzzed_lines(fixtures_dir):
    folder = fixtures_dir / "clean"
    expected = read_md5_manifest(folder / "expected.md5")
    adversarial = clean_bytes((folder / "adversarial.txt").read_bytes())
    assert adversarial == (folder / "adversarial.expected").read_bytes()
    fuzzed = clean_bytes((folder / "fuzz.txt").read_bytes())
    assert hashlib.md5(fuzzed).hexdigest() == expected["fuzz.expected"]


def _every_rule_on_every_line(data: bytes) -> bytes:
    """The clean.sh chain without shortcuts: each line through both filters and all rules."""
    kept = []
    lines = data.split(b"\n")
    for line in lines[:-1] if lines[-1] == b"" else lines:
        if any(pattern.search(line) for _, pattern in clean._DROPPED_LINES):
            continue
        for _, pattern, replacement in clean._COMPILED:
            line = pattern.sub(replacement, line)
        kept.append(line + b"\n")
    return b"".join(kept)


def test_triggers_skip_only_rules_that_cannot_match(fixtures_dir):
    folder = fixtures_dir / "clean"
    for name in ("adversarial.txt", "fuzz.txt"):
        data = (folder / name).read_bytes()
        assert clean_bytes(data) == _every_rule_on_every_line(data), name
    rng = random.Random(69)
    pieces = [b"<", b"[", b"]", b"|", b"alt=", b"ref", b">", b"</", b"/>", b"\n", b"x", b"{",
              b"}", b"graph", b"div", b"[[", b"]]", b"<doc ", b"Category:", b"\\", b"br",
              b"<ref>", b"</ref>", b"File:", b"mapframe ", b"poem ", b"\r"]
    for _ in range(3000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert clean_bytes(data) == _every_rule_on_every_line(data), data


def test_every_match_of_a_rule_starts_with_its_trigger(fixtures_dir):
    lines = b"".join((fixtures_dir / "clean" / name).read_bytes()
                     for name in ("adversarial.txt", "fuzz.txt")).split(b"\n")
    for trigger, pattern, _ in clean._COMPILED:
        starts = [line.startswith(trigger, match.start())
                  for line in lines for match in pattern.finditer(line)]
        assert starts and all(starts), trigger


def test_clean_rules_individually():
    assert clean_line(b"see [[Paris|the city]] and [[Rome]]") == b"see the city and Rome"
    assert clean_line(b"[[Category:Cities]]") is None
    assert clean_line(b"<doc id=\"3\" url=\"u\" title=\"t\">") is None
    assert clean_line(b"x<ref name=a>cite</ref>y") == b"xy"
    assert clean_line(b"a</doc>b") == b"a\rb"
    # sed's [^\/] class excludes the backslash too: only the later `<mapframe...>` rule applies.
    assert clean_line(b"<mapframe a\\b>x/>") == b"x/>"
    assert clean_line(b"<mapframe a>b/>") == b""


def test_clean_ends_every_line_with_newline_like_grep():
    assert clean_bytes(b"a\nb") == b"a\nb\n"
    assert clean_bytes(b"") == b""
    assert clean_bytes(b"\n\n") == b"\n\n"


def test_strip_doc_markup_drops_header_title_footer_and_bare_newlines():
    lines = ['<doc id="1" url="u" title="T">\n', "T\n", "\n", "Body.\n", "</doc>\n", "x\n"]
    assert strip_doc_markup(lines) == ["\n", "Body.\n", "x\n"]


def _line_by_line(lines: list[str]) -> list[str]:
    """The reference cleanup_file's loop, restated: the oracle of the test below."""
    kept, skip_title = [], False
    for line in lines:
        if skip_title:
            skip_title = False
        elif "<doc" in line:
            skip_title = True
            kept.append("\n")
        elif "</doc>" not in line and len(line) != 1:
            kept.append(line)
    return kept


def test_strip_doc_markup_equals_the_line_by_line_rule():
    rng = random.Random(3)
    choices = ['<doc id="1">\n', "Title\n", "\n", "Body.\n", "</doc>\n", "a<doc b</doc>\n",
               "y", "zz", " \n", "<doc\n"]
    for _ in range(5000):
        lines = [rng.choice(choices) for _ in range(rng.randint(0, 12))]
        assert strip_doc_markup(lines) == _line_by_line(lines), lines


def test_cleanup_file_rejects_non_utf8_without_leaving_output(tmp_path):
    bad = tmp_path / "wiki_00"
    bad.write_bytes(b"caf\xe9\n")
    result = run_module("cleanup_scripts.cleanup_file", f"--data={bad}", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {bad}: not UTF-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wiki_00"]


def test_cleanup_file_reports_no_matching_inputs(tmp_path):
    result = run_module("cleanup_scripts.cleanup_file", f"--data={tmp_path}/none_??",
                        check=False)
    assert result.returncode == 1
    assert "no input files match" in result.stderr


def test_clean_unwritable_output_is_one_line_error(tmp_path, fixtures_dir):
    source = fixtures_dir / "clean" / "adversarial.txt"
    result = run_module("cleanup_scripts.text.clean", str(source),
                        str(tmp_path / "missing-dir" / "out"), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "cannot write output" in result.stderr
