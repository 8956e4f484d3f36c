"""Google Cloud Storage for the dataset: `gs://` URLs, listing with md5s, and parallel,
md5-verified uploads and downloads through google-cloud-storage's own transfers.

    python -m cleanup_scripts.storage ls gs://bucket/prefix
    python -m cleanup_scripts.storage download gs://bucket/prefix DIR [--nworker=8]

Credentials: Google's default ones; with STORAGE_EMULATOR_HOST (`http://127.0.0.1:9023`) every
request goes to that emulator without credentials.

Before any request: a `gs://` URL is checked against the bucket naming rules
(`parse_gcs_url`); an upload refuses a path leading outside the source directory and a file
whose md5 is no longer the one `manifest.tsv` lists (`check_manifest_md5s`).

Every object is checked against an md5: an upload puts the file's md5 in the object's metadata
(the bucket refuses other bytes) and compares what the bucket reports; a download compares
`<file>.partial` with the object's md5 before renaming it.

`manifest.tsv` is the commit record: an upload sends it last, alone, once every file it lists
is in the bucket (a stale bucket manifest is deleted first); a download checks that every file
it lists is there with its size and md5 before fetching anything, and writes it last.

Bounds and resumption: a storage call retries transient failures for RETRY_TIMEOUT_S (10 s) in
all, then fails in one line naming the endpoint. A re-run skips every object (or file) already
there with the right md5, so after a kill it redoes only the uploads that were in flight; a
download continues its `.partial` with a ranged read.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import concurrent.futures
import hashlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.storage.exceptions import InvalidResponse
from google.cloud.storage.retry import DEFAULT_RETRY
from tqdm import tqdm

from benchmark.errors import exit_on_user_error
from benchmark.files import md5_file
from cleanup_scripts.artifacts import causes as artifact_causes
from benchmark.errors import printable as shown
from cleanup_scripts.artifacts import partial_name, problem, resume_hint, verified
from cleanup_scripts.fileio import InputError, ensure_dir
from cleanup_scripts.layout import DatasetLayout
from cleanup_scripts.ledger import Entry, OutputLedger
from cleanup_scripts.runner import StageSummary, report

GS_SCHEME = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
MANIFEST = "manifest.tsv"

# Chunks of a resumable upload or a chunked download: multiples of 256 KiB.
CHUNK_QUANTUM = 256 << 10
DEFAULT_CHUNK_SIZE = 16 << 20
DEFAULT_THREADS = 8
TIMEOUT_S = (30, 300)  # connect, read
# A storage call (listing, a download, a delete) retries a transient failure (connection
# refused or reset, HTTP 429/5xx) with waits of 0.5, 1, 2, 4, 4 ... s for at most this long in
# all, then fails with one line naming the endpoint (the library's default is 120 s).
RETRY_TIMEOUT_S = 10.0
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
# A bucket's manifest.tsv is read into memory to check the copy: this much at most.
MANIFEST_MAX_BYTES = 64 << 20
OBJECT_NAME_MAX_BYTES = 1024
_IP_ADDRESS = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_GOOGLE = re.compile(r"g[o0][o0]gle")


# ----------------------------------------------------------------------------------------------
# URLs, clients, md5s


@dataclass(frozen=True)
class GcsUrl:
    """A parsed `gs://bucket/prefix`; `prefix` has no leading or trailing slash."""

    bucket: str
    prefix: str = ""

    def object_name(self, relative: str) -> str:
        """The object name of `relative` (a `/`-separated path) under this prefix."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def relative(self, name: str) -> str:
        """The path of object `name` relative to this prefix."""
        return name[len(self.prefix) + 1:] if self.prefix else name

    def child(self, relative: str) -> str:
        """The `gs://` URL of `relative` under this prefix."""
        return f"{GS_SCHEME}{self.bucket}/{self.object_name(relative)}"

    def __str__(self) -> str:
        return f"{GS_SCHEME}{self.bucket}/{self.prefix}" if self.prefix else \
            f"{GS_SCHEME}{self.bucket}"


def is_gcs_url(text: str | os.PathLike) -> bool:
    """True for a `gs://…` string."""
    return isinstance(text, str) and text.startswith(GS_SCHEME)


def bucket_name_problem(name: str) -> str | None:
    """Why `name` breaks Cloud Storage's bucket naming rules, or None when it follows them:
    3-63 characters (up to 222 with dots, each dot-separated part at most 63), only lowercase
    letters, digits, `-`, `_` and `.`, a letter or digit at both ends, not an IP address, no
    `goog` prefix and no `google` (nor `g00gle`) inside."""
    bad = sorted(set(re.sub(r"[a-z0-9._-]", "", name)))
    if bad:
        return (f"{', '.join(map(repr, bad))} not allowed (only lowercase letters, digits, "
                f"'-', '_' and '.')")
    if not 3 <= len(name) <= (222 if "." in name else 63):
        return f"{len(name)} characters, must be 3 to 63 (up to 222 when it has dots)"
    if any(len(part) > 63 for part in name.split(".")):
        return "a dot-separated part is longer than 63 characters"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "must start and end with a letter or digit"
    if _IP_ADDRESS.fullmatch(name):
        return "must not be an IP address"
    if name.startswith("goog"):
        return "must not start with 'goog'"
    if _GOOGLE.search(name):
        return "must not contain 'google' or a look-alike"
    return None


def parse_gcs_url(url: str) -> GcsUrl:
    """Parse `gs://bucket[/prefix]`, the one place `gs://` URLs are checked: InputError, in one
    line naming the URL and the reason, for anything else, a bucket name that breaks the
    naming rules (`bucket_name_problem`), or a prefix that no object name can start with."""
    shown = url if isinstance(url, str) and url.isprintable() else repr(url)
    if not is_gcs_url(url):
        raise InputError(f"{shown}: not a gs://bucket/prefix URL")
    bucket, _, prefix = url[len(GS_SCHEME):].partition("/")
    prefix = prefix.strip("/")
    if not bucket or any(part in ("", ".", "..") for part in prefix.split("/") if prefix):
        raise InputError(f"{shown}: not a gs://bucket/prefix URL")
    problem = bucket_name_problem(bucket)
    if problem:
        raise InputError(f"{shown}: invalid bucket name {bucket!r}: {problem}")
    if "\r" in prefix or "\n" in prefix:
        raise InputError(f"{shown}: object names cannot contain line breaks")
    if len(prefix.encode("utf-8")) + 2 > OBJECT_NAME_MAX_BYTES:  # room for "/x" after it
        raise InputError(f"{shown}: the prefix leaves no room for object names (at most "
                         f"{OBJECT_NAME_MAX_BYTES} bytes in all)")
    return GcsUrl(bucket, prefix)


def md5_hex(md5_base64: str | None) -> str | None:
    """The hex digest of a base64 `md5Hash` from object metadata (None stays None)."""
    if not md5_base64:
        return None
    return base64.b64decode(md5_base64).hex()


def md5_base64(md5_hexdigest: str) -> str:
    """The base64 form of a hex md5, as object metadata's `md5Hash` holds it."""
    return base64.b64encode(binascii.unhexlify(md5_hexdigest)).decode("ascii")


def emulator_endpoint() -> str | None:
    """The emulator's base URL from STORAGE_EMULATOR_HOST (a scheme added if missing)."""
    host = os.environ.get(EMULATOR_ENV, "").strip()
    if not host:
        return None
    return host if "://" in host else "http://" + host


def make_client() -> storage.Client:
    """A storage client: the emulator of STORAGE_EMULATOR_HOST without credentials, else
    Google's default credentials (InputError, in one line, when there are none)."""
    endpoint = emulator_endpoint()
    if endpoint:
        return storage.Client(credentials=AnonymousCredentials(), project="emulator",
                              client_options={"api_endpoint": endpoint})
    try:
        return storage.Client()
    except auth_exceptions.DefaultCredentialsError as err:
        raise InputError("no Google Cloud credentials: run `gcloud auth application-default "
                         "login` or set GOOGLE_APPLICATION_CREDENTIALS") from err


def retry_policy() -> "DEFAULT_RETRY":
    """The retry of a storage call: the library's own choice of what is transient, within
    RETRY_TIMEOUT_S (read when called, so it can be changed)."""
    return DEFAULT_RETRY.with_delay(initial=0.5, maximum=4.0, multiplier=2.0).with_timeout(
        RETRY_TIMEOUT_S)


def endpoint() -> str:
    """The storage endpoint requests go to: the emulator's, else Google's."""
    return emulator_endpoint() or DEFAULT_ENDPOINT


def connection_problem(err: BaseException) -> str | None:
    """"connection refused", "timed out", ... when `err` is a failure to reach the endpoint
    (None for anything else, such as an HTTP error answer)."""
    causes = list(artifact_causes(err))
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return "connection refused"
    if not any(isinstance(c, (requests.ConnectionError, requests.Timeout, OSError))
               for c in causes):
        return None
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return shown(cause.strerror[:1].lower() + cause.strerror[1:])
    return "timed out" if any(isinstance(c, (TimeoutError, requests.Timeout)) for c in causes) \
        else "connection failed"


def _api_error(where: str, err: Exception) -> InputError:
    """A one-line InputError for a failed storage call about `where`."""
    where = shown(where)
    problem = connection_problem(err)
    if problem is not None:
        retried = (f" (retried for {RETRY_TIMEOUT_S:g} s)"
                   if isinstance(err, api_exceptions.RetryError) else "")
        return InputError(f"{where}: cannot reach the storage endpoint {shown(endpoint())}: "
                          f"{problem}{retried}")
    if isinstance(err, api_exceptions.RetryError) and err.cause is not None:
        err = err.cause
    if isinstance(err, api_exceptions.NotFound):
        return InputError(f"{where}: not found (no such bucket or object)")
    if isinstance(err, api_exceptions.Forbidden):
        return InputError(f"{where}: permission denied ({shown(err.message)})")
    message = getattr(err, "message", None) or str(err) or type(err).__name__
    return InputError(f"{where}: {type(err).__name__}: "
                      f"{shown(' '.join(message.split())[:300])}")


# ----------------------------------------------------------------------------------------------
# Listing


@dataclass(frozen=True)
class RemoteObject:
    """One object: its name, size, md5 (hex; None for composite objects) and generation."""

    name: str
    size: int
    md5: str | None
    generation: int | None = None


def list_objects(url: GcsUrl, client: storage.Client | None = None) -> dict[str, RemoteObject]:
    """Every object under `url`, keyed by its path relative to the prefix, with size and md5.

    Only metadata is read. `gs://b/data` lists `data/...`, not `database/...`. Names that end
    in `/` (folder placeholders) are left out.
    """
    client = client or make_client()
    prefix = url.prefix + "/" if url.prefix else None
    objects: dict[str, RemoteObject] = {}
    try:
        for blob in client.list_blobs(url.bucket, prefix=prefix, retry=retry_policy(),
                                      fields="items(name,size,md5Hash,generation),nextPageToken"):
            if blob.name.endswith("/"):
                continue
            objects[url.relative(blob.name)] = RemoteObject(
                blob.name, int(blob.size or 0), md5_hex(blob.md5_hash), blob.generation)
    except (api_exceptions.GoogleAPIError, requests.RequestException) as err:
        raise _api_error(str(url), err) from err
    return objects


# ----------------------------------------------------------------------------------------------
# Local files


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: its path relative to the source directory, size and md5 (hex)."""

    relative: str
    path: Path
    size: int
    md5: str | None  # None: not known yet (computed when needed)


def inside_source(root: Path, relative: str, where: str) -> Path:
    """`root/relative`, refused (InputError naming `where` and the path) unless it stays inside
    `root`: no absolute path, no `..`, `.` or empty component, no symlink (anywhere on the way)
    whose target leaves `root`."""
    if relative.startswith("/"):
        raise InputError(f"{where}: {relative!r} is outside {root} (an absolute path)")
    if any(part in ("", ".", "..") for part in relative.split("/")):
        raise InputError(f"{where}: {relative!r} is not a plain relative path under {root} "
                         f"(a '..', '.' or empty component)")
    path = root / relative
    target = path.resolve()
    if not target.is_relative_to(root.resolve()):
        raise InputError(f"{where}: {relative!r} is outside {root} (a symlink to {target})")
    return path


def _is_hidden(relative: PurePosixPath) -> bool:
    return any(part.startswith(".") for part in relative.parts) or \
        relative.name.endswith(".partial")


def manifest_rows(text: str, where: str) -> Iterator[tuple[int, str, int, str]]:
    """(line number, path, bytes, md5) of each row of a `manifest.tsv` (its header skipped);
    InputError naming `where` and the line for a row that is not `path<TAB>bytes<TAB>md5`."""
    for number, line in enumerate(text.splitlines()[1:], start=2):
        fields = line.split("\t")
        if not line.strip():
            continue
        if (len(fields) != 3 or not fields[1].isdigit()
                or not re.fullmatch(r"[0-9a-fA-F]{32}", fields[2])):
            raise InputError(f"{where}:{number}: expected 'path<TAB>bytes<TAB>md5': "
                             f"{line[:60]!r}")
        yield number, fields[0], int(fields[1]), fields[2].lower()


def read_manifest(source_dir: Path) -> list[LocalFile]:
    """The files listed in `source_dir/manifest.tsv` (path, bytes, md5), plus the manifest.

    InputError when a listed path leads outside `source_dir` (see `inside_source`), or a
    listed file is missing or has another size than the manifest says.
    """
    manifest = source_dir / MANIFEST
    try:
        text = manifest.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{manifest}: cannot read ({err.strerror})") from err
    files = []
    for number, relative, size, md5 in manifest_rows(text, str(manifest)):
        path = inside_source(source_dir, relative, f"{manifest}:{number}")
        try:
            actual = path.stat().st_size
        except OSError as err:
            raise InputError(f"{path}: listed in {MANIFEST} but cannot be read "
                             f"({err.strerror})") from err
        if actual != size:
            raise InputError(f"{path}: {actual} bytes, {MANIFEST} says {size}")
        files.append(LocalFile(relative, path, size, md5))
    files.append(LocalFile(MANIFEST, manifest, manifest.stat().st_size, None))
    return files


def local_files(source_dir: str | os.PathLike) -> list[LocalFile]:
    """What an upload of `source_dir` sends: the files of its `manifest.tsv` and the manifest
    itself when there is one (a `make preprocess` output), else every file in the tree except
    hidden ones (`.state/`, `.*`) and `*.partial` downloads. InputError for a file (or a
    manifest path) that leads outside `source_dir`."""
    root = Path(source_dir)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    if (root / MANIFEST).is_file():
        return read_manifest(root)
    files = []
    for path in sorted(root.rglob("*")):
        relative = PurePosixPath(path.relative_to(root).as_posix())
        if path.is_file() and not _is_hidden(relative):
            inside_source(root, str(relative), str(path))
            files.append(LocalFile(str(relative), path, path.stat().st_size, None))
    return files


def _ledger_entries(root: Path) -> dict[str, list[Entry]]:
    """What the pipeline's ledgers (`root/.state/<stage>.outputs`) recorded of each path."""
    recorded: dict[str, list[Entry]] = {}
    for ledger in sorted(DatasetLayout(root).state_dir.glob("*.outputs")):
        for relative, entry in OutputLedger(ledger, root).entries().items():
            recorded.setdefault(relative, []).append(entry)
    return recorded


def current_md5(local: LocalFile, root: Path, recorded: dict[str, list[Entry]]) -> str:
    """The md5 of `local` as it is now: a ledger's (see `_ledger_entries`) when it recorded the
    file's present size and mtime, else the md5 of its bytes."""
    try:
        stat = local.path.stat()
        for entry in recorded.get(str(local.path.resolve().relative_to(root.resolve())), ()):
            if (entry.size, entry.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
                return entry.md5
        return md5_file(local.path)
    except OSError as err:
        raise InputError(f"{local.path}: cannot read ({err.strerror})") from err


def check_manifest_md5s(files: list[LocalFile], source_dir: str | os.PathLike, url: GcsUrl,
                        existing: dict[str, RemoteObject], nworker: int = DEFAULT_THREADS
                        ) -> None:
    """Check that every file listed with an md5 (from `manifest.tsv`) still has that md5, in
    `nworker` threads, cheaply where a ledger vouches for it (`current_md5`).

    InputError naming the first file that changed since the manifest was written, with the
    manifest's md5, the file's and the bucket's (or that the object is absent).
    """
    root = Path(source_dir)
    listed = [local for local in files if local.md5]
    recorded = _ledger_entries(root)
    with concurrent.futures.ThreadPoolExecutor(_thread_count(nworker, len(listed))) as pool:
        actual = list(pool.map(lambda local: current_md5(local, root, recorded), listed))
    changed = [(local, md5) for local, md5 in zip(listed, actual) if md5 != local.md5]
    if not changed:
        return
    local, md5 = changed[0]
    remote = existing.get(local.relative)
    bucket = f"bucket md5 {remote.md5 or 'none'}" if remote else "not in the bucket"
    more = f"; {len(changed) - 1} more files changed too" if len(changed) > 1 else ""
    raise InputError(f"{local.path}: changed since {MANIFEST} was written: manifest md5 "
                     f"{local.md5}, file md5 {md5}, {bucket} ({url.child(local.relative)}); "
                     f"nothing uploaded{more}")


# ----------------------------------------------------------------------------------------------
# Upload


@dataclass
class Transfer:
    """What happened to one file: `present` (already there with the right md5), `uploaded`,
    `resumed` (continued from byte `resumed_from`) or `downloaded`."""

    relative: str
    size: int
    action: str
    sent: int = 0  # bytes moved by this run
    resumed_from: int = 0


def chunk_size_bytes(megabytes: float) -> int:
    """`megabytes` MiB rounded up to a multiple of 256 KiB (the unit GCS requires)."""
    size = max(1, int(megabytes * (1 << 20)))
    return -(-size // CHUNK_QUANTUM) * CHUNK_QUANTUM


def upload_file(client: storage.Client, url: GcsUrl, local: LocalFile,
                existing: RemoteObject | None, chunk_size: int,
                on_bytes: Callable[[int], None] = lambda count: None) -> Transfer:
    """Upload one file unless the bucket already holds it with the same md5, by the library's
    own transfer (one request up to 8 MiB, else a resumable upload in `chunk_size` chunks,
    each retried by `retry_policy`); then check the md5 the bucket reports. InputError, naming
    the object, when it differs.

    The file's md5 goes in the object's metadata, so the bucket itself refuses other bytes
    (the library's `checksum="md5"` would replace it by the md5 of the bytes read, which a
    file changed since its manifest was written would match).
    """
    target = url.child(local.relative)
    md5 = local.md5 or md5_file(local.path)
    if existing is not None and existing.md5 == md5 and existing.size == local.size:
        on_bytes(local.size)
        return Transfer(local.relative, local.size, "present")
    blob = client.bucket(url.bucket).blob(url.object_name(local.relative), chunk_size=chunk_size)
    blob.md5_hash = md5_base64(md5)
    try:
        blob.upload_from_filename(str(local.path), content_type="application/octet-stream",
                                  client=client, timeout=TIMEOUT_S, checksum=None,
                                  retry=retry_policy())
    except (api_exceptions.GoogleAPIError, requests.RequestException, InvalidResponse) as err:
        if "md5" in str(err).lower() and connection_problem(err) is None:
            raise InputError(f"{target}: the bucket's md5 of the uploaded bytes is not {md5}, "
                             f"the md5 of {local.path} ({problem(err)[:200]})") from err
        raise _api_error(target, err) from err
    on_bytes(local.size)
    if md5_hex(blob.md5_hash) != md5:
        raise InputError(f"{target}: md5 {md5_hex(blob.md5_hash)} in the bucket after upload, "
                         f"expected {md5} ({local.path})")
    return Transfer(local.relative, local.size, "uploaded", local.size)


def _thread_count(nworker: int, items: int) -> int:
    """Threads for `items` jobs: `nworker` (DEFAULT_THREADS when not positive), at most one
    per job, at least one."""
    return max(1, min(nworker if nworker > 0 else DEFAULT_THREADS, items or 1))


def _run_in_threads(function: Callable, items: list, nworker: int, total_bytes: int,
                    desc: str) -> list:
    """Apply `function(client, item, on_bytes)` to each item in `nworker` threads (one storage
    client per thread) with a byte progress bar. Every item is attempted; then the first
    failure is raised (the others are printed on stderr)."""
    local = threading.local()
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
               leave=False, disable=None)
    lock = threading.Lock()

    def on_bytes(count: int) -> None:
        with lock:
            bar.update(count)

    def job(item):
        if not hasattr(local, "client"):
            local.client = make_client()
        return function(local.client, item, on_bytes)

    results, errors = [], []
    try:
        with concurrent.futures.ThreadPoolExecutor(_thread_count(nworker, len(items))) as pool:
            for future in [pool.submit(job, item) for item in items]:
                try:
                    results.append(future.result())
                except InputError as err:
                    errors.append(err)
    finally:
        bar.close()
    for err in errors[1:]:
        print(f"error: {err}", file=sys.stderr)
    if errors:
        more = f" (and {len(errors) - 1} more failures above)" if len(errors) > 1 else ""
        raise InputError(f"{errors[0]}{more}")
    return results


def upload_tree(source_dir: str | os.PathLike, url: str | GcsUrl, nworker: int = DEFAULT_THREADS,
                chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[Transfer]:
    """Upload `source_dir` (see `local_files`) to `url` in `nworker` threads, skipping objects
    already there with the right md5 (so a re-run after a kill redoes only the files that were
    in flight); every object's md5 is checked. Returns one Transfer per file.

    Nothing is uploaded unless every path stays inside `source_dir` and every file listed in
    its manifest still has the manifest's size and md5 (`check_manifest_md5s`).

    `manifest.tsv` is the commit record: it goes up last, alone, once every file it lists is
    in the bucket with its md5, so a bucket holding the manifest holds the whole dataset. A
    manifest already in the bucket that differs from this one is deleted before any other
    object changes (it would describe files that are being replaced).
    """
    url = parse_gcs_url(url) if isinstance(url, str) else url
    if chunk_size % CHUNK_QUANTUM:
        raise InputError(f"chunk size {chunk_size}: not a multiple of {CHUNK_QUANTUM} bytes")
    files = local_files(source_dir)
    client = make_client()
    existing = list_objects(url, client)
    check_manifest_md5s(files, source_dir, url, existing, nworker)
    commit = [item for item in files if item.relative == MANIFEST]
    data = [item for item in files if item.relative != MANIFEST]
    data.sort(key=lambda item: -item.size)  # big files first: a shorter tail
    if commit and MANIFEST in existing:
        _delete_stale_manifest(client, url, commit[0], existing)

    def send(items: list[LocalFile], desc: str) -> list[Transfer]:
        return _run_in_threads(
            lambda client, local, on_bytes: upload_file(
                client, url, local, existing.get(local.relative), chunk_size, on_bytes),
            items, nworker, sum(item.size for item in items), desc=desc)

    transfers = send(data, "upload") if data else []
    return transfers + (send(commit, f"upload {MANIFEST}") if commit else [])


def _delete_stale_manifest(client: storage.Client, url: GcsUrl, manifest: LocalFile,
                           existing: dict[str, RemoteObject]) -> None:
    """Delete the bucket's manifest when it is not `manifest` (and forget it in `existing`)."""
    remote = existing[MANIFEST]
    if remote.size == manifest.size and remote.md5 == md5_file(manifest.path):
        return
    try:
        client.bucket(url.bucket).blob(remote.name).delete(
            client=client, if_generation_match=remote.generation, retry=retry_policy(),
            timeout=TIMEOUT_S)
    except api_exceptions.NotFound:
        pass
    except (api_exceptions.GoogleAPIError, requests.RequestException) as err:
        raise _api_error(url.child(MANIFEST), err) from err
    del existing[MANIFEST]


# ----------------------------------------------------------------------------------------------
# Download


def _safe_destination(root: Path, relative: str, where: str | None = None) -> Path:
    parts = relative.split("/")
    if (not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts)
            or not relative.isprintable()):
        raise InputError(f"{where or shown(relative)}: {relative!r} is not a safe relative path")
    return root.joinpath(*parts)


def download_object(client: storage.Client, url: GcsUrl, relative: str, remote: RemoteObject,
                    dest_dir: Path, chunk_size: int,
                    on_bytes: Callable[[int], None] = lambda count: None) -> Transfer:
    """Download one object to `dest_dir/relative` via `.partial` (continued from its last byte
    by the library's ranged, chunked download), check its md5 against the object's, then
    rename it into place."""
    dest = _safe_destination(dest_dir, relative)
    source = url.child(relative)
    if verified(dest, remote.md5, remote.size):
        on_bytes(remote.size)
        return Transfer(relative, remote.size, "present")
    ensure_dir(dest.parent)
    partial = partial_name(dest)
    for _ in range(2):  # a resumed .partial that does not match is fetched again from byte 0
        offset = partial.stat().st_size if partial.exists() else 0
        offset = offset if offset <= remote.size else 0
        on_bytes(offset)
        if offset < remote.size:
            blob = client.bucket(url.bucket).blob(remote.name, chunk_size=chunk_size)
            try:
                with open(partial, "ab") as out:
                    out.truncate(offset)
                    blob.download_to_file(out, client=client, start=offset or None,
                                          if_generation_match=remote.generation,
                                          timeout=TIMEOUT_S, checksum=None, retry=retry_policy())
            except api_exceptions.PreconditionFailed as err:
                raise InputError(f"{source}: the object changed during the download; "
                                 f"run again") from err
            except (api_exceptions.GoogleAPIError, requests.RequestException) as err:
                raise InputError(f"{_api_error(source, err)}{resume_hint(partial)}") from err
            on_bytes(remote.size - offset)
        actual = md5_file(partial)
        if remote.md5 is None or actual == remote.md5:
            os.replace(partial, dest)
            return Transfer(relative, remote.size, "resumed" if offset else "downloaded",
                            remote.size - offset, offset)
        partial.unlink()
        if not offset:  # a fresh download that does not match: no point in another try
            break
    raise InputError(f"{source}: md5 {actual} of the download, the bucket says {remote.md5}; "
                     f"download removed")


def read_remote_manifest(client: storage.Client, url: GcsUrl, remote: RemoteObject
                         ) -> dict[str, tuple[int, str]]:
    """The bucket's `manifest.tsv` under `url`: {path: (bytes, md5)}, read into memory (at
    most MANIFEST_MAX_BYTES) and checked against the object's md5. InputError, in one line
    naming the manifest (and line), for anything that is not such a manifest."""
    where = url.child(MANIFEST)
    if remote.size > MANIFEST_MAX_BYTES:
        raise InputError(f"{where}: {remote.size:,} bytes, more than a manifest may have "
                         f"({MANIFEST_MAX_BYTES:,})")
    try:
        data = client.bucket(url.bucket).blob(remote.name).download_as_bytes(
            client=client, if_generation_match=remote.generation, timeout=TIMEOUT_S,
            checksum=None, retry=retry_policy())
    except (api_exceptions.GoogleAPIError, requests.RequestException) as err:
        raise _api_error(where, err) from err
    if remote.md5 is not None and hashlib.md5(data).hexdigest() != remote.md5:
        raise InputError(f"{where}: the bytes read are not the object's md5 {remote.md5}; "
                         f"run again")
    listed: dict[str, tuple[int, str]] = {}
    for number, relative, size, md5 in manifest_rows(data.decode("utf-8", "replace"), where):
        _safe_destination(Path("."), relative, f"{where}:{number}")
        listed[relative] = (size, md5)
    return listed


def check_complete(url: GcsUrl, listed: dict[str, tuple[int, str]],
                   objects: dict[str, RemoteObject]) -> None:
    """InputError, one line, unless every file the manifest lists is under `url` with the
    manifest's size and md5 (an upload that stopped before the end, or another one since)."""
    problems = []
    for relative, (size, md5) in sorted(listed.items()):
        remote = objects.get(relative)
        if remote is None:
            problems.append(f"{shown(relative)} is missing")
        elif remote.size != size or (remote.md5 is not None and remote.md5 != md5):
            problems.append(f"{shown(relative)} is {remote.size:,} bytes with md5 "
                            f"{remote.md5 or 'unknown'}, the manifest says {size:,} bytes, "
                            f"md5 {md5}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{url.child(MANIFEST)}: lists {len(listed)} files, but {problems[0]}"
                         f"{more}: an incomplete or overlapping upload; nothing downloaded")


def download_prefix(url: str | GcsUrl, dest_dir: str | os.PathLike,
                    nworker: int = DEFAULT_THREADS, chunk_size: int = DEFAULT_CHUNK_SIZE
                    ) -> list[Transfer]:
    """Download every object under `url` to `dest_dir` (same relative paths) in `nworker`
    threads; files already there with the right md5 are kept, `.partial`s are continued.

    When the prefix holds `manifest.tsv` (an upload's commit record), nothing is downloaded
    unless every file it lists is there with its size and md5 (`check_complete`), and the
    manifest itself is written last, after every other file. Without one, a note says the
    copy's completeness cannot be checked.
    """
    url = parse_gcs_url(url) if isinstance(url, str) else url
    client = make_client()
    objects = list_objects(url, client)
    if not objects:
        raise InputError(f"{url}: no objects")
    if MANIFEST in objects:
        check_complete(url, read_remote_manifest(client, url, objects[MANIFEST]), objects)
    else:
        print(f"note: {url} holds no {MANIFEST}, so whether it is complete cannot be checked",
              file=sys.stderr)
    dest_dir = ensure_dir(dest_dir)
    items = sorted(((relative, remote) for relative, remote in objects.items()
                    if relative != MANIFEST), key=lambda item: -item[1].size)

    def fetch(batch: list, desc: str) -> list[Transfer]:
        return _run_in_threads(
            lambda client, item, on_bytes: download_object(
                client, url, item[0], item[1], dest_dir, chunk_size, on_bytes),
            batch, nworker, sum(remote.size for _, remote in batch), desc=desc)

    transfers = fetch(items, "download") if items else []
    if MANIFEST in objects:
        transfers += fetch([(MANIFEST, objects[MANIFEST])], f"download {MANIFEST}")
    return transfers


# ----------------------------------------------------------------------------------------------
# Reporting and CLI


def describe(transfers: Iterable[Transfer], verb: str, where: str) -> str:
    """One line: how many files were moved, resumed, or already there."""
    transfers = list(transfers)
    counts = {action: sum(t.action == action for t in transfers)
              for action in ("present", "resumed")}
    moved = len(transfers) - counts["present"]
    line = f"{verb}: {len(transfers)} files {where}: {moved} transferred"
    resumed = [t for t in transfers if t.action == "resumed"]
    if resumed:
        line += " (" + ", ".join(f"{t.relative} resumed at byte {t.resumed_from}"
                                 for t in resumed[:5]) + (", …" if len(resumed) > 5 else "") + ")"
    return line + f", {counts['present']} already there with the right md5"


def summary(stage: str, transfers: list[Transfer], started: float) -> StageSummary:
    """The stage summary: files, files transferred now, and bytes sent by this run."""
    return StageSummary(stage, len(transfers), sum(t.action != "present" for t in transfers),
                        sum(t.sent for t in transfers), started)


def main(argv: list[str] | None = None) -> None:
    """CLI: `ls URL` (path, bytes, md5 of each object) or `download URL DIR`."""
    parser = argparse.ArgumentParser(
        description="List or download a gs://bucket/prefix (md5-verified, resumable).")
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("ls", help="Print path, bytes and md5 of every object.")
    listing.add_argument("url", help="gs://bucket/prefix")
    download = commands.add_parser("download", help="Download every object under URL to DIR.")
    download.add_argument("url", help="gs://bucket/prefix")
    download.add_argument("directory", metavar="DIR")
    download.add_argument("--nworker", type=int, default=DEFAULT_THREADS,
                          help=f"Parallel transfers (threads; default {DEFAULT_THREADS}).")
    download.add_argument("--chunk_mb", type=float, default=DEFAULT_CHUNK_SIZE >> 20,
                          help="Bytes per ranged request, in MiB (a .partial grows by this).")
    args = parser.parse_args(argv)
    url = parse_gcs_url(args.url)
    if args.command == "ls":
        for relative, remote in sorted(list_objects(url).items()):
            print(f"{relative}\t{remote.size}\t{remote.md5 or '-'}")
        return
    started = time.time()
    transfers = download_prefix(url, args.directory, args.nworker, chunk_size_bytes(args.chunk_mb))
    print(describe(transfers, "download", f"from {url}"), flush=True)
    report(summary("download", transfers, started))


if __name__ == "__main__":
    exit_on_user_error(main)
