"""Ledgers of finished outputs: what a preprocess stage completed, with size, mtime and md5.

A ledger is a text file of tab-separated lines `path  bytes  mtime_ns  md5`, paths relative to
the dataset root. A line is appended (one `write` on an O_APPEND descriptor, so worker processes
can share a ledger) only after its output has been renamed to its final name; a run killed
mid-append leaves at most one torn last line, which is ignored. An output counts as finished
only while it still matches its line: a re-run skips it and redoes the rest.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from benchmark.files import md5_file
from cleanup_scripts.fileio import InputError, disk_full


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
        for line in self.path.read_text(errors="replace").splitlines():
            fields = line.split("\t")
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
