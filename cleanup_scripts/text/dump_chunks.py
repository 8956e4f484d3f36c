"""A Wikipedia dump cut into page-aligned chunks that workers can decode on their own.

WikiExtractor reads a dump line by line, as text (UTF-8, universal newlines), and its page
reader starts afresh at every `<page>` line. So a dump cut just before `<page>` lines gives
the same pages, chunk by chunk, as the whole dump read in one go. Three ways to cut:

* plain XML (`.xml`): byte ranges, each ending just before a line that opens a `<page>`; a
  worker reads its own range from the file.
* a bz2 multistream dump (Wikimedia's `*-multistream.xml.bz2`, the form the benchmark's
  dump comes in): runs of whole bz2 streams. Each stream holds whole pages (that is what the
  dump's index is for), so a worker decompresses its own run. The streams are found by their
  headers (`BZh[1-9]` + the block magic 0x314159265359), in parallel; a false match inside
  compressed data could only make a chunk fail to decompress, which is an error, never wrong
  text. `starts_a_chunk` helps check each decoded chunk.
* anything else (one bz2 stream, gzip, or a multistream file whose streams split pages): read
  and decoded in this process and handed out as text, cut before `<page>` lines.

Every chunk is decoded as a stream, line by line (`chunk_lines`, `page_lines`), never whole, and
a page larger than MAX_PAGE_CHARS is refused: memory does not grow with a page's size.
"""
from __future__ import annotations

import bz2
import io
import mmap
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from benchmark.errors import printable
from benchmark.files import InputError

_PAGE_LINE = re.compile(rb"\n[ \t]*<page>")
_PAGE_LINE_TEXT = re.compile(r"[ \t]*<page>")
_CHUNK_START_TEXT = re.compile(r"[ \t]*(<page>|</mediawiki>)")
_STREAM_HEADER = re.compile(rb"BZh[1-9]1AY&SY")
_HEADER_LENGTH = 10
_SCAN_PIECE = 64 << 20
_TITLE = re.compile(r"<title>([^<]*)</title>")
# The most characters one page of a dump may span, from its `<page>` line to the next (and one
# line at most). MediaWiki keeps at most 2 MiB of wikitext a page ($wgMaxArticleSize, 2048 KiB);
# XML escaping grows that to 12 MiB at the very worst (every character a `"`, `&quot;`), and the
# largest real enwiki pages hold a few MB. A page over this is no real page: it is refused, so a
# worker holds at most about two of these (the page's lines and the line being read).
MAX_PAGE_CHARS = 16 << 20


@dataclass(frozen=True)
class Chunk:
    """A page-aligned piece of the dump at `path`.

    `codec` is "xml" (bytes `start`..`stop` of the file), "bz2" (whole bz2 streams in bytes
    `start`..`stop`) or "text" (the decoded lines in `text`; `start`..`stop` count the file's
    bytes read for it). `index` is its position in the dump; `last` marks the final chunk.
    """

    path: str
    codec: str
    index: int
    start: int
    stop: int
    last: bool
    text: str | None = None

    @property
    def size(self) -> int:
        """File bytes the chunk covers."""
        return self.stop - self.start


class _Range(io.RawIOBase):
    """Bytes `start`..`stop` of the open binary file `handle`, read as a stream."""

    def __init__(self, handle: io.BufferedReader, start: int, stop: int) -> None:
        super().__init__()
        handle.seek(start)
        self._handle, self._left = handle, stop - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        count = self._handle.readinto(memoryview(buffer)[:self._left])
        self._left -= count
        return count


def page_lines(stream: io.TextIOBase, where: str) -> Iterator[str]:
    """The lines of text `stream`, read one at a time (at most MAX_PAGE_CHARS + 1 characters
    each). InputError naming `where` and the page (its title) when a line, or a page from its
    `<page>` line to the next, holds more than MAX_PAGE_CHARS characters: nothing of it is
    passed on, and no more is read."""
    held, title = 0, None
    while True:
        line = stream.readline(MAX_PAGE_CHARS + 1)
        if not line:
            return
        if _PAGE_LINE_TEXT.match(line):
            held, title = 0, None
        elif title is None and "<title>" in line:
            found = _TITLE.search(line)
            title = found.group(1) if found else None
        held += len(line)
        if held > MAX_PAGE_CHARS:
            page = f"page '{printable(title[:200])}'" if title else "a page (no <title> yet)"
            raise InputError(f"{where}: {page} holds more than {MAX_PAGE_CHARS:,} characters, "
                             f"more than any real page (MediaWiki keeps at most 2 MiB of "
                             f"wikitext a page); refused")
        yield line


def chunk_lines(chunk: Chunk) -> Iterator[str]:
    """The lines of `chunk`'s decoded text, newlines as WikiExtractor's text-mode reading gives
    them (UTF-8, universal newlines), decoded as a stream (`page_lines`): memory does not grow
    with the chunk or its pages.

    Raises InputError for bytes that do not decompress (naming the file and byte range), are
    not UTF-8, or a page over MAX_PAGE_CHARS.
    """
    if chunk.text is not None:
        yield from page_lines(io.StringIO(chunk.text), chunk.path)
        return
    where = f"{chunk.path}: bytes {chunk.start}-{chunk.stop}"
    with open(chunk.path, "rb") as handle:
        raw = io.BufferedReader(_Range(handle, chunk.start, chunk.stop), 1 << 20)
        source = bz2.BZ2File(raw) if chunk.codec == "bz2" else raw
        try:
            yield from page_lines(io.TextIOWrapper(source, encoding="utf-8"), where)
        except InputError:
            raise
        except UnicodeDecodeError as err:
            raise InputError(f"{where}: not UTF-8 text ({err.reason})") from err
        except (OSError, ValueError, EOFError) as err:
            raise InputError(f"{where}: cannot decompress ({err})") from err


def starts_a_chunk(line: str) -> bool:
    """Whether a chunk after the first may start with `line`: a `<page>` line or the closing
    `</mediawiki>`."""
    return _CHUNK_START_TEXT.match(line) is not None


# ----------------------------------------------------------------------------------------------
# Plain XML


def _xml_boundaries(path: Path, target: int) -> list[int]:
    """Byte offsets, about `target` apart, of the lines of `path` that open a `<page>`."""
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        position = target
        while position < size:
            match = _PAGE_LINE.search(data, max(position - 1, cuts[-1]))
            if match is None:
                break
            cut = match.start() + 1
            if cut > cuts[-1]:
                cuts.append(cut)
            position = cut + target
    return cuts + [size]


# ----------------------------------------------------------------------------------------------
# bz2 multistream


def stream_offsets_in(path: str, start: int, stop: int) -> list[int]:
    """Offsets in bytes `start`..`stop` of `path` where a bz2 stream header begins."""
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(stop - start + _HEADER_LENGTH - 1)
    return [start + match.start() for match in _STREAM_HEADER.finditer(data)
            if match.start() < stop - start]


def bz2_stream_offsets(path: Path, mapper: Callable) -> list[int]:
    """Where each bz2 stream of `path` starts, scanned in pieces through `mapper` (a
    `map`-like function taking the function and an iterable of argument tuples)."""
    size = path.stat().st_size
    pieces = [(str(path), start, min(start + _SCAN_PIECE, size))
              for start in range(0, size, _SCAN_PIECE)]
    return [offset for found in mapper(stream_offsets_in, pieces) for offset in found]


def _group(offsets: list[int], size: int, target: int) -> list[int]:
    """Cut points among `offsets` (plus `size` at the end) about `target` bytes apart."""
    cuts = [offsets[0]]
    for offset in offsets[1:]:
        if offset - cuts[-1] >= target:
            cuts.append(offset)
    return cuts + [size]


# ----------------------------------------------------------------------------------------------
# Planning


def _chunks_between(path: Path, codec: str, cuts: list[int]) -> list[Chunk]:
    last = len(cuts) - 2
    return [Chunk(str(path), codec, index, start, stop, index == last)
            for index, (start, stop) in enumerate(zip(cuts, cuts[1:]))]


def plan(path: Path, target: int, mapper: Callable) -> list[Chunk] | None:
    """Chunks of about `target` decoded bytes for a dump workers can read on their own (plain
    XML, or bz2 with several streams starting at byte 0); None when it must be read
    serially (`serial_chunks`). `mapper` runs the stream scan (see `bz2_stream_offsets`)."""
    if path.suffix == ".xml":
        return _chunks_between(path, "xml", _xml_boundaries(path, target))
    if path.suffix == ".bz2":
        offsets = bz2_stream_offsets(path, mapper)
        if len(offsets) > 1 and offsets[0] == 0:
            # Wikipedia text compresses about 4:1; aim at `target` decompressed bytes.
            return _chunks_between(path, "bz2", _group(offsets, path.stat().st_size,
                                                       max(1, target // 4)))
    return None


def serial_chunks(lines: Iterator[str], path: Path, target: int,
                  position: Callable[[], int]) -> Iterator[Chunk]:
    """Text chunks of about `target` characters cut before `<page>` lines of `lines` (the
    dump read in this process); `position()` tells how many file bytes were read so far."""
    pending: list[str] = []
    held = 0
    start = 0
    index = 0
    for line in lines:
        if held >= target and _PAGE_LINE_TEXT.match(line):
            stop = position()
            yield Chunk(str(path), "text", index, start, stop, False, "".join(pending))
            index, start, pending, held = index + 1, stop, [], 0
        pending.append(line)
        held += len(line)
    yield Chunk(str(path), "text", index, start, max(start, position()), True, "".join(pending))


# ----------------------------------------------------------------------------------------------
# Writing dumps (the bench and the tests make multistream dumps from plain XML)


def split_pages(xml: bytes) -> tuple[bytes, list[bytes], bytes]:
    """(header, [page, …], footer) of a dump's XML: the bytes before the first `<page>` line,
    each page from its `<page>` line to the next, and the `</mediawiki>` line onwards."""
    starts = [match.start() + 1 for match in _PAGE_LINE.finditer(xml)]
    if not starts:
        raise InputError("no <page> lines in the XML")
    end = xml.rindex(b"\n", 0, xml.rindex(b"</mediawiki>")) + 1
    cuts = starts + [end]
    return xml[:starts[0]], [xml[a:b] for a, b in zip(cuts, cuts[1:])], xml[end:]


def multistream(xml: bytes, pages_per_stream: int) -> bytes:
    """`xml` as Wikimedia writes a multistream dump: one bz2 stream for the header, one per
    `pages_per_stream` pages, one for the closing tag."""
    header, pages, footer = split_pages(xml)
    streams = [header] + [b"".join(pages[i:i + pages_per_stream])
                          for i in range(0, len(pages), pages_per_stream)] + [footer]
    return b"".join(bz2.compress(stream) for stream in streams)
