"""extract: the reference's WikiExtractor 2.75, in parallel, byte-identical to the original."""
import bz2
import gzip
import hashlib
import io
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError
import cleanup_scripts
from cleanup_scripts.text import dump_chunks, extract, wikiextractor_275
from tests.cleanup_scripts import dump_cases
from tests.conftest import read_peak_rss, reporting_peak_rss

REPO = Path(__file__).resolve().parents[2]
MAGIC_WORDS_DUMP = REPO / "tests" / "fixtures" / "wiki-dump" / "magic-words.xml.bz2"
REFERENCE_MD5S = REPO / "tests" / "fixtures" / "wikiextractor-2.75" / "md5s.tsv"


def tree_md5s(root):
    return {path.relative_to(root).as_posix(): hashlib.md5(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def reference_md5s(case):
    """{file: md5} the original WikiExtractor 2.75 wrote for `case` under Python 3.7."""
    rows = [line.split("\t") for line in REFERENCE_MD5S.read_text().splitlines()[1:]]
    return {file: md5 for name, file, _, md5 in rows if name == case}


@pytest.fixture(scope="module")
def sample_xml():
    return bz2.decompress(cleanup_scripts.SAMPLE_DUMP.read_bytes())


@pytest.fixture(scope="module")
def many_pages(sample_xml):
    return dump_cases.many_pages(sample_xml, copies=3)


@pytest.fixture(scope="module")
def sample_text(tmp_path_factory):
    """The vendored 206-page dump slice extracted once with one worker process."""
    out = tmp_path_factory.mktemp("sample") / "text"
    result = extract.extract_dump(cleanup_scripts.SAMPLE_DUMP, out, processes=1)
    return out, result


def test_sample_dump_is_byte_identical_to_the_original_under_python37(sample_text):
    out, result = sample_text
    assert tree_md5s(out) == reference_md5s("sample")
    assert (result.pages, result.files) == (106, 3)
    first = (out / "AA" / "wiki_00").read_text(encoding="utf-8").split("\n")
    assert first[:3] == ['<doc id="12" url="https://en.wikipedia.org/wiki?curid=12" '
                         'title="Anarchism">', "Anarchism", ""]
    assert "History.\n" not in first  # section titles dropped, as the reference did


@pytest.mark.parametrize("form", ["xml", "multistream", "blockwise", "bz2", "gz"])
def test_many_pages_identical_to_the_original_in_every_dump_form(many_pages, tmp_path, form):
    """43 files, a page larger than a file, pages repeated in a row, read as plain XML in byte ranges,
    as a multistream bz2 by its streams, as bz2 streams that split pages (read serially), and
    as one bz2 or gzip stream (read serially); 3 workers, small chunks."""
    data = {"xml": lambda xml: xml, "multistream": lambda xml: dump_chunks.multistream(xml, 7),
            "blockwise": lambda xml: dump_cases.blockwise_bz2(xml, 300000),
            "bz2": bz2.compress, "gz": lambda xml: gzip.compress(xml, mtime=0)}[form](many_pages)
    suffix = {"xml": ".xml", "gz": ".xml.gz"}.get(form, ".xml.bz2")
    dump = tmp_path / f"many{suffix}"
    dump.write_bytes(data)
    out = tmp_path / "text"
    result = extract.extract_dump(dump, out, file_size="200K", processes=3,
                                  chunk_bytes=400000)
    expected = reference_md5s("many-pages")
    assert len(expected) == 43 and expected["AA/wiki_42"] == tree_md5s(out)["AA/wiki_42"]
    assert tree_md5s(out) == expected
    assert result.files == 43


@pytest.mark.slow
def test_over_a_hundred_files_fill_the_next_folder_as_in_the_original(sample_xml, tmp_path):
    dump = tmp_path / "folders.xml.bz2"
    dump.write_bytes(dump_chunks.multistream(dump_cases.many_pages(sample_xml, copies=8), 20))
    extract.extract_dump(dump, tmp_path / "text", file_size="200K", processes=2)
    expected = reference_md5s("folders")
    assert len(expected) == 113 and "AB/wiki_12" in expected
    assert tree_md5s(tmp_path / "text") == expected


def test_chunks_of_the_many_pages_dump_split_repeated_pages(many_pages, tmp_path):
    """The case above really cuts between two pages with one id (the second is dropped only
    because the first chunk's last page id is carried over), and between bz2 streams."""
    dump = tmp_path / "many.xml"
    dump.write_bytes(many_pages)
    chunks = dump_chunks.plan(dump, 400000, lambda f, args: [f(*a) for a in args])
    assert len(chunks) > 20 and chunks[0].start == 0 and chunks[-1].stop == len(many_pages)
    ids = [dump_cases.PAGE_ID.search(many_pages, chunk.start) for chunk in chunks[1:]]
    before = [dump_cases.PAGE_ID.findall(many_pages[:chunk.start])[-1] for chunk in chunks[1:]]
    assert any(found.group(2) == last[1] for found, last in zip(ids, before))
    streams = tmp_path / "many.xml.bz2"
    streams.write_bytes(dump_chunks.multistream(many_pages, 7))
    assert len(dump_chunks.plan(streams, 400000, lambda f, a: [f(*x) for x in a])) > 5


def test_magic_words_dump_identical_to_the_original(tmp_path):
    out = tmp_path / "text"
    extract.extract_dump(MAGIC_WORDS_DUMP, out, processes=2)
    assert tree_md5s(out) == reference_md5s("magic-words")


def test_sample_dump_extracts_identically_in_another_process(sample_text, tmp_path):
    """Same md5s from the CLI with 3 worker processes and another string-hash seed."""
    out, _ = sample_text
    again = tmp_path / "text"
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-m", "cleanup_scripts.text.extract",
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


def test_paths_beginning_with_a_dash_are_paths(tmp_path, monkeypatch):
    # Passed to WikiExtractor's command line as they are, `-rf/.text.partial-PID` would be an
    # option to its argparse, which prints its usage (71 lines) and exits.
    monkeypatch.chdir(tmp_path)
    shutil.copy(MAGIC_WORDS_DUMP, "-magic.xml.bz2")
    extract.extract_dump(Path("-magic.xml.bz2"), Path("-rf/text"), processes=1)
    assert tree_md5s(tmp_path / "-rf" / "text") == reference_md5s("magic-words")


def test_magic_words_expand_to_the_fixed_date(tmp_path):
    text = extracted_text(MAGIC_WORDS_DUMP, tmp_path / "text")
    assert "Year 2020, month 01, day 01, hour 00, time 00:00:00.\n" in text
    # The reference's command line collects no templates: a template call is empty.
    assert "Through a template: .\n" in text
    # WikiExtractor defines no other time words: they are empty, whatever the date.
    assert "Words WikiExtractor does not define: [] [] [] [].\n" in text
    assert text.count("<doc id=") == 2  # the redirect and the template are not articles
    assert time.strftime("%Y") != "2020"  # the calling process's clock is not pinned


def test_pinned_clock_answers_the_date():
    clock = extract.PinnedClock(extract.parse_date("2020-01-01"))
    assert clock.strftime("%Y-%m-%d %H:%M:%S") == "2020-01-01 00:00:00"
    assert clock.time() == 1577836800.0
    assert clock.strftime("%Y", time.gmtime(0)) == "1970"
    assert clock.perf_counter() > 0  # everything else is the real time module
    with pytest.raises(InputError, match="--date=01/01/2020"):
        extract.parse_date("01/01/2020")


def test_another_date_changes_only_the_time_words(tmp_path):
    default = extracted_text(MAGIC_WORDS_DUMP, tmp_path / "a")
    other = extracted_text(MAGIC_WORDS_DUMP, tmp_path / "b", date="2019-07-04T13:45:06")
    changed = [line for line, before in zip(other.split("\n"), default.split("\n"))
               if line != before]
    assert changed == ["Year 2019, month 07, day 04, hour 13, time 13:45:06."]


def test_cli_date_flag_and_summary(tmp_path, capsys):
    out = tmp_path / "text"
    extract.main([f"--input={MAGIC_WORDS_DUMP}", f"--output_dir={out}", "--date=1999-12-31",
                  "--processes=1"])
    assert "Year 1999, month 12, day 31" in (out / "AA" / "wiki_00").read_text()
    assert "extract: 1 files, 2 records" in capsys.readouterr().err


def test_loaded_script_is_the_installed_original_and_leaves_this_process_alone():
    script = wikiextractor_275.load()
    path = wikiextractor_275.installed_script()
    assert hashlib.md5(path.read_bytes()).hexdigest() == "96fc661a218d8e881f222133e053eb52"
    assert script.version == "2.75"
    # The two patterns Python 3.11 refuses, compiled as Python 3.7 did: case-insensitive.
    assert script.ExtLinkBracketedRegex.match("[HTTP://example.org x]")
    assert script.EXT_IMAGE_REGEX.match("http://example.org/a/B.PNG")
    assert script.cgi.escape('<a href="x">&</a>') == '&lt;a href="x"&gt;&amp;&lt;/a&gt;'
    assert script.cgi.escape('"', True) == "&quot;"
    import re
    assert re.compile is not script.re.compile
    assert wikiextractor_275.load().options is not script.options  # fresh state each time


def test_python37_pattern_moves_late_global_flags_to_the_front():
    move = wikiextractor_275.python37_pattern
    assert move(r"\[((?i)http|ftp)x") == r"(?i)\[(http|ftp)x"
    assert move(r"a(?s)b(?i)c") == r"(?is)abc"
    assert move(r"a\(?i)b") == r"a\(?i)b"  # an escaped parenthesis is no flag group
    assert move(r"(?i:x)y") == r"(?i:x)y"  # a scoped group is left alone


def test_a_modified_wikiextractor_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "wikiextractor"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "WikiExtractor.py").write_text("version = '3.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "wikiextractor", raising=False)
    with pytest.raises(InputError, match=r"WikiExtractor.py: md5 \w+ is not WikiExtractor 2.75 "
                                         r".*pip install wikiextractor==0.1"):
        wikiextractor_275.load()


def test_dump_without_siteinfo_is_an_error(tmp_path, capsys):
    """The original reads the whole input looking for </siteinfo> and writes an empty file."""
    xml = bz2.decompress(MAGIC_WORDS_DUMP.read_bytes())
    dump = tmp_path / "headless.xml"
    dump.write_bytes(xml[:xml.index(b"  <siteinfo>")] + xml[xml.index(b"  <page>"):])
    err = run_cli_error([f"--input={dump}", f"--output_dir={tmp_path / 'text'}"], capsys)
    assert "headless.xml: no </siteinfo>" in err
    assert not (tmp_path / "text").exists()


@pytest.mark.parametrize("suffix", [".xml", ".xml.bz2"])
def test_dump_without_siteinfo_fails_within_its_first_mib(sample_xml, tmp_path, suffix):
    # The sample (6 MB) without </siteinfo> took 20-40 s to be refused: the whole dump was
    # read looking for it, which for the benchmark's 18 GB dump means hours.
    xml = sample_xml.replace(b"</siteinfo>", b"")
    dump = tmp_path / f"headless{suffix}"
    dump.write_bytes(bz2.compress(xml) if suffix == ".xml.bz2" else xml)
    started = time.monotonic()
    with pytest.raises(InputError) as err:
        extract.extract_dump(dump, tmp_path / "text", processes=1)
    assert time.monotonic() - started < 5
    assert str(err.value) == f"{dump}: no </siteinfo> in its first 1 MiB: not the header of " \
                             "a MediaWiki dump (WikiExtractor would find no pages)"
    assert not (tmp_path / "text").exists()


def test_siteinfo_is_looked_for_in_the_first_mib_only(sample_xml, tmp_path):
    # Bounded: a header that would end 2 MiB in is refused without reading on to it.
    head, rest = sample_xml.split(b"</siteinfo>\n", 1)
    dump = tmp_path / "long-header.xml"
    dump.write_bytes(head + (b" " * 99 + b"\n") * 20_000 + b"</siteinfo>\n" + rest)
    with pytest.raises(InputError, match="no </siteinfo> in its first 1 MiB"):
        extract.check_dump_start(dump)
    dump.write_bytes(head + b"</siteinfo>\n" + rest)  # the same within the limit: accepted
    extract.check_dump_start(dump)


def run_cli_error(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(lambda: extract.main(args))
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
    ("utf16.xml", "<mediawiki>\n".encode("utf-16"), "not UTF-8 text"),
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


def test_failure_in_a_worker_stops_all_workers_and_keeps_old_output(
        tmp_path, monkeypatch, sample_xml):
    out = tmp_path / "text"
    out.mkdir()
    (out / "earlier-run").write_text("kept\n")
    dump = tmp_path / "in" / "sample.xml"
    dump.parent.mkdir()
    dump.write_bytes(sample_xml)
    decode = dump_chunks.chunk_lines

    def failing_decode(chunk):
        if chunk.index == 5:
            raise InputError("dump: simulated read failure")
        return decode(chunk)

    monkeypatch.setattr(dump_chunks, "chunk_lines", failing_decode)
    with pytest.raises(InputError, match="simulated read failure"):
        extract.extract_dump(dump, out, processes=2, chunk_bytes=200000)
    assert multiprocessing.active_children() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "text"]
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
    for bad in ("0", "100K", "1X", "M", ""):
        with pytest.raises(InputError):
            extract.parse_size(bad)


HUGE_PAGE_MB = 200


def dump_with_a_huge_page(path: Path, megabytes: int) -> None:
    """The magic-words dump with one more page of `megabytes` MiB of text, each MiB its own
    stream (.bz2) or member (.gz) of the same compressed bytes (so it is quick to make; the
    whole dump is small enough for one worker's chunk)."""
    codec = bz2 if path.suffix == ".bz2" else gzip
    header, pages, footer = dump_chunks.split_pages(bz2.decompress(MAGIC_WORDS_DUMP.read_bytes()))
    start = (b"  <page>\n    <title>Huge page</title>\n    <ns>0</ns>\n    <id>99999</id>\n"
             b"    <revision>\n      <id>1</id>\n      <text xml:space=\"preserve\">")
    end = b"</text>\n    </revision>\n  </page>\n"
    mebibyte = codec.compress((b"Lorem ipsum dolor sit amet. " * 36 + b"\n") * 1024)
    with open(path, "wb") as out:
        for part in (header, b"".join(pages), start):
            out.write(codec.compress(part))
        for _ in range(megabytes):
            out.write(mebibyte)
        out.write(codec.compress(end) + codec.compress(footer))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("suffix", [".xml.bz2", ".xml.gz"])
def test_a_page_larger_than_any_real_one_is_refused_in_bounded_memory(tmp_path,
                                                                     tmp_path_factory, suffix):
    # Decompressing each chunk whole, a 200 MB page takes 2.2 GB and 75 s (bz2).
    dump = tmp_path / f"huge{suffix}"
    dump_with_a_huge_page(dump, HUGE_PAGE_MB)
    report = tmp_path_factory.mktemp("peak-rss") / "report"
    result = subprocess.run(
        reporting_peak_rss([sys.executable, "-m", "cleanup_scripts.text.extract",
                            f"--input={dump}", f"--output_dir={tmp_path / 'text'}",
                            "--processes=2"], report),
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    status, peak = read_peak_rss(report)
    assert status == 1
    where = f"{dump}: bytes 0-{dump.stat().st_size}" if suffix == ".xml.bz2" else str(dump)
    assert result.stderr == (f"error: {where}: page 'Huge page' holds more than "
                             f"{dump_chunks.MAX_PAGE_CHARS:,} characters, more than any real "
                             f"page (MediaWiki keeps at most 2 MiB of wikitext a page); "
                             f"refused\n")
    assert peak < 160 << 20, f"peak RSS {peak >> 20} MiB"  # measured: about 40 MiB
    assert sorted(path.name for path in tmp_path.iterdir()) == [dump.name]


def test_page_lines_hold_a_page_to_the_bound_and_never_read_a_longer_line_whole(monkeypatch):
    monkeypatch.setattr(dump_chunks, "MAX_PAGE_CHARS", 100)
    fits = "<page>\n<title>A</title>\n" + "x" * 70 + "\n"
    assert "".join(dump_chunks.page_lines(io.StringIO(fits * 3), "dump")) == fits * 3
    stream = io.StringIO("<page>\n<title>Long</title>\n" + "y" * 10_000 + "\n")
    with pytest.raises(InputError, match=r"^dump: page 'Long' holds more than 100 characters"):
        list(dump_chunks.page_lines(stream, "dump"))
    assert stream.tell() < 200  # the long line was not read whole
