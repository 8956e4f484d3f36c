"""Stage 2: WikiExtractor, made reproducible: dump XML to `text/AA/wiki_00 …`.

    python -m cleanup_scripts.extract --input=DUMP.xml[.bz2] --output_dir=DIR/text
        [--date=2020-01-01] [--bytes=1M] [--processes=N]

Runs the pip `wikiextractor` package (3.1.0) with the settings the reference ran
WikiExtractor.py with: template expansion on, no links, no lists and no section titles (the
reference did not pass `--sections`; 3.1.0's CLI always keeps them, `--keep_sections` here),
`<doc id=… url=… title=…>` / title / text / `</doc>` records in ~1 MB files, 100 per folder
(`AA/wiki_00` … `AA/wiki_99`, `AB/wiki_00`, …). The text itself is 3.1.0's, which is not
byte-identical to the reference's 2019 WikiExtractor (commit 3162bb6c): that one also puts a
blank line after each paragraph and cleans some markup differently.

Reproducibility. WikiExtractor reads the wall clock (`time.strftime`, in
`wikiextractor.extract`) for the magic words CURRENTYEAR, CURRENTMONTH, CURRENTDAY,
CURRENTHOUR and CURRENTTIME, which is why the reference's own extraction cannot be repeated.
Here WikiExtractor runs in a forked supervisor process in which that module's `time` is
replaced by a clock fixed at `--date` (default: the dump's date,
`benchmark.constants.DUMP_DATE`, 00:00:00); its worker processes are forked from there and
inherit it. The installed package is not modified, and the calling process is not patched.
WikiExtractor defines no other time words (CURRENTMONTHNAME, LOCAL*, … expand to nothing, as
in the reference), so they are already independent of the clock. Pages are written in dump
order whatever `--processes` is (WikiExtractor's reducer orders them by sequence number).

The output is built in a hidden directory beside `--output_dir` and renamed into place only
when the whole dump was read; an empty, truncated or non-XML input gives a one-line error and
leaves no output directory behind, and so does a full disk (the line names the file being
written).
"""
from __future__ import annotations

import argparse
import bz2
import contextlib
import datetime
import gzip
import io
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tqdm import tqdm

from benchmark import constants
from cleanup_scripts.fileio import (DiskFullError, InputError, disk_full, ensure_dir,
                                    temporary_name)
from cleanup_scripts.runner import StageSummary, exit_on_input_error, report

MIN_FILE_SIZE = 200 * 1024  # WikiExtractor's own lower limit for --bytes
_SNIFF_BYTES = 64 * 1024
_TAIL_BYTES = 64


# ----------------------------------------------------------------------------------------------
# The pinned clock


def parse_date(text: str) -> datetime.datetime:
    """`YYYY-MM-DD` (midnight) or `YYYY-MM-DDTHH:MM:SS` as a naive datetime; InputError if not."""
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError as err:
        raise InputError(f"--date={text}: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS") from err


class PinnedClock:
    """Stands in for the `time` module where WikiExtractor reads it: the clock shows `when`.

    `strftime`, `localtime`, `gmtime` and `time` without an explicit time argument all
    answer `when` (taken as UTC for `time()`); every other attribute is the real `time`'s.
    """

    def __init__(self, when: datetime.datetime) -> None:
        self.when = when
        self._struct = when.timetuple()

    def strftime(self, fmt: str, t: time.struct_time | tuple | None = None) -> str:
        return time.strftime(fmt, self._struct if t is None else t)

    def localtime(self, secs: float | None = None) -> time.struct_time:
        return self._struct if secs is None else time.localtime(secs)

    def gmtime(self, secs: float | None = None) -> time.struct_time:
        return self._struct if secs is None else time.gmtime(secs)

    def time(self) -> float:
        return self.when.replace(tzinfo=datetime.timezone.utc).timestamp()

    def __getattr__(self, name: str):
        return getattr(time, name)


@contextlib.contextmanager
def pinned_clock(when: datetime.datetime) -> Iterator[PinnedClock]:
    """Make wikiextractor's magic words see the time `when` inside the block (this process
    and processes forked from it)."""
    from wikiextractor import extract as wikiextractor_extract

    saved = wikiextractor_extract.time
    clock = PinnedClock(when)
    wikiextractor_extract.time = clock
    try:
        yield clock
    finally:
        wikiextractor_extract.time = saved


# ----------------------------------------------------------------------------------------------
# Reading the dump


class _DumpReader(io.RawIOBase):
    """The decompressed bytes of a dump, with one-line errors and a check of its end.

    Decompression failures become InputError; with `check_end`, a dump whose data ends
    without a closing `</mediawiki>` (cut short) is an InputError too at its end. `bar`
    (closed with the reader) counts the bytes read from the file.
    """

    def __init__(self, path: Path, bar: tqdm | None = None, check_end: bool = True) -> None:
        super().__init__()
        self.path = path
        try:
            self._file = open(path, "rb")
        except OSError as err:
            raise InputError(f"{path}: cannot read ({err.strerror})") from err
        self._bar = bar
        self._consumed = 0
        if path.suffix == ".bz2":
            self._inner = bz2.BZ2File(self._file)
        elif path.suffix == ".gz":
            self._inner = gzip.GzipFile(fileobj=self._file)
        else:
            self._inner = self._file
        self._tail = b""
        self._check_end = check_end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        try:
            count = self._inner.readinto(buffer)
        except EOFError as err:
            raise InputError(f"{self.path}: truncated compressed data (it ends before its "
                             f"end-of-stream marker)") from err
        except OSError as err:
            raise InputError(f"{self.path}: cannot decompress ({err})") from err
        if count:
            self._tail = (self._tail + bytes(buffer[max(0, count - _TAIL_BYTES):count])
                          )[-_TAIL_BYTES:]
        elif self._check_end and not self._tail.rstrip().endswith(b"</mediawiki>"):
            raise InputError(f"{self.path}: the XML ends before </mediawiki> "
                             f"(truncated or not a MediaWiki dump)")
        if self._bar is not None:
            position = self._file.tell()
            self._bar.update(position - self._consumed)
            self._consumed = position
        return count

    def close(self) -> None:
        if not self.closed:
            if self._inner is not self._file:
                self._inner.close()
            self._file.close()
            if self._bar is not None:
                self._bar.close()
        super().close()


def open_dump(path: str | os.PathLike, desc: str | None = None,
              check_end: bool = True) -> io.TextIOWrapper:
    """Open a dump (.xml, .xml.bz2 or .xml.gz) as WikiExtractor's `decode_open` does (UTF-8,
    universal newlines), through `_DumpReader`; `desc` names a byte progress bar."""
    path = Path(path)
    bar = None
    if desc is not None:
        bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=desc, leave=False, disable=None)
    raw = _DumpReader(path, bar, check_end)
    return io.TextIOWrapper(io.BufferedReader(raw, 1 << 20), encoding="utf-8")


def check_dump_start(path: str | os.PathLike) -> None:
    """InputError unless `path` is a non-empty file whose data starts a MediaWiki dump."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: input file does not exist")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    with open_dump(path, check_end=False) as handle:
        try:
            head = handle.read(_SNIFF_BYTES)
        except UnicodeDecodeError as err:
            raise InputError(f"{path}: not UTF-8 text, not a MediaWiki XML dump") from err
    if "<mediawiki" not in head:
        raise InputError(f"{path}: not a MediaWiki XML dump (no <mediawiki> element)")


# ----------------------------------------------------------------------------------------------
# Running WikiExtractor


def parse_size(text: str) -> int:
    """WikiExtractor's --bytes: `n[KMG]` (powers of 1024) or `0` (one article per file)."""
    text = text.strip()
    if text == "0":
        return 0
    power = "kmg".find(text[-1:].lower()) + 1
    digits = text[:-1] if power else text
    if not digits.isdigit():
        raise InputError(f"--bytes={text}: expected a size such as 1M or 500K")
    size = int(digits) * 1024 ** power
    if size < MIN_FILE_SIZE:
        raise InputError(f"--bytes={text}: files must be at least 200K (or 0)")
    return size


def default_processes() -> int:
    """WikiExtractor's default: one extraction process per core but one (at least one)."""
    return max(1, (os.cpu_count() or 2) - 1)


def _extractor_kwargs(keep_sections: bool = False) -> dict:
    """WikiExtractor's default CLI settings (no links, no HTML), with section titles dropped
    unless `keep_sections`, as the reference's WikiExtractor did by default."""
    from wikiextractor.extract import _DEFAULT_IGNORED_TAG_PATTERNS, ignoreTag

    return {
        "keepLinks": False,
        "HtmlFormatting": False,
        "to_json": False,
        "to_text": False,
        "discard_empty": False,
        "keepSections": keep_sections,
        "ignored_tag_patterns": list(_DEFAULT_IGNORED_TAG_PATTERNS) + [ignoreTag("a")],
    }


@dataclass
class Extraction:
    """What one extraction produced."""

    pages: int
    files: int
    output_bytes: int


@contextlib.contextmanager
def _instrumented_wikiextractor(input_path: Path, counter: list[int]) -> Iterator[None]:
    """Route WikiExtractor's dump reading through `open_dump` and count the pages it maps."""
    from wikiextractor import WikiExtractor as wikiextractor_main

    saved_open = wikiextractor_main.decode_open
    saved_collect = wikiextractor_main.collect_pages
    passes = iter(("templates", "pages"))

    def decode_open(filename, mode="rt", encoding="utf-8"):
        if Path(filename) != input_path:
            return saved_open(filename, mode, encoding)
        return open_dump(filename, desc=f"extract: {next(passes, 'read')}")

    def collect_pages(text):
        for page in saved_collect(text):
            counter[0] += 1
            yield page

    wikiextractor_main.decode_open = decode_open
    wikiextractor_main.collect_pages = collect_pages
    try:
        yield
    finally:
        wikiextractor_main.decode_open = saved_open
        wikiextractor_main.collect_pages = saved_collect


class _Stopped(BaseException):
    """Raised in the supervisor process when its parent asks it to stop (SIGTERM)."""


def _stop_once(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Stopped()


class _WriteFailed(BaseException):
    """Raised in the supervisor process when WikiExtractor's writer could not write (SIGUSR1)."""


def _write_failed(signum, frame) -> None:
    raise _WriteFailed()


@contextlib.contextmanager
def _reported_write_failures(building: Path, final: Path, sender) -> Iterator[None]:
    """Make WikiExtractor's writer process, when a write fails (a full disk), send an outcome
    ("disk" or "input", one-line message) on `sender`, signal this process (SIGUSR1) and exit
    at once, instead of dying with a traceback while this process waits for it forever.

    The message names the file being written under its final name (`building` -> `final`).
    """
    from wikiextractor.WikiExtractor import OutputSplitter

    saved_write, saved_close = OutputSplitter.write, OutputSplitter.close
    supervisor = os.getpid()

    def reporting(method):
        def call(splitter, *args):
            try:
                return method(splitter, *args)
            except OSError as err:
                name = final / Path(splitter.file.name).relative_to(building)
                full = disk_full(name, err)
                sender.send(("disk", str(full)) if full else
                            ("input", f"{name}: cannot write ({err.strerror})"))
                os.kill(supervisor, signal.SIGUSR1)
                os._exit(1)
        return call

    OutputSplitter.write, OutputSplitter.close = reporting(saved_write), reporting(saved_close)
    try:
        yield
    finally:
        OutputSplitter.write, OutputSplitter.close = saved_write, saved_close


def _run_wikiextractor(conn, input_path: Path, building: Path, final: Path,
                       when: datetime.datetime, size: int, processes: int, keep_sections: bool,
                       log_level: int) -> None:
    """Body of the supervisor process: run WikiExtractor, send back the outcome, exit.

    The outcome sent on `conn` is ("ok", pages), ("input", message), ("disk", message) or
    ("error", text); a write that fails in WikiExtractor's writer ("disk" for a full disk)
    names the file under `final`. Ctrl-C is left to the parent, which sends SIGTERM instead
    (WikiExtractor's processes, forked from here, ignore SIGINT too). On any failure
    WikiExtractor's processes are killed here, and the process always leaves through
    os._exit: its multiprocessing queues may still hold pages for workers that are gone, and
    the normal exit path would wait for them forever.
    """
    from wikiextractor import WikiExtractor as wikiextractor_main

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_once)
    signal.signal(signal.SIGUSR1, _write_failed)
    failures, failure_sender = multiprocessing.get_context("fork").Pipe(duplex=False)
    status, outcome = 1, ("error", "interrupted")
    try:
        counter = [0]
        with pinned_clock(when), _instrumented_wikiextractor(input_path, counter), \
                _reported_write_failures(building, final, failure_sender):
            wikiextractor_main.process_dump(
                str(input_path), None, str(building), size, False, processes, True,
                expand_templates=True, extractor_kwargs=_extractor_kwargs(keep_sections),
                log_level=log_level)
        status, outcome = 0, ("ok", counter[0])
    except _WriteFailed:
        outcome = failures.recv()
    except InputError as err:
        outcome = ("input", str(err))
    except UnicodeDecodeError as err:
        outcome = ("input", f"{input_path}: not UTF-8 text ({err.reason})")
    except _Stopped:
        outcome = ("error", "interrupted")
    except BaseException:  # noqa: BLE001 -- reported to the parent, which raises it
        outcome = ("error", traceback.format_exc())
    finally:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if status:
                for child in multiprocessing.active_children():
                    child.kill()
                    child.join(timeout=10)
            conn.send(outcome)
            conn.close()
        except BaseException:  # noqa: BLE001 -- the parent sees a missing outcome
            pass
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)


def _supervise(input_path: Path, building: Path, final: Path, when: datetime.datetime,
               size: int, processes: int, keep_sections: bool, log_level: int) -> int:
    """Run WikiExtractor in a forked supervisor process, writing into `building` (renamed to
    `final` later); return the number of pages.

    Keeps the clock pin and the reading hooks out of this process, and keeps a failure
    (or Ctrl-C) from leaving worker processes or blocked queue threads behind here.
    """
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    supervisor = context.Process(
        target=_run_wikiextractor, name="wikiextractor",
        args=(sender, input_path, building, final, when, size, processes, keep_sections,
              log_level))
    supervisor.start()
    sender.close()
    try:
        try:
            kind, value = receiver.recv()
        except EOFError:
            kind, value = "died", None
        supervisor.join()
    except BaseException:
        # Interrupted (Ctrl-C): the supervisor stops and cleans up after its own workers.
        if supervisor.is_alive():
            supervisor.terminate()
        supervisor.join(timeout=60)
        if supervisor.is_alive():
            supervisor.kill()
            supervisor.join()
        raise
    finally:
        receiver.close()
    if kind == "ok":
        return value
    if kind == "input":
        raise InputError(value)
    if kind == "disk":
        raise DiskFullError(value)
    if kind == "died":
        raise RuntimeError(f"WikiExtractor's process ended with status {supervisor.exitcode} "
                           f"before reporting a result")
    raise RuntimeError(f"WikiExtractor failed:\n{value}")


def _replace_directory(built: Path, final: Path) -> None:
    """Rename directory `built` to `final`, replacing an earlier `final` directory."""
    if final.exists() and not final.is_dir():
        raise InputError(f"{final}: exists and is not a directory")
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(built, final)
        shutil.rmtree(old)
    else:
        os.replace(built, final)


def extract_dump(input_path: str | os.PathLike, output_dir: str | os.PathLike,
                 date: datetime.datetime | str = constants.DUMP_DATE,
                 file_size: int | str = "1M", processes: int = 0,
                 keep_sections: bool = False, log_level: int = logging.WARNING) -> Extraction:
    """Extract `input_path` into `output_dir` (`AA/wiki_00`, …) with the clock at `date`.

    `processes` <= 0 means WikiExtractor's default (cores - 1); `keep_sections` keeps section
    titles as lines (off in the reference). The directory appears only
    when complete (an earlier one is replaced). Raises InputError for a bad input.
    """
    input_path = Path(input_path)
    output_dir = Path(output_dir)
    when = parse_date(date) if isinstance(date, str) else date
    size = parse_size(file_size) if isinstance(file_size, str) else file_size
    processes = processes if processes > 0 else default_processes()
    check_dump_start(input_path)
    ensure_dir(output_dir.parent)
    building = temporary_name(output_dir)
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        pages = _supervise(input_path, building, output_dir, when, size, processes,
                           keep_sections, log_level)
        if pages == 0:
            raise InputError(f"{input_path}: no articles found in the dump")
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    files = sorted(path for path in building.rglob("wiki_*") if path.is_file())
    output_bytes = sum(path.stat().st_size for path in files)
    _replace_directory(building, output_dir)
    return Extraction(pages, len(files), output_bytes)


def main(argv: list[str] | None = None) -> None:
    """CLI: extract a dump reproducibly into the reference's `text/` layout."""
    parser = argparse.ArgumentParser(
        description="Extract a Wikipedia XML dump with WikiExtractor, with a fixed clock.")
    parser.add_argument("--input", required=True, help="The dump: .xml, .xml.bz2 or .xml.gz.")
    parser.add_argument("--output_dir", required=True,
                        help="The directory to create, e.g. DIR/text (replaced if present).")
    parser.add_argument("--date", default=constants.DUMP_DATE,
                        help="The date (YYYY-MM-DD[THH:MM:SS]) time magic words expand to.")
    parser.add_argument("--bytes", default="1M",
                        help="Maximum bytes per output file (n[KMG]; 0: one article per file).")
    parser.add_argument("--processes", type=int, default=0,
                        help="Extraction processes (0: cores - 1, WikiExtractor's default).")
    parser.add_argument("--keep_sections", action="store_true",
                        help="Keep section titles as lines (the reference dropped them).")
    parser.add_argument("--verbose", action="store_true", help="Show WikiExtractor's progress.")
    args = parser.parse_args(argv)
    started = time.time()
    result = extract_dump(args.input, args.output_dir, parse_date(args.date),
                          parse_size(args.bytes), args.processes, args.keep_sections,
                          logging.INFO if args.verbose else logging.WARNING)
    report(StageSummary("extract", result.files, result.pages,
                        os.path.getsize(args.input), started))


if __name__ == "__main__":
    exit_on_input_error(main)
