"""The state files of `make preprocess` under OUT/.state/, read so that damage never stops a run.

- A stage's marker (`<stage>.started`, then `<stage>`): its key on the first line; a finished
  one then lists each output it made as `path<TAB>bytes` (paths relative to OUT).
- A ledger (`manifest.outputs`, `import_results.md5s`): `path<TAB>bytes<TAB>mtime_ns<TAB>md5`
  lines, which let a reader trust an md5 while a file keeps its size and mtime.

A damaged state file counts as never written (its stage runs again, with a warning); a torn or
malformed ledger line is skipped.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from absl import logging

from benchmark.files import md5_file
from cleanup_scripts.fileio import InputError, atomic_output, disk_full, printable

# A marker holds a key and one short line per output: anything longer is damage.
STATE_LIMIT = 16 << 20
# The longest ledger line read whole (a path, three numbers); a longer one is a torn line.
LINE_LIMIT = 64 << 10


class DamagedState(InputError):
    """A state file whose bytes are not a state (see `read_state`)."""


def _damaged(path: Path, problem: str, remove: bool) -> None:
    """Warn and remove the damaged state file `path` (DamagedState when not `remove`)."""
    if not remove:
        raise DamagedState(f"{printable(path)}: damaged state file ({problem})")
    logging.warning("%s: damaged state file (%s); removed: its stage runs again",
                    printable(path), problem)
    path.unlink(missing_ok=True)


def read_state(path: Path, remove_damaged: bool = True) -> str | None:
    """The text of the state file `path`, or None when there is none.

    A damaged one (not UTF-8, NUL bytes, more than STATE_LIMIT bytes) counts as never written:
    removed with a warning naming it (without `remove_damaged`: DamagedState, and it is kept).
    Something other than a regular file there (a folder, a FIFO) is an InputError naming it,
    never opened, so nothing blocks.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise InputError(f"{printable(path)}: state file is not a regular file; remove it "
                             f"and run again")
        with open(path, "rb") as handle:
            data = handle.read(STATE_LIMIT + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read state file ({err.strerror})") from err
    problem = "longer than a state file can be" if len(data) > STATE_LIMIT else \
        "NUL bytes" if b"\0" in data else None
    if problem is None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
    _damaged(path, problem, remove_damaged)
    return None


def write_state(path: Path, text: str) -> None:
    """Replace the state file `path` by `text`, atomically."""
    with atomic_output(path) as out:
        out.write(text)


def read_marker(path: Path) -> tuple[str, dict[str, int]] | None:
    """(key, {output: bytes}) of a finished stage's marker; None when there is none or it is
    damaged (removed with a warning)."""
    text = read_state(path)
    if text is None:
        return None
    key, *lines = text.split("\n") if text else [""]
    outputs = {}
    for line in filter(None, lines):
        name, _, size = line.rpartition("\t")
        if not (name and size.isdigit()):
            _damaged(path, "not a stage record", True)
            return None
        outputs[name] = int(size)
    return key, outputs


def write_marker(path: Path, key: str, root: Path, outputs: list[Path]) -> None:
    """Mark a stage finished with `key`, listing its `outputs` (under `root`) and their sizes."""
    write_state(path, key + "\n" + "".join(
        f"{output.relative_to(root)}\t{output.stat().st_size}\n" for output in outputs))


@dataclass(frozen=True)
class Entry:
    """A file as recorded: size in bytes, mtime in ns, md5 hex."""

    size: int
    mtime_ns: int
    md5: str

    @classmethod
    def of(cls, path: str | os.PathLike, md5: str | None = None) -> "Entry":
        """`path` as it is now (its md5 computed unless given)."""
        info = os.stat(path)
        return cls(info.st_size, info.st_mtime_ns, md5 or md5_file(path, progress=False))

    def vouches_for(self, path: str | os.PathLike) -> bool:
        """Whether `path` still has the recorded size and mtime (so, presumably, the md5)."""
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return False
        return (info.st_size, info.st_mtime_ns) == (self.size, self.mtime_ns)


def write_entries(path: Path, entries: dict[str, Entry]) -> None:
    """Replace the ledger `path` by `entries` ({path: Entry}), atomically."""
    write_state(path, "".join(f"{name}\t{entry.size}\t{entry.mtime_ns}\t{entry.md5}\n"
                              for name, entry in entries.items()))


@dataclass(frozen=True)
class OutputLedger:
    """The ledger at `path` of files under `root` (named relative to it)."""

    path: Path
    root: Path

    def record(self, output: str | os.PathLike) -> Entry:
        """Hash the file `output` and append its line (one write: processes may share a
        ledger); returns what was recorded."""
        entry = Entry.of(output)
        name = Path(output).resolve().relative_to(self.root.resolve())
        line = f"{name}\t{entry.size}\t{entry.mtime_ns}\t{entry.md5}\n".encode()
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

    def entries(self) -> dict[str, Entry]:
        """Recorded files (path -> Entry); later lines win, torn or malformed lines are
        skipped."""
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
