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
  text. `text_is_page_aligned` checks each decoded chunk.
* anything else (one bz2 stream, gzip, or a multistream file whose streams split pages): read
  and decoded in this process and handed out as text, cut before `<page>` lines.
"""
from __future__ import annotations

import bz2
import io
import mmap
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cleanup_scripts.fileio import InputError

_PAGE_LINE = re.compile(rb"\n[ \t]*<page>")
_PAGE_LINE_TEXT = re.compile(r"[ \t]*<page>")
_CHUNK_START_TEXT = re.compile(r"[ \t]*(<page>|</mediawiki>)")
_STREAM_HEADER = re.compile(rb"BZh[1-9]1AY&SY")
_HEADER_LENGTH = 10
_SCAN_PIECE = 64 << 20


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


def chunk_text(chunk: Chunk) -> str:
    """The decoded text of `chunk`, newlines as WikiExtractor's text-mode reading gives them.

    Raises InputError for bytes that do not decompress (naming the file and byte range) or
    are not UTF-8.
    """
    if chunk.text is not None:
        return chunk.text
    with open(chunk.path, "rb") as handle:
        handle.seek(chunk.start)
        data = handle.read(chunk.size)
    where = f"{chunk.path}: bytes {chunk.start}-{chunk.stop}"
    if chunk.codec == "bz2":
        try:
            data = bz2.decompress(data)
        except (OSError, ValueError, EOFError) as err:
            raise InputError(f"{where}: cannot decompress ({err})") from err
    try:
        return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except UnicodeDecodeError as err:
        raise InputError(f"{where}: not UTF-8 text ({err.reason})") from err


def chunk_lines(text: str) -> io.StringIO:
    """The lines of a chunk's decoded text, as WikiExtractor iterates them (split at "\\n")."""
    return io.StringIO(text)


def text_is_page_aligned(text: str, chunk: Chunk) -> bool:
    """Whether decoded `text` of `chunk` starts at a `<page>` line or the closing
    `</mediawiki>` (unless it is the first chunk) and ends at a line end (unless it is the
    last)."""
    starts = chunk.index == 0 or _CHUNK_START_TEXT.match(text) is not None
    ends = chunk.last or text.endswith("\n")
    return starts and ends


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
