"""One file from `http(s)://`, `file://` or a path into place: `fetch`.

The file is written as `<file>.partial`, each chunk flushed as it comes, so every byte received
is kept however the process ends (kill -9 included) and a later run resumes it with a Range
request; one `Deadline` bounds all of a file's attempts and waits, and cuts a transfer slower
than a floor of bytes per second; no more bytes are written than its official size (or a
ceiling). It takes its name only with its official md5; every failure is one InputError
naming it.
"""
from __future__ import annotations

import contextlib
import http.client
import os
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import BinaryIO, Iterator

import requests
from requests.adapters import HTTPAdapter
from tqdm import tqdm
from urllib3 import exceptions as urllib3_exceptions

from benchmark.adapters.urllib3 import watched_pool_classes
from benchmark.errors import printable
from benchmark.files import InputError, ensure_dir, md5_file, open_regular, resolve_inside
from cleanup_scripts.artifacts import (partial_name, problem, resume_hint, unknown_host, verified,
                                       write_failed)

CHUNK_SIZE = 1 << 20
TIMEOUT_S = 60  # the most one connect or one read may wait
# A file's deadline: DEADLINE_FLOOR_S plus one second per MIN_RATE bytes of it (2.9 hours for
# the 1.34 GB TF2 checkpoint, 37.7 hours for the 17.75 GB dump).
DEADLINE_FLOOR_S = 300.0
MIN_RATE = 128 << 10  # bytes per second
# While a request is under way (headers and body), fewer than RATE_FLOOR bytes per second over
# RATE_WINDOW_S seconds cut it for good: a server dripping 1 byte/s holds the dump's download
# for about a minute, not for its 37-hour deadline. (The dump at 16 KiB/s: 13 days.)
RATE_FLOOR = 16 << 10  # bytes per second
RATE_WINDOW_S = 60.0
USER_AGENT = "mlperf-bert-harness-download/1"
RETRY_STATUSES = (429, 500, 502, 503, 504)
MAX_REDIRECTS = 10
_READ_ERRORS = (requests.RequestException, urllib3_exceptions.HTTPError, OSError,
                http.client.HTTPException)


class Retryable(Exception):
    """A failure of one request (connection error, HTTP 5xx or 429, a transfer cut short): the
    caller waits and tries again, resuming where it stopped, unless it is `final` (an unknown
    host: the same answer again)."""

    def __init__(self, message: str, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


class LoginRequired(InputError):
    """The source wants credentials: HTTP 401 or 403, or a redirect to a Cloudflare Access
    login, instead of the file."""


def _shut(sock: socket.socket) -> None:
    """Shut `sock` both ways, which wakes a thread blocked reading it (`close` does not)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Deadline:
    """One file's time limit, every attempt and wait included: DEADLINE_FLOOR_S plus one second
    per MIN_RATE bytes of the file (`total`; while that is unknown, of the bytes `received`);
    and a floor on its rate: while a request is under way (`requesting`), fewer than RATE_FLOOR
    bytes per second over a RATE_WINDOW_S window end it too (`drip` is then that rate).

    As a context manager, a watchdog thread shuts every socket given to `watch` once the limit
    passes or the rate falls below the floor, so no connect, header or body read outlasts it,
    however a server drips or stalls.
    """

    def __init__(self, total: int | None = None) -> None:
        self.floor_s, self.min_rate = DEADLINE_FLOOR_S, MIN_RATE
        self.rate_floor, self.window_s = RATE_FLOOR, RATE_WINDOW_S
        self.total, self.received = total, 0
        self.started = time.monotonic()
        self.expired = False
        self.drip: float | None = None  # bytes per second, when the rate floor cut it
        self._window: tuple[float, int] | None = None  # (start, bytes then) while requesting
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watchdog, name="download-deadline",
                                        daemon=True)

    def limit_s(self) -> float:
        """Seconds the download may take in all, as far as its size is known now."""
        return self.floor_s + (self.total or self.received) / self.min_rate

    def remaining_s(self) -> float:
        return self.limit_s() - (time.monotonic() - self.started)

    def passed(self) -> bool:
        return self.expired or self.remaining_s() <= 0

    def describe(self) -> str:
        """How the limit is made, for the error line."""
        if self.drip is not None:
            return (f"{self.drip:.1f} bytes/s over {self.window_s:g} s, below the floor of "
                    f"{_words(self.rate_floor)}/s")
        return (f"deadline {self.limit_s():.0f} s: {self.floor_s:g} s plus 1 s per "
                f"{_words(self.min_rate)} of the file")

    @contextlib.contextmanager
    def requesting(self) -> Iterator[None]:
        """The block is a request under way: its rate is held to the floor (not so the waits
        between attempts)."""
        with self._lock:
            self._window = (time.monotonic(), self.received)
        try:
            yield
        finally:
            with self._lock:
                self._window = None

    def _too_slow(self, now: float) -> bool:
        """Whether the request under way brought fewer than `rate_floor` bytes per second over
        the last full window (then `drip` is its rate); a new window starts after each."""
        if self._window is None or now - self._window[0] < self.window_s:
            return False
        start, count = self._window
        rate = (self.received - count) / (now - start)
        self._window = (now, self.received)
        if rate < self.rate_floor:
            self.drip = rate
        return self.drip is not None

    def watch(self, sock: socket.socket) -> socket.socket:
        """Register a socket of the download (shut at once if the deadline has passed)."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _watchdog(self) -> None:
        tick = self.window_s / 8
        while not self._done.wait(max(min(self.remaining_s(), tick), 0.0) + 0.01):
            with self._lock:
                if self.remaining_s() <= 0 or self._too_slow(time.monotonic()):
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


def _words(rate: int) -> str:
    """A byte count in KiB or MiB for a message ("128 KiB")."""
    return f"{rate / (1 << 10):g} KiB" if rate < 1 << 20 else f"{rate / (1 << 20):g} MiB"


class DeadlinePassed(Exception):
    """A request asked for after its Deadline passed (or its rate fell below the floor): not a
    network fault, so no retry policy tries again."""


class WatchedAdapter(HTTPAdapter):
    """An HTTPAdapter that hands every new socket, direct or to a proxy, to `deadline.watch`
    before any TLS handshake or request is sent on it; with `refuse_late`, a request sent once
    the deadline has passed raises DeadlinePassed instead."""

    def __init__(self, deadline: Deadline, refuse_late: bool = False) -> None:
        self.deadline, self.refuse_late = deadline, refuse_late
        super().__init__()

    def _watched(self, manager):
        manager.pool_classes_by_scheme = watched_pool_classes(self.deadline.watch)
        return manager

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self._watched(self.poolmanager)

    def proxy_manager_for(self, proxy, **kwargs):
        return self._watched(super().proxy_manager_for(proxy, **kwargs))

    def send(self, request, *args, **kwargs):
        if self.refuse_late and self.deadline.passed():
            raise DeadlinePassed(self.deadline.describe())
        return super().send(request, *args, **kwargs)


def watch_session(session: requests.Session, deadline: Deadline,
                  refuse_late: bool = False) -> requests.Session:
    """`session` with every connection it opens watched by `deadline` (see WatchedAdapter)."""
    for scheme in ("http://", "https://"):
        session.mount(scheme, WatchedAdapter(deadline, refuse_late))
    return session


def _refuse_redirect(response: requests.Response, **kwargs) -> None:
    """A response hook: a redirect to a Cloudflare Access login, or to anything but an
    http(s):// URL (`file://`, `ftp://`), is not followed: an InputError at once, no retry."""
    if not response.is_redirect:
        return
    location = response.headers.get("Location", "")
    if "/cdn-cgi/access/" in location:
        raise LoginRequired(f"{printable(response.url)}: asks for a Cloudflare Access login")
    target = urllib.parse.urljoin(response.url, location)
    if urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
        raise InputError(f"{printable(response.url)}: redirects to {printable(target)}; only "
                         f"http:// and https:// redirects are followed")


def _session(deadline: Deadline) -> requests.Session:
    """The session of one file's requests: its sockets watched by `deadline`, at most
    MAX_REDIRECTS redirects, none to a login page or out of http(s)."""
    session = requests.Session()
    session.max_redirects = MAX_REDIRECTS
    session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    session.hooks["response"].append(_refuse_redirect)
    return watch_session(session, deadline)


def _local_path(url: str) -> str | None:
    """The filesystem path of a `file://` URL or plain path; None for a network URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return urllib.request.url2pathname(parts.path)
    if parts.scheme in ("http", "https"):
        return None
    if len(parts.scheme) > 1:  # one letter: a Windows drive
        raise InputError(f"{printable(url)}: unsupported URL scheme {parts.scheme!r}")
    return url


@contextlib.contextmanager
def _open_source(url: str, offset: int, session: requests.Session
                 ) -> Iterator[tuple[Iterator[bytes], int, int | None]]:
    """Open `url` from byte `offset`: (chunks, first byte they hold, total size or None).

    The first byte is 0 when a server ignores the Range header. Retryable for what a retry may
    cure, InputError for the rest.
    """
    local = _local_path(url)
    if local is not None:
        try:  # a FIFO, device or socket is refused, never opened for a blocking read
            handle = open_regular(local, sys.maxsize)
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
        raise InputError(f"too many redirects from {printable(url)} (the last, HTTP "
                         f"{last.status_code}, to {printable(target)})") from err
    except requests.RequestException as err:
        raise Retryable(problem(err), final=unknown_host(err)) from err
    with response:
        status = response.status_code
        if status == 416 and offset:  # nothing after `offset`: the partial file is complete
            yield iter(()), offset, offset
            return
        if status not in (200, 206):
            words = f"HTTP {status} {printable(' '.join(str(response.reason).split()))}"
            if status in RETRY_STATUSES:
                raise Retryable(words)
            refused = LoginRequired if status in (401, 403) else InputError
            raise refused(f"{printable(url)}: {words}")
        start = offset if status == 206 else 0
        if status == 206 and not response.headers.get("Content-Range", "").startswith(
                f"bytes {offset}-"):
            raise Retryable(f"asked for bytes from {offset}, the server sent others")
        length = response.headers.get("Content-Length", "")
        # read1: each chunk is what one socket read brought, so a cut keeps the bytes before it
        yield (iter(lambda: response.raw.read1(CHUNK_SIZE, decode_content=True), b""), start,
               start + int(length) if length.isdigit() else None)


def _oversized(dest: Path, url: str, size: int | None, limit: int, announced: int | None
               ) -> InputError:
    """The error for a source that announces (`announced`) or sends more than `limit` bytes;
    the `.partial` file is removed."""
    partial_name(dest).unlink(missing_ok=True)
    sent = f"announces {announced:,} bytes" if announced is not None else "sent more bytes"
    what = "the official file has" if size is not None else "the most expected of it is"
    return InputError(f"{dest}: {printable(url)} {sent}, {what} {limit:,}; stopped, nothing kept")


@contextlib.contextmanager
def _writing(dest: Path) -> Iterator[BinaryIO]:
    """`dest`'s `.partial` opened for appending; a write that fails (a full disk, a quota, a
    file size limit) is one InputError naming it (`write_failed`), the bytes written so far
    kept to resume from."""
    partial = partial_name(dest)
    try:
        with open(partial, "ab") as out:
            yield out
    except OSError as err:  # the reads' errors are Retryable by then: this is a write's
        raise write_failed(partial, err) from err


def _append(url: str, session: requests.Session, dest: Path, size: int | None,
            limit: int | None, deadline: Deadline) -> None:
    """One attempt: append the rest of `url` to `dest`'s `.partial` (restarted when the source
    sends from byte 0), never past `limit` bytes; Retryable when the source stops short."""
    partial = partial_name(dest)
    offset = partial.stat().st_size if partial.exists() else 0
    if size is not None and offset >= size:
        if offset == size:
            return
        offset = 0
    with deadline.requesting(), _open_source(url, offset, session) as (chunks, start, total):
        if total is not None and limit is not None and total > limit:
            raise _oversized(dest, url, size, limit, total)
        deadline.total = deadline.total or total
        total = total if total is not None else size
        with _writing(dest) as out, tqdm(
                total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                desc=partial.name, leave=False, disable=None) as bar:
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
                    raise _oversized(dest, url, size, limit, None)
                out.write(chunk)
                out.flush()  # each chunk reaches the file at once: a kill loses none of it
                written += len(chunk)
                deadline.received += len(chunk)
                bar.update(len(chunk))
    if deadline.expired:  # the watchdog shut the connection: what came is not the whole file
        raise Retryable(f"stopped at byte {written} by the deadline")
    if total is not None and written < total:
        raise Retryable(f"connection closed at byte {written} of {total}")


def _download(url: str, dest: Path, size: int | None, limit: int | None, retries: int,
              retry_wait_s: float) -> None:
    """Bring all of `url` into `dest`'s `.partial`: `retries` more attempts after a transient
    failure, each resuming, all within one Deadline. InputError naming `dest` when it fails."""
    partial = partial_name(dest)
    with Deadline(size) as deadline, _session(deadline) as session:
        for attempt in range(retries + 1):
            try:
                return _append(url, session, dest, size, limit, deadline)
            except Retryable as err:
                if deadline.passed():  # the deadline, or the rate floor
                    have = partial.stat().st_size if partial.exists() else 0
                    of = f" of {deadline.total:,}" if deadline.total is not None else ""
                    raise InputError(
                        f"{dest}: download from {printable(url)} too slow: {have:,}{of} bytes "
                        f"after {time.monotonic() - deadline.started:.1f} s "
                        f"({deadline.describe()}){resume_hint(partial)}") from err
                if attempt == retries or err.final:
                    raise InputError(f"{dest}: download from {printable(url)} failed ({err})"
                                     f"{resume_hint(partial)}") from err
                print(f"{dest.name}: {err}; retrying ({attempt + 1}/{retries})", file=sys.stderr)
                time.sleep(max(0.0, min(retry_wait_s * 2 ** attempt, deadline.remaining_s())))


def fetch(url: str, dest: str | os.PathLike, expected_md5: str | None = None,
          expected_size: int | None = None, retries: int = 3, retry_wait_s: float = 5.0,
          max_size: int | None = None) -> str:
    """Download `url` (`http(s)://`, `file://` or a path) to `dest`; return its md5.

    A `dest` with `expected_md5` is kept as it is. `dest` or its `.partial` that is a link
    leading out of its folder, or no regular file, is an InputError (`resolve_inside`), and
    nothing is written. The download goes to `dest.partial` (see
    `_download`): at most `expected_size` bytes, else `max_size`. It is renamed to `dest` only
    with `expected_size` and `expected_md5` (when given), else removed; every failure is an
    InputError naming `dest`.
    """
    dest = Path(dest)
    ensure_dir(dest.parent)
    for name in (dest.name, partial_name(dest).name):  # never written through a link leading out
        resolve_inside(dest.parent, name, str(dest))
    if expected_md5 is not None and dest.is_file():
        if verified(dest, expected_md5, expected_size):
            return expected_md5
        print(f"{dest}: present but not the official file; downloading it again",
              file=sys.stderr)
    limit = expected_size if expected_size is not None else max_size
    _download(url, dest, expected_size, limit, retries, retry_wait_s)
    partial = partial_name(dest)
    size = partial.stat().st_size
    if expected_size is not None and size != expected_size:
        partial.unlink()
        raise InputError(f"{dest}: downloaded {size} bytes, the official file has "
                         f"{expected_size}; download removed (source {printable(url)})")
    actual = md5_file(partial)
    if expected_md5 is not None and actual != expected_md5:
        partial.unlink()
        raise InputError(f"{dest}: md5 {actual} is not the official {expected_md5}; "
                         f"download removed (source {printable(url)})")
    os.replace(partial, dest)
    return actual
