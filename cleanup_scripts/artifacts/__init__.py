"""The benchmark's official files on the network and on disk: their md5s and sizes
(`checksums`, reading the `checksums/` package data), HTTP(S) fetches (`transfer`), the MLCommons
R2 bucket (`r2`), the download command (`download`), Google Cloud Storage (`storage`, `upload`),
and the `make verify` command (`verify`) with its checks of a folder (`verify_dir`) and of a
bucket copy (`verify_bucket`).

This module holds what they share: the `.partial` name, "already verified?", link-or-copy
placement, md5-checked writing, and the one-line wording of a failure's cause.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
from pathlib import Path
from typing import Iterable, Iterator

from benchmark.errors import printable
from benchmark.files import (InputError, atomic_output, disk_full, ensure_dir, md5_file,
                             temporary_name)


def _causes(err: BaseException) -> Iterator[BaseException]:
    """`err` and every exception under it: causes, contexts, urllib3's `reason`, a RetryError's
    `cause`, exceptions passed as arguments."""
    seen, stack = set(), [err]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseException) and id(item) not in seen:
            seen.add(id(item))
            yield item
            stack += [item.__cause__, item.__context__, getattr(item, "reason", None),
                      getattr(item, "cause", None), *getattr(item, "args", ())]


def problem(err: BaseException) -> str:
    """What went wrong, in one escaped line: the system's words ("[Errno 111] Connection
    refused") when an OS error lies under `err`, else `err`'s own message."""
    found = next((c for c in _causes(err) if isinstance(c, OSError) and c.errno is not None),
                 err)
    plain = found.args[0] if found.args and isinstance(found.args[0], str) else None
    text = str(found) if isinstance(found, OSError) or plain is None else plain
    return printable(" ".join(text.split()) or type(found).__name__)


def unknown_host(err: BaseException) -> bool:
    """Whether a name lookup that failed for good (the resolver does not know the host, not a
    temporary failure) lies under `err`: a retry cannot cure it."""
    return any(isinstance(c, socket.gaierror) and c.errno != socket.EAI_AGAIN
               for c in _causes(err))


def partial_name(dest: str | os.PathLike) -> Path:
    """The `.partial` file a download of `dest` writes to (and a re-run resumes)."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".partial")


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


def write_failed(partial: Path, err: OSError) -> InputError:
    """The one-line error naming the `.partial` file of a download for a write into it that
    failed with `err`: a DiskFullError ("no space left on device") or the system's words. The
    bytes it holds are kept: a re-run resumes from them."""
    return disk_full(partial, err) or InputError(f"{partial}: cannot write ({err.strerror})"
                                                 f"{resume_hint(partial)}")


def verified(path: Path, md5: str | None, size: int | None = None) -> bool:
    """Whether `path` already holds the file with md5 `md5` (and `size` bytes, when known);
    the size is compared first, so a wrong one costs no read."""
    try:
        if md5 is None or not path.is_file():
            return False
        if size is not None and path.stat().st_size != size:
            return False
        return md5_file(path) == md5
    except OSError:
        return False


def place(source: Path, dest: Path) -> None:
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


def write_checked(chunks: Iterable[bytes], dest: Path, md5: str | None, origin: str,
                  max_size: int | None = None) -> str:
    """Write `chunks` to `dest`, which takes its name only complete and, when `md5` is given,
    with that md5; returns the md5 written. InputError naming `dest` and `origin` (where the
    bytes came from), and no `dest`, on a mismatch, or as soon as the chunks bring more than
    `max_size` bytes (the writing stops there)."""
    digest = hashlib.md5()
    written = 0
    with atomic_output(dest, "wb") as out:
        for chunk in chunks:
            written += len(chunk)
            if max_size is not None and written > max_size:
                raise InputError(f"{dest}: more than {max_size:,} bytes ({origin}); stopped, "
                                 f"not kept")
            digest.update(chunk)
            out.write(chunk)
        if md5 is not None and digest.hexdigest() != md5:
            raise InputError(f"{dest}: md5 {digest.hexdigest()} is not the official {md5} "
                             f"({origin}); not kept")
    return digest.hexdigest()
