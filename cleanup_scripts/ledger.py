"""Ledgers of finished outputs: what a preprocess stage completed, with size, mtime and md5.

A ledger is a text file of tab-separated lines `path  bytes  mtime_ns  md5`, paths relative to
the dataset root. A line is appended (one `write` on an O_APPEND descriptor, so worker processes
can share a ledger) only after its output has been renamed to its final name; a run killed
mid-append leaves at most one torn last line, which is ignored. An output counts as finished
only while it still matches its line: a re-run skips it and redoes the rest.

The other state files (a stage's marker holding its key, the folder a run imported) are read
through `read_state`: one that is damaged counts as never written, so its stage runs again.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from absl import logging

from benchmark.files import md5_file
from cleanup_scripts.fileio import InputError, disk_full, printable

# A state file holds a key (32 hex digits) or a folder's path: anything longer is damage.
STATE_LIMIT = 64 << 10
# The longest ledger line read whole (a path, three numbers); a longer one is a torn line.
LINE_LIMIT = 64 << 10


class DamagedState(InputError):
    """A state file whose bytes are not a state (see `read_state`)."""


def read_state(path: Path, remove_damaged: bool = True) -> str | None:
    """The text of the state file `path`, or None when there is none.

    A damaged one (bytes that are not UTF-8, NUL bytes, more than STATE_LIMIT bytes) counts as
    never written: it is removed, with a warning naming it, and the stage it stands for runs
    again (without `remove_damaged`: DamagedState naming it, and it is kept). Something other than a regular file in its place (a folder, a FIFO, a device) is an
    InputError naming it; it is never opened for reading, so nothing blocks or runs long.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read state file ({err.strerror})") from err
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{printable(path)}: state file is not a regular file; remove it and "
                         f"run again")
    try:
        with open(path, "rb") as handle:
            data = handle.read(STATE_LIMIT + 1)
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read state file ({err.strerror})") from err
    problem = "longer than a state file can be" if len(data) > STATE_LIMIT else \
        "NUL bytes" if b"\0" in data else None
    if problem is None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
    if not remove_damaged:
        raise DamagedState(f"{printable(path)}: damaged state file ({problem})")
    logging.warning("%s: damaged state file (%s); removed: its stage runs again",
                    printable(path), problem)
    path.unlink(missing_ok=True)
    return None


@dataclass(frozen=True)
class Entry:
    """An output as recorded when it was finished: size in bytes, mtime in ns, md5 hex."""

    size: int
    mtime_ns: int
    md5: str


@dataclass(frozen=True)
class OutputLedger:
    """The ledger at `path` of the outputs under `root` that one stage finished."""

    path: Path
    root: Path

    def name(self, output: str | os.PathLike) -> str:
        """How `output` (a path under `root`) is named in the ledger: relative to `root`."""
        return str(Path(output).resolve().relative_to(self.root.resolve()))

    def record(self, output: str | os.PathLike) -> Entry:
        """Hash the finished file `output` and append its line; returns what was recorded."""
        stat = os.stat(output)
        entry = Entry(stat.st_size, stat.st_mtime_ns, md5_file(output, progress=False))
        line = f"{self.name(output)}\t{entry.size}\t{entry.mtime_ns}\t{entry.md5}\n".encode()
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(descriptor, line)
            finally:
                os.close(descriptor)
        except OSError as err:
            raise disk_full(self.path, err) or InputError(
                f"{self.path}: cannot write ({err.strerror})") from err
        return entry

    def record_all(self, outputs: Iterable[str | os.PathLike]) -> None:
        """`record` each of `outputs`, in order."""
        for output in outputs:
            self.record(output)

    def entries(self) -> dict[str, Entry]:
        """Recorded outputs (relative path -> Entry); later lines win, torn lines are skipped."""
        if not self.path.is_file():
            return {}
        entries = {}
        with open(self.path, "rb") as handle:
            while line := handle.readline(LINE_LIMIT):
                if len(line) == LINE_LIMIT and not line.endswith(b"\n"):
                    while (rest := handle.readline(LINE_LIMIT)) and not rest.endswith(b"\n"):
                        pass  # the rest of an over-long line
                    continue
                fields = line.decode(errors="replace").rstrip("\n").split("\t")
                if len(fields) == 4 and fields[1].isdigit() and fields[2].isdigit() \
                        and len(fields[3]) == 32:
                    entries[fields[0]] = Entry(int(fields[1]), int(fields[2]), fields[3])
        return entries

    def intact(self, output: str | os.PathLike, entries: dict[str, Entry],
               always_hash: bool) -> bool:
        """Whether `output` is recorded in `entries` and still matches its line.

        Size must match; the md5 is recomputed when `always_hash` or when the mtime changed.
        """
        entry = entries.get(self.name(output))
        try:
            stat = os.stat(output)
        except FileNotFoundError:
            return False
        if entry is None or stat.st_size != entry.size:
            return False
        if not always_hash and stat.st_mtime_ns == entry.mtime_ns:
            return True
        return md5_file(output, progress=False) == entry.md5

    def damaged(self, always_hash: bool, required: Iterable[str | os.PathLike] = ()
                ) -> list[str]:
        """Outputs that are missing or no longer match their line (relative paths): recorded
        ones, and those of `required` (paths) that were never recorded."""
        entries = self.entries()
        names = dict.fromkeys([*entries, *map(self.name, required)])
        return [name for name in names
                if not self.intact(self.root / name, entries, always_hash)]

    def reset(self) -> None:
        """Forget every recorded output."""
        self.path.unlink(missing_ok=True)
