"""Fetch the benchmark's official inputs, resumably, and verify each md5 before use.

    python -m cleanup_scripts.download --output_dir=DIR [--artifacts=all]
        [--source=r2|drive|url] [--url NAME=URL ...] [--base_url=URL]
        [--r2_downloader=PATH] [--from_dir=DIR] [--decompress] [--retries=3] [--list]

Writes the layout of the reference's download_and_uncompress.sh: `DIR/bert_config.json`,
`DIR/vocab.txt`, `DIR/tf1_ckpt/model.ckpt-28252.*`, `DIR/tf2_ckpt/model.ckpt-28252.*` and
`DIR/enwiki-20200101-pages-articles-multistream.xml.bz2` (`--decompress` adds the `.xml`);
`--artifacts=results` adds the preprocessed text, `DIR/results/part-XXXXX-of-00500`,
`eval.txt` and `eval.md5`.

Sources (`--source`):
  r2     (default) the MLCommons R2 bucket that the reference README now points to. Each of its
         datasets is described by two metadata files: `<name>.uri`, one line holding the URL of
         the dataset's folder, and `<name>.md5` beside it, an `md5sum` list of every file in
         that folder by relative path. The datasets used here are `bert-input-files` (config,
         vocab, checkpoints, dump) and `bert-preprocessed-wikipedia-dataset` (the `results/`
         text as `results_text.tar.gz`, with `bert_reference_results_text_md5.txt`). When the
         bucket is public the files are fetched here over HTTPS, only those asked for. When it
         asks for a Cloudflare Access login, the official `mlc-r2-downloader.sh`
         (mlcommons/r2-downloader; `--r2_downloader=PATH` or found on PATH) downloads whole
         datasets into `DIR/r2/<name>/`, and the requested files are linked into place from
         there. `--from_dir=FOLDER` does the same from a folder that downloader already filled.
  drive  the Google Drive ids the reference's download_and_uncompress.sh used (the
         confirmation page Drive shows for big files is followed).
  url    only `--url` / `--base_url`.
`--url NAME=URL` sets one artifact's source and `--base_url=BASE` all others' (`BASE/<path>`),
whatever `--source` says; a source may be `http(s)://…`, `file://…` or a local path.

Every file has one overall deadline, all attempts included: 300 s plus 1 s per 128 KiB of it
(`Deadline`); a server that drips bytes or stalls is cut off there. No more bytes are written
than the official size (the bucket's files of unpublished size and its metadata have ceilings):
a source that announces or sends more is stopped at once and nothing is kept. Every failure is
one line naming the file; resuming is advised only when a `.partial` holds bytes.

Bytes go to `<file>.partial`, which a later run resumes (an HTTP Range request); the complete
file is compared with the official md5 in `checksums/` and only then renamed into place. A
`results/` file missing from `checksums/` is checked against the bucket's own list (itself
checked against the bucket's `.md5`). A wrong md5 removes the download and ends with a one-line
error naming the file, the expected and the actual md5.
"""
from __future__ import annotations

import argparse
import bz2
import contextlib
import hashlib
import http.client
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from http.cookiejar import CookieJar
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator, Mapping

import requests
from tqdm import tqdm
from urllib3 import exceptions as urllib3_exceptions

from benchmark.errors import exit_on_user_error
from benchmark.files import md5_file
from cleanup_scripts import checksums
from cleanup_scripts.artifacts import Retryable, shown
from cleanup_scripts.fileio import (InputError, atomic_output, disk_full, ensure_dir,
                                    temporary_name)
from cleanup_scripts.runner import StageSummary, report

CHUNK_SIZE = 1 << 20
TIMEOUT_S = 60  # the most one connect or one read may wait
# Every file's download has an overall deadline: DEADLINE_FLOOR_S plus one second per
# MIN_RATE bytes of the file (2.9 hours for the 1.34 GB TF2 checkpoint, 37.7 hours for the
# 17.75 GB dump). A server that drips bytes or stalls cannot hold a download past it.
DEADLINE_FLOOR_S = 300.0
MIN_RATE = 128 << 10  # bytes per second
USER_AGENT = "mlperf-bert-harness-download/1"

DUMP_BZ2 = "enwiki-20200101-pages-articles-multistream.xml.bz2"
DUMP_XML = DUMP_BZ2.removesuffix(".bz2")

DRIVE_URL = "https://drive.google.com/uc?export=download&id={}"
# The Google Drive file ids that the reference's download_and_uncompress.sh fetches.
DRIVE_IDS = {
    "bert_config.json": "1fbGClQMi2CoMv7fwrwTC5YYPooQBdcFW",
    "vocab.txt": "1USK108J6hMM_d27xCHi738qBL8_BT1u1",
    DUMP_BZ2: "18K1rrNJ_0lSR9bsLaoP3PkQeSFO-9LE7",
    "tf1_ckpt/model.ckpt-28252.data-00000-of-00001": "1chiTBljF0Eh1U5pKs6ureVHgSbtU8OG_",
    "tf1_ckpt/model.ckpt-28252.index": "1Q47V3K3jFRkbJ2zGCrKkKk-n0fvMZsa0",
    "tf1_ckpt/model.ckpt-28252.meta": "1vAcVmXSLsLeQ1q7gvHnQUSth5W_f_pwv",
    "tf2_ckpt/model.ckpt-28252.data-00000-of-00001": "1pJhVkACK3p_7Uc-1pAzRaOXodNeeHZ7F",
    "tf2_ckpt/model.ckpt-28252.index": "1oVBgtSxkXC9rH2SXJv85RXR9-WrMPy-Q",
}


def artifact_groups(known: Mapping[str, checksums.Artifact] | None = None
                    ) -> dict[str, list[str]]:
    """Short names for sets of artifacts (`--artifacts=vocab,tf1_ckpt`); `config,vocab` is the
    default, `all` every input.

    `results` lists the results/ files that `checksums/` knows; from the R2 bucket it means
    every file of the official results/ folder (500 parts, eval.txt, eval.md5).
    """
    known = checksums.known_artifacts() if known is None else known
    groups = {
        "config": ["bert_config.json"],
        "vocab": ["vocab.txt"],
        "tf1_ckpt": [path for path in known if path.startswith("tf1_ckpt/")],
        "tf2_ckpt": [path for path in known if path.startswith("tf2_ckpt/")],
        "dump": [DUMP_BZ2],
        # From R2 (the default source), or --url / --base_url (an unpacked processed-data mirror).
        "results": [path for path, a in known.items() if a.group == "results"],
    }
    groups["all"] = (groups["config"] + groups["vocab"] + groups["tf1_ckpt"]
                     + groups["tf2_ckpt"] + groups["dump"])
    return groups


def resolve_names(names: list[str], known: Mapping[str, checksums.Artifact] | None = None
                  ) -> list[str]:
    """Expand artifact paths and group names into artifact paths (in order, no repeats)."""
    known = checksums.known_artifacts() if known is None else known
    groups = artifact_groups(known)
    paths: list[str] = []
    for name in names:
        members = groups.get(name, [name] if name in known else None)
        if members is None:
            raise InputError(f"{name}: unknown artifact (known: {', '.join(groups)}, "
                             f"or a path such as tf1_ckpt/model.ckpt-28252.index)")
        paths.extend(path for path in members if path not in paths)
    return paths


def source_url(path: str, urls: dict[str, str], base_url: str | None,
               drive: bool = True) -> str:
    """Where to fetch artifact `path`: its --url, else BASE/path, else (`drive`) its Drive id."""
    if path in urls:
        return urls[path]
    if base_url:
        return base_url.rstrip("/") + "/" + path
    if drive and path in DRIVE_IDS:
        return DRIVE_URL.format(DRIVE_IDS[path])
    raise InputError(f"{path}: no default source; give --url {path}=URL or --base_url")


# ----------------------------------------------------------------------------------------------
# The deadline of one download


def _shut(sock: socket.socket) -> None:
    """Shut `sock` both ways, which wakes any thread blocked reading it (a plain `close` from
    another thread does not); a socket already closed is left alone."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Deadline:
    """The overall time limit of one file's download, all its attempts and waits included:
    `floor_s` plus one second per `min_rate` bytes of the file (`total`; while that is
    unknown, of the bytes `received` so far, so the average rate must stay above `min_rate`).

    Used as a context manager, a watchdog thread shuts every socket opened for the download
    (`watch`) once the deadline passes, so no connect, header or body read outlasts it,
    whatever the server does (drips a byte at a time, stalls, never ends).
    """

    def __init__(self, total: int | None = None, floor_s: float | None = None,
                 min_rate: float | None = None) -> None:
        self.floor_s = DEADLINE_FLOOR_S if floor_s is None else floor_s
        self.min_rate = MIN_RATE if min_rate is None else min_rate
        self.total = total
        self.received = 0
        self.started = time.monotonic()
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watchdog, name="download-deadline",
                                        daemon=True)

    def limit_s(self) -> float:
        """Seconds the download may take in all, as far as its size is known now."""
        size = self.total if self.total is not None else self.received
        return self.floor_s + size / self.min_rate

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float:
        return self.limit_s() - self.elapsed_s()

    def passed(self) -> bool:
        return self.expired or self.remaining_s() <= 0

    def describe(self) -> str:
        """How the limit is made, for the error line."""
        rate = (f"{self.min_rate / (1 << 10):g} KiB" if self.min_rate < 1 << 20
                else f"{self.min_rate / (1 << 20):g} MiB")
        return (f"deadline {self.limit_s():.0f} s: {self.floor_s:g} s plus 1 s per {rate} of "
                f"the file")

    def watch(self, sock: socket.socket) -> socket.socket:
        """Register a socket of the download (shut at once when the deadline has passed)."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _watchdog(self) -> None:
        while not self._done.wait(max(self.remaining_s(), 0.0) + 0.01):
            if self.remaining_s() <= 0:
                with self._lock:
                    self.expired = True
                    for sock in self._sockets:
                        _shut(sock)
                return

    def __enter__(self) -> "Deadline":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._done.set()
        self._thread.join()


def _watched(http_class: type, deadline: Deadline) -> type:
    """`http_class` (an http.client connection class) whose sockets `deadline` watches; the
    plain TCP socket is registered before any TLS handshake or request is sent on it."""
    class Watched(http_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            create = self._create_connection
            self._create_connection = lambda *a, **k: deadline.watch(create(*a, **k))
    return Watched


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_watched(http_class, self.deadline), req, **kwargs)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_watched(http_class, self.deadline), req, **kwargs)


def build_opener(deadline: Deadline | None = None) -> urllib.request.OpenerDirector:
    """A urllib opener keeping cookies (Google Drive's confirmation needs them), whose
    connections `deadline` watches when given."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPCookieProcessor(CookieJar())]
    if deadline is not None:
        handlers += [_WatchedHTTPHandler(deadline), _WatchedHTTPSHandler(deadline)]
    return urllib.request.build_opener(*handlers)


def resume_hint(partial: Path) -> str:
    """"; run again to resume from X.partial" when that file holds bytes to resume from; an
    empty one is removed and nothing is advised."""
    try:
        if partial.stat().st_size > 0:
            return f"; run again to resume from {partial.name}"
        partial.unlink()
    except OSError:
        pass
    return ""


# ----------------------------------------------------------------------------------------------
# Opening a source at an offset


class _ConfirmPageParser(HTMLParser):
    """Collects the forms (action, hidden fields) and links of Google Drive's warning page."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.forms.append((values.get("action", ""), {}))
        elif tag == "input" and self.forms and values.get("name"):
            if values.get("type", "text") == "hidden":
                self.forms[-1][1][values["name"]] = values.get("value", "")
        elif tag == "a" and "confirm=" in values.get("href", ""):
            self.links.append(values["href"])


def drive_confirm_url(page: str, page_url: str) -> str | None:
    """The download URL behind Google Drive's "can't scan this file for viruses" page, or None.

    Handles the current form (`<form action=…/download>` with hidden id/confirm/uuid fields)
    and the older link carrying `confirm=TOKEN`.
    """
    parser = _ConfirmPageParser()
    parser.feed(page)
    for action, fields in parser.forms:
        if "id" in fields and ("confirm" in fields or "download" in action):
            target = urllib.parse.urljoin(page_url, action or page_url)
            return target.split("?")[0] + "?" + urllib.parse.urlencode(fields)
    if parser.links:
        return urllib.parse.urljoin(page_url, parser.links[0])
    match = re.search(r"confirm=([0-9A-Za-z_-]+)", page)
    if match:
        parts = urllib.parse.urlsplit(page_url)
        query = urllib.parse.parse_qsl(parts.query) + [("confirm", match.group(1))]
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    return None


def _local_path(url: str) -> str | None:
    """The filesystem path of a `file://` URL or plain path; None for a network URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return urllib.request.url2pathname(parts.path)
    if parts.scheme in ("http", "https"):
        return None
    if parts.scheme and len(parts.scheme) > 1:
        raise InputError(f"{url}: unsupported URL scheme {parts.scheme!r}")
    return url


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """(first byte, total or None) of a `Content-Range: bytes a-b/total` header."""
    match = re.match(r"bytes (\d+)-\d+/(\d+|\*)", value or "")
    if not match:
        return None
    return int(match.group(1)), None if match.group(2) == "*" else int(match.group(2))


def open_source(url: str, offset: int, opener: urllib.request.OpenerDirector | None = None,
                _pages_followed: int = 0, deadline: Deadline | None = None
                ) -> tuple[BinaryIO, int, int | None]:
    """Open `url` for reading from byte `offset`: (stream, first byte it yields, total size).

    The first byte is `offset` when the source honours the request (an HTTP 206, a local
    seek) and 0 when a server ignores the Range header. A total of None means unknown.
    `deadline` watches the connections (see `Deadline`). A redirect loop, or more than
    urllib's 10 redirects, is one InputError line naming the URL.
    """
    local = _local_path(url)
    if local is not None:
        try:
            handle = open(local, "rb")
        except OSError as err:
            raise InputError(f"{local}: cannot read source ({err.strerror})") from err
        size = os.fstat(handle.fileno()).st_size
        start = min(offset, size)
        handle.seek(start)
        return handle, start, size
    opener = opener or build_opener(deadline)
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = opener.open(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # nothing after `offset`: the partial file is complete
            return io.BytesIO(b""), offset, offset
        if 300 <= err.code < 400 and "infinite loop" in str(err.msg):
            target = urllib.parse.urljoin(err.geturl() or url, err.headers.get("Location", ""))
            raise InputError(f"too many redirects from {shown(url)} (the last, HTTP {err.code}, "
                             f"to {shown(target)})") from err
        reason = shown(" ".join(str(err.reason).split()))
        if err.code >= 500 or err.code == 429:
            raise Retryable(f"HTTP {err.code} {reason}") from err
        raise InputError(f"{shown(url)}: HTTP {err.code} {reason}") from err
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        raise Retryable(shown(" ".join(str(getattr(err, "reason", err)).split()))) from err
    if response.headers.get_content_type() == "text/html":
        # None of the artifacts is a web page: this is Drive's confirmation (or error) page.
        page = response.read(4 << 20).decode("utf-8", "replace")
        response.close()
        follow = drive_confirm_url(page, response.geturl())
        if follow is None or _pages_followed >= 2:
            raise InputError(f"{url}: the server sent a web page instead of the file "
                             f"(Google Drive quota exceeded, or the file is not shared?)")
        return open_source(follow, offset, opener, _pages_followed + 1, deadline)
    if response.status == 206:
        content_range = _content_range(response.headers.get("Content-Range"))
        if content_range is None or content_range[0] != offset:
            response.close()
            return open_source(url, 0, opener, _pages_followed, deadline)
        return response, offset, content_range[1]
    length = response.headers.get("Content-Length")
    return response, 0, int(length) if length and length.isdigit() else None


# ----------------------------------------------------------------------------------------------
# Downloading one file


def partial_name(dest: str | os.PathLike) -> Path:
    """The resumable `.partial` file a download of `dest` writes to."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".partial")


class _Oversized(Exception):
    """The source has more bytes than the file may have (its `limit`)."""

    def __init__(self, limit: int, announced: int | None = None) -> None:
        super().__init__(limit)
        self.limit = limit
        self.announced = announced


def _copy_from(url: str, partial: Path, expected_size: int | None, limit: int | None,
               desc: str, deadline: Deadline) -> None:
    """One attempt: append the rest of `url` to `partial` (truncating it if needed).

    At most `limit` bytes are ever written: a source that announces or sends more raises
    _Oversized at once, without writing past the limit.
    """
    offset = partial.stat().st_size if partial.exists() else 0
    if expected_size is not None and offset > expected_size:
        offset = 0
    if expected_size is not None and offset == expected_size:
        return
    stream, start, total = open_source(url, offset, deadline=deadline)
    with stream:
        if total is not None and limit is not None and total > limit:
            raise _Oversized(limit, total)
        total = total if total is not None else expected_size
        if deadline.total is None:
            deadline.total = total
        with open(partial, "ab") as out:
            out.truncate(start)
            written = start
            with tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=desc, leave=False, disable=None) as bar:
                while True:
                    try:
                        chunk = stream.read(CHUNK_SIZE)
                    except (OSError, http.client.HTTPException) as err:
                        raise Retryable(f"interrupted at byte {written}: "
                                        f"{shown(' '.join(str(err).split()))}") from err
                    if not chunk:
                        break
                    if limit is not None and written + len(chunk) > limit:
                        raise _Oversized(limit)
                    out.write(chunk)
                    written += len(chunk)
                    deadline.received += len(chunk)
                    bar.update(len(chunk))
    if deadline.expired:  # the watchdog shut the connection: what came is not the whole file
        raise Retryable(f"stopped at byte {written} by the deadline")
    if total is not None and written < total:
        raise Retryable(f"connection closed at byte {written} of {total}")


def fetch(url: str, dest: str | os.PathLike, expected_md5: str | None = None,
          expected_size: int | None = None, retries: int = 3, retry_wait_s: float = 5.0,
          max_size: int | None = None) -> str:
    """Download `url` to `dest` via `dest.partial`, check it, rename it; return its md5.

    An existing `dest` with the expected md5 is kept as it is. A `.partial` left by an earlier
    run is resumed. Transient failures are retried `retries` times, each resuming, within one
    overall deadline (`Deadline`: DEADLINE_FLOOR_S plus 1 s per MIN_RATE bytes of the file).
    No more than `expected_size` (else `max_size`) bytes are written: a source that announces
    or sends more is stopped at once. A wrong size or md5 removes the download; every failure
    is an InputError naming `dest`, and advises resuming only when a `.partial` holds bytes.
    """
    dest = Path(dest)
    ensure_dir(dest.parent)
    if dest.is_file() and expected_md5 is not None:
        if expected_size is None or dest.stat().st_size == expected_size:
            actual = md5_file(dest)
            if actual == expected_md5:
                return actual
        print(f"{dest}: present but not the official file; downloading it again",
              file=sys.stderr)
    partial = partial_name(dest)
    limit = expected_size if expected_size is not None else max_size
    with Deadline(expected_size) as deadline:
        for attempt in range(retries + 1):
            try:
                _copy_from(url, partial, expected_size, limit, dest.name, deadline)
                break
            except _Oversized as err:
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()
                what = ("the official file has" if expected_size is not None
                        else "the most expected of it is")
                sent = (f"announces {err.announced:,} bytes" if err.announced is not None
                        else "sent more bytes")
                raise InputError(f"{dest}: {shown(url)} {sent}, {what} {limit:,}; stopped, "
                                 f"nothing kept") from err
            except Retryable as err:
                if deadline.passed():
                    have = partial.stat().st_size if partial.exists() else 0
                    of = f" of {deadline.total:,}" if deadline.total is not None else ""
                    raise InputError(
                        f"{dest}: download from {shown(url)} too slow: {have:,}{of} bytes after "
                        f"{deadline.elapsed_s():.1f} s ({deadline.describe()})"
                        f"{resume_hint(partial)}") from err
                if attempt == retries:
                    raise InputError(f"{dest}: download from {shown(url)} failed ({err})"
                                     f"{resume_hint(partial)}") from err
                print(f"{dest.name}: {err}; retrying ({attempt + 1}/{retries})", file=sys.stderr)
                time.sleep(max(0.0, min(retry_wait_s * (attempt + 1), deadline.remaining_s())))
    size = partial.stat().st_size
    if expected_size is not None and size != expected_size:
        partial.unlink()
        raise InputError(f"{dest}: downloaded {size} bytes, the official file has "
                         f"{expected_size}; download removed (source {shown(url)})")
    actual = md5_file(partial)
    if expected_md5 is not None and actual != expected_md5:
        partial.unlink()
        raise InputError(f"{dest}: md5 {actual} is not the official {expected_md5}; "
                         f"download removed (source {shown(url)})")
    os.replace(partial, dest)
    return actual


# ----------------------------------------------------------------------------------------------
# Decompressing the dump


class _CountingReader(io.RawIOBase):
    """A raw binary reader that counts the bytes read from the file under it."""

    def __init__(self, handle: BinaryIO) -> None:
        super().__init__()
        self.handle = handle
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        count = self.handle.readinto(buffer)
        self.count += count or 0
        return count


def decompress_bz2(source: str | os.PathLike, dest: str | os.PathLike,
                   expected_md5: str | None = None) -> str:
    """Stream-decompress a (multi-stream) .bz2 file to `dest`; return the output's md5.

    The output is written beside `dest` and renamed only when complete and, if
    `expected_md5` is given, equal to it. A truncated, empty or non-bzip2 `source` raises a
    one-line InputError and leaves no `dest`.
    """
    source = Path(source)
    try:
        handle = open(source, "rb")
    except OSError as err:
        raise InputError(f"{source}: cannot read ({err.strerror})") from err
    digest = hashlib.md5()
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise InputError(f"{source}: empty file, not bzip2 data")
        counter = _CountingReader(handle)
        reader = bz2.BZ2File(io.BufferedReader(counter, CHUNK_SIZE))
        with atomic_output(dest, "wb") as out, \
                tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                     desc=f"bunzip2 {source.name}", disable=None) as bar:
            while True:
                try:
                    chunk = reader.read(CHUNK_SIZE)
                except EOFError as err:
                    raise InputError(f"{source}: truncated bzip2 data (it ends before the "
                                     f"end-of-stream marker)") from err
                except OSError as err:
                    raise InputError(f"{source}: not valid bzip2 data ({err})") from err
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                bar.update(counter.count - bar.n)
            actual = digest.hexdigest()
            if expected_md5 is not None and actual != expected_md5:
                raise InputError(f"{dest}: md5 {actual} of the decompressed dump is not the "
                                 f"official {expected_md5}")
    return actual


# ----------------------------------------------------------------------------------------------
# The MLCommons R2 bucket

R2_METADATA_URL = "https://training.mlcommons-storage.org/metadata"
R2_INPUTS = "bert-input-files"
R2_PROCESSED = "bert-preprocessed-wikipedia-dataset"
# The folder the official downloader fills when it is given no -d: the last part of the URL
# in the dataset's .uri file.
R2_DEFAULT_FOLDERS = {R2_INPUTS: "input_files", R2_PROCESSED: "processed_dataset"}
# Files the bucket keeps under another name than ours (same bytes, same md5). With the
# bucket's .md5 list at hand the name is found by md5; this table serves folders without one.
R2_OTHER_NAMES = {
    "tf1_ckpt/model.ckpt-28252.data-00000-of-00001":
        ("tf1_ckpt/model.ckpt-28252-003.data-00000-of-00001",),
}
# The processed dataset: the results/ folder packed twice (as results4/, the first is fetched)
# and the md5 of each of its files.
R2_RESULTS_LIST = "bert_reference_results_text_md5.txt"
R2_RESULTS_ARCHIVES = ("results_text.tar.gz", "results_text.zip")
R2_RESULTS_UNPACKED = "results4"  # an archive someone already unpacked in the folder
# The most bytes the bucket's files of unpublished size may have: its metadata (the .uri
# line, the .md5 lists: the processed dataset's lists 502 files in ~40 KB), the results md5
# list, and an archive of results/ (the 502 text files hold ~13.6 GB; gzip or zip of them can
# only be a little larger). A source that sends more is stopped there.
R2_METADATA_MAX_BYTES = 1 << 20
R2_RESULTS_LIST_MAX_BYTES = 1 << 20
R2_RESULTS_ARCHIVE_MAX_BYTES = 16 << 30
R2_DOWNLOADER = "mlc-r2-downloader.sh"
R2_DOWNLOADER_URL = ("https://raw.githubusercontent.com/mlcommons/r2-downloader/refs/heads/main/"
                     + R2_DOWNLOADER)
# OUTPUT_DIR/r2/<dataset>/: bucket files laid out as the official downloader lays them out (its
# own downloads, or the processed dataset's md5 list and archive when fetched here).
R2_STAGING = "r2"


class R2LoginRequired(InputError):
    """The bucket answered a metadata request with a Cloudflare Access login."""


def r2_uri(metadata_url: str, dataset: str) -> str:
    """The URL of dataset `dataset`'s `.uri` metadata file."""
    return f"{metadata_url.rstrip('/')}/{dataset}.uri"


def r2_md5_url(uri: str) -> str:
    """The `.md5` list that goes with a `.uri` file: same folder, same name."""
    return uri.removesuffix(".uri") + ".md5"


def _is_access_login(response: requests.Response) -> bool:
    """Whether a response is Cloudflare Access asking for a login (rather than the file)."""
    location = response.headers.get("Location", "")
    if response.is_redirect:
        return "cloudflareaccess.com" in location or "/cdn-cgi/access/" in location
    if "Cf-Access-Required" in response.headers:
        return True
    if "CF_Authorization" in response.headers.get("WWW-Authenticate", ""):
        return True
    return response.status_code in (401, 403)


def _read_bounded(response: requests.Response, url: str, deadline: Deadline) -> bytes:
    """The body of a streamed response: at most R2_METADATA_MAX_BYTES (InputError beyond), and
    Retryable once `deadline` has passed (each read returns what one socket read brought)."""
    body = bytearray()
    while True:
        if deadline.passed():
            raise Retryable(f"too slow: {len(body):,} bytes after {deadline.elapsed_s():.1f} s "
                            f"({deadline.describe()})")
        try:
            chunk = response.raw.read1(1 << 16, decode_content=True)
        except (requests.RequestException, OSError, http.client.HTTPException,
                urllib3_exceptions.HTTPError) as err:
            raise Retryable(shown(" ".join(str(err).split()))) from err
        if not chunk:
            return bytes(body)
        body += chunk
        deadline.received = len(body)
        if len(body) > R2_METADATA_MAX_BYTES:
            raise InputError(f"{shown(url)}: more than {R2_METADATA_MAX_BYTES:,} bytes, not a "
                             f"metadata file; stopped")


def r2_get_text(url: str, retries: int = 3, retry_wait_s: float = 2.0) -> str:
    """The text of a small metadata file (`http(s)://`, `file://` or a path).

    Raises R2LoginRequired when the bucket wants a Cloudflare Access login, InputError for
    anything else that is not the file (after `retries` retries of transient failures). The
    body is read up to R2_METADATA_MAX_BYTES, within one `Deadline` for all attempts.
    """
    local = _local_path(url)
    if local is not None:
        try:
            return Path(local).read_text(encoding="utf-8")
        except OSError as err:
            raise InputError(f"{local}: cannot read ({err.strerror})") from err
    problem = ""
    deadline = Deadline(R2_METADATA_MAX_BYTES)
    for attempt in range(retries + 1):
        try:
            with requests.get(url, headers={"User-Agent": USER_AGENT}, timeout=TIMEOUT_S,
                              allow_redirects=False, stream=True) as response:
                if _is_access_login(response):
                    raise R2LoginRequired(f"{shown(url)}: the bucket asks for a Cloudflare "
                                          f"Access login")
                if response.is_redirect:
                    raise InputError(f"{shown(url)}: unexpected redirect to "
                                     f"{shown(response.headers['Location'])}")
                if response.status_code == 200:
                    body = _read_bounded(response, url, deadline)
                    text = body.decode(response.encoding or "utf-8", "replace")
                    if (response.headers.get("Content-Type", "").startswith("text/html")
                            and "cloudflareaccess" in text.lower()):
                        raise R2LoginRequired(f"{shown(url)}: the bucket answers with a "
                                              f"Cloudflare Access login page")
                    return text
                problem = f"HTTP {response.status_code} {shown(response.reason)}"
                if response.status_code < 500 and response.status_code != 429:
                    raise InputError(f"{shown(url)}: {problem}")
        except requests.RequestException as err:
            problem = shown(" ".join(str(err).split()))
        except Retryable as err:
            problem = str(err)
        if attempt == retries or deadline.passed():
            raise InputError(f"{shown(url)}: {problem}")
        time.sleep(max(0.0, min(retry_wait_s * (attempt + 1), deadline.remaining_s())))
    raise AssertionError("unreachable")


def parse_uri_file(text: str, uri: str) -> str:
    """The dataset folder's URL that a `.uri` metadata file holds (its one line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1 or not re.match(r"^(https?|file)://\S+$", lines[0]):
        raise InputError(f"{uri}: not a dataset .uri file (one line, the URL of the dataset's "
                         f"folder, was expected)")
    return lines[0].rstrip("/")


def read_listing(path: Path) -> dict[str, str]:
    """A bucket's `.md5` list: {path in the dataset folder: md5}, a leading `./` dropped."""
    return {name.removeprefix("./"): md5
            for name, md5 in checksums.parse_md5_manifest(path).items()}


@dataclass(frozen=True)
class R2Dataset:
    """One dataset of the bucket, as its metadata files describe it."""

    name: str
    uri: str  # the .uri file's URL
    base_url: str  # the dataset folder's URL (the .uri's content)
    listing: dict[str, str]  # {path in the folder: md5} (the .md5 beside the .uri)

    def url(self, path: str) -> str:
        """The URL of file `path` of the dataset."""
        quoted = urllib.parse.quote(path) if self.base_url.startswith("http") else path
        return f"{self.base_url}/{quoted}"


def open_r2_dataset(metadata_url: str, name: str, folder: Path, retries: int) -> R2Dataset:
    """Read dataset `name`'s `.uri` and `.md5`; the list is kept as `folder/<name>.md5`, where
    the official downloader keeps it too."""
    uri = r2_uri(metadata_url, name)
    base_url = parse_uri_file(r2_get_text(uri, retries), uri)
    text = r2_get_text(r2_md5_url(uri), retries)
    listing = ensure_dir(folder) / f"{name}.md5"
    with atomic_output(listing) as out:
        out.write(text)
    return R2Dataset(name, uri, base_url, read_listing(listing))


def bucket_path(artifact: checksums.Artifact, listing: Mapping[str, str], where: str) -> str:
    """The path under which the bucket's list `listing` holds `artifact`: its own path, or
    another with the official md5 (the bucket renamed a file)."""
    listed = listing.get(artifact.path)
    if listed is not None:
        if artifact.md5 is not None and listed != artifact.md5:
            raise InputError(f"{where}: lists md5 {listed} for {artifact.path}, the official md5 "
                             f"is {artifact.md5}")
        return artifact.path
    same = sorted(path for path, md5 in listing.items() if md5 == artifact.md5)
    if not same:
        raise InputError(f"{artifact.path}: not in the bucket's list {where}")
    folder = artifact.path.rpartition("/")[0]
    return next((path for path in same if path.rpartition("/")[0] == folder), same[0])


def _in_place(dest: Path, md5: str | None, size: int | None) -> bool:
    """Whether `dest` already holds the file with md5 `md5` (and `size` bytes, when known)."""
    if md5 is None or not dest.is_file():
        return False
    if size is not None and dest.stat().st_size != size:
        return False
    return md5_file(dest) == md5


def _place(source: Path, dest: Path) -> None:
    """Put the verified file `source` at `dest`: a hard link where the file system allows one,
    else a copy; `dest` appears only complete."""
    ensure_dir(dest.parent)
    tmp = temporary_name(dest)
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except OSError as err:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise disk_full(dest, err) or InputError(
            f"{dest}: cannot place {source} there ({err.strerror})") from err


def _check_found(found: Path, md5: str, size: int | None, label: str, removable: bool,
                 resumable: bool) -> None:
    """Compare a file the official downloader left (or a user's copy) with its md5.

    `removable`: the file is ours to delete when wrong (so the next run downloads it anew
    instead of taking it for complete). `resumable`: the downloader stopped early, so a short
    file is a download to resume, not a wrong one.
    """
    actual_size = found.stat().st_size
    if resumable and size is not None and actual_size < size:
        raise InputError(f"{found}: incomplete ({actual_size} of {size} bytes); run again to "
                         f"resume the download")
    actual = md5_file(found)
    if actual == md5:
        return
    note = "not used"
    if removable and not (resumable and size is None):
        found.unlink()
        note = "removed, run again to download it anew"
    raise InputError(f"{found}: md5 {actual} is not the official {md5} of {label}; {note}")


def find_r2_folder(root: Path, name: str) -> tuple[Path, dict[str, str] | None]:
    """The folder under `root` that the official downloader filled with dataset `name`, and
    the dataset's md5 list found there (None when there is none).

    Looked at: `root` itself (its -d), the downloader's default folder name under `root`, and
    any other folder directly under `root` holding `<name>.md5`.
    """
    if not root.is_dir():
        raise InputError(f"{root}: no such folder")
    default = root / R2_DEFAULT_FOLDERS[name]
    candidates = [root, default] + sorted(p for p in root.iterdir() if p.is_dir())
    for folder in candidates:
        listing = folder / f"{name}.md5"
        if listing.is_file():
            return folder, read_listing(listing)
    return (default if default.is_dir() else root), None


def import_inputs(folder: Path, listing: Mapping[str, str] | None, paths: list[str],
                  known: Mapping[str, checksums.Artifact], output_dir: Path,
                  removable: bool = False, resumable: bool = False) -> list[Path]:
    """Verify the input artifacts `paths` in a folder the official downloader filled and place
    them under `output_dir` (hard links where possible). Returns the placed files."""
    placed = []
    where = str(folder / f"{R2_INPUTS}.md5")
    for path in paths:
        artifact = known[path]
        dest = output_dir / path
        if listing is not None:
            candidates = [bucket_path(artifact, listing, where)]
        else:
            candidates = [path, *R2_OTHER_NAMES.get(path, ())]
        found = next((folder / c for c in candidates if (folder / c).is_file()), None)
        if found is None:
            raise InputError(f"{folder / candidates[0]}: missing ({path} is not in {folder})")
        same = dest.is_file() and os.path.samefile(found, dest)
        if same or not _in_place(dest, artifact.md5, artifact.size):
            _check_found(found, artifact.md5, artifact.size, path, removable, resumable)
            if not same:
                _place(found, dest)
        placed.append(dest)
        print(f"ok  {path}")
    return placed


# The results/ folder


def _flat_name(path: str) -> str | None:
    """The file name of a results/ entry (`part-…`, `./part-…`, `results4/part-…`), or None
    for anything else (deeper paths, `..`, absolute paths)."""
    if path.startswith("/"):
        return None
    parts = [part for part in PurePosixPath(path).parts if part != "."]
    if not parts or len(parts) > 2 or ".." in parts:
        return None
    return parts[-1]


def results_expected(list_path: Path, known: Mapping[str, checksums.Artifact]
                     ) -> dict[str, str]:
    """{file name in results/: md5}: the bucket's list, and the official values of
    `checksums/`, which it must agree with."""
    expected: dict[str, str] = {}
    for path, md5 in checksums.parse_md5_manifest(list_path).items():
        name = _flat_name(path)
        if name is None:
            raise InputError(f"{list_path}: {path!r} is not a file of the results/ folder")
        expected[name] = md5
    for path, artifact in known.items():
        if artifact.group != "results" or artifact.md5 is None:
            continue
        name = path.removeprefix("results/")
        if expected.setdefault(name, artifact.md5) != artifact.md5:
            raise InputError(f"{list_path}: lists md5 {expected[name]} for {path}, the official "
                             f"md5 is {artifact.md5}")
    return expected


def select_results(expected: Mapping[str, str], wanted: list[str] | None,
                   list_path: Path) -> list[str]:
    """The results/ file names asked for (None: all of them), each one the list knows."""
    if wanted is None:
        return sorted(expected)
    for name in wanted:
        if name not in expected:
            raise InputError(f"results/{name}: not in the bucket's list {list_path}")
    return list(wanted)


def _archive_members(source: Path) -> Iterator[tuple[str, BinaryIO]]:
    """(path, stream) of each file in a results archive (.tar.gz, .zip) or unpacked folder."""
    if source.is_dir():
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            with open(path, "rb") as handle:
                yield path.relative_to(source).as_posix(), handle
    elif source.name.endswith(".zip"):
        with zipfile.ZipFile(source) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    with archive.open(info) as handle:
                        yield info.filename, handle
    else:
        with tarfile.open(source, "r|*") as archive:
            for member in archive:
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    yield member.name, handle


def _write_verified(stream: BinaryIO, dest: Path, md5: str, source: Path) -> None:
    """Copy `stream` to `dest` via `dest.partial`; rename it only if its md5 is `md5`."""
    partial = partial_name(dest)
    digest = hashlib.md5()
    try:
        with open(partial, "wb") as out:
            while chunk := stream.read(CHUNK_SIZE):
                digest.update(chunk)
                out.write(chunk)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        full = disk_full(dest, err) if isinstance(err, OSError) else None
        if full is not None:
            raise full from err
        raise
    actual = digest.hexdigest()
    if actual != md5:
        partial.unlink()
        raise InputError(f"{dest}: md5 {actual} is not the official {md5} (unpacked from "
                         f"{source}); not kept")
    os.replace(partial, dest)


def pending_results(results_dir: Path, expected: Mapping[str, str],
                    names: list[str]) -> list[str]:
    """The names among `names` that `results_dir` does not hold verified yet."""
    return [name for name in names if not _in_place(results_dir / name, expected[name], None)]


def unpack_results(source: Path, expected: Mapping[str, str], names: list[str],
                   results_dir: Path) -> None:
    """Write files `names` of results/ from `source` (the archive, or its unpacked folder) into
    `results_dir`, each checked against `expected` before it takes its name."""
    ensure_dir(results_dir)
    todo = set(names)
    try:
        for member, stream in _archive_members(source):
            name = _flat_name(member)
            if name in todo:
                _write_verified(stream, results_dir / name, expected[name], source)
                todo.discard(name)
                if not todo:
                    break
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
        raise InputError(f"{source}: damaged archive ({' '.join(str(err).split())})") from err
    if todo:
        raise InputError(f"{source}: has no results/{min(todo)} ({len(todo)} of the "
                         f"{len(names)} files asked for are missing)")


def import_results(folder: Path, listing: Mapping[str, str] | None,
                   known: Mapping[str, checksums.Artifact], wanted: list[str] | None,
                   results_dir: Path, removable: bool = False, resumable: bool = False
                   ) -> list[Path]:
    """Verify and unpack the results/ files `wanted` (None: all) from a folder the official
    downloader filled with the processed dataset. Returns the files of results/ placed."""
    list_path = folder / R2_RESULTS_LIST
    if not list_path.is_file():
        raise InputError(f"{list_path}: missing (the md5 list of the processed dataset)")
    if listing is not None and R2_RESULTS_LIST in listing:
        _check_found(list_path, listing[R2_RESULTS_LIST], None, R2_RESULTS_LIST, removable,
                     resumable)
    expected = results_expected(list_path, known)
    names = select_results(expected, wanted, list_path)
    pending = pending_results(results_dir, expected, names)
    if pending:
        options = [folder / name for name in R2_RESULTS_ARCHIVES] + [folder / R2_RESULTS_UNPACKED]
        source = next((path for path in options if path.exists()), None)
        if source is None:
            raise InputError(f"{folder}: holds neither {' nor '.join(R2_RESULTS_ARCHIVES)} nor "
                             f"{R2_RESULTS_UNPACKED}/")
        if resumable and listing is not None and source.name in listing:
            # The downloader stopped early: make sure the archive is whole before unpacking.
            _check_found(source, listing[source.name], None, source.name, removable, resumable)
        unpack_results(source, expected, pending, results_dir)
    for name in names:
        print(f"ok  results/{name}")
    return [results_dir / name for name in names]


def r2_fetch_results(dataset: R2Dataset, folder: Path, known: Mapping[str, checksums.Artifact],
                     wanted: list[str] | None, results_dir: Path, retries: int) -> list[Path]:
    """Download the processed dataset's md5 list and, unless results/ is complete already, its
    archive (into `folder`), both checked against the bucket's .md5; unpack what is missing."""
    where = r2_md5_url(dataset.uri)
    if R2_RESULTS_LIST not in dataset.listing:
        raise InputError(f"{where}: does not list {R2_RESULTS_LIST}")
    list_path = folder / R2_RESULTS_LIST
    fetch(dataset.url(R2_RESULTS_LIST), list_path, dataset.listing[R2_RESULTS_LIST],
          retries=retries, max_size=R2_RESULTS_LIST_MAX_BYTES)
    expected = results_expected(list_path, known)
    names = select_results(expected, wanted, list_path)
    pending = pending_results(results_dir, expected, names)
    if pending:
        archive = next((name for name in R2_RESULTS_ARCHIVES if name in dataset.listing), None)
        if archive is None:
            raise InputError(f"{where}: lists none of {', '.join(R2_RESULTS_ARCHIVES)}")
        fetch(dataset.url(archive), folder / archive, dataset.listing[archive], retries=retries,
              max_size=R2_RESULTS_ARCHIVE_MAX_BYTES)
        unpack_results(folder / archive, expected, pending, results_dir)
    for name in names:
        print(f"ok  results/{name}")
    return [results_dir / name for name in names]


def find_r2_downloader(given: str | None, why: str = "") -> Path:
    """The official `mlc-r2-downloader.sh`: `given`, else the one on PATH.

    InputError (one line, with the command that gets it) when there is none.
    """
    get_it = (f"get it with `curl -fsSLO {R2_DOWNLOADER_URL}` and pass "
              f"--r2_downloader=./{R2_DOWNLOADER}")
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise InputError(f"{given}: no such file (the official R2 downloader); {get_it}")
        return path
    found = shutil.which(R2_DOWNLOADER)
    if found:
        return Path(found)
    raise InputError(f"{why + '; ' if why else ''}the official {R2_DOWNLOADER} is needed and is "
                     f"not on PATH: {get_it}")


def run_r2_downloader(script: Path, uri: str, folder: Path) -> int:
    """Run the official downloader for one dataset into `folder` (its -d); its exit status.

    It logs in (a browser, or the service token in CF_ACCESS_CLIENT_ID/CF_ACCESS_CLIENT_SECRET,
    its -s), resumes what an earlier run left, and checks the bucket's md5s itself.
    """
    command = ["bash", str(script)]
    if os.environ.get("CF_ACCESS_CLIENT_ID") and os.environ.get("CF_ACCESS_CLIENT_SECRET"):
        command.append("-s")
    command += ["-d", str(ensure_dir(folder)), uri]
    print("running " + " ".join(command), file=sys.stderr, flush=True)
    try:
        return subprocess.run(command, check=False).returncode
    except OSError as err:
        raise InputError(f"{script}: cannot run it with bash ({err.strerror})") from err


@dataclass
class R2Request:
    """What is asked of the bucket: input artifacts, and results/ files (None: all of them)."""

    inputs: list[str]
    results: list[str] | None  # None: the whole folder
    any_results: bool

    def datasets(self) -> list[str]:
        return ([R2_INPUTS] if self.inputs else []) + ([R2_PROCESSED] if self.any_results else [])


def r2_request(paths: list[str], names: list[str], known: Mapping[str, checksums.Artifact]
               ) -> R2Request:
    """Sort the artifacts left to the bucket into its two datasets."""
    inputs, results = [], []
    for path in paths:
        if path.startswith("results/"):
            results.append(path.removeprefix("results/"))
        elif known[path].group == "inputs" and path != DUMP_XML:
            inputs.append(path)
        else:
            hint = " (it has the .bz2: add --decompress)" if path == DUMP_XML else ""
            raise InputError(f"{path}: not in the R2 bucket{hint}; give --url {path}=URL or "
                             f"--base_url")
    whole = "results" in names
    return R2Request(inputs, None if whole else results, whole or bool(results))


def r2_download(request: R2Request, known: Mapping[str, checksums.Artifact], output_dir: Path,
                metadata_url: str, downloader: str | None, from_dir: str | None,
                retries: int) -> list[Path]:
    """Get the requested artifacts from the bucket into `output_dir`; returns the files placed.

    From `from_dir` when given (a folder the official downloader filled); else over HTTPS here
    while the bucket needs no login; else through the official downloader (`downloader`, or
    the one on PATH), whose folders are `output_dir/r2/<dataset>/`.
    """
    results_dir = output_dir / "results"
    if from_dir:
        placed = []
        for name in request.datasets():
            folder, listing = find_r2_folder(Path(from_dir).expanduser(), name)
            if name == R2_INPUTS:
                placed += import_inputs(folder, listing, request.inputs, known, output_dir)
            else:
                placed += import_results(folder, listing, known, request.results, results_dir)
        return placed
    staging = {name: output_dir / R2_STAGING / name for name in request.datasets()}
    script = find_r2_downloader(downloader) if downloader else None
    if script is None:
        try:
            opened = {name: open_r2_dataset(metadata_url, name, staging[name], retries)
                      for name in request.datasets()}
        except R2LoginRequired as err:
            script = find_r2_downloader(None, why=str(err))
        else:
            placed = []
            if request.inputs:
                dataset = opened[R2_INPUTS]
                where = r2_md5_url(dataset.uri)
                for path in request.inputs:
                    artifact = known[path]
                    remote = bucket_path(artifact, dataset.listing, where)
                    fetch(dataset.url(remote), output_dir / path, artifact.md5, artifact.size,
                          retries=retries)
                    placed.append(output_dir / path)
                    print(f"ok  {path}")
            if request.any_results:
                placed += r2_fetch_results(opened[R2_PROCESSED], staging[R2_PROCESSED], known,
                                           request.results, results_dir, retries)
            return placed
    placed = []
    for name in request.datasets():
        if name == R2_INPUTS and all(_in_place(output_dir / path, known[path].md5,
                                               known[path].size) for path in request.inputs):
            for path in request.inputs:
                print(f"ok  {path}")
            placed += [output_dir / path for path in request.inputs]
            continue
        status = run_r2_downloader(script, r2_uri(metadata_url, name), staging[name])
        folder, listing = find_r2_folder(staging[name], name)
        try:
            if name == R2_INPUTS:
                placed += import_inputs(folder, listing, request.inputs, known, output_dir,
                                        removable=True, resumable=status != 0)
            else:
                placed += import_results(folder, listing, known, request.results, results_dir,
                                         removable=True, resumable=status != 0)
        except InputError as err:
            if status == 0:
                raise
            raise InputError(f"{err} (the official downloader exited with status {status})"
                             ) from err
        if status != 0:
            print(f"{script.name} exited with status {status}, but every file asked for is "
                  f"verified", file=sys.stderr)
    return placed


# ----------------------------------------------------------------------------------------------
# CLI


def _parse_urls(pairs: list[str], known: Mapping[str, checksums.Artifact] | None = None
                ) -> dict[str, str]:
    urls: dict[str, str] = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not url:
            raise InputError(f"--url {pair}: expected NAME=URL")
        paths = resolve_names([name], known)
        if len(paths) != 1:
            raise InputError(f"--url {pair}: {name} names {len(paths)} files; give one path")
        urls[paths[0]] = url
    return urls


DEFAULT_ARTIFACTS = "config,vocab"


def _size(size: int | None) -> str:
    """A byte count for people: 231.5 kB, 1.3 GB; "size unknown" for None."""
    if size is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} B"


def _group_sizes(known: Mapping[str, checksums.Artifact] | None = None) -> str:
    """Each artifact group with its download size: "config (<1 kB), vocab (231.5 kB), ..."."""
    known = checksums.known_artifacts() if known is None else known
    parts = []
    for group, paths in artifact_groups(known).items():
        if group == "results":
            parts.append("results (the official results/ folder: 500 parts and the eval set, "
                         "size not published)")
            continue
        sizes = [known[p].size for p in paths if p in known and not p.startswith("results/")]
        total = sum(s for s in sizes if s) if sizes and None not in sizes else None
        parts.append(f"{group} ({_size(total)})")
    return ", ".join(parts)


def _plan(paths: list[str], results: bool, known: Mapping[str, checksums.Artifact]) -> str:
    """The line printed before a download starts: how many files and how many bytes."""
    listed = [p for p in paths if not (results and p.startswith("results/"))]
    sizes = [known[p].size for p in listed if p in known]
    total = sum(s for s in sizes if s)
    unknown = sum(1 for s in sizes if s is None)
    more = (f" (+ {unknown} of unpublished size)" if unknown else "") + (
        " and the results/ folder (size not published)" if results else "")
    return f"downloading {len(listed)} file(s), {_size(total)}{more}"


def main(argv: list[str] | None = None) -> None:
    """CLI: download, verify and place the selected official artifacts."""
    parser = argparse.ArgumentParser(
        prog="python -m cleanup_scripts.download",
        description="Download the MLPerf BERT inputs and verify their official md5s.")
    parser.add_argument("--output_dir", required=True, help="Where the files are placed.")
    parser.add_argument("--artifacts", default=DEFAULT_ARTIFACTS,
                        help="Comma-separated paths or groups: " + _group_sizes()
                        + f" (default: {DEFAULT_ARTIFACTS}, as make download; all = config, "
                        "vocab, both checkpoints and the dump).")
    parser.add_argument("--source", choices=("r2", "drive", "url"), default="r2",
                        help="Where artifacts without --url/--base_url come from: the MLCommons "
                        "R2 bucket (default), the reference's Google Drive ids, or nowhere "
                        "(url: every artifact needs --url or --base_url).")
    parser.add_argument("--url", action="append", default=[], metavar="NAME=URL",
                        help="Source of one artifact (http(s)://, file:// or a path); repeatable.")
    parser.add_argument("--base_url", default=None,
                        help="Fetch every artifact without --url from BASE_URL/<its path>.")
    parser.add_argument("--r2_downloader", default=None, metavar="PATH",
                        help="The official mlc-r2-downloader.sh (mlcommons/r2-downloader): "
                        "download through it (needed when the bucket asks for a login; found "
                        "on PATH then if this is not given).")
    parser.add_argument("--from_dir", default=None, metavar="DIR",
                        help="Take the R2 files from a folder mlc-r2-downloader.sh filled "
                        "(its -d, or the folder holding its input_files/ and "
                        "processed_dataset/) instead of downloading them.")
    parser.add_argument("--r2_metadata", default=R2_METADATA_URL, metavar="URL",
                        help="Where the bucket's <dataset>.uri/.md5 metadata files are "
                        "(default: %(default)s).")
    parser.add_argument("--checksums_dir", default=None, metavar="DIR",
                        help="md5 tables to verify against, in the format of checksums/ "
                        "(default: the official ones in checksums/).")
    parser.add_argument("--decompress", action="store_true",
                        help="Also write the dump's .xml (streamed, md5-verified).")
    parser.add_argument("--retries", type=int, default=3,
                        help="Retries per file after a transient failure (each resumes).")
    parser.add_argument("--list", action="store_true",
                        help="Print each selected artifact and its source, then exit.")
    args = parser.parse_args(argv)
    started = time.time()
    known = (checksums.known_artifacts(Path(args.checksums_dir)) if args.checksums_dir
             else checksums.known_artifacts())
    names = [name for name in args.artifacts.split(",") if name]
    paths = resolve_names(names, known)
    urls = _parse_urls(args.url, known)
    if args.source != "r2" and (args.from_dir or args.r2_downloader):
        raise InputError(f"--from_dir and --r2_downloader are for the R2 bucket; they do not go "
                         f"with --source={args.source}")
    # The bucket provides what has no --url and no --base_url.
    from_r2 = [path for path in paths
               if args.source == "r2" and path not in urls and not args.base_url]
    sources = {path: source_url(path, urls, args.base_url, drive=args.source == "drive")
               for path in paths if path not in from_r2}
    request = r2_request(from_r2, names, known)
    if args.list:
        for path in sources:
            print(f"{path}\t{sources[path]}")
        origin = {name: args.from_dir or r2_uri(args.r2_metadata, name)
                  for name in (R2_INPUTS, R2_PROCESSED)}
        for path in request.inputs:
            print(f"{path}\t{origin[R2_INPUTS]}")
        if request.any_results:
            for name in (["*"] if request.results is None else request.results):
                print(f"results/{name}\t{origin[R2_PROCESSED]}")
        return
    print(_plan(paths, request.any_results, known), flush=True)
    output_dir = ensure_dir(args.output_dir)
    placed: list[Path] = []
    for path, url in sources.items():
        artifact = known[path]
        dest = output_dir / path
        fetch(url, dest, artifact.md5, artifact.size, retries=args.retries)
        placed.append(dest)
        print(f"ok  {path}")
    if request.inputs or request.any_results:
        placed += r2_download(request, known, output_dir, args.r2_metadata, args.r2_downloader,
                              args.from_dir, args.retries)
    total = sum(path.stat().st_size for path in placed)
    count = len(placed)
    if args.decompress and DUMP_BZ2 in paths:
        xml = known[DUMP_XML]
        dest = output_dir / DUMP_XML
        if not (dest.is_file() and dest.stat().st_size == xml.size and md5_file(dest) == xml.md5):
            decompress_bz2(output_dir / DUMP_BZ2, dest, xml.md5)
        print(f"ok  {DUMP_XML}")
        count += 1
    report(StageSummary("download", count, count, total, started))


if __name__ == "__main__":
    exit_on_user_error(main)
