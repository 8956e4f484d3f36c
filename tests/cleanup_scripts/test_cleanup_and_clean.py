"""cleanup_file and clean give the reference's bytes (fixtures made by the reference scripts)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from cleanup_scripts.clean import clean_bytes, clean_line
from cleanup_scripts.cleanup_file import strip_doc_markup
from tests.conftest import md5_of, read_md5_manifest, run_module

REFERENCE = read_md5_manifest(Path(__file__).parents[1] / "fixtures" /
                              "reference-wiki_00-01" / "md5sums.txt")


def test_cli_stages_match_reference_on_sample_wiki(tmp_path, fixtures_dir):
    for name in ("wiki_00", "wiki_01"):
        shutil.copy(fixtures_dir / "wiki-extracted" / name, tmp_path / name)
    run_module("cleanup_scripts.cleanup_file", f"--data={tmp_path}/wiki_??",
               "--output_suffix=.1", "--nworker=2")
    for name in ("wiki_00", "wiki_01"):
        run_module("cleanup_scripts.clean", str(tmp_path / f"{name}.1"),
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
    assert list(strip_doc_markup(lines)) == ["\n", "Body.\n", "x\n"]


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
    result = run_module("cleanup_scripts.clean", str(source),
                        str(tmp_path / "missing-dir" / "out"), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "cannot write output" in result.stderr
