"""Stage 2: the dump's XML to `text/AA/wiki_00 …`, exactly as the reference's WikiExtractor.

    python -m cleanup_scripts.text.extract --input=DUMP.xml[.bz2|.gz] --output_dir=DIR/text
        [--date=2020-01-01] [--bytes=1M] [--processes=N]

The text is written by the reference's own WikiExtractor.py (2.75, attardi/wikiextractor at
3162bb6c, pip `wikiextractor==0.1`; `cleanup_scripts.text.wikiextractor_275` loads it unmodified on
this Python) with the settings the reference ran it with, `WikiExtractor.py DUMP.xml`: all
defaults (no links, lists or section titles, `<doc id=… url=… title=…>` records in ~1 MB
files, 100 per folder: `AA/wiki_00` … `AA/wiki_99`, `AB/wiki_00`, …). Note what that command
does not do: without `--templates FILE` the script never collects the dump's templates, so
every template call expands to nothing (magic words such as {{CURRENTYEAR}} still expand).

The script's own `main` sets every option from those command-line defaults; only its
`process_dump` (one reader process feeding workers through queues) is replaced here by one
that reads the dump in parallel with the same result: `<siteinfo>` is read as the script reads
it, then the dump is cut into page-aligned chunks (`cleanup_scripts.text.dump_chunks`; a bz2
multistream dump by its streams, so decompression runs on every core too), workers run the
script's `pages_from`, `keepPage` and `Extractor` on them, and the pages are written in dump
order through the script's own `OutputSplitter`, so file boundaries fall where the script puts
them. The output is byte-identical to the script's, whatever `--processes` is (tests compare
with files the original wrote under Python 3.7). A dump without `</siteinfo>`, in which the
script finds no pages at all, is an error here, found in the first MiB of its text
(HEADER_LIMIT): the script would read the whole dump looking for it.

Reproducibility. The script reads the wall clock (`time.strftime`) for CURRENTYEAR,
CURRENTMONTH, CURRENTDAY, CURRENTHOUR and CURRENTTIME; the reference's own extraction cannot be
repeated for that reason (its date was not recorded). Here the script's `time` is a clock fixed
at `--date` (default: the dump's date, `benchmark.constants.DUMP_DATE`, 00:00:00). Other time
words are not defined by the script and expand to nothing, whatever the date.

The whole run happens in a forked supervisor process, so the script's module state, logging
set-up and worker processes never reach the caller. The output is built in a hidden
directory beside `--output_dir` and renamed into place only when the whole dump was read; an
empty, truncated or non-XML input gives a one-line error and leaves no output directory behind,
and so does a full disk (the line names the file being written).
"""
from __future__ import annotations

import argparse
import bz2
import collections
import datetime
import functools
import gzip
import io
import logging
import multiprocessing
import os
import re
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from benchmark import constants
from benchmark.errors import exit_on_user_error
from benchmark.files import (DiskFullError, InputError, check_output, disk_full, ensure_dir,
                             require_regular_file, temporary_name)
from cleanup_scripts.pipeline.runner import StageProgress, StageSummary, report
from cleanup_scripts.text import dump_chunks, wikiextractor_275

MIN_FILE_SIZE = 200 * 1024  # WikiExtractor's own lower limit for --bytes
CHUNK_BYTES = 16 << 20  # decoded dump text per worker task
_SNIFF_BYTES = 64 * 1024
_TAIL_BYTES = 64
# `</siteinfo>` must come within this many characters of a dump's text (the enwiki header is
# a few KiB): a dump without it is refused after reading this much, not all of it.
HEADER_LIMIT = 1 << 20
# The first tag of a line, as WikiExtractor's tagRE finds it (its group 2).
_FIRST_TAG = re.compile(r"<(/?\w+)[^>]*?>")


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


# ----------------------------------------------------------------------------------------------
# Reading the dump


class _DumpReader(io.RawIOBase):
    """The decompressed bytes of a dump, with one-line errors and a check of its end.

    Decompression failures become InputError; with `check_end`, a dump whose data ends
    without a closing `</mediawiki>` (cut short) is an InputError too at its end.
    """

    def __init__(self, path: Path, check_end: bool = True) -> None:
        super().__init__()
        self.path = path
        try:
            self._file = open(path, "rb")
        except OSError as err:
            raise InputError(f"{path}: cannot read ({err.strerror})") from err
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

    def position(self) -> int:
        """Bytes of the file read so far."""
        return self._file.tell()

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
        return count

    def close(self) -> None:
        if not self.closed:
            if self._inner is not self._file:
                self._inner.close()
            self._file.close()
        super().close()


def open_dump(path: str | os.PathLike, check_end: bool = True) -> io.TextIOWrapper:
    """Open a dump (.xml, .xml.bz2 or .xml.gz) as text the way the reference's WikiExtractor
    read its plain XML (UTF-8, universal newlines), through `_DumpReader`."""
    raw = _DumpReader(Path(path), check_end)
    return io.TextIOWrapper(io.BufferedReader(raw, 1 << 20), encoding="utf-8")


def check_dump_start(path: str | os.PathLike) -> None:
    """InputError unless `path` is a non-empty file whose data starts a MediaWiki dump: a
    `<mediawiki>` element, and `</siteinfo>` within HEADER_LIMIT characters. Reads at most
    that much (decompressed)."""
    path = Path(path)
    require_regular_file(path)  # /dev/zero or a FIFO: named, never read
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    with open_dump(path, check_end=False) as handle:
        try:
            head = handle.read(_SNIFF_BYTES)
        except UnicodeDecodeError as err:
            raise InputError(f"{path}: not UTF-8 text, not a MediaWiki XML dump") from err
    if "<mediawiki" not in head:
        raise InputError(f"{path}: not a MediaWiki XML dump (no <mediawiki> element)")
    with open_dump(path, check_end=False) as handle:
        if not _header_ends(_header_lines(handle, path)):
            raise InputError(f"{path}: no </siteinfo> in its first {HEADER_LIMIT >> 20} MiB: "
                             f"not the header of a MediaWiki dump (WikiExtractor would find no "
                             f"pages)")


def _header_lines(handle: io.TextIOBase, path: Path) -> Iterator[str]:
    """The lines of `handle` within its first HEADER_LIMIT characters (a longer line is cut
    there): where a dump's `<siteinfo>` must end."""
    left = HEADER_LIMIT
    while left > 0:
        try:
            line = handle.readline(left)
        except UnicodeDecodeError as err:
            raise InputError(f"{path}: not UTF-8 text, not a MediaWiki XML dump") from err
        if not line:
            return
        left -= len(line)
        yield line


def _header_ends(lines: Iterator[str]) -> bool:
    """Whether a line of `lines` has `</siteinfo>` as its first tag (where `_read_siteinfo`,
    as the script, stops reading the header)."""
    for line in lines:
        match = _FIRST_TAG.search(line)
        if match and match.group(1) == "/siteinfo":
            return True
    return False


# ----------------------------------------------------------------------------------------------
# WikiExtractor's settings


def parse_size(text: str) -> int:
    """WikiExtractor's --bytes: `n[KMG]` (powers of 1024), at least 200K, as its CLI reads it."""
    text = text.strip()
    power = "kmg".find(text[-1:].lower()) + 1
    digits = text[:-1]
    if not digits.isdigit():
        raise InputError(f"--bytes={text}: expected a size such as 1M or 500K")
    size = int(digits) * 1024 ** power
    if size < MIN_FILE_SIZE:
        raise InputError(f"--bytes={text}: files must be at least 200K")
    return size


def default_processes() -> int:
    """WikiExtractor's default: one extraction process per core but one (at least one)."""
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class _Settings:
    """One extraction, as the supervisor process runs it."""

    input_path: Path
    building: Path  # written here ...
    final: Path  # ... and renamed to this by the caller
    when: datetime.datetime
    size: int
    processes: int
    keep_sections: bool
    verbose: bool
    chunk_bytes: int

    def script_argv(self) -> list[str]:
        """The script's command line: the reference's `WikiExtractor.py DUMP.xml`, plus the
        output folder, size and process count (`--sections` on request, `-q` unless verbose).
        Paths are absolute, so that one beginning with "-" is not taken for an option."""
        return (["WikiExtractor.py", os.path.abspath(self.input_path),
                 "-o", os.path.abspath(self.building),
                 "-b", f"{self.size // 1024}K", "--processes", str(self.processes)]
                + (["--sections"] if self.keep_sections else [])
                + ([] if self.verbose else ["-q"]))


@dataclass
class Extraction:
    """What one extraction produced."""

    pages: int
    files: int
    output_bytes: int


# ----------------------------------------------------------------------------------------------
# The parallel process_dump (runs in the supervisor process and its forked workers)

# The loaded script; set in the supervisor before its workers are forked.
_script = None


class _Misaligned(Exception):
    """A bz2 chunk whose streams do not start and end at page lines."""


def _read_siteinfo(lines: Iterator[str]) -> bool:
    """Read `<siteinfo>` from `lines` into the script's options as its `process_dump` does
    (URL base, namespaces, the Template and Module names); True once the line whose first tag
    is `</siteinfo>` was read, False if `lines` ran out first (the script then has no lines
    left to read pages from)."""
    options = _script.options
    for line in lines:
        match = _script.tagRE.search(line)
        if not match:
            continue
        tag = match.group(2)
        if tag == "base":
            base = match.group(3)
            options.urlbase = base[:base.rfind("/")]
        elif tag == "namespace":
            key = _script.keyRE.search(line)
            options.knownNamespaces[match.group(3)] = "".join(key.groups()) if key else ""
            if 'key="10"' in line:
                options.templateNamespace = match.group(3)
                options.templatePrefix = options.templateNamespace + ":"
            elif 'key="828"' in line:
                options.moduleNamespace = match.group(3)
                options.modulePrefix = options.moduleNamespace + ":"
        elif tag == "/siteinfo":
            return True
    return False


def _decoded(chunk: dump_chunks.Chunk) -> Iterator[str]:
    """The lines of `chunk` (`dump_chunks.chunk_lines`, a stream), checked as they pass: a
    chunk after the first starts at a `<page>` line or `</mediawiki>`, one before the last ends
    at a line end (else _Misaligned for bz2 streams that split pages, RuntimeError otherwise),
    and the last chunk of a compressed or XML dump ends with `</mediawiki>` (else InputError)."""
    last_line, last_content = "", ""
    for number, line in enumerate(dump_chunks.chunk_lines(chunk)):
        if number == 0 and chunk.index != 0 and not dump_chunks.starts_a_chunk(line):
            break
        last_line = line
        last_content = line if line.strip() else last_content
        yield line
    else:
        if (chunk.index == 0 or last_line) and (chunk.last or last_line.endswith("\n")):
            if (chunk.last and chunk.codec != "text"
                    and not last_content.rstrip().endswith("</mediawiki>")):
                raise InputError(f"{chunk.path}: the XML ends before </mediawiki> "
                                 f"(truncated or not a MediaWiki dump)")
            return
    if chunk.codec == "bz2":
        raise _Misaligned(chunk.index)
    raise RuntimeError(f"{chunk.path}: chunk {chunk.index} is not page-aligned")


def _extract_chunk(chunk: dump_chunks.Chunk) -> tuple:
    """Worker: the script's page reader, filter and Extractor over one chunk (the first from
    after `</siteinfo>`, where the script's reader goes on). Returns (first page id, last page
    id, [(page ordinal, UTF-8 text), …]) for the pages kept, in dump order."""
    lines = _decoded(chunk)
    if chunk.index == 0 and not _read_siteinfo(lines):
        raise InputError(f"{chunk.path}: <siteinfo> does not end before the first page")
    ids: list = []
    texts: list = []
    out = io.StringIO()
    for ordinal, (page_id, revid, title, ns, categories, page) in \
            enumerate(_script.pages_from(lines)):
        ids.append(page_id)
        if not _script.keepPage(ns, categories, page):
            continue
        try:
            _script.Extractor(page_id, revid, title, page).extract(out)
            text = out.getvalue()
        except Exception:  # noqa: BLE001 -- the script writes an empty text, and logs it
            text = ""
            logging.exception("Processing page: %s %s", page_id, title)
        out.seek(0)
        out.truncate(0)
        texts.append((ordinal, text.encode("utf-8")))
    return (ids[0] if ids else None), (ids[-1] if ids else None), texts


def _in_order(pool, chunks: Iterator[dump_chunks.Chunk], window: int
              ) -> Iterator[tuple[dump_chunks.Chunk, list]]:
    """`_extract_chunk` over `chunks` in `pool`: each chunk with its texts, in chunk order,
    with at most `window` chunks in flight (a serially read dump is never all in memory). A
    chunk's first page is left out when its id repeats the previous chunk's last page id, as
    the script's page reader, reading on, would have skipped it."""
    pending: collections.deque = collections.deque()
    previous_last = None
    chunks = iter(chunks)
    while True:
        while len(pending) < window:
            chunk = next(chunks, None)
            if chunk is None:
                break
            pending.append((chunk, pool.apply_async(_extract_chunk, (chunk,))))
        if not pending:
            return
        chunk, result = pending.popleft()
        first, last, texts = result.get()
        drop_first = first is not None and first == previous_last
        previous_last = last if last is not None else previous_last
        yield chunk, [text for ordinal, text in texts if not (drop_first and ordinal == 0)]


def _serial_chunks(settings: _Settings) -> Iterator[dump_chunks.Chunk]:
    reader = open_dump(settings.input_path)
    try:
        lines = dump_chunks.page_lines(reader, str(settings.input_path))
        yield from dump_chunks.serial_chunks(lines, settings.input_path, settings.chunk_bytes,
                                             reader.buffer.raw.position)
    finally:
        reader.close()


def _write_pages(settings: _Settings, pool, chunks) -> int:
    """The script's output files from `chunks` (None: the dump read serially here), written
    in dump order through its `OutputSplitter`; returns the number of pages written. The
    stage's progress bar counts the pages written and the dump's (compressed) bytes read."""
    splitter = _script.OutputSplitter(_script.NextFile(str(settings.building)), settings.size,
                                      False)
    pages = 0
    source = chunks if chunks is not None else _serial_chunks(settings)
    try:
        with StageProgress("extract", None, settings.input_path.stat().st_size,
                           unit="pages") as bar:
            for chunk, texts in _in_order(pool, source, 2 * settings.processes + 2):
                for text in texts:
                    splitter.write(text)
                pages += len(texts)
                bar.advance(len(texts), chunk.size)
        splitter.close()
    except OSError as err:
        name = settings.final / Path(splitter.file.name).relative_to(settings.building)
        raise disk_full(name, err) or InputError(f"{name}: cannot write ({err.strerror})") \
            from err
    return pages


def _worker_signals() -> None:
    """Pool workers: Ctrl-C is the supervisor's business, and SIGTERM (the pool's way of
    stopping them) ends them quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _empty(directory: Path) -> None:
    for entry in directory.iterdir():
        shutil.rmtree(entry)


def _process_dump(settings: _Settings, outcome: list, input_file, template_file, out_file,
                  file_size, file_compress, process_count) -> None:
    """Stands in for the script's `process_dump`, called by its `main` with the arguments it
    parsed: see the module doc. Appends the number of pages written to `outcome`."""
    if template_file or not out_file or file_compress:
        raise RuntimeError("only the reference's command line is supported")
    with open_dump(settings.input_path, check_end=False) as reader:
        if not _read_siteinfo(_header_lines(reader, settings.input_path)):
            raise InputError(f"{settings.input_path}: no </siteinfo> in its first "
                             f"{HEADER_LIMIT >> 20} MiB: WikiExtractor finds no pages in a dump "
                             f"without its <siteinfo> header")
    with multiprocessing.get_context("fork").Pool(process_count, _worker_signals) as pool:
        chunks = dump_chunks.plan(settings.input_path, settings.chunk_bytes, pool.starmap)
        try:
            outcome.append(_write_pages(settings, pool, chunks))
        except _Misaligned:
            logging.warning("%s: its bz2 streams split pages; reading it serially",
                            settings.input_path)
            _empty(settings.building)
            outcome.append(_write_pages(settings, pool, None))


# ----------------------------------------------------------------------------------------------
# The supervisor process


class _Stopped(BaseException):
    """Raised in the supervisor process when its parent asks it to stop (SIGTERM)."""


def _stop_once(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Stopped()


def _run_wikiextractor(conn, settings: _Settings) -> None:
    """Body of the supervisor process: run the script's `main`, send back the outcome, exit.

    The outcome sent on `conn` is ("ok", pages), ("input", message), ("disk", message) or
    ("error", text). Ctrl-C is left to the parent, which sends SIGTERM instead (the workers,
    forked from here, ignore SIGINT too). On any failure the workers are killed here, and the
    process always leaves through os._exit (pool threads may still be blocked on queues).
    """
    global _script
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_once)
    status, outcome = 1, ("error", "interrupted")
    try:
        # The script logs a line per article at INFO on the root logger, and its `-q` leaves
        # that logger's level as the caller set it (absl: INFO): here and in the workers
        # forked from here, only its warnings and errors pass, unless asked to be verbose.
        logging.getLogger().setLevel(logging.INFO if settings.verbose else logging.WARNING)
        _script = wikiextractor_275.load()
        _script.time = PinnedClock(settings.when)
        pages: list[int] = []
        _script.process_dump = functools.partial(_process_dump, settings, pages)
        sys.argv = settings.script_argv()
        _script.main()
        if not pages:
            raise RuntimeError("WikiExtractor's main stopped before extracting")
        status, outcome = 0, ("ok", pages[0])
    except DiskFullError as err:
        outcome = ("disk", str(err))
    except InputError as err:
        outcome = ("input", str(err))
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


def _supervise(settings: _Settings) -> int:
    """Run the extraction in a forked supervisor process; return the number of pages.

    Keeps the script's module state and worker processes out of this process, and keeps a
    failure (or Ctrl-C) from leaving worker processes behind here.
    """
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    supervisor = context.Process(target=_run_wikiextractor, name="wikiextractor",
                                 args=(sender, settings))
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
    """Rename directory `built` to `final`, replacing an earlier `final` directory (moved
    aside as `.NAME.old.partial-PID` first: a kill leaves it under a temporary's name, which
    the next `make preprocess` removes)."""
    if final.exists() and not final.is_dir():
        raise InputError(f"{final}: exists and is not a directory")
    if final.exists():
        old = temporary_name(final.with_name(final.name + ".old"))
        os.replace(final, old)
        os.replace(built, final)
        shutil.rmtree(old)
    else:
        os.replace(built, final)


def extract_dump(input_path: str | os.PathLike, output_dir: str | os.PathLike,
                 date: datetime.datetime | str = constants.DUMP_DATE,
                 file_size: int | str = "1M", processes: int = 0,
                 keep_sections: bool = False, verbose: bool = False,
                 chunk_bytes: int = CHUNK_BYTES) -> Extraction:
    """Extract `input_path` into `output_dir` (`AA/wiki_00`, …) with the clock at `date`.

    `file_size` caps each output file (bytes, or WikiExtractor's `n[KMG]`); `processes` <= 0
    means WikiExtractor's default (cores - 1); `keep_sections` keeps section titles as lines
    (off in the reference); `verbose` lets WikiExtractor log each page; `chunk_bytes` is the
    decoded dump text per worker task. The directory appears only when complete (an earlier
    one is replaced). Raises InputError for a bad input, DiskFullError for a full disk.
    """
    input_path = Path(input_path)
    output_dir = Path(output_dir)
    when = parse_date(date) if isinstance(date, str) else date
    size = parse_size(file_size) if isinstance(file_size, str) else file_size
    processes = processes if processes > 0 else default_processes()
    check_dump_start(input_path)
    check_output(output_dir, folder=True)  # a link there would be moved aside, not replaced
    ensure_dir(output_dir.parent)
    building = temporary_name(output_dir)
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    settings = _Settings(input_path, building, output_dir, when, size, processes, keep_sections,
                         verbose, chunk_bytes)
    try:
        pages = _supervise(settings)
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
        description="Extract a Wikipedia XML dump with the reference's WikiExtractor 2.75, in "
                    "parallel, with a fixed clock.")
    parser.add_argument("--input", required=True, help="The dump: .xml, .xml.bz2 or .xml.gz.")
    parser.add_argument("--output_dir", required=True,
                        help="The directory to create, e.g. DIR/text (replaced if present).")
    parser.add_argument("--date", default=constants.DUMP_DATE,
                        help="The date (YYYY-MM-DD[THH:MM:SS]) time magic words expand to.")
    parser.add_argument("--bytes", default="1M",
                        help="Maximum bytes per output file (n[KMG], at least 200K).")
    parser.add_argument("--processes", type=int, default=0,
                        help="Extraction processes (0: cores - 1, WikiExtractor's default).")
    parser.add_argument("--keep_sections", action="store_true",
                        help="Keep section titles as lines (the reference dropped them).")
    parser.add_argument("--verbose", action="store_true", help="Show WikiExtractor's progress.")
    args = parser.parse_args(argv)
    started = time.time()
    result = extract_dump(args.input, args.output_dir, parse_date(args.date),
                          parse_size(args.bytes), args.processes, args.keep_sections,
                          args.verbose)
    report(StageSummary("extract", result.files, result.pages,
                        os.path.getsize(args.input), started))


if __name__ == "__main__":
    exit_on_user_error(main)
