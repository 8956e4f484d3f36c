"""The benchmark's artifacts on the network and on disk: the GCS client (`storage`), official
downloads (`download`), bucket uploads (`upload`) and md5 checks of a folder or a bucket copy
(`verify`, `verify_dir`, `verify_bucket`). The tables of official md5s and sizes, and where
each artifact may sit, are `cleanup_scripts.checksums`.

This module holds what the transfers share: the `.partial` name, the "already verified?"
check, link-or-copy placement, and the wording of failures.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

from benchmark.files import md5_file
from cleanup_scripts.fileio import InputError, disk_full, ensure_dir, temporary_name


class Retryable(Exception):
    """A transient failure of one network request (connection error, HTTP 5xx or 429, a transfer
    cut short): the caller waits and tries again, resuming where it stopped."""


def shown(text: object) -> str:
    """`text` as an error line may carry it: unchanged when printable, else its repr (line
    breaks, escape sequences and other control characters escaped), so nothing a server, a
    bucket or a file sent reaches the terminal raw."""
    text = str(text)
    return text if text.isprintable() else repr(text)


def causes(err: BaseException) -> Iterator[BaseException]:
    """`err` and every exception under it: causes, contexts, a RetryError's last failure,
    urllib3's `reason`, exceptions passed as arguments."""
    seen, stack = set(), [err]
    while stack:
        item = stack.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        stack += [item.__cause__, item.__context__, getattr(item, "reason", None),
                  getattr(item, "cause", None), *getattr(item, "args", ())]


def problem(err: BaseException) -> str:
    """What went wrong, in one escaped line: the system's words ("[Errno 111] Connection
    refused") when an OS error lies under `err`, else `err`'s own message."""
    found = next((c for c in causes(err) if isinstance(c, OSError) and c.errno is not None),
                 err)
    plain = found.args[0] if found.args and isinstance(found.args[0], str) else None
    text = str(found) if isinstance(found, OSError) or plain is None else plain
    return shown(" ".join(text.split()) or type(found).__name__)


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
