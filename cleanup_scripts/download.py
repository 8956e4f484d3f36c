"""Fetch the benchmark's official inputs, resumably, and verify each md5 before use.

    python -m cleanup_scripts.download --output_dir=DIR [--artifacts=all]
        [--url NAME=URL ...] [--base_url=URL] [--decompress] [--retries=3] [--list]

Writes the layout of the reference's download_and_uncompress.sh: `DIR/bert_config.json`,
`DIR/vocab.txt`, `DIR/tf1_ckpt/model.ckpt-28252.*`, `DIR/tf2_ckpt/model.ckpt-28252.*` and
`DIR/enwiki-20200101-pages-articles-multistream.xml.bz2` (`--decompress` adds the `.xml`).

By default each file comes from the Google Drive id the reference uses (the confirmation page
Drive shows for big files is followed). `--url NAME=URL` sets one artifact's source and
`--base_url=BASE` all others' (`BASE/<path>`); a source may be `http(s)://…`, `file://…` or a
local path. Bytes go to `<file>.partial`, which a later run resumes (an HTTP Range request);
the complete file is compared with the official md5 in `checksums/` and only then renamed into
place. A wrong md5 removes the download and ends with a one-line error naming the file.
"""
from __future__ import annotations

import argparse
import bz2
import hashlib
import http.client
import io
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from http.cookiejar import CookieJar
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from cleanup_scripts import checksums
from cleanup_scripts.fileio import InputError, atomic_output, ensure_dir
from cleanup_scripts.runner import StageSummary, exit_on_input_error, report
from cleanup_scripts.verify import md5_file

CHUNK_SIZE = 1 << 20
TIMEOUT_S = 60
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


def artifact_groups() -> dict[str, list[str]]:
    """Short names for sets of artifacts (`--artifacts=vocab,tf1_ckpt`); `all` is the default."""
    known = checksums.known_artifacts()
    groups = {
        "config": ["bert_config.json"],
        "vocab": ["vocab.txt"],
        "tf1_ckpt": [path for path in known if path.startswith("tf1_ckpt/")],
        "tf2_ckpt": [path for path in known if path.startswith("tf2_ckpt/")],
        "dump": [DUMP_BZ2],
        # No default source: give --url or --base_url (e.g. an unpacked processed-data mirror).
        "results": [path for path, a in known.items() if a.group == "results"],
    }
    groups["all"] = (groups["config"] + groups["vocab"] + groups["tf1_ckpt"]
                     + groups["tf2_ckpt"] + groups["dump"])
    return groups


def resolve_names(names: list[str]) -> list[str]:
    """Expand artifact paths and group names into artifact paths (in order, no repeats)."""
    known = checksums.known_artifacts()
    groups = artifact_groups()
    paths: list[str] = []
    for name in names:
        members = groups.get(name, [name] if name in known else None)
        if members is None:
            raise InputError(f"{name}: unknown artifact (known: {', '.join(groups)}, "
                             f"or a path such as tf1_ckpt/model.ckpt-28252.index)")
        paths.extend(path for path in members if path not in paths)
    return paths


def source_url(path: str, urls: dict[str, str], base_url: str | None) -> str:
    """Where to fetch artifact `path`: its --url, else BASE/path, else its Drive id."""
    if path in urls:
        return urls[path]
    if base_url:
        return base_url.rstrip("/") + "/" + path
    if path in DRIVE_IDS:
        return DRIVE_URL.format(DRIVE_IDS[path])
    raise InputError(f"{path}: no default source; give --url {path}=URL or --base_url")


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


class _Retryable(Exception):
    """A transient failure (network, server error): the next attempt resumes."""


def open_source(url: str, offset: int, opener: urllib.request.OpenerDirector | None = None,
                _pages_followed: int = 0) -> tuple[BinaryIO, int, int | None]:
    """Open `url` for reading from byte `offset`: (stream, first byte it yields, total size).

    The first byte is `offset` when the source honours the request (an HTTP 206, a local
    seek) and 0 when a server ignores the Range header. A total of None means unknown.
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
    opener = opener or urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = opener.open(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # nothing after `offset`: the partial file is complete
            return io.BytesIO(b""), offset, offset
        if err.code >= 500 or err.code == 429:
            raise _Retryable(f"HTTP {err.code} {err.reason}") from err
        raise InputError(f"{url}: HTTP {err.code} {err.reason}") from err
    except (urllib.error.URLError, OSError) as err:
        raise _Retryable(str(getattr(err, "reason", err))) from err
    if response.headers.get_content_type() == "text/html":
        # None of the artifacts is a web page: this is Drive's confirmation (or error) page.
        page = response.read(4 << 20).decode("utf-8", "replace")
        response.close()
        follow = drive_confirm_url(page, response.geturl())
        if follow is None or _pages_followed >= 2:
            raise InputError(f"{url}: the server sent a web page instead of the file "
                             f"(Google Drive quota exceeded, or the file is not shared?)")
        return open_source(follow, offset, opener, _pages_followed + 1)
    if response.status == 206:
        content_range = _content_range(response.headers.get("Content-Range"))
        if content_range is None or content_range[0] != offset:
            response.close()
            return open_source(url, 0, opener, _pages_followed)
        return response, offset, content_range[1]
    length = response.headers.get("Content-Length")
    return response, 0, int(length) if length and length.isdigit() else None


# ----------------------------------------------------------------------------------------------
# Downloading one file


def partial_name(dest: str | os.PathLike) -> Path:
    """The resumable `.partial` file a download of `dest` writes to."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".partial")


def _copy_from(url: str, partial: Path, expected_size: int | None, desc: str) -> None:
    """One attempt: append the rest of `url` to `partial` (truncating it if needed)."""
    offset = partial.stat().st_size if partial.exists() else 0
    if expected_size is not None and offset > expected_size:
        offset = 0
    if expected_size is not None and offset == expected_size:
        return
    stream, start, total = open_source(url, offset)
    total = total if total is not None else expected_size
    with stream, open(partial, "ab") as out:
        out.truncate(start)
        written = start
        with tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                  desc=desc, leave=False, disable=None) as bar:
            while True:
                try:
                    chunk = stream.read(CHUNK_SIZE)
                except (OSError, http.client.HTTPException) as err:
                    raise _Retryable(f"interrupted at byte {written}: {err}") from err
                if not chunk:
                    break
                out.write(chunk)
                written += len(chunk)
                bar.update(len(chunk))
    if total is not None and written < total:
        raise _Retryable(f"connection closed at byte {written} of {total}")


def fetch(url: str, dest: str | os.PathLike, expected_md5: str | None = None,
          expected_size: int | None = None, retries: int = 3, retry_wait_s: float = 5.0) -> str:
    """Download `url` to `dest` via `dest.partial`, check it, rename it; return its md5.

    An existing `dest` with the expected md5 is kept as it is. A `.partial` left by an earlier
    run is resumed. Transient failures are retried `retries` times, each resuming. A wrong size
    or md5 removes the download and raises InputError naming `dest`.
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
    for attempt in range(retries + 1):
        try:
            _copy_from(url, partial, expected_size, desc=dest.name)
            break
        except _Retryable as err:
            if attempt == retries:
                raise InputError(f"{dest}: download from {url} failed ({err}); "
                                 f"run again to resume from {partial.name}") from err
            print(f"{dest.name}: {err}; retrying ({attempt + 1}/{retries})", file=sys.stderr)
            time.sleep(retry_wait_s * (attempt + 1))
    size = partial.stat().st_size
    if expected_size is not None and size != expected_size:
        partial.unlink()
        raise InputError(f"{dest}: downloaded {size} bytes, the official file has "
                         f"{expected_size}; download removed (source {url})")
    actual = md5_file(partial)
    if expected_md5 is not None and actual != expected_md5:
        partial.unlink()
        raise InputError(f"{dest}: md5 {actual} is not the official {expected_md5}; "
                         f"download removed (source {url})")
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
# CLI


def _parse_urls(pairs: list[str]) -> dict[str, str]:
    urls: dict[str, str] = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not url:
            raise InputError(f"--url {pair}: expected NAME=URL")
        paths = resolve_names([name])
        if len(paths) != 1:
            raise InputError(f"--url {pair}: {name} names {len(paths)} files; give one path")
        urls[paths[0]] = url
    return urls


def main(argv: list[str] | None = None) -> None:
    """CLI: download, verify and place the selected official artifacts."""
    parser = argparse.ArgumentParser(
        description="Download the MLPerf BERT inputs and verify their official md5s.")
    parser.add_argument("--output_dir", required=True, help="Where the files are placed.")
    parser.add_argument("--artifacts", default="all",
                        help="Comma-separated paths or groups: " + ", ".join(artifact_groups())
                        + " (default: all = config, vocab, both checkpoints and the dump).")
    parser.add_argument("--url", action="append", default=[], metavar="NAME=URL",
                        help="Source of one artifact (http(s)://, file:// or a path); repeatable.")
    parser.add_argument("--base_url", default=None,
                        help="Fetch every artifact without --url from BASE_URL/<its path>.")
    parser.add_argument("--decompress", action="store_true",
                        help="Also write the dump's .xml (streamed, md5-verified).")
    parser.add_argument("--retries", type=int, default=3,
                        help="Retries per file after a transient failure (each resumes).")
    parser.add_argument("--list", action="store_true",
                        help="Print each selected artifact and its source, then exit.")
    args = parser.parse_args(argv)
    started = time.time()
    known = checksums.known_artifacts()
    paths = resolve_names([name for name in args.artifacts.split(",") if name])
    urls = _parse_urls(args.url)
    sources = {path: source_url(path, urls, args.base_url) for path in paths}
    if args.list:
        for path in paths:
            print(f"{path}\t{sources[path]}")
        return
    output_dir = ensure_dir(args.output_dir)
    total = 0
    for path in paths:
        artifact = known[path]
        dest = output_dir / path
        fetch(sources[path], dest, artifact.md5, artifact.size, retries=args.retries)
        total += dest.stat().st_size
        print(f"ok  {path}")
    count = len(paths)
    if args.decompress and DUMP_BZ2 in paths:
        xml = known[DUMP_XML]
        dest = output_dir / DUMP_XML
        if not (dest.is_file() and dest.stat().st_size == xml.size and md5_file(dest) == xml.md5):
            decompress_bz2(output_dir / DUMP_BZ2, dest, xml.md5)
        print(f"ok  {DUMP_XML}")
        count += 1
    report(StageSummary("download", count, count, total, started))


if __name__ == "__main__":
    exit_on_input_error(main)
