"""File handling shared by every pipeline stage: input discovery, atomic outputs, errors,
locks."""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import glob
import os
import socket
import time
from pathlib import Path
from typing import IO, Iterator


class InputError(Exception):
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


def expand_inputs(pattern: str, suffix: str = "") -> list[str]:
    """Return the sorted paths matching a glob `pattern` (with `~` expanded).

    Raises InputError when nothing matches, or when a match lacks `match + suffix`, the file a
    reference-style stage reads.
    """
    paths = sorted(glob.glob(os.path.expanduser(pattern)))
    if not paths:
        raise InputError(f"{pattern}: no input files match")
    for path in paths:
        if not os.path.isfile(path + suffix):
            raise InputError(f"{path + suffix}: input file does not exist")
    return paths


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


def _holder(descriptor: int) -> str:
    """The holder line a lock file opened as `descriptor` keeps (waiting up to a second for
    a holder that has just taken the lock to write it)."""
    for _ in range(20):
        line = os.pread(descriptor, 4096, 0).decode(errors="replace")
        if line.endswith("\n"):
            return line.strip()
        time.sleep(0.05)
    return "holder unknown"


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, directory: str | os.PathLike, what: str
                   ) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created if needed) for the block.

    The lock guards `directory` for one `what` (e.g. "preprocess") at a time. It is a
    `flock` lock: the OS releases it when the holder and every process forked from it have
    ended, however they ended (kill -9 included). The file keeps its last holder's pid, host
    and start time. If another process holds it, InputError says who, and nothing is written.
    """
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise InputError(f"{path}: cannot open lock file ({err.strerror})") from err
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{directory}: another {what} is writing into this directory "
                             f"({_holder(descriptor)}); wait for it to end or stop it") from None
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        line = f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n"
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, line.encode(), 0)
        except OSError as err:
            raise disk_full(path, err) or InputError(
                f"{path}: cannot write lock file ({err.strerror})") from err
        yield
    finally:
        os.close(descriptor)
