"""The state files of `make preprocess` under OUT/.state/.

- a stage's markers: `<stage>.started` holds its key while it runs; `<stage>` holds its key,
  then a `path<TAB>bytes` line per output it made (relative to OUT), once it finished;
- a ledger (`manifest.outputs`, `import_results.md5s`): `path<TAB>bytes<TAB>mtime_ns<TAB>md5`
  lines, an md5 to trust while its file keeps its size and mtime;
and OUT/manifest.tsv (`manifest_text`, `manifest_rows`): a `path<TAB>bytes<TAB>md5` header,
then one such row per output; `write_manifest` writes it with `manifest.outputs` and
`manifest.record` (the manifest's own ledger line), which `read_dataset_manifest` holds it to.

A damaged state file counts as never written: it is removed with a warning.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from absl import logging

from benchmark.errors import printable
from benchmark.files import (InputError, RefusedFile, atomic_output, md5_file, read_regular,
                             resolve_inside)
from cleanup_scripts.pipeline.layout import DatasetLayout

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


def manifest_rows(text: str, where: str) -> list[tuple[int, str, int, str]]:
    """(line number, path, bytes, md5) of each row of a manifest.tsv's `text` (blank lines
    skipped). InputError naming `where` (and the line) when the first line is not the header,
    a row is not `path<TAB>bytes<TAB>md5`, or there is no row: a manifest lists at least one
    file, so an emptied one never passes for a dataset of none."""
    lines = text.splitlines()
    if lines and lines[0] != MANIFEST_HEADER.rstrip("\n"):
        raise InputError(f"{where}: not a manifest (its first line must be "
                         f"{MANIFEST_HEADER.rstrip()!r})")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if not line.strip():
            continue
        if (len(fields) != 3 or not fields[1].isdigit()
                or not re.fullmatch(r"[0-9a-fA-F]{32}", fields[2])):
            raise InputError(f"{where}:{number}: expected 'path<TAB>bytes<TAB>md5': "
                             f"{printable(line[:60])}")
        rows.append((number, fields[0], int(fields[1]), fields[2].lower()))
    if not rows:
        raise InputError(f"{where}: lists no files (a manifest lists every file of its "
                         f"dataset); not a dataset")
    return rows


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
    return manifest_rows(text, str(path))


def write_manifest(layout: DatasetLayout, entries: dict[str, Entry]) -> None:
    """Write OUT/manifest.tsv listing `entries` ({path relative to OUT: Entry}), with its two
    records in `.state/`: `manifest.outputs` (the entries) before it, and `manifest.record`
    (its own size, mtime and md5) after it, each atomically."""
    write_entries(layout.state_dir / "manifest.outputs", entries)
    with atomic_output(layout.manifest) as out:
        out.write(manifest_text(entries))
    write_entries(layout.manifest_record, {layout.manifest.name: Entry.of(layout.manifest)})


def read_dataset_manifest(layout: DatasetLayout) -> list[tuple[Path, str, int, str]]:
    """(file, path as listed, bytes, md5) of each row of OUT/manifest.tsv (`read_manifest_rows`).
    Every row's path is checked first (`resolve_inside`: nothing it names is read); then, in a
    `make preprocess` output (a folder with `.state/`), the manifest is held to what the
    manifest stage recorded (`_check_record`). InputError, one line, for any of it."""
    rows = read_manifest_rows(layout.manifest)
    files = [resolve_inside(layout.root, name, f"{layout.manifest}:{number}")
             for number, name, _, _ in rows]
    if layout.state_dir.is_dir():
        _check_record(layout, rows)
    return [(file, name, size, md5) for file, (_, name, size, md5) in zip(files, rows)]


def _check_record(layout: DatasetLayout, rows: list[tuple[int, str, int, str]]) -> None:
    """InputError, one line naming OUT/manifest.tsv, unless it is the manifest `write_manifest`
    wrote: its size and md5 those `.state/manifest.record` holds, and its `rows` the files of
    `.state/manifest.outputs`. A manifest emptied, cut or edited since, or one without its
    record (the manifest stage did not finish, or an older version ran it), is refused."""
    manifest, record_path = layout.manifest, layout.manifest_record
    redo = "delete it and run make preprocess again to rewrite it"
    record = OutputLedger(record_path, layout.root).entries().get(manifest.name)
    if record is None:
        raise InputError(f"{manifest}: no record of it in {record_path}, so nothing shows it is "
                         f"the manifest the build wrote (its manifest stage did not finish, or "
                         f"an older version ran it): run make preprocess again")
    try:
        actual = (manifest.stat().st_size, md5_file(manifest, progress=False))
    except OSError as err:
        raise InputError(f"{manifest}: cannot read the manifest ({err.strerror})") from err
    if actual != (record.size, record.md5):
        raise InputError(f"{manifest}: {actual[0]:,} bytes, md5 {actual[1]}; the manifest stage "
                         f"wrote {record.size:,} bytes, md5 {record.md5} ({record_path}): "
                         f"changed since; {redo}")
    listed = {name: (size, md5) for _, name, size, md5 in rows}
    ledger = layout.state_dir / "manifest.outputs"
    recorded = {name: (entry.size, entry.md5)
                for name, entry in OutputLedger(ledger, layout.root).entries().items()}
    if listed != recorded:
        first = min(set(listed.items()) ^ set(recorded.items()))[0]
        raise InputError(f"{manifest}: lists {len(listed)} files, {ledger} recorded "
                         f"{len(recorded)} when it was written (first difference: "
                         f"{printable(first)}); {redo}")
