"""extract: WikiExtractor 3.1.0 with a pinned clock, reproducible, atomic, with clear errors."""
import bz2
import hashlib
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wikiextractor import WikiExtractor as wikiextractor_main
from wikiextractor import extract as wikiextractor_extract

import cleanup_scripts
from cleanup_scripts import extract
from cleanup_scripts.fileio import InputError
from cleanup_scripts.runner import exit_on_input_error

REPO = Path(__file__).resolve().parents[2]
MAGIC_WORDS_DUMP = REPO / "tests" / "fixtures" / "wiki-dump" / "magic-words.xml.bz2"


def tree_md5s(root):
    return {path.relative_to(root).as_posix(): hashlib.md5(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture(scope="module")
def sample_text(tmp_path_factory):
    """The vendored 206-page dump slice extracted once with one worker process."""
    out = tmp_path_factory.mktemp("sample") / "text"
    result = extract.extract_dump(cleanup_scripts.SAMPLE_DUMP, out, processes=1)
    return out, result


def test_sample_dump_gives_the_reference_layout(sample_text):
    out, result = sample_text
    assert sorted(tree_md5s(out)) == ["AA/wiki_00", "AA/wiki_01", "AA/wiki_02"]
    assert (result.pages, result.files) == (106, 3)
    first = (out / "AA" / "wiki_00").read_text(encoding="utf-8").split("\n")
    assert first[:3] == ['<doc id="12" url="https://en.wikipedia.org/wiki?curid=12" '
                         'title="Anarchism">', "Anarchism", ""]
    docs = sum(path.read_text(encoding="utf-8").count("<doc id=") for path in out.rglob("wiki_*"))
    ends = sum(path.read_text(encoding="utf-8").count("\n</doc>\n")
               for path in out.rglob("wiki_*"))
    assert docs == ends == 106
    assert all(path.stat().st_size <= 1024 * 1024 for path in out.rglob("wiki_*"))
    assert "History.\n" not in first  # section titles dropped, as the reference did


def test_sample_dump_extracts_identically_in_another_process(sample_text, tmp_path):
    """Same md5s from the CLI with 3 worker processes and another string-hash seed."""
    out, _ = sample_text
    again = tmp_path / "text"
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-m", "cleanup_scripts.extract",
                    f"--input={cleanup_scripts.SAMPLE_DUMP}", f"--output_dir={again}",
                    "--processes=3"], cwd=REPO, env=env, check=True, capture_output=True)
    assert tree_md5s(again) == tree_md5s(out)


def test_sample_dump_current_year_is_the_dump_year(sample_text):
    out, _ = sample_text
    text = "".join(path.read_text(encoding="utf-8") for path in sorted(out.rglob("wiki_*")))
    assert text.count("in 2020 dollars") == 2  # {{CURRENTYEAR}} twice in the sample


def extracted_text(dump, out, **kwargs):
    extract.extract_dump(dump, out, processes=2, **kwargs)
    return (out / "AA" / "wiki_00").read_text(encoding="utf-8")


def test_magic_words_expand_to_the_fixed_date(tmp_path):
    text = extracted_text(MAGIC_WORDS_DUMP, tmp_path / "text")
    assert "Year 2020, month 01, day 01, hour 00, time 00:00:00.\n" in text
    assert "Through a template: 2020.\n" in text
    # WikiExtractor defines no other time words: they are empty, whatever the date.
    assert "Words WikiExtractor does not define: [] [] [] [].\n" in text
    assert text.count("<doc id=") == 2  # the redirect and the template are not articles
    assert wikiextractor_extract.time is time  # pinned in the supervisor process only


def test_pinned_clock_answers_the_date_and_is_given_back():
    when = extract.parse_date("2020-01-01")
    with extract.pinned_clock(when) as clock:
        assert wikiextractor_extract.time is clock
        assert wikiextractor_extract.time.strftime("%Y-%m-%d %H:%M:%S") == "2020-01-01 00:00:00"
        assert clock.time() == 1577836800.0
        assert clock.strftime("%Y", time.gmtime(0)) == "1970"
        assert clock.perf_counter() > 0  # everything else is the real time module
    assert wikiextractor_extract.time is time
    with pytest.raises(InputError, match="--date=01/01/2020"):
        extract.parse_date("01/01/2020")


def test_another_date_changes_the_expansion(tmp_path):
    default = extracted_text(MAGIC_WORDS_DUMP, tmp_path / "a")
    other = extracted_text(MAGIC_WORDS_DUMP, tmp_path / "b", date="2019-07-04T13:45:06")
    assert "Year 2019, month 07, day 04, hour 13, time 13:45:06.\n" in other
    assert "Through a template: 2019.\n" in other
    changed = [line for line, before in zip(other.split("\n"), default.split("\n"))
               if line != before]
    assert changed == ["Year 2019, month 07, day 04, hour 13, time 13:45:06.",
                       "Through a template: 2019."]


def test_plain_xml_input_gives_the_same_output(tmp_path):
    xml = tmp_path / "magic-words.xml"
    xml.write_bytes(bz2.decompress(MAGIC_WORDS_DUMP.read_bytes()))
    assert extracted_text(xml, tmp_path / "a") == \
        extracted_text(MAGIC_WORDS_DUMP, tmp_path / "b")


def test_cli_date_flag_and_summary(tmp_path, capsys):
    out = tmp_path / "text"
    extract.main([f"--input={MAGIC_WORDS_DUMP}", f"--output_dir={out}", "--date=1999-12-31",
                  "--processes=1"])
    assert "Year 1999, month 12, day 31" in (out / "AA" / "wiki_00").read_text()
    assert "extract: 1 files, 2 records" in capsys.readouterr().err


def run_cli_error(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        exit_on_input_error(lambda: extract.main(args))
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_truncated_bz2_is_a_one_line_error_and_leaves_no_text(tmp_path, capsys):
    data = cleanup_scripts.SAMPLE_DUMP.read_bytes()
    dump = tmp_path / "cut.xml.bz2"
    dump.write_bytes(data[: len(data) // 2])
    err = run_cli_error([f"--input={dump}", f"--output_dir={tmp_path / 'out' / 'text'}",
                         "--processes=1"], capsys)
    assert "cut.xml.bz2: truncated compressed data" in err
    assert not (tmp_path / "out" / "text").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # no temporary left


@pytest.mark.parametrize("name, content, message", [
    ("empty.xml.bz2", b"", "empty file"),
    ("notes.xml", b"just some text\n", "not a MediaWiki XML dump"),
    ("notes.xml.bz2", bz2.compress(b"<html>a web page</html>\n"), "not a MediaWiki XML dump"),
    ("garbage.xml.bz2", b"BZh9 this is no bzip2 stream at all", "cannot decompress"),
])
def test_bad_inputs_are_one_line_errors(tmp_path, capsys, name, content, message):
    dump = tmp_path / name
    dump.write_bytes(content)
    err = run_cli_error([f"--input={dump}", f"--output_dir={tmp_path / 'text'}"], capsys)
    assert f"{name}: {message}" in err
    assert not (tmp_path / "text").exists()


def test_xml_cut_short_is_an_error(tmp_path, capsys):
    xml = bz2.decompress(MAGIC_WORDS_DUMP.read_bytes())
    dump = tmp_path / "cut.xml"
    dump.write_bytes(xml[: xml.index(b"<title>Plain page")])
    err = run_cli_error([f"--input={dump}", f"--output_dir={tmp_path / 'text'}"], capsys)
    assert "cut.xml: the XML ends before </mediawiki>" in err
    assert not (tmp_path / "text").exists()


def test_failure_during_page_extraction_stops_workers_and_keeps_old_output(
        tmp_path, monkeypatch):
    out = tmp_path / "text"
    out.mkdir()
    (out / "earlier-run").write_text("kept\n")
    collect = wikiextractor_main.collect_pages

    def failing_collect(text):
        for number, page in enumerate(collect(text)):
            if number == 50:
                raise InputError("dump: simulated read failure")
            yield page

    monkeypatch.setattr(wikiextractor_main, "collect_pages", failing_collect)
    with pytest.raises(InputError, match="simulated read failure"):
        extract.extract_dump(cleanup_scripts.SAMPLE_DUMP, out, processes=2)
    assert multiprocessing.active_children() == []
    assert [p.name for p in tmp_path.iterdir()] == ["text"]
    assert [p.name for p in out.iterdir()] == ["earlier-run"]


def test_successful_run_replaces_earlier_output(tmp_path):
    out = tmp_path / "text"
    (out / "ZZ").mkdir(parents=True)
    extracted_text(MAGIC_WORDS_DUMP, out)
    assert sorted(p.name for p in out.iterdir()) == ["AA"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text"]


def test_parse_size():
    assert extract.parse_size("1M") == 1024 * 1024
    assert extract.parse_size("500k") == 500 * 1024
    assert extract.parse_size("0") == 0
    for bad in ("100K", "1X", "M", ""):
        with pytest.raises(InputError):
            extract.parse_size(bad)
