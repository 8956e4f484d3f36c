"""The state files of `make preprocess` under OUT/.state/.

- a stage's markers: `<stage>.started` holds its key while it runs; `<stage>` holds its key,
  then a `path<TAB>bytes` line per output it made (relative to OUT), once it finished;
- a ledger (`manifest.outputs`, `import_results.md5s`): `path<TAB>bytes<TAB>mtime_ns<TAB>md5`
  lines, an md5 to trust while its file keeps its size and mtime;
and OUT/manifest.tsv (`manifest_text`, `manifest_rows`): a `path<TAB>bytes<TAB>md5` header,
then one such row per output.

A damaged state file counts as never written: it is removed with a warning.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator
from pathlib import Path

from absl import logging

from benchmark.files import RefusedFile, md5_file, read_regular, resolve_inside
from cleanup_scripts.fileio import InputError, atomic_output, printable
from cleanup_scripts.layout import DatasetLayout

# A state file holds a key and a short line per output: anything longer is damage.
STATE_LIMIT = 16 << 20
MANIFEST_HEADER = "path\tbytes\tmd5\n"
MANIFEST_MAX_BYTES = 64 << 20  # a manifest.tsv is read into memory: this much at most


class DamagedState(InputError):
    """A state file whose bytes are not a state (see `read_state`)."""


def read_state(path: Path, remove_damaged: bool = True) -> str | None:
    """The text of the state file `path`, or None when there is none.

    A damaged one (not UTF-8, NUL bytes, over STATE_LIMIT bytes) counts as never written: it is
    removed with a warning naming it (without `remove_damaged`: DamagedState, and it is kept).
    A folder, FIFO or device there is an InputError naming it, never opened.
    """
    try:
        data = read_regular(path, STATE_LIMIT)
        problem = "NUL bytes" if b"\0" in data else None
        if problem is None:
            return data.decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except RefusedFile as err:
        if not err.too_large:
            raise
        problem = "longer than a state file can be"
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read state file ({err.strerror})") from err
    return _damaged(path, problem, remove_damaged)


def _damaged(path: Path, problem: str, remove: bool) -> None:
    """Warn and remove the damaged state file `path` (DamagedState when not `remove`)."""
    if not remove:
        raise DamagedState(f"{printable(path)}: damaged state file ({problem})")
    logging.warning("%s: damaged state file (%s); removed: it counts as never written, so its "
                    "work is redone", printable(path), problem)
    path.unlink(missing_ok=True)


def write_state(path: Path, text: str) -> None:
    """Replace the state file `path` by `text`, atomically."""
    with atomic_output(path) as out:
        out.write(text)


def read_marker(path: Path, root: Path) -> tuple[str, dict[str, int]] | None:
    """(key, {output relative to `root` (OUT): bytes}) of a finished stage's marker; None when
    there is none or it is damaged (removed with a warning).

    A well-formed line naming a path that leaves `root`, or something there that is not a
    regular file, is an InputError naming the marker and the line (`resolve_inside`): a stage
    never writes one, so the folder was altered by hand or by someone else, and the run stops
    before it removes or reads anything a record names.
    """
    text = read_state(path)
    if text is None:
        return None
    key, *lines = text.split("\n")
    outputs = {}
    for number, line in enumerate(lines, start=2):
        if not line:
            continue
        name, _, size = line.rpartition("\t")
        if not (name and size.isdigit()):
            return _damaged(path, "not a stage record", True)
        resolve_inside(root, name, f"{printable(path)}:{number}")
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
    """Replace the ledger `path` by `entries` ({file name: Entry}), atomically."""
    write_state(path, "".join(f"{name}\t{entry.size}\t{entry.mtime_ns}\t{entry.md5}\n"
                              for name, entry in entries.items()))


@dataclass(frozen=True)
class OutputLedger:
    """The ledger at `path` of files under `root` (named relative to it)."""

    path: Path
    root: Path

    def entries(self) -> dict[str, Entry]:
        """The recorded files ({name: Entry}); none when the ledger is absent or damaged, and
        a malformed line is skipped."""
        rows = [line.split("\t") for line in (read_state(self.path) or "").splitlines()]
        return {row[0]: Entry(int(row[1]), int(row[2]), row[3]) for row in rows
                if len(row) == 4 and row[1].isdigit() and row[2].isdigit() and len(row[3]) == 32}


def recorded_entries(layout: DatasetLayout) -> dict[str, list[Entry]]:
    """{path relative to OUT: its Entry in each `.state/*.outputs` ledger that records it}."""
    recorded: dict[str, list[Entry]] = {}
    for ledger in sorted(layout.state_dir.glob("*.outputs")):
        for relative, entry in OutputLedger(ledger, layout.root).entries().items():
            recorded.setdefault(relative, []).append(entry)
    return recorded


def manifest_text(entries: dict[str, Entry]) -> str:
    """The text of a manifest.tsv listing `entries` ({path relative to OUT: Entry})."""
    return MANIFEST_HEADER + "".join(f"{name}\t{entry.size}\t{entry.md5}\n"
                                     for name, entry in entries.items())


def manifest_rows(text: str, where: str) -> Iterator[tuple[int, str, int, str]]:
    """(line number, path, bytes, md5) of each row of a manifest.tsv's `text` (its header
    skipped, blank lines too); InputError naming `where` and the line for any other row that is
    not `path<TAB>bytes<TAB>md5`."""
    for number, line in enumerate(text.splitlines()[1:], start=2):
        fields = line.split("\t")
        if not line.strip():
            continue
        if (len(fields) != 3 or not fields[1].isdigit()
                or not re.fullmatch(r"[0-9a-fA-F]{32}", fields[2])):
            raise InputError(f"{where}:{number}: expected 'path<TAB>bytes<TAB>md5': "
                             f"{printable(line[:60])}")
        yield number, fields[0], int(fields[1]), fields[2].lower()


def read_manifest_rows(path: Path) -> list[tuple[int, str, int, str]]:
    """The rows (`manifest_rows`) of the manifest.tsv at `path`, read whole: InputError naming
    it when it is not a regular file, holds more than MANIFEST_MAX_BYTES, is not UTF-8 or has a
    malformed row."""
    try:
        text = read_regular(path, MANIFEST_MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{printable(path)}: cannot read the manifest (not UTF-8 text)") from err
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read the manifest ({err.strerror})") from err
    return list(manifest_rows(text, str(path)))
