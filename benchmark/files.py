"""Low file helpers every layer may use: atomic outputs, output folders, md5 hashing, and the
one-line errors they raise.

`atomic_output` writes beside the final name and renames only on success; `ensure_dir` makes an
output folder or says in one line why it cannot; `md5_file` hashes a file in 1 MiB chunks.
`InputError` (a `UserError`) names the file or folder at fault; `DiskFullError` says the disk
filled up while writing it.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from pathlib import Path
from typing import IO, Iterator

from tqdm import tqdm

from benchmark.errors import UserError

CHUNK_SIZE = 1 << 20
# md5_file shows a progress bar (on a terminal) for files larger than this.
_PROGRESS_MIN_BYTES = 256 << 20


class InputError(UserError):
    """A problem with a user's input or output path; its message is one line naming the file."""


class DiskFullError(InputError):
    """A write failed for want of space: no space left on the device, the disk quota reached,
    or a file larger than the file system (or the process's RLIMIT_FSIZE) allows."""


_DISK_FULL = {errno.ENOSPC: "no space left on device",
              errno.EDQUOT: "no space left on device (disk quota exceeded)",
              errno.EFBIG: "no space left on device (file too large)"}


def disk_full(path: str | os.PathLike, err: OSError) -> DiskFullError | None:
    """The one-line DiskFullError naming `path` if `err` says the disk is full, else None."""
    problem = _DISK_FULL.get(err.errno)
    return None if problem is None else DiskFullError(f"{path}: {problem}")


def temporary_name(path: str | os.PathLike) -> Path:
    """The hidden name beside `path` that a stage writes before renaming to `path`."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial-{os.getpid()}")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary file beside `path`; rename it to `path` only if the block succeeds.

    A crash or an exception leaves no file under the final name (and removes the temporary).
    Text modes default to UTF-8. Raises InputError when the directory cannot be written, and
    DiskFullError (naming `path`) when the disk fills up while it is written.
    """
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    tmp = temporary_name(path)
    try:
        handle = open(tmp, mode, **open_kwargs)
    except OSError as err:
        raise disk_full(path, err) or InputError(
            f"{path}: cannot write output ({err.strerror})") from err
    try:
        with handle:
            yield handle
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        full = disk_full(path, err) if isinstance(err, OSError) else None
        if full is not None:
            raise full from err
        raise


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create directory `path` (and parents) if needed; InputError if it cannot be made."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise disk_full(path, err) or InputError(
            f"{path}: cannot create output directory ({err.strerror})") from err
    if not os.access(path, os.W_OK):
        raise InputError(f"{path}: output directory is not writable")
    return path


def md5_file(path: str | os.PathLike, progress: bool | None = None) -> str:
    """The md5 hex digest of a file, read in 1 MiB chunks.

    `progress`: True/False forces a byte progress bar on/off; None shows one on a terminal
    for big files. Raises OSError if the file cannot be read.
    """
    digest = hashlib.md5()
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
    size = os.path.getsize(path)
    if progress is None:  # tqdm's None: shown only on a terminal
        disable = None if size >= _PROGRESS_MIN_BYTES else True
    else:
        disable = not progress
    with open(path, "rb") as handle, tqdm(total=size, unit="B", unit_scale=True, leave=False,
                                           desc=f"md5 {Path(path).name}", disable=disable) as bar:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            bar.update(count)
    return digest.hexdigest()


def verify_file(path: str | os.PathLike, expected_md5: str) -> bool:
    """True when `path` exists and its md5 equals `expected_md5` (case-insensitive)."""
    try:
        return md5_file(path) == expected_md5.lower()
    except OSError:
        return False
