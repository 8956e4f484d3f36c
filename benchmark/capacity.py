"""What this machine can hold, and the one-line refusal of a flag that asks for more.

A flag that sizes an allocation or an output (a dupe factor, a number of records to write) is
checked against a lower bound of what it needs before anything is allocated or written:
`require_memory` against this machine's memory (`host_memory_bytes`), `require_disk` against
the free space on the disk of the output folder (`free_disk_bytes`). Each raises the project's
`InputError` naming the flag, what it asks for and what the machine has.
"""
from __future__ import annotations

import os
import shutil

from benchmark.errors import printable
from benchmark.files import InputError


def host_memory_bytes() -> int:
    """This machine's memory in bytes: its physical memory, or the cgroup's limit if lower (a
    container's)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read(64).strip()
        except (OSError, ValueError):
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def free_disk_bytes(folder: str | os.PathLike) -> int:
    """Bytes free to this process on the disk that holds `folder` (or, while it does not exist
    yet, its nearest existing parent)."""
    path = os.path.abspath(folder)
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def gigabytes(count: int) -> str:
    """A byte count for a message: "12.3 GB" (10**9 bytes)."""
    return f"{count / 1e9:,.1f} GB"


def require_memory(what: str, need: int) -> None:
    """InputError "<what> need at least N GB of memory, more than the M GB this machine has"
    when `need` bytes exceed `host_memory_bytes()` (the caller names the flag that asked:
    `benchmark.files.naming`).

    what: the things asked for ("1,000,000,000 instances"); need: a lower bound of the bytes
    they take."""
    have = host_memory_bytes()
    if need > have:
        raise InputError(f"{what} need at least {gigabytes(need)} of memory, more than "
                         f"the {gigabytes(have)} this machine has")


def require_disk(what: str, need: int, folder: str | os.PathLike) -> None:
    """InputError "<what> take at least N GB, more than the M GB free on the disk of <folder>"
    when `need` bytes exceed `free_disk_bytes(folder)`; arguments as `require_memory`'s,
    `folder` the output's."""
    have = free_disk_bytes(folder)
    if need > have:
        raise InputError(f"{what} take at least {gigabytes(need)}, more than the "
                         f"{gigabytes(have)} free on the disk of {printable(folder)}")
