"""The import_results stage of `make preprocess --results_text=DIR`: the official results/ text
(its parts, eval.txt and eval.md5), checked against the official md5s, becomes OUT/results:
DIR itself when it is OUT/results ("in place", never removed), else hard links or copies.
The md5s of DIR's files (by real path) are kept in a ledger: a re-run hashes only files
touched since, and a later build from a dump knows whether OUT/results is DIR.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

from absl import logging

from benchmark import files
from benchmark.files import InputError, ensure_dir, refuse_special_file
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts import place
from cleanup_scripts.pipeline.layout import DatasetLayout
from cleanup_scripts.pipeline.ledger import (DamagedState, Entry, OutputLedger, read_state,
                                             write_entries)
from cleanup_scripts.pipeline.runner import StageProgress, StageSummary, map_in_workers, total_bytes

PART_NAME = re.compile(r"part-\d+-of-\d+")
EVAL_FILES = ("eval.txt", "eval.md5")  # eval.md5 is taken when DIR has it; eval.txt must be


def text_names(folder: Path) -> list[str]:
    """The files of an official results/ folder to import, sorted: eval.txt, eval.md5 (when
    present) and every part-N-of-M. InputError naming `folder` and what it lacks, or a device,
    FIFO or socket among them (never opened)."""
    if not folder.is_dir():
        raise InputError(f"{folder}: results text directory does not exist" if not
                         folder.exists() else f"{folder}: is not a directory")
    names = sorted(path.name for path in folder.iterdir() if (
        PART_NAME.fullmatch(path.name) or path.name in EVAL_FILES) and _regular(path))
    missing = [what for what, present in (
        ("no part-*-of-* files", any(PART_NAME.fullmatch(name) for name in names)),
        ("no eval.txt", "eval.txt" in names)) if not present]
    if missing:
        raise InputError(f"{folder}: {' and '.join(missing)}; expected the official "
                         f"results/ text (make download ARTIFACTS=results)")
    return names


def _regular(path: Path) -> bool:
    refuse_special_file(path)
    return path.is_file()


def imported_files(layout: DatasetLayout) -> list[Path]:
    """The official text files in OUT/results (what import_results places)."""
    return sorted(path for path in layout.results_dir.glob("*")
                  if PART_NAME.fullmatch(path.name) or path.name in EVAL_FILES)


def in_place(layout: DatasetLayout, folder: str) -> bool:
    """Whether the results text `folder` is OUT/results itself (`make download DIR=D`, then
    `make preprocess RESULTS=D/results OUT=D`)."""
    return bool(folder) and os.path.realpath(folder) == os.path.realpath(layout.results_dir)


def imported_in_place(layout: DatasetLayout) -> bool:
    """Whether OUT/results holds official text used in place by the last import (the md5
    ledger names files there); InputError when the ledger is damaged: then there is no
    telling, and that text must never be removed."""
    try:
        recorded = read_state(layout.results_md5s, remove_damaged=False) or ""
    except DamagedState as err:
        raise InputError(f"{err}: there is no telling whether results/ is official text used "
                         f"in place; remove it (and results/ unless it is that text) and run "
                         f"again") from err
    return any(in_place(layout, os.path.dirname(line.split("\t")[0]))
               for line in recorded.splitlines())


def _md5(path: str) -> str:
    return files.md5_file(path, progress=False)


def text_digest(layout: DatasetLayout, folder: str, nworker: int) -> str:
    """The md5 of the names and md5s of the results text `folder`'s files, each checked
    against its official md5 (InputError naming the first that differs), and noted in the
    ledger. InputError too for a `folder` inside OUT other than OUT/results (the pipeline may
    remove it). When `folder` is gone the ledger stands (OUT/results holds its files)."""
    source, root = Path(os.path.realpath(folder)), Path(os.path.realpath(layout.root))
    if (source == root or root in source.parents) and not in_place(layout, folder):
        raise InputError(f"{folder}: inside the output directory {layout.root}; give a "
                         f"folder outside it, or {layout.results_dir} itself")
    recorded = OutputLedger(layout.results_md5s, layout.root).entries()
    md5s = _md5s(Path(folder), recorded, nworker) if source.exists() or not recorded else recorded
    official = {Path(artifact.path).name: artifact.md5
                for artifact in checksums.known_artifacts().values()
                if artifact.path.startswith("results/") and artifact.md5 is not None}
    for path, entry in md5s.items():
        expected = official.get(Path(path).name)
        if expected is not None and entry.md5 != expected:
            raise InputError(f"{path}: md5 {entry.md5} is not the official {expected} "
                             f"(checksums/results.md5)")
    names, before = ({Path(path).name: entry.md5 for path, entry in table.items()}
                     for table in (md5s, recorded))
    changed = sorted(set(names.items()) ^ set(before.items()))
    if before and changed:
        logging.warning("import_results: %d input(s) added, removed or changed since it "
                        "finished (first: %s); running it again with every stage after it",
                        len({name for name, _ in changed}), changed[0][0])
    if md5s != recorded:
        write_entries(layout.results_md5s, md5s)
    return hashlib.md5(json.dumps(sorted(names.items())).encode()).hexdigest()


def _md5s(folder: Path, recorded: dict[str, Entry], nworker: int) -> dict[str, Entry]:
    """{real path: Entry} of the results text `folder`'s files: the `recorded` one while it
    vouches for the file, else hashed anew (in `nworker` processes)."""
    paths = [os.path.realpath(folder / name) for name in text_names(folder)]
    todo = [path for path in paths if not (path in recorded and recorded[path].vouches_for(path))]
    hashed = dict(zip(todo, map_in_workers(_md5, todo, nworker, desc="import_results md5")))
    return {path: Entry.of(path, hashed[path]) if path in hashed else recorded[path]
            for path in paths}


def _place(job: tuple[Path, Path]) -> bool:
    """Put a DIR file at its place in OUT/results (`artifacts.place`); True when it had to
    copy it."""
    place(*job)
    return not os.path.samefile(*job)


def import_text(layout: DatasetLayout, folder: Path, nworker: int) -> StageSummary:
    """Place the files of the results text `folder` that OUT/results lacks, in `nworker`
    processes; nothing to do in place."""
    started = time.time()
    ensure_dir(layout.results_dir)
    jobs = [] if in_place(layout, str(folder)) else [
        (folder / name, layout.results_dir / name) for name in text_names(folder)
        if not (layout.results_dir / name).exists()]  # a file there is complete
    with StageProgress("import_results", len(jobs)):
        copied = map_in_workers(_place, jobs, nworker, desc="import_results")
    if any(copied):
        logging.warning("import_results: %d of %d files copied, not hard-linked (%s is on "
                        "another file system or refuses links)", sum(copied), len(jobs), folder)
    parts = sum(1 for source, _ in jobs if PART_NAME.fullmatch(source.name))
    return StageSummary("import_results", len(jobs), parts,
                        total_bytes(str(source) for source, _ in jobs), started)
