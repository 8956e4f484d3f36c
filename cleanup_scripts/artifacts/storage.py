"""Google Cloud Storage for the dataset: `gs://` URLs, listings with md5s, and parallel,
md5-checked uploads and downloads through google-cloud-storage's own transfers.

    python -m cleanup_scripts.artifacts.storage ls gs://bucket/prefix
    python -m cleanup_scripts.artifacts.storage download gs://bucket/prefix DIR [--nworker=8]

`manifest.tsv` is the commit record: an upload sends it last (one it writes for a tree that has
none), once every file it lists is in the bucket; a download refuses a prefix without one, and
first checks that every file it lists is there with its size and md5.
Credentials are Google's default ones; with STORAGE_EMULATOR_HOST every request goes to that
emulator without credentials.
"""
from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterable

import google.auth
import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage
from google.cloud.storage.exceptions import DataCorruption, InvalidResponse
from google.cloud.storage.retry import DEFAULT_RETRY
from tqdm import tqdm

from benchmark.errors import exit_on_user_error, printable
from benchmark.files import InputError, ensure_dir, md5_file, resolve_inside, scratch_dir
from cleanup_scripts.artifacts import (partial_name, problem, resume_hint, verified,
                                       write_failed)
from cleanup_scripts.artifacts.transfer import Deadline, DeadlinePassed, watch_session
from cleanup_scripts.pipeline.layout import DatasetLayout
from cleanup_scripts.pipeline.ledger import (MANIFEST_HEADER, MANIFEST_MAX_BYTES, Entry,
                                             manifest_rows, read_dataset_manifest, recorded_entries)
from cleanup_scripts.pipeline.runner import StageSummary, report

GS_SCHEME = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
DEFAULT_ENDPOINT = "https://storage.googleapis.com"
MANIFEST = "manifest.tsv"
CHUNK_QUANTUM = 256 << 10  # chunks of a resumable upload: multiples of it
DEFAULT_CHUNK_SIZE = 16 << 20
DEFAULT_THREADS = 8
TIMEOUT_S = (30, 300)  # connect, read
# A storage call retries a transient failure (connection refused or reset, HTTP 429/5xx) for at
# most this long in all, then fails in one line naming the endpoint (the library's is 120 s).
RETRY_TIMEOUT_S = 10.0
OBJECT_NAME_MAX_BYTES = 1024
_IP_ADDRESS = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_GOOGLE = re.compile(r"g[o0][o0]gle")
_API_ERRORS = (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError,
               requests.RequestException, InvalidResponse, DataCorruption)


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
        return f"{GS_SCHEME}{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


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
    shown = printable(url)
    bucket, _, prefix = url.removeprefix(GS_SCHEME).partition("/")
    prefix = prefix.strip("/")
    if (not url.startswith(GS_SCHEME) or not bucket
            or any(part in ("", ".", "..") for part in prefix.split("/") if prefix)):
        raise InputError(f"{shown}: not a gs://bucket/prefix URL")
    why = bucket_name_problem(bucket)
    if why:
        raise InputError(f"{shown}: invalid bucket name {bucket!r}: {why}")
    if "\r" in prefix or "\n" in prefix:
        raise InputError(f"{shown}: object names cannot contain line breaks")
    if len(prefix.encode("utf-8")) + 2 > OBJECT_NAME_MAX_BYTES:  # room for "/x" after it
        raise InputError(f"{shown}: the prefix leaves no room for object names (at most "
                         f"{OBJECT_NAME_MAX_BYTES} bytes in all)")
    return GcsUrl(bucket, prefix)


def md5_hex(md5_base64: str | None) -> str | None:
    """The hex digest of a base64 `md5Hash` from object metadata (None stays None)."""
    return base64.b64decode(md5_base64).hex() if md5_base64 else None


def md5_base64(md5_hexdigest: str) -> str:
    """The base64 form of a hex md5, as object metadata's `md5Hash` holds it."""
    return base64.b64encode(bytes.fromhex(md5_hexdigest)).decode("ascii")


def endpoint() -> str:
    """The storage endpoint requests go to: STORAGE_EMULATOR_HOST's (a scheme added if
    missing), else Google's."""
    host = os.environ.get(EMULATOR_ENV, "").strip()
    return (host if "://" in host else "http://" + host) if host else DEFAULT_ENDPOINT


@dataclass(frozen=True)
class Access:
    """How to reach the storage: credentials, project and client options, found once (a token
    is then shared by every client made from it)."""

    credentials: Credentials
    project: str | None
    options: dict[str, str] | None

    def client(self, deadline: Deadline | None = None) -> storage.Client:
        """A storage client; with `deadline`, every connection of its requests is watched by
        it and no request starts after it has passed (`transfer.watch_session`)."""
        session = None if deadline is None else watch_session(
            AuthorizedSession(self.credentials), deadline, refuse_late=True)
        return storage.Client(project=self.project, credentials=self.credentials,
                              client_options=self.options, _http=session)


def access() -> Access:
    """The emulator of STORAGE_EMULATOR_HOST without credentials, else Google's default
    credentials (InputError, in one line, when there are none)."""
    if os.environ.get(EMULATOR_ENV, "").strip():
        return Access(AnonymousCredentials(), "emulator", {"api_endpoint": endpoint()})
    try:
        credentials, project = google.auth.default(scopes=storage.Client.SCOPE)
    except auth_exceptions.DefaultCredentialsError as err:
        raise InputError("no Google Cloud credentials: run `gcloud auth application-default "
                         "login` or set GOOGLE_APPLICATION_CREDENTIALS") from err
    return Access(credentials, project, None)


def make_client() -> storage.Client:
    """A storage client of `access()`."""
    return access().client()


def retry_policy() -> "DEFAULT_RETRY":
    """The library's retry of what is transient, waiting 0.5, 1, 2, 4, 4 ... s, for at most
    RETRY_TIMEOUT_S in all (read when called, so it can be changed)."""
    return DEFAULT_RETRY.with_delay(initial=0.5, maximum=4.0, multiplier=2.0).with_timeout(
        RETRY_TIMEOUT_S)


def _api_error(where: str, err: Exception) -> InputError:
    """A one-line InputError for a failed storage call about `where`."""
    retried = isinstance(err, api_exceptions.RetryError) and err.cause is not None
    cause = err.cause if retried else err
    where = printable(where)
    if isinstance(cause, (requests.ConnectionError, requests.Timeout)):
        after = f" (retried for {RETRY_TIMEOUT_S:g} s)" if retried else ""
        return InputError(f"{where}: cannot reach the storage endpoint {printable(endpoint())}: "
                          f"{problem(cause)}{after}")
    if isinstance(cause, api_exceptions.NotFound):
        return InputError(f"{where}: not found (no such bucket or object)")
    return InputError(f"{where}: {type(cause).__name__}: {problem(cause)[:300]}")


@dataclass(frozen=True)
class RemoteObject:
    """One object: its name, size, md5 (hex; None for composite objects) and generation."""

    name: str
    size: int
    md5: str | None
    generation: int | None = None


def list_objects(url: GcsUrl, client: storage.Client | None = None) -> dict[str, RemoteObject]:
    """Every object under `url` (`gs://b/data` lists `data/...`, not `database/...`), keyed by
    its path relative to the prefix, from metadata only; folder placeholders (`…/`) left out."""
    client = client or make_client()
    objects: dict[str, RemoteObject] = {}
    try:
        for blob in client.list_blobs(url.bucket, prefix=url.prefix + "/" if url.prefix else None,
                                      retry=retry_policy(),
                                      fields="items(name,size,md5Hash,generation),nextPageToken"):
            if not blob.name.endswith("/"):
                objects[url.relative(blob.name)] = RemoteObject(
                    blob.name, int(blob.size or 0), md5_hex(blob.md5_hash), blob.generation)
    except _API_ERRORS as err:
        raise _api_error(str(url), err) from err
    return objects


def _in_threads(function: Callable, items: list, nworker: int, desc: str) -> list:
    """`function(item)` for each item in `nworker` threads (DEFAULT_THREADS when not positive),
    with a bar of files done; the results in order. Every item is attempted, then the first
    failure is raised (the other ones printed on stderr)."""
    threads = max(1, min(nworker if nworker > 0 else DEFAULT_THREADS, len(items) or 1))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(function, item) for item in items]
        for _ in tqdm(concurrent.futures.as_completed(futures), total=len(futures), desc=desc,
                      unit="file", leave=False, disable=None):
            pass
    errors = [future.exception() for future in futures if future.exception() is not None]
    for err in errors[1:]:
        print(f"error: {printable(err)}", file=sys.stderr)
    if len(errors) > 1 and isinstance(errors[0], InputError):
        raise InputError(f"{errors[0]} (and {len(errors) - 1} more failures above)")
    if errors:
        raise errors[0]
    return [future.result() for future in futures]


# ----------------------------------------------------------------------------------------------
# What an upload sends


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: its path relative to the source directory, size and md5 (hex)."""

    relative: str
    path: Path
    size: int
    md5: str | None  # None: not known yet (computed when needed)


def read_manifest(source_dir: Path) -> list[LocalFile]:
    """The files listed in `source_dir/manifest.tsv` (path, bytes, md5), then the manifest.
    InputError for a listed path that leads outside `source_dir` or is no regular file
    (`resolve_inside`), a manifest that lists no file, one of a `make preprocess` output (with
    `.state/`) that is not the one its manifest stage wrote (`read_dataset_manifest`), or a
    listed file that is missing or not of the listed size."""
    manifest = source_dir / MANIFEST
    files = []
    for path, relative, size, md5 in read_dataset_manifest(DatasetLayout(source_dir)):
        try:
            actual = path.stat().st_size
        except OSError as err:
            raise InputError(f"{path}: listed in {MANIFEST} but cannot be read "
                             f"({err.strerror})") from err
        if actual != size:
            raise InputError(f"{path}: {actual} bytes, {MANIFEST} says {size}")
        files.append(LocalFile(relative, path, size, md5))
    return files + [LocalFile(MANIFEST, manifest, manifest.stat().st_size, None)]


def local_files(source_dir: str | os.PathLike) -> list[LocalFile]:
    """What an upload of `source_dir` sends: its `manifest.tsv`'s files and the manifest when
    there is one (a `make preprocess` output, see `read_manifest`), else every file of the tree
    but hidden ones (`.state/`, `.*`) and `*.partial` downloads (`upload_tree` adds a manifest
    of them). InputError for a path leading outside it, a `manifest.tsv` that is no regular
    file, or a tree with no file to send."""
    root = Path(source_dir)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    if os.path.lexists(root / MANIFEST):
        resolve_inside(root, MANIFEST, str(root))
        return read_manifest(root)
    files = []
    for path in sorted(root.rglob("*")):
        relative = PurePosixPath(path.relative_to(root).as_posix())
        if (path.is_file() and not any(part.startswith(".") for part in relative.parts)
                and not relative.name.endswith(".partial")):
            resolve_inside(root, str(relative), str(path))
            files.append(LocalFile(str(relative), path, path.stat().st_size, None))
    if not files:
        raise InputError(f"{root}: no files to upload (nor a {MANIFEST})")
    return files


def current_md5(local: LocalFile, root: Path, recorded: dict[str, list[Entry]]) -> str:
    """The md5 of `local` as it is now: a ledger's (`recorded`: the entries of `root/.state/
    *.outputs` by path) when it recorded the file's present size and mtime, else its bytes'."""
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
    """InputError naming the first file listed with an md5 (from `manifest.tsv`) that no longer
    has it (`current_md5`, in `nworker` threads), with the manifest's, the file's and the
    bucket's md5 (or that the object is absent)."""
    root = Path(source_dir)
    recorded = recorded_entries(DatasetLayout(root))
    listed = [local for local in files if local.md5]
    actual = _in_threads(lambda local: current_md5(local, root, recorded), listed, nworker,
                         "md5")
    changed = [(local, md5) for local, md5 in zip(listed, actual) if md5 != local.md5]
    if changed:
        local, md5 = changed[0]
        remote = existing.get(local.relative)
        bucket = f"bucket md5 {remote.md5 or 'none'}" if remote else "not in the bucket"
        more = f"; {len(changed) - 1} more files changed too" if len(changed) > 1 else ""
        raise InputError(f"{local.path}: changed since {MANIFEST} was written: manifest md5 "
                         f"{local.md5}, file md5 {md5}, {bucket} ({url.child(local.relative)}); "
                         f"nothing uploaded{more}")


# ----------------------------------------------------------------------------------------------
# Transfers


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
    """`megabytes` MiB (--chunk_mb) rounded up to a multiple of 256 KiB (the unit GCS requires);
    InputError unless it is a positive number of at most 1 GiB."""
    if not 0 < megabytes <= 1024:  # also false for NaN
        raise InputError(f"--chunk_mb={megabytes}: must be more than 0 and at most 1024 (MiB)")
    size = max(1, int(megabytes * (1 << 20)))
    return -(-size // CHUNK_QUANTUM) * CHUNK_QUANTUM


def upload_file(client: storage.Client, url: GcsUrl, local: LocalFile,
                existing: RemoteObject | None, chunk_size: int) -> Transfer:
    """Upload one file unless the bucket holds it with its md5 already: the library's upload
    (one request up to 8 MiB, else resumable in `chunk_size` chunks), then the md5 the bucket
    reports is compared. InputError naming the object when it differs.

    The file's md5 goes in the object's metadata, so the bucket itself refuses other bytes (the
    library's `checksum="md5"` would send the md5 of the bytes read, which a file changed since
    its manifest was written would match).
    """
    target = url.child(local.relative)
    md5 = local.md5 or md5_file(local.path)
    if existing is not None and existing.md5 == md5 and existing.size == local.size:
        return Transfer(local.relative, local.size, "present")
    blob = client.bucket(url.bucket).blob(url.object_name(local.relative), chunk_size=chunk_size)
    blob.md5_hash = md5_base64(md5)
    try:
        blob.upload_from_filename(str(local.path), content_type="application/octet-stream",
                                  client=client, timeout=TIMEOUT_S, checksum=None,
                                  retry=retry_policy())
    except _API_ERRORS as err:
        if "md5" in str(err).lower():
            raise InputError(f"{target}: the bucket's md5 of the uploaded bytes is not {md5}, "
                             f"the md5 of {local.path} ({problem(err)[:200]})") from err
        raise _api_error(target, err) from err
    if md5_hex(blob.md5_hash) != md5:
        raise InputError(f"{target}: md5 {md5_hex(blob.md5_hash)} in the bucket after upload, "
                         f"expected {md5} ({local.path})")
    return Transfer(local.relative, local.size, "uploaded", local.size)


def upload_tree(source_dir: str | os.PathLike, url: str | GcsUrl, nworker: int = DEFAULT_THREADS,
                chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[Transfer]:
    """Upload `source_dir` (`local_files`) to `url` in `nworker` threads, skipping objects there
    with the right md5 already; one Transfer per file. Nothing is sent unless every file listed
    in its manifest still has the manifest's md5 (`check_manifest_md5s`).

    `manifest.tsv` goes up last, alone, once every file it lists is in the bucket, so a bucket
    holding the manifest holds the whole dataset; a bucket manifest that differs from it is
    deleted before any other object changes.
    """
    url = parse_gcs_url(url) if isinstance(url, str) else url
    files = local_files(source_dir)
    client = make_client()
    existing = list_objects(url, client)
    check_manifest_md5s(files, source_dir, url, existing, nworker)
    with scratch_dir("upload-manifest") as scratch:
        if not any(local.relative == MANIFEST for local in files):
            files = with_manifest(files, Path(scratch), nworker)
        commit = [local for local in files if local.relative == MANIFEST]
        data = sorted((local for local in files if local.relative != MANIFEST),
                      key=lambda local: -local.size)  # big files first: a shorter tail
        if MANIFEST in existing:
            _delete_stale_manifest(client, url, commit[0], existing)

        def send(items: list[LocalFile], desc: str) -> list[Transfer]:
            return _in_threads(lambda local: upload_file(
                client, url, local, existing.get(local.relative), chunk_size), items, nworker,
                desc)
        return send(data, "upload") + send(commit, f"upload {MANIFEST}")


def with_manifest(files: list[LocalFile], folder: Path, nworker: int) -> list[LocalFile]:
    """`files` (a tree without a manifest.tsv) with their md5s (computed in `nworker` threads),
    then a `manifest.tsv` listing them, written in `folder`: so the bucket copy of any tree has
    its commit record, and a download can tell whether it is complete."""
    md5s = _in_threads(lambda local: md5_file(local.path), files, nworker, "md5")
    files = [replace(local, md5=md5) for local, md5 in zip(files, md5s)]
    manifest = folder / MANIFEST
    manifest.write_text(MANIFEST_HEADER + "".join(
        f"{local.relative}\t{local.size}\t{local.md5}\n" for local in files), encoding="utf-8")
    return files + [LocalFile(MANIFEST, manifest, manifest.stat().st_size, None)]


def _delete_stale_manifest(client: storage.Client, url: GcsUrl, manifest: LocalFile,
                           existing: dict[str, RemoteObject]) -> None:
    """Delete the bucket's manifest unless it is `manifest` (and drop it from `existing`)."""
    remote = existing[MANIFEST]
    if (remote.size, remote.md5) == (manifest.size, md5_file(manifest.path)):
        return
    try:
        client.bucket(url.bucket).blob(remote.name).delete(
            client=client, if_generation_match=remote.generation, retry=retry_policy(),
            timeout=TIMEOUT_S)
    except api_exceptions.NotFound:
        pass
    except _API_ERRORS as err:
        raise _api_error(url.child(MANIFEST), err) from err
    del existing[MANIFEST]


class _CountedWrites:
    """A `.partial` file, opened unbuffered, as the library writes the object into it: each
    write reaches the file at once (a kill keeps it) and is counted in `deadline.received`,
    which the rate floor watches. A write that fails (a full disk) is one InputError naming
    the file, the bytes so far kept to resume from."""

    def __init__(self, out: BinaryIO, deadline: Deadline) -> None:
        self._out, self._deadline = out, deadline

    def write(self, data: bytes) -> int:
        left = memoryview(data)
        try:
            while left:  # an unbuffered write may take fewer bytes than it is given
                left = left[self._out.write(left):]
        except OSError as err:
            raise write_failed(Path(self._out.name), err) from err
        self._deadline.received += len(data)
        return len(data)


def _read_object(access_: Access, url: GcsUrl, remote: RemoteObject, partial: Path,
                 start: int) -> None:
    """Write object `remote` from byte `start` on into `partial` (its first `start` bytes
    kept): the library's download in one streamed request, its bytes written as they come
    (8 KiB at a time). One transfer.Deadline bounds it, as it does an HTTP download: time for
    the object's size, and a floor on bytes per second (a dripping server is cut after
    RATE_WINDOW_S, and no retry follows)."""
    where = url.child(url.relative(remote.name))
    with Deadline(remote.size) as deadline, open(partial, "ab", buffering=0) as out, \
            contextlib.closing(access_.client(deadline)) as client:
        out.truncate(start)
        if start >= remote.size:
            return
        blob = client.bucket(url.bucket).blob(remote.name)
        try:
            with deadline.requesting():
                blob.download_to_file(_CountedWrites(out, deadline), start=start or None,
                                      if_generation_match=remote.generation,
                                      timeout=TIMEOUT_S, checksum=None, retry=retry_policy())
        except api_exceptions.PreconditionFailed as err:
            raise InputError(f"{where}: the object changed during the download; run again"
                             ) from err
        except (DeadlinePassed, *_API_ERRORS) as err:
            if deadline.passed():
                raise InputError(f"{where}: download too slow: {start + deadline.received:,} "
                                 f"of {remote.size:,} bytes after "
                                 f"{time.monotonic() - deadline.started:.1f} s "
                                 f"({deadline.describe()}){resume_hint(partial)}") from err
            raise InputError(f"{_api_error(where, err)}{resume_hint(partial)}") from err


def download_object(access_: Access, url: GcsUrl, relative: str, remote: RemoteObject,
                    dest_dir: Path) -> Transfer:
    """Download one object to `dest_dir/relative` unless it is there with its md5: into
    `.partial`, continued from its last byte (once more from byte 0 when the result is not the
    object's md5), renamed into place only with the object's md5."""
    where = url.child(relative)
    dest = resolve_inside(dest_dir, relative, where)
    if verified(dest, remote.md5, remote.size):
        return Transfer(relative, remote.size, "present")
    ensure_dir(dest.parent)
    partial = resolve_inside(dest_dir, partial_name(relative).as_posix(), where)
    held = partial.stat().st_size if partial.exists() else 0
    for start in [held, 0] if 0 < held <= remote.size else [0]:
        _read_object(access_, url, remote, partial, start)
        actual = md5_file(partial)
        if remote.md5 is None or actual == remote.md5:
            os.replace(partial, dest)
            return Transfer(relative, remote.size, "resumed" if start else "downloaded",
                            remote.size - start, start)
    partial.unlink()
    raise InputError(f"{url.child(relative)}: md5 {actual} of the download, the bucket says "
                     f"{remote.md5}; download removed")


def read_remote_manifest(client: storage.Client, url: GcsUrl, remote: RemoteObject,
                         dest_dir: Path) -> dict[str, tuple[int, str]]:
    """The bucket's `manifest.tsv` under `url` as {path: (bytes, md5)}, read into memory (at
    most MANIFEST_MAX_BYTES) with its md5 checked. InputError, in one line naming it (and the
    line), for anything that is not such a manifest, or a path that would not stay a file
    inside `dest_dir`, where it is to go (`resolve_inside`)."""
    where = url.child(MANIFEST)
    if remote.size > MANIFEST_MAX_BYTES:
        raise InputError(f"{where}: {remote.size:,} bytes, more than a manifest may have "
                         f"({MANIFEST_MAX_BYTES:,})")
    try:
        data = client.bucket(url.bucket).blob(remote.name).download_as_bytes(
            client=client, if_generation_match=remote.generation, timeout=TIMEOUT_S,
            checksum="md5", retry=retry_policy())
    except _API_ERRORS as err:
        raise _api_error(where, err) from err
    listed: dict[str, tuple[int, str]] = {}
    for number, relative, size, md5 in manifest_rows(data.decode("utf-8", "replace"), where):
        resolve_inside(dest_dir, relative, f"{where}:{number}")
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
            problems.append(f"{printable(relative)} is missing")
        elif remote.size != size or (remote.md5 is not None and remote.md5 != md5):
            problems.append(f"{printable(relative)} is {remote.size:,} bytes with md5 "
                            f"{remote.md5 or 'unknown'}, the manifest says {size:,} bytes, "
                            f"md5 {md5}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{url.child(MANIFEST)}: lists {len(listed)} files, but {problems[0]}"
                         f"{more}: an incomplete or overlapping upload; nothing downloaded")


def download_prefix(url: str | GcsUrl, dest_dir: str | os.PathLike,
                    nworker: int = DEFAULT_THREADS) -> list[Transfer]:
    """Download every object under `url` to `dest_dir` (same relative paths) in `nworker`
    threads; one Transfer per file. Nothing is downloaded unless the prefix holds a
    `manifest.tsv` (an upload sends it last: without it, the upload did not finish) and every
    file it lists is there (`check_complete`); the manifest comes last."""
    url = parse_gcs_url(url) if isinstance(url, str) else url
    access_ = access()
    client = access_.client()
    objects = list_objects(url, client)
    if not objects:
        raise InputError(f"{url}: no objects")
    if MANIFEST not in objects:
        raise InputError(f"{url}: holds no {MANIFEST}, which an upload sends last: an upload "
                         f"that did not finish (run it again), or not a copy made by "
                         f"cleanup_scripts.artifacts.upload; nothing downloaded")
    check_complete(url, read_remote_manifest(client, url, objects[MANIFEST], Path(dest_dir)),
                   objects)
    dest_dir = ensure_dir(dest_dir)
    data = sorted((relative for relative in objects if relative != MANIFEST),
                  key=lambda relative: -objects[relative].size)

    def fetch(items: list[str], desc: str) -> list[Transfer]:
        return _in_threads(lambda relative: download_object(
            access_, url, relative, objects[relative], dest_dir), items, nworker, desc)
    return fetch(data, "download") + fetch([MANIFEST], f"download {MANIFEST}")


def describe(transfers: Iterable[Transfer], verb: str, where: str) -> str:
    """One line: how many files were moved, resumed, or already there."""
    transfers = list(transfers)
    present = sum(t.action == "present" for t in transfers)
    resumed = [f"{printable(t.relative)} resumed at byte {t.resumed_from}" for t in transfers
               if t.action == "resumed"]
    shown = f" ({', '.join(resumed[:5])}{', …' if len(resumed) > 5 else ''})" if resumed else ""
    return (f"{verb}: {len(transfers)} files {printable(where)}: {len(transfers) - present} "
            f"transferred{shown}, {present} already there with the right md5")


def summary(stage: str, transfers: list[Transfer], started: float) -> StageSummary:
    """The stage summary: files, files transferred now, and bytes sent by this run."""
    return StageSummary(stage, len(transfers), sum(t.action != "present" for t in transfers),
                        sum(t.sent for t in transfers), started)


def main(argv: list[str] | None = None) -> None:
    """CLI: `ls URL` (path, bytes, md5 of each object) or `download URL DIR`."""
    parser = argparse.ArgumentParser(
        description="List or download a gs://bucket/prefix (md5-verified, resumable).")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("ls", help="Print path, bytes and md5 of every object.").add_argument(
        "url", help="gs://bucket/prefix")
    download = commands.add_parser("download", help="Download every object under URL to DIR.")
    download.add_argument("url", help="gs://bucket/prefix")
    download.add_argument("directory", metavar="DIR")
    download.add_argument("--nworker", type=int, default=DEFAULT_THREADS,
                          help=f"Parallel transfers (threads; default {DEFAULT_THREADS}).")
    args = parser.parse_args(argv)
    url = parse_gcs_url(args.url)
    if args.command == "ls":
        for relative, remote in sorted(list_objects(url).items()):
            print(f"{printable(relative)}\t{remote.size}\t{remote.md5 or '-'}")
        return
    started = time.time()
    transfers = download_prefix(url, args.directory, args.nworker)
    print(describe(transfers, "download", f"from {url}"), flush=True)
    report(summary("download", transfers, started))


if __name__ == "__main__":
    exit_on_user_error(main)
