"""Fetch the benchmark's official inputs, resumably, and verify each md5 before use.

    python -m cleanup_scripts.download --output_dir=DIR [--artifacts=config,vocab]
        [--source=r2|url] [--url NAME=URL ...] [--base_url=URL]
        [--r2_downloader=PATH] [--from_dir=DIR] [--decompress] [--retries=3] [--list]

Writes the reference's layout: `DIR/bert_config.json`, `DIR/vocab.txt`, `DIR/tf1_ckpt/…`,
`DIR/tf2_ckpt/…`, the dump (`--decompress` adds its `.xml`) and, for `results`,
`DIR/results/`. Sources: the MLCommons R2 bucket (`r2`, the default: `r2_download`), which
holds every file the reference's old Google Drive ids did; `--url NAME=URL` and `--base_url`
(`http(s)://`, `file://` or a path) override it per file.

HTTP is one `requests.Session` per file (`http_session`): urllib3 retries connection failures
and HTTP 429/5xx with backoff, and a transfer cut short resumes `<file>.partial` with a Range
request. Every file has one overall `Deadline`, and no more bytes are written than its official
size (or a ceiling). A file takes its name only once its md5 is the official one; every
failure is one line naming the file.
"""
from __future__ import annotations

import argparse
import bz2
import contextlib
import hashlib
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator, Mapping

import requests
from requests.adapters import HTTPAdapter
from tqdm import tqdm
from urllib3 import exceptions as urllib3_exceptions
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.retry import Retry

from benchmark.errors import exit_on_user_error
from benchmark.files import md5_file
from cleanup_scripts import checksums
from cleanup_scripts.artifacts import (Retryable, partial_name, place, problem, resume_hint,
                                       shown, verified)
from cleanup_scripts.fileio import InputError, atomic_output, disk_full, ensure_dir
from cleanup_scripts.runner import StageSummary, report

CHUNK_SIZE = 1 << 20
TIMEOUT_S = 60  # the most one connect or one read may wait
# Every file's download has an overall deadline: DEADLINE_FLOOR_S plus one second per
# MIN_RATE bytes of the file (2.9 hours for the 1.34 GB TF2 checkpoint, 37.7 hours for the
# 17.75 GB dump). A server that drips bytes or stalls cannot hold a download past it.
DEADLINE_FLOOR_S = 300.0
MIN_RATE = 128 << 10  # bytes per second
USER_AGENT = "mlperf-bert-harness-download/1"
RETRY_STATUSES = (429, 500, 502, 503, 504)
MAX_REDIRECTS = 10

DUMP_BZ2 = "enwiki-20200101-pages-articles-multistream.xml.bz2"
DUMP_XML = DUMP_BZ2.removesuffix(".bz2")


def artifact_groups(known: Mapping[str, checksums.Artifact] | None = None
                    ) -> dict[str, list[str]]:
    """Short names for sets of artifacts (`--artifacts=vocab,tf1_ckpt`); `all` is every input,
    `results` the results/ files `checksums/` knows (from R2: the whole official folder)."""
    known = checksums.known_artifacts() if known is None else known
    groups = {
        "config": ["bert_config.json"],
        "vocab": ["vocab.txt"],
        "tf1_ckpt": [path for path in known if path.startswith("tf1_ckpt/")],
        "tf2_ckpt": [path for path in known if path.startswith("tf2_ckpt/")],
        "dump": [DUMP_BZ2],
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


def source_url(path: str, urls: dict[str, str], base_url: str | None) -> str:
    """Where to fetch artifact `path` other than the bucket: its --url, else BASE/path."""
    if path in urls:
        return urls[path]
    if base_url:
        return base_url.rstrip("/") + "/" + path
    raise InputError(f"{path}: no default source; give --url {path}=URL or --base_url")


# ----------------------------------------------------------------------------------------------
# HTTP: one session per file, bounded by its deadline


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


class _DeadlineAdapter(HTTPAdapter):
    """An HTTPAdapter whose connection pools hand every new socket to `deadline.watch` (the
    plain TCP socket, before any TLS handshake or request is sent on it)."""

    def __init__(self, deadline: Deadline, **kwargs) -> None:
        self.deadline = deadline
        super().__init__(**kwargs)

    def _watched(self, manager):
        def pool(base: type) -> type:
            deadline = self.deadline

            class Connection(base.ConnectionCls):  # type: ignore[misc, name-defined]
                def _new_conn(self):
                    return deadline.watch(super()._new_conn())
            return type(base.__name__, (base,), {"ConnectionCls": Connection})
        manager.pool_classes_by_scheme = {"http": pool(HTTPConnectionPool),
                                          "https": pool(HTTPSConnectionPool)}
        return manager

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self._watched(self.poolmanager)

    def proxy_manager_for(self, proxy, **kwargs):
        return self._watched(super().proxy_manager_for(proxy, **kwargs))


def http_session(deadline: Deadline, retries: int = 3, backoff_s: float = 1.0
                 ) -> requests.Session:
    """The session every HTTP request of one file goes through: urllib3 retries connection
    failures and HTTP 429/5xx `retries` times (waits 0, 2, 4 ... × `backoff_s`, never past
    `deadline`, whose watchdog watches every socket), and at most MAX_REDIRECTS redirects."""
    class DeadlineRetry(Retry):
        def is_exhausted(self) -> bool:
            return super().is_exhausted() or deadline.passed()

        def get_backoff_time(self) -> float:
            return max(0.0, min(super().get_backoff_time(), deadline.remaining_s()))

    retry = DeadlineRetry(total=retries, backoff_factor=backoff_s, allowed_methods={"GET"},
                          status_forcelist=RETRY_STATUSES, raise_on_status=False,
                          respect_retry_after_header=False, redirect=False)
    session = requests.Session()
    session.max_redirects = MAX_REDIRECTS
    session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    adapter = _DeadlineAdapter(deadline, max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


_READ_ERRORS = (requests.RequestException, urllib3_exceptions.HTTPError, OSError,
                http.client.HTTPException)


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


@contextlib.contextmanager
def open_source(url: str, offset: int, session: requests.Session
                ) -> Iterator[tuple[Iterator[bytes], int, int | None]]:
    """Open `url` from byte `offset`: (chunks, first byte they hold, total size or None).

    The first byte is `offset` when the source honours the request (an HTTP 206, a local seek)
    and 0 when a server ignores the Range header. Retryable for what a retry may cure (after
    the session's own retries), InputError for the rest; a redirect loop is one line.
    """
    local = _local_path(url)
    if local is not None:
        try:
            handle = open(local, "rb")
        except OSError as err:
            raise InputError(f"{local}: cannot read source ({err.strerror})") from err
        with handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(min(offset, size))
            yield iter(lambda: handle.read(CHUNK_SIZE), b""), min(offset, size), size
        return
    try:
        response = session.get(url, headers={"Range": f"bytes={offset}-"} if offset else {},
                               stream=True, timeout=TIMEOUT_S)
    except requests.TooManyRedirects as err:
        last = err.response
        target = urllib.parse.urljoin(last.url, last.headers.get("Location", ""))
        raise InputError(f"too many redirects from {shown(url)} (the last, HTTP "
                         f"{last.status_code}, to {shown(target)})") from err
    except requests.RequestException as err:
        raise Retryable(problem(err)) from err
    with response:
        status = response.status_code
        if status == 416 and offset:  # nothing after `offset`: the partial file is complete
            yield iter(()), offset, offset
            return
        if status not in (200, 206):
            words = f"HTTP {status} {shown(' '.join(str(response.reason).split()))}"
            if status in RETRY_STATUSES:
                raise Retryable(words)
            raise InputError(f"{shown(url)}: {words}")
        length = response.headers.get("Content-Length", "")
        start = offset if status == 206 else 0
        if status == 206 and not response.headers.get("Content-Range", "").startswith(
                f"bytes {offset}-"):
            raise Retryable(f"asked for bytes from {offset}, the server sent others")
        # read1: each chunk is what one socket read brought, so a cut keeps the bytes before it
        chunks = iter(lambda: response.raw.read1(CHUNK_SIZE, decode_content=True), b"")
        yield chunks, start, start + int(length) if length.isdigit() else None


class _Oversized(Exception):
    """The source has more bytes than the file may have (its `limit`)."""

    def __init__(self, limit: int, announced: int | None = None) -> None:
        super().__init__(limit)
        self.limit, self.announced = limit, announced


def _copy_from(url: str, session: requests.Session, partial: Path, expected_size: int | None,
               limit: int | None, desc: str, deadline: Deadline) -> None:
    """One attempt: append the rest of `url` to `partial` (truncating it if needed). At most
    `limit` bytes are ever written: a source that announces or sends more raises _Oversized
    at once."""
    offset = partial.stat().st_size if partial.exists() else 0
    if expected_size is not None and offset > expected_size:
        offset = 0
    if expected_size is not None and offset == expected_size:
        return
    with open_source(url, offset, session) as (chunks, start, total):
        if total is not None and limit is not None and total > limit:
            raise _Oversized(limit, total)
        total = total if total is not None else expected_size
        if deadline.total is None:
            deadline.total = total
        with open(partial, "ab") as out, tqdm(
                total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                desc=desc, leave=False, disable=None) as bar:
            out.truncate(start)
            written = start
            while True:
                try:
                    chunk = next(chunks, b"")
                except _READ_ERRORS as err:  # not the writes: a full disk is no network fault
                    raise Retryable(f"interrupted at byte {written}: {problem(err)}") from err
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

    An existing `dest` with the expected md5 is kept. A `.partial` left by an earlier run is
    resumed, and so is a transfer cut short (`retries` times), all within one `Deadline`. No
    more than `expected_size` (else `max_size`) bytes are written. A wrong size or md5 removes
    the download; every failure is an InputError naming `dest`.
    """
    dest = Path(dest)
    ensure_dir(dest.parent)
    if expected_md5 is not None and dest.is_file():
        if verified(dest, expected_md5, expected_size):
            return expected_md5
        print(f"{dest}: present but not the official file; downloading it again",
              file=sys.stderr)
    partial = partial_name(dest)
    limit = expected_size if expected_size is not None else max_size
    with Deadline(expected_size) as deadline, \
            http_session(deadline, retries, retry_wait_s) as session:
        for attempt in range(retries + 1):
            try:
                _copy_from(url, session, partial, expected_size, limit, dest.name, deadline)
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


def decompress_bz2(source: str | os.PathLike, dest: str | os.PathLike,
                   expected_md5: str | None = None) -> str:
    """Stream-decompress a (multi-stream) .bz2 file to `dest`; return the output's md5.

    `dest` takes its name only complete and, if `expected_md5` is given, equal to it. A
    truncated, empty or non-bzip2 `source` is a one-line InputError and leaves no `dest`.
    """
    source = Path(source)
    try:
        size = source.stat().st_size
        handle = open(source, "rb")
    except OSError as err:
        raise InputError(f"{source}: cannot read ({err.strerror})") from err
    if size == 0:
        handle.close()
        raise InputError(f"{source}: empty file, not bzip2 data")
    digest = hashlib.md5()
    with tqdm.wrapattr(handle, "read", total=size, desc=f"bunzip2 {source.name}", leave=False,
                       disable=None) as counted, bz2.BZ2File(counted) as reader, \
            atomic_output(dest, "wb") as out:
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


def r2_get_text(url: str, retries: int = 3, retry_wait_s: float = 2.0) -> str:
    """The text of a small metadata file (`http(s)://`, `file://` or a path), read up to
    R2_METADATA_MAX_BYTES within one `Deadline`. R2LoginRequired when the bucket wants a
    Cloudflare Access login, InputError for anything else that is not the file."""
    local = _local_path(url)
    if local is not None:
        try:
            return Path(local).read_text(encoding="utf-8")
        except OSError as err:
            raise InputError(f"{local}: cannot read ({err.strerror})") from err
    with Deadline(R2_METADATA_MAX_BYTES) as deadline, \
            http_session(deadline, retries, retry_wait_s) as session:
        try:
            response = session.get(url, allow_redirects=False, stream=True, timeout=TIMEOUT_S)
        except requests.RequestException as err:
            raise InputError(f"{shown(url)}: {problem(err)}") from err
        with response:
            if _is_access_login(response):
                raise R2LoginRequired(f"{shown(url)}: the bucket asks for a Cloudflare Access "
                                      f"login")
            if response.is_redirect:
                raise InputError(f"{shown(url)}: unexpected redirect to "
                                 f"{shown(response.headers['Location'])}")
            if response.status_code != 200:
                raise InputError(f"{shown(url)}: HTTP {response.status_code} "
                                 f"{shown(response.reason)}")
            body = bytearray()
            try:
                for chunk in iter(lambda: response.raw.read1(1 << 16, decode_content=True), b""):
                    body += chunk
                    if len(body) > R2_METADATA_MAX_BYTES:
                        raise InputError(f"{shown(url)}: more than {R2_METADATA_MAX_BYTES:,} "
                                         f"bytes, not a metadata file; stopped")
            except _READ_ERRORS as err:
                slow = f"too slow ({deadline.describe()}): " if deadline.passed() else ""
                raise InputError(f"{shown(url)}: {slow}{problem(err)}") from err
            text = body.decode(response.encoding or "utf-8", "replace")
    if (response.headers.get("Content-Type", "").startswith("text/html")
            and "cloudflareaccess" in text.lower()):
        raise R2LoginRequired(f"{shown(url)}: the bucket answers with a Cloudflare Access "
                              f"login page")
    return text


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
        if same or not verified(dest, artifact.md5, artifact.size):
            _check_found(found, artifact.md5, artifact.size, path, removable, resumable)
            if not same:
                place(found, dest)
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
    return [name for name in names if not verified(results_dir / name, expected[name], None)]


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
    """Download the processed dataset's md5 list and, unless results/ holds every file asked
    for already, its archive into `folder` (each checked against the bucket's .md5), then
    unpack what is missing (`import_results`)."""
    where = r2_md5_url(dataset.uri)
    if R2_RESULTS_LIST not in dataset.listing:
        raise InputError(f"{where}: does not list {R2_RESULTS_LIST}")
    list_path = folder / R2_RESULTS_LIST
    fetch(dataset.url(R2_RESULTS_LIST), list_path, dataset.listing[R2_RESULTS_LIST],
          retries=retries, max_size=R2_RESULTS_LIST_MAX_BYTES)
    expected = results_expected(list_path, known)
    if pending_results(results_dir, expected, select_results(expected, wanted, list_path)):
        archive = next((name for name in R2_RESULTS_ARCHIVES if name in dataset.listing), None)
        if archive is None:
            raise InputError(f"{where}: lists none of {', '.join(R2_RESULTS_ARCHIVES)}")
        fetch(dataset.url(archive), folder / archive, dataset.listing[archive], retries=retries,
              max_size=R2_RESULTS_ARCHIVE_MAX_BYTES)
    return import_results(folder, None, known, wanted, results_dir)


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

    def import_from(root: Path, name: str, **flags) -> list[Path]:
        folder, listing = find_r2_folder(root, name)
        if name == R2_INPUTS:
            return import_inputs(folder, listing, request.inputs, known, output_dir, **flags)
        return import_results(folder, listing, known, request.results, results_dir, **flags)

    if from_dir:
        return [path for name in request.datasets()
                for path in import_from(Path(from_dir).expanduser(), name)]
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
        if name == R2_INPUTS and all(verified(output_dir / path, known[path].md5,
                                               known[path].size) for path in request.inputs):
            for path in request.inputs:
                print(f"ok  {path}")
            placed += [output_dir / path for path in request.inputs]
            continue
        status = run_r2_downloader(script, r2_uri(metadata_url, name), staging[name])
        try:
            placed += import_from(staging[name], name, removable=True, resumable=status != 0)
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
        sizes = [known[p].size for p in paths if p in known]
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
    parser.add_argument("--source", choices=("r2", "url"), default="r2",
                        help="Where artifacts without --url/--base_url come from: the MLCommons "
                        "R2 bucket (default; it holds every file of the reference's old Google "
                        "Drive ids), or nowhere (url: every artifact needs --url or --base_url).")
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
    sources = {path: source_url(path, urls, args.base_url)
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
        if not verified(dest, xml.md5, xml.size):
            decompress_bz2(output_dir / DUMP_BZ2, dest, xml.md5)
        print(f"ok  {DUMP_XML}")
        count += 1
    report(StageSummary("download", count, count, total, started))


if __name__ == "__main__":
    exit_on_user_error(main)
