"""File handling shared by every pipeline stage: input discovery, atomic outputs, errors."""
from __future__ import annotations

import contextlib
import glob
import os
from pathlib import Path
from typing import IO, Iterator


class InputError(Exception):
    """A problem with a user's input or output path; its message is one line naming the file."""


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
    Text modes default to UTF-8. Raises InputError when the directory cannot be written.
    """
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    tmp = temporary_name(path)
    try:
        handle = open(tmp, mode, **open_kwargs)
    except OSError as err:
        raise InputError(f"{path}: cannot write output ({err.strerror})") from err
    try:
        with handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create directory `path` (and parents) if needed; InputError if it cannot be made."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{path}: cannot create output directory ({err.strerror})") from err
    if not os.access(path, os.W_OK):
        raise InputError(f"{path}: output directory is not writable")
    return path
