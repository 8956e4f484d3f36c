"""File handling shared by every pipeline stage: input discovery, atomic outputs, errors,
locks.

Atomic outputs, output folders and their errors live in `benchmark.files` (one home for every
layer) and are re-exported here for the pipeline's stages."""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import glob
import os
import socket
import stat
import time
from typing import Iterator

from benchmark.errors import printable  # noqa: F401 - the one escaping, for this package
from benchmark.files import (DiskFullError, InputError, atomic_output, disk_full, ensure_dir,
                             file_kind, open_output, temporary_name)

__all__ = ["DiskFullError", "InputError", "atomic_output", "disk_full", "ensure_dir",
           "exclusive_lock", "expand_inputs", "printable", "refuse_special_file",
           "require_regular_file", "temporary_name"]

def refuse_special_file(path: str | os.PathLike) -> None:
    """InputError "<path>: is not a regular file (a FIFO)" if `path` is a device, FIFO or
    socket; nothing for a regular file, a folder or a missing path (the caller's open() names
    those). Only stat()ed: a FIFO cannot block this, nor /dev/zero feed it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"{printable(path)}: is not a regular file ({file_kind(mode)})")


def require_regular_file(path: str | os.PathLike, what: str = "input file") -> None:
    """InputError naming `path` unless it is a regular file (or a link to one): "does not
    exist", "is a directory", or "is not a regular file (a FIFO)" for a device, FIFO or
    socket. Only stat()ed, never opened: a FIFO cannot block this, nor /dev/zero feed it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{printable(path)}: {what} does not exist") from None
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read {what} ({err.strerror})") from err
    if stat.S_ISDIR(mode):
        article = "an" if what[:1] in "aeiou" else "a"
        raise InputError(f"{printable(path)}: is a directory, not {article} {what}")
    if not stat.S_ISREG(mode):
        raise InputError(f"{printable(path)}: is not a regular file ({file_kind(mode)})")


def expand_inputs(pattern: str, suffix: str = "") -> list[str]:
    """Return the sorted paths matching a glob `pattern` (with `~` expanded).

    Raises InputError when nothing matches, or when `match + suffix`, the file a
    reference-style stage reads, is missing or no regular file (`require_regular_file`).
    """
    paths = sorted(glob.glob(os.path.expanduser(pattern)))
    if not paths:
        raise InputError(f"{printable(pattern)}: no input files match")
    for path in paths:
        require_regular_file(path + suffix)
    return paths


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
    and start time. If another process holds it, InputError says who, and nothing is written;
    a link or a special file at `path` is RefusedOutput naming it (never followed nor opened).
    """
    try:
        descriptor = open_output(path)
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
