"""`make preprocess`: a Wikipedia dump to the MLPerf BERT dataset, in one resumable command.

    python -m cleanup_scripts.preprocess --output_dir=build/dataset [--dump=PATH_OR_URL]
    python -m cleanup_scripts.preprocess --output_dir=build/dataset --results_text=DIR

Stages, in order (each ends with a summary line; see cleanup_scripts.layout for the tree):
fetch (download and md5-verify the dump when it is a URL or an official file), extract
(WikiExtractor with time magic words fixed to --date), clean (cleanup_file + clean.sh),
segment (Punkt as NLTK 3.4.5), separate (eval articles), gather (parts), tfrecords
(create_pretraining_data per part and for eval.txt), eval_10k (pick_eval_samples), with --pack
pack (cleanup_scripts.pack_pretraining_data: the training parts packed together, eval_10k on
its own, into tfrecords_packed/), and manifest.

Without --dump it runs on the Wikipedia slice shipped in the repository with small-input
defaults (20 test articles, 1.5 MiB parts); with --dump the benchmark's values apply.

--results_text=DIR starts from the official preprocessed text instead (what `make download
ARTIFACTS=results` puts in DIR: part-XXXXX-of-00500, eval.txt, eval.md5): the stage
import_results replaces extract to gather. It checks the DIR files that `checksums/` has an
official md5 for, then hard-links every part, eval.txt and eval.md5 into OUT/results (copies them
where a link cannot be made, e.g. across file systems), and tfrecords, eval_10k and manifest
follow with the benchmark's values. That route is bit-exact with the official TFRecords. The
links are the very files of DIR: nothing here writes into them in place. Switching one output
directory between the two routes removes the other route's outputs (text/, work/, results/) and
redoes every later stage. A DIR file changed, added or removed since it was imported makes
import_results and every later stage run again.

A finished stage records its parameters under .state/, and every finished output its size,
mtime and md5 (cleanup_scripts.ledger). A re-run with the same parameters skips a stage whose
outputs still match; it redoes only the outputs that are missing or changed (a part deleted or
truncated since), and a stage killed midway keeps the outputs it finished (clean, segment,
import_results and tfrecords work file by file). A stage whose parameters (or an earlier
stage's) changed runs again from scratch with everything after it.

Every flag is range-checked before the first stage. One run at a time writes into an output
directory: a run holds the lock `.state/lock` (released by the OS however the run ends), and a
second one stops with one line naming the holder. A full disk stops the run with one line
naming the file being written; after freeing space the same command goes on from there.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from absl import app, flags, logging

from benchmark import constants, files
from cleanup_scripts import SAMPLE_DUMP, VOCAB_FILE
from cleanup_scripts import create_pretraining_data as pretraining
from cleanup_scripts import checksums, extract, pick_eval_samples
from cleanup_scripts.artifacts import download
from cleanup_scripts.clean import write_cleaned
from cleanup_scripts.cleanup_file import stripped_bytes
from cleanup_scripts.do_gather import GatherSource, gather
from cleanup_scripts.do_sentence_segmentation import segment_file
from cleanup_scripts.fileio import (DiskFullError, InputError, atomic_output, disk_full,
                                    ensure_dir, exclusive_lock, printable,
                                    require_regular_file, special_file_kind, temporary_name)
from cleanup_scripts.layout import DatasetLayout
from cleanup_scripts.ledger import DamagedState, Entry, OutputLedger, read_state
from cleanup_scripts.pack_pretraining_data import (MAX_SEQUENCES_PER_PACK, PackOptions,
                                                   pack_files)
from cleanup_scripts.pack_pretraining_data import check_options as check_pack_options
from cleanup_scripts.packing import PackStats
from cleanup_scripts.runner import (StageProgress, StageSummary, map_in_workers, report, say,
                                    total_bytes, worker_count)
from cleanup_scripts.seperate_test_set import separate_files

SAMPLE_NUM_TEST_ARTICLES = 20
SAMPLE_BLOCK_SIZE_MB = 1.5
MAX_NWORKER = 1024


@dataclass(frozen=True)
class Options:
    """Every parameter of the pipeline; all but `nworker` and `verify_outputs` decide its
    output."""

    dump: str
    vocab_file: str
    do_lower_case: bool
    date: str
    num_test_articles: int
    seed: int
    block_size: float
    max_seq_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    short_seq_prob: float
    dupe_factor: int
    random_seed: int
    num_eval_examples: int
    nworker: int
    results_text: str = ""  # the official results/ text folder; "" builds from `dump`
    verify_outputs: bool = False
    pack: bool = False  # also write tfrecords_packed/ (the pack stage)
    max_sequences_per_pack: int = MAX_SEQUENCES_PER_PACK


StageBody = Callable[[DatasetLayout, Options, OutputLedger], StageSummary]
SourceCheck = Callable[[DatasetLayout, Options, OutputLedger], list[str]]


@dataclass
class Stage:
    """A named step; `params` lists the Options fields its output depends on.

    `run(layout, options, ledger)` records each output in `ledger` once it is complete. A stage
    with an `output_dir` works file by file: restarted with the same parameters it skips the
    outputs its ledger shows intact; run afresh, that directory is emptied first. A stage
    without one always redoes all its outputs. `outputs(layout)`, where the earlier stages'
    outputs decide them, lists the outputs the stage must have finished: one its ledger lacks
    is redone like a damaged one (else only the recorded outputs are checked).
    `sources_changed(layout, options, ledger)`, for a stage that reads files outside the output
    directory, names those changed since its outputs were recorded: a finished stage with any
    then runs afresh, with every stage after it.
    """

    name: str
    run: StageBody
    params: tuple[str, ...]
    output_dir: Callable[[DatasetLayout], Path] | None = None
    outputs: Callable[[DatasetLayout], list[Path]] | None = None
    sources_changed: SourceCheck | None = None


# ---- stage bodies -------------------------------------------------------------------------------

def official_artifact(name: str) -> checksums.Artifact | None:
    """The known official artifact whose file name is `name`, if any."""
    for artifact in checksums.known_artifacts().values():
        if Path(artifact.path).name == name:
            return artifact
    return None


def local_dump(dump: str) -> Path | None:
    """The path `dump` names if it is local (a path or a file:// URL); None for a URL."""
    if "://" in dump and not dump.startswith("file://"):
        return None
    return Path(dump.removeprefix("file://"))


def check_local_dump(path: Path) -> None:
    """InputError unless `path` is a regular file (a directory, a device such as /dev/zero, a
    FIFO or a missing path is no dump) that starts as a MediaWiki dump does, `</siteinfo>`
    within its first MiB (`extract.check_dump_start`: reads no more than that)."""
    require_regular_file(path, "dump file")
    extract.check_dump_start(path)


def fetch_dump(layout: DatasetLayout, options: Options) -> Path:
    """The local dump to extract: downloaded (resumably) first if `options.dump` is a URL.

    A dump named like an official artifact must have its official md5, or InputError; a full
    disk during the download is a DiskFullError naming the `.partial` file, which a re-run
    resumes.
    """
    name = Path(options.dump.split("?")[0]).name
    official = official_artifact(name)
    expected = official.md5 if official else None
    path = local_dump(options.dump)
    if path is None:
        target = layout.download_dir / name
        try:
            download.fetch(options.dump, target, expected_md5=expected,
                           expected_size=official.size if official else None)
        except OSError as err:
            full = disk_full(download.partial_name(target), err)
            if full is None:
                raise
            raise full from err
        return target
    check_local_dump(path)
    if expected is not None and not files.verify_file(path, expected):
        raise InputError(f"{path}: md5 differs from the official {expected}")
    return path


def run_extract(layout: DatasetLayout, options: Options, ledger: OutputLedger) -> StageSummary:
    started = time.time()
    dump = fetch_dump(layout, options)
    extraction = extract.extract_dump(dump, layout.text_dir, date=options.date,
                                      processes=worker_count(options.nworker))
    ledger.record_all(layout.extracted_files())
    return StageSummary("extract", extraction.files, extraction.pages, dump.stat().st_size,
                        started)


def _clean_one(job: tuple[str, str]) -> int:
    source, target = job
    return write_cleaned(stripped_bytes(source), target)


def _segment_one(job: tuple[str, str]) -> int:
    return segment_file(*job)


@dataclass(frozen=True)
class _Recorded:
    """A per-file job function that records its output (the job's second item) when done."""

    function: Callable[[tuple], int]
    ledger: OutputLedger

    def __call__(self, job: tuple) -> int:
        records = self.function(job)
        self.ledger.record(job[1])
        return records


def _unfinished(jobs: list[tuple], ledger: OutputLedger, options: Options, stage: str
                ) -> list[tuple]:
    """The jobs whose output (second item) is not recorded intact in `ledger`."""
    entries = ledger.entries()
    todo = [job for job in jobs if not ledger.intact(job[1], entries, options.verify_outputs)]
    if len(todo) < len(jobs):
        say(f"{stage}: {len(jobs) - len(todo)} of {len(jobs)} outputs already finished, kept")
    return todo


def _mirror_jobs(layout: DatasetLayout, source_stage: str | None, target_stage: str
                 ) -> list[tuple[str, str]]:
    sources = layout.extracted_files() if source_stage is None else layout.mirrors(source_stage)
    jobs = []
    for source, target in zip(sources, layout.mirrors(target_stage)):
        ensure_dir(target.parent)
        jobs.append((str(source), str(target)))
    return jobs


def _per_file_stage(name: str, function: Callable[[tuple[str, str]], int],
                    source_stage: str | None, target_stage: str) -> StageBody:
    def run(layout: DatasetLayout, options: Options, ledger: OutputLedger) -> StageSummary:
        started = time.time()
        jobs = _mirror_jobs(layout, source_stage, target_stage)
        if not jobs:
            raise InputError(f"{layout.text_dir}: no extracted files (text/*/wiki_??)")
        jobs = _unfinished(jobs, ledger, options, name)
        sizes = [os.path.getsize(source) for source, _ in jobs]
        with StageProgress(name, len(jobs), sum(sizes)):
            records = map_in_workers(_Recorded(function, ledger), jobs, options.nworker,
                                     desc=name, sizes=sizes)
        return StageSummary(name, len(jobs), sum(records), sum(sizes), started)
    return run


def run_separate(layout: DatasetLayout, options: Options, ledger: OutputLedger
                 ) -> StageSummary:
    started = time.time()
    shutil.rmtree(layout.work_dir("train"), ignore_errors=True)
    jobs = _mirror_jobs(layout, "sentences", "train")
    ensure_dir(layout.results_dir)
    with StageProgress("separate", len(jobs), total_bytes(s for s, _ in jobs)):
        held_out = separate_files(jobs, options.num_test_articles, options.seed,
                                  str(layout.results_dir / "eval"), options.nworker)
    ledger.record_all([target for _, target in jobs] + [layout.results_dir / "eval.txt",
                                                        layout.results_dir / "eval.md5"])
    return StageSummary("separate", len(jobs), held_out, total_bytes(s for s, _ in jobs),
                        started)


def run_gather(layout: DatasetLayout, options: Options, ledger: OutputLedger) -> StageSummary:
    started = time.time()
    for old in layout.results_dir.glob("part-*"):
        old.unlink()
    sources = [GatherSource(str(extracted), str(layout.mirror(extracted, "train")))
               for extracted in layout.extracted_files()]
    with StageProgress("gather", None, total_bytes(s.text_path for s in sources),
                       unit="parts"):
        parts = gather(sources, str(layout.results_dir), options.block_size,
                       constants.GATHER_NUM_OUTPUTS, nworker=1, nprocs=options.nworker)
    ledger.record_all(parts)
    return StageSummary("gather", len(sources), len(parts),
                        total_bytes(s.text_path for s in sources), started)


# ---- from the official results/ text (--results_text) ------------------------------------------

_PART_NAME = re.compile(r"part-\d+-of-\d+")
_EVAL_FILES = ("eval.txt", "eval.md5")  # eval.md5 is taken when DIR has it; eval.txt must be


def results_text_names(source_dir: Path) -> list[str]:
    """The files of an official results/ folder to import: eval.txt, eval.md5 (when present)
    and every part-N-of-M, sorted. InputError naming `source_dir` and what it lacks."""
    if not source_dir.is_dir():
        raise InputError(f"{source_dir}: results text directory does not exist" if not
                         source_dir.exists() else f"{source_dir}: is not a directory")
    names = sorted(path.name for path in source_dir.iterdir() if (
        _PART_NAME.fullmatch(path.name) or path.name in _EVAL_FILES) and _regular(path))
    missing = [what for what, present in (
        ("no part-*-of-* files", any(_PART_NAME.fullmatch(name) for name in names)),
        ("no eval.txt", "eval.txt" in names)) if not present]
    if missing:
        raise InputError(f"{source_dir}: {' and '.join(missing)}; expected the official "
                         f"results/ text (make download ARTIFACTS=results)")
    return names


def _regular(path: Path) -> bool:
    """Whether `path` is a regular file; False for a folder or a missing path, InputError
    naming a device, FIFO or socket (never opened: it could block or never end)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return stat.S_ISREG(mode)
    raise InputError(f"{printable(path)}: is not a regular file ({special_file_kind(mode)})")


def imports_in_place(layout: DatasetLayout, options: Options) -> bool:
    """Whether --results_text is OUT/results itself (`make download DIR=D` then `make
    preprocess RESULTS=D/results OUT=D`): its files are then used where they are, and nothing
    of that folder is ever removed."""
    return bool(options.results_text) and \
        os.path.realpath(options.results_text) == os.path.realpath(layout.results_dir)


def check_results_text_place(layout: DatasetLayout, options: Options) -> None:
    """InputError if --results_text is the output directory or inside it, other than
    OUT/results itself: the pipeline may remove what it writes there."""
    source, root = Path(os.path.realpath(options.results_text)), Path(
        os.path.realpath(layout.root))
    if (source == root or root in source.parents) and not imports_in_place(layout, options):
        raise InputError(f"{options.results_text}: inside the output directory {layout.root}; "
                         f"give a folder outside it, or {layout.results_dir} itself")


def official_results_md5s() -> dict[str, str]:
    """{file name in results/: official md5} of the results/ files `checksums/` knows."""
    return {Path(artifact.path).name: artifact.md5
            for artifact in checksums.known_artifacts().values()
            if artifact.path.startswith("results/") and artifact.md5 is not None}


@dataclass(frozen=True)
class ImportJob:
    """A DIR file to place in OUT/results, with its official md5 if `checksums/` has one."""

    source: str
    target: str
    official_md5: str | None


# md5s of DIR files this process hashed, by (path, device, inode, size, mtime_ns): a file is
# hashed once per run however many checks read it.
_SOURCE_MD5S: dict[tuple, str] = {}


def _stat_key(path: str | os.PathLike) -> tuple:
    stat = os.stat(path)
    return str(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def _md5_job(path: str) -> str:
    return files.md5_file(path, progress=False)


def source_md5s(paths: list[str], nworker: int) -> dict[str, str]:
    """{path: md5} of DIR files, those not hashed yet by this process hashed in parallel."""
    keys = {path: _stat_key(path) for path in paths}
    todo = [path for path, key in keys.items() if key not in _SOURCE_MD5S]
    for path, md5 in zip(todo, map_in_workers(_md5_job, todo, nworker,
                                              desc="import_results md5")):
        _SOURCE_MD5S[keys[path]] = md5
    return {path: _SOURCE_MD5S[key] for path, key in keys.items()}


def _same_source(source: Path, entry: Entry | None) -> bool:
    """Whether `source` still is the file whose copy `entry` recorded: same size and mtime,
    or, the mtime changed, same md5."""
    if entry is None:
        return False
    try:
        stat = source.stat()
    except FileNotFoundError:
        return False
    if stat.st_size != entry.size:
        return False
    return stat.st_mtime_ns == entry.mtime_ns or \
        source_md5s([str(source)], 1)[str(source)] == entry.md5


def import_jobs(layout: DatasetLayout, options: Options, ledger: OutputLedger,
                entries: dict[str, Entry]) -> list[ImportJob]:
    """The files of --results_text not yet in OUT/results as `entries` recorded them, those
    with an official md5 first."""
    source_dir = Path(options.results_text)
    official = official_results_md5s()
    jobs = []
    for name in results_text_names(source_dir):
        source, target = source_dir / name, layout.results_dir / name
        if not (ledger.intact(target, entries, options.verify_outputs)
                and _same_source(source, entries.get(ledger.name(target)))):
            jobs.append(ImportJob(str(source), str(target), official.get(name)))
    return sorted(jobs, key=lambda job: job.official_md5 is None)


def check_official_md5s(jobs: list[ImportJob], nworker: int) -> None:
    """InputError naming the first job's file whose md5 is not its official one."""
    official = [job for job in jobs if job.official_md5 is not None]
    actual = source_md5s([job.source for job in official], nworker)
    for job in official:
        if actual[job.source] != job.official_md5:
            raise InputError(f"{job.source}: md5 {actual[job.source]} is not the official "
                             f"{job.official_md5} (checksums/results.md5)")


@dataclass(frozen=True)
class _PlaceOne:
    """Hard-link (or, where that fails, copy) a job's source to its target, atomically, and
    record the target; returns True when it had to copy. A target that already is the source
    (imported in place, or linked by a run killed before it recorded it) is only recorded."""

    ledger: OutputLedger

    def __call__(self, job: ImportJob) -> bool:
        temporary = temporary_name(job.target)
        temporary.unlink(missing_ok=True)
        copied = False
        try:
            if os.path.exists(job.target) and os.path.samefile(job.source, job.target):
                self.ledger.record(job.target)
                return False
            try:
                os.link(job.source, temporary)
            except OSError as err:
                if disk_full(job.target, err) is not None:
                    raise
                copied = True
                shutil.copy2(job.source, temporary)
            os.replace(temporary, job.target)
        except OSError as err:
            temporary.unlink(missing_ok=True)
            full = disk_full(job.target, err)
            if full is not None:
                raise full from err
            raise InputError(f"{job.source}: cannot place it as {job.target} "
                             f"({err.strerror})") from err
        self.ledger.record(job.target)
        return copied


def run_import_results(layout: DatasetLayout, options: Options, ledger: OutputLedger
                       ) -> StageSummary:
    """Place the official text of --results_text in OUT/results, skipping files in place."""
    started = time.time()
    ensure_dir(layout.results_dir)
    wanted = set(results_text_names(Path(options.results_text)))
    if not imports_in_place(layout, options):  # then OUT/results holds only what this puts
        for stray in layout.results_dir.iterdir():  # a file DIR lost while a run was killed
            if stray.is_file() and not stray.name.startswith(".") and stray.name not in wanted:
                stray.unlink()
    jobs = import_jobs(layout, options, ledger, ledger.entries())
    if len(jobs) < len(wanted):
        say(f"import_results: {len(wanted) - len(jobs)} of {len(wanted)} files already in "
            f"place, kept")
    check_official_md5s(jobs, options.nworker)  # hashed before the stage (check_inputs)
    with StageProgress("import_results", len(jobs)):
        copied = map_in_workers(_PlaceOne(ledger), jobs, options.nworker,
                                desc="import_results")
    if any(copied):
        logging.warning("import_results: %d of %d files copied, not hard-linked (%s is on "
                        "another file system or refuses links)", sum(copied), len(jobs),
                        options.results_text)
    parts = sum(1 for job in jobs if _PART_NAME.fullmatch(Path(job.source).name))
    return StageSummary("import_results", len(jobs), parts,
                        total_bytes(job.source for job in jobs), started)


def results_text_changed(layout: DatasetLayout, options: Options, ledger: OutputLedger
                         ) -> list[str]:
    """The files of --results_text added, removed or changed since they were imported (none
    when the folder is gone: the imported files stand)."""
    source_dir = Path(options.results_text)
    if not source_dir.is_dir():
        return []
    try:
        names = set(results_text_names(source_dir))
    except InputError:
        names = set()
    entries = ledger.entries()
    recorded = {Path(name).name: entry for name, entry in entries.items()}
    changed = sorted(set(recorded) ^ names)
    changed += [name for name in sorted(names & set(recorded))
                if not _same_source(source_dir / name, recorded[name])]
    return changed


def _pretraining_job(job: tuple[str, str, Options]) -> int:
    text_path, record_path, options = job
    return pretraining.write_pretraining_data(
        [text_path], [record_path], vocab_file=options.vocab_file,
        do_lower_case=options.do_lower_case, max_seq_length=options.max_seq_length,
        max_predictions_per_seq=options.max_predictions_per_seq,
        random_seed=options.random_seed, dupe_factor=options.dupe_factor,
        masked_lm_prob=options.masked_lm_prob, short_seq_prob=options.short_seq_prob)


def run_tfrecords(layout: DatasetLayout, options: Options, ledger: OutputLedger
                  ) -> StageSummary:
    """create_pretraining_data for every part and eval.txt, skipping finished TFRecords."""
    started = time.time()
    ensure_dir(layout.tfrecord_dir)
    jobs = _unfinished([(str(text), str(target), options) for text, target in
                        layout.tfrecord_sources()], ledger, options, "tfrecords")
    sizes = [os.path.getsize(text) for text, _, _ in jobs]
    with StageProgress("tfrecords", len(jobs), sum(sizes)):
        records = map_in_workers(_Recorded(_pretraining_job, ledger), jobs, options.nworker,
                                 desc="tfrecords", sizes=sizes)
    return StageSummary("tfrecords", len(jobs), sum(records), sum(sizes), started)


def run_eval_10k(layout: DatasetLayout, options: Options, ledger: OutputLedger
                 ) -> StageSummary:
    started = time.time()
    source = layout.tfrecord_dir / "eval_intermediate"
    target = layout.tfrecord_dir / "eval_10k"
    with StageProgress("eval_10k", options.num_eval_examples, unit="records") as bar:
        picked = pick_eval_samples.pick_examples(
            str(source), str(target), options.num_eval_examples, options.max_seq_length,
            options.max_predictions_per_seq, progress=bar.advance)
    ledger.record(target)
    return StageSummary("eval_10k", 1, picked, os.path.getsize(source), started)


@dataclass
class PackSummary(StageSummary):
    """The pack stage's summary: files packed, rows written, then what packing saved."""

    packing: PackStats

    def line(self) -> str:
        """The summary line of a stage, then the packer's counts (sequences, rows, padding)."""
        return f"{super().line()}; {self.packing.line()}"


def run_pack(layout: DatasetLayout, options: Options, ledger: OutputLedger) -> PackSummary:
    """Pack the training parts of tfrecords/ in one packer call (so their rows share one
    masked-LM width) and eval_10k in another, into a fresh tfrecords_packed/; same names."""
    started = time.time()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the packer's TensorFlow: no CUDA lines
    shutil.rmtree(layout.packed_dir, ignore_errors=True)
    pairs = layout.packed_sources()
    settings = PackOptions(options.max_seq_length, options.max_predictions_per_seq,
                           options.max_sequences_per_pack, options.random_seed)
    packing = PackStats(max_seq_length=options.max_seq_length)
    nbytes = total_bytes(str(source) for source, _ in pairs)
    with StageProgress("pack", 2 * len(pairs), 2 * nbytes):  # each file scanned, then packed
        for group in (pairs[:-1], pairs[-1:]):
            result = pack_files([str(source) for source, _ in group],
                                [str(target) for _, target in group], settings, options.nworker)
            ledger.record_all(target for _, target in group)
            packing.add(result.stats)
    return PackSummary("pack", len(pairs), packing.rows, nbytes, started, packing)


def run_manifest(layout: DatasetLayout, options: Options, ledger: OutputLedger
                 ) -> StageSummary:
    started = time.time()
    folders = [layout.text_dir, layout.results_dir, layout.tfrecord_dir]
    folders += [layout.packed_dir] if options.pack else []
    outputs = sorted(p for folder in folders
                     for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    sizes = [path.stat().st_size for path in outputs]
    with atomic_output(layout.manifest) as out, \
            StageProgress("manifest", len(outputs), sum(sizes)) as bar:
        out.write("path\tbytes\tmd5\n")
        for path, size in zip(outputs, sizes):
            out.write(f"{path.relative_to(layout.root)}\t{size}\t"
                      f"{files.md5_file(path, progress=False)}\n")
            bar.advance(1, size)
    ledger.record(layout.manifest)
    return StageSummary("manifest", len(outputs), len(outputs), sum(sizes), started)


_PRETRAINING_PARAMS = ("vocab_file", "do_lower_case", "max_seq_length", "max_predictions_per_seq",
                       "masked_lm_prob", "short_seq_prob", "dupe_factor", "random_seed")

_LATER_STAGES = (
    Stage("tfrecords", run_tfrecords, _PRETRAINING_PARAMS,
          output_dir=lambda layout: layout.tfrecord_dir,
          outputs=lambda layout: [target for _, target in layout.tfrecord_sources()]),
    Stage("eval_10k", run_eval_10k, ("num_eval_examples",),
          outputs=lambda layout: [layout.tfrecord_dir / "eval_10k"]),
    Stage("manifest", run_manifest, (), outputs=lambda layout: [layout.manifest]),
)

# From a Wikipedia dump (the default route).
STAGES = (
    Stage("extract", run_extract, ("dump", "date")),
    Stage("clean", _per_file_stage("clean", _clean_one, None, "cleaned"), (),
          output_dir=lambda layout: layout.work_dir("cleaned"),
          outputs=lambda layout: layout.mirrors("cleaned")),
    Stage("segment", _per_file_stage("segment", _segment_one, "cleaned", "sentences"), (),
          output_dir=lambda layout: layout.work_dir("sentences"),
          outputs=lambda layout: layout.mirrors("sentences")),
    Stage("separate", run_separate, ("num_test_articles", "seed"),
          outputs=lambda layout: layout.mirrors("train") + [
              layout.results_dir / "eval.txt", layout.results_dir / "eval.md5"]),
    Stage("gather", run_gather, ("block_size",)),
    *_LATER_STAGES,
)

# From the official results/ text (--results_text).
RESULTS_STAGES = (
    Stage("import_results", run_import_results, ("results_text",),
          output_dir=lambda layout: layout.results_dir, sources_changed=results_text_changed),
    *_LATER_STAGES,
)


# With --pack, between eval_10k and manifest; its key chains on the earlier stages' keys, so
# their parameters (max_seq_length, random_seed, ...) count for it too.
PACK_STAGE = Stage("pack", run_pack, ("max_sequences_per_pack",),
                   outputs=lambda layout: [target for _, target in layout.packed_sources()])


def route(options: Options) -> tuple[Stage, ...]:
    """The route that `options` take: RESULTS_STAGES with --results_text, else STAGES."""
    return RESULTS_STAGES if options.results_text else STAGES


def with_pack(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """Route `stages` with the pack stage before its last stage (the manifest)."""
    return (*stages[:-1], PACK_STAGE, stages[-1])


def pipeline(options: Options) -> tuple[Stage, ...]:
    """The stages a run with `options` goes through: its route, and pack with --pack."""
    return with_pack(route(options)) if options.pack else route(options)


def route_dirs(layout: DatasetLayout, stages: tuple[Stage, ...]) -> list[Path]:
    """The folders only the first stages of route `stages` write (before tfrecords)."""
    if stages is RESULTS_STAGES:
        return [layout.results_dir]
    return [layout.text_dir, layout.root / "work", layout.results_dir]


# ---- resumption ---------------------------------------------------------------------------------

def stage_keys(options: Options) -> dict[str, str]:
    """A key per stage that changes when its parameters or any earlier stage's change."""
    keys, previous = {}, ""
    values = asdict(options)
    for stage in pipeline(options):
        payload = json.dumps({"previous": previous, "stage": stage.name,
                              "params": {name: values[name] for name in stage.params}},
                             sort_keys=True)
        previous = keys[stage.name] = hashlib.md5(payload.encode()).hexdigest()
    return keys


def remove_unfinished_files(root: Path) -> None:
    """Delete the temporaries (`.NAME.partial-PID`) a killed run left anywhere under `root`."""
    for leftover in sorted(root.rglob(".*.partial-*"), reverse=True):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _markers(layout: DatasetLayout, stage: Stage) -> tuple[Path, Path]:
    """The (finished, started) marker files of `stage`; each holds the stage's key."""
    finished = layout.state_dir / stage.name
    return finished, finished.with_name(stage.name + ".started")


def _ledger(layout: DatasetLayout, stage: Stage) -> OutputLedger:
    return OutputLedger(layout.state_dir / f"{stage.name}.outputs", layout.root)


def _holds(marker: Path, key: str) -> bool:
    """Whether the marker file holds `key` (a damaged marker is removed: it holds nothing)."""
    return read_state(marker) == key


def _forget_after(layout: DatasetLayout, options: Options, stage: Stage) -> None:
    """Make every stage after `stage` look never run (markers removed); pack too in a run
    without --pack, so that a later --pack run does not keep rows of older TFRecords."""
    stages = with_pack(route(options))
    index = [each.name for each in stages].index(stage.name)
    for later in stages[index + 1:]:
        for marker in _markers(layout, later):
            marker.unlink(missing_ok=True)


def _remove_tree(folder: Path, layout: DatasetLayout, options: Options) -> None:
    """Remove `folder`, unless it is the --results_text folder (imported in place)."""
    if not (folder == layout.results_dir and imports_in_place(layout, options)):
        shutil.rmtree(folder, ignore_errors=True)


def leave_other_route(layout: DatasetLayout, options: Options, stages: tuple[Stage, ...]
                      ) -> None:
    """If the output directory holds the work of the other route (a dump's text/, work/ and
    results/, or linked official text), remove it and its records, and the manifest: the two
    never mix. Outputs go first, so a run killed midway does this again. Official text
    imported in place is never removed: a build from a dump there is an InputError."""
    other = RESULTS_STAGES if stages is STAGES else STAGES
    names = {stage.name for stage in stages}
    source = _results_source(layout)
    state = [path for stage in other if stage.name not in names
             for path in (*_markers(layout, stage), _ledger(layout, stage).path)]
    state += [source] if other is RESULTS_STAGES else []
    if not any(path.exists() for path in state):
        return
    if other is RESULTS_STAGES and source.exists() and _source_read(source) == \
            os.path.realpath(layout.results_dir):
        raise InputError(f"{layout.results_dir}: holds the official text, used in place by "
                         f"--results_text; a build from a dump would overwrite it: give another "
                         f"--output_dir")
    logging.warning("%s: holds the outputs of the %s; removing them (%s) for the %s",
                    layout.root, _route_name(other), ", ".join(
                        str(path.relative_to(layout.root)) for path in route_dirs(layout, other)),
                    _route_name(stages))
    for folder in route_dirs(layout, other):
        _remove_tree(folder, layout, options)
    layout.manifest.unlink(missing_ok=True)
    for path in state:
        path.unlink(missing_ok=True)


def _results_source(layout: DatasetLayout) -> Path:
    """Where a run from --results_text notes the folder, before its first stage."""
    return layout.results_source


def _source_read(source: Path) -> str | None:
    """The real path of the folder that `source` (`_results_source`) names; InputError when it
    is damaged (unreadable, there is no telling whether OUT/results holds the official text
    used in place, which must never be removed)."""
    try:
        text = read_state(source, remove_damaged=False)
    except DamagedState as err:
        raise InputError(f"{err}: there is no telling whether results/ is official text used "
                         f"in place; remove it (and results/ unless it is that text) and run "
                         f"again") from err
    return os.path.realpath(text) if text is not None else None


def _route_name(stages: tuple[Stage, ...]) -> str:
    return "route from --results_text" if stages is RESULTS_STAGES else "route from a dump"


def check_options(options: Options) -> None:
    """InputError naming the flag and its allowed range for a value out of range (NaN and
    infinities included), an unreadable --date or a --vocab_file that is no vocabulary.

    Cheap: run before the first stage, so a bad flag costs no extraction. Seeds must be 0 or
    more (random.Random takes a negative seed's absolute value, so two flags would give one
    dataset). A local --dump is checked once the extraction is known to need it.
    """
    at_least = {"num_test_articles": 1, "seed": 0, "random_seed": 0, "num_eval_examples": 1}
    for name, low in at_least.items():
        value = getattr(options, name)
        if value < low:
            raise InputError(f"--{name}={value}: must be at least {low}")
    if not 0 <= options.nworker <= MAX_NWORKER:
        raise InputError(f"--nworker={options.nworker}: must be between 0 (all cores) and "
                         f"{MAX_NWORKER}")
    if not (math.isfinite(options.block_size) and options.block_size > 0):
        raise InputError(f"--block_size={options.block_size}: must be a number of MiB greater "
                         f"than 0")
    pretraining.check_options(options.max_seq_length, options.max_predictions_per_seq,
                              options.dupe_factor, options.masked_lm_prob,
                              options.short_seq_prob)
    check_pack_options(PackOptions(options.max_seq_length, options.max_predictions_per_seq,
                                   options.max_sequences_per_pack, options.random_seed))
    extract.parse_date(options.date)
    pretraining.get_tokenizer(options.vocab_file, options.do_lower_case)


def run_pipeline(output_dir: str, options: Options) -> None:
    """Run, into `output_dir`, every stage whose outputs are not already finished and intact.

    The options are checked first (`check_options`). One run at a time: the run holds
    `.state/lock` throughout, and a second one is refused (InputError naming the holder)
    before it changes anything. A run that fails removes its unfinished temporaries.
    Per stage: finished with these parameters and every output intact -> skipped; finished
    but some outputs missing, changed or never recorded -> those redone (later stages are
    redone too if the redone outputs differ from what was recorded); started with these
    parameters but killed -> resumed, keeping its finished outputs; otherwise run from
    scratch, with every later stage.
    """
    check_options(options)
    if options.results_text and not os.path.isdir(os.path.join(output_dir, ".state")):
        results_text_names(Path(options.results_text))  # a new OUT: not made for a bad DIR
    layout = DatasetLayout(ensure_dir(output_dir))
    ensure_dir(layout.state_dir)
    with exclusive_lock(layout.state_dir / "lock", layout.root, "preprocess"):
        remove_unfinished_files(layout.root)
        try:
            _run_stages(layout, options)
        except BaseException:
            remove_unfinished_files(layout.root)
            raise


def check_inputs(layout: DatasetLayout, options: Options, stages: tuple[Stage, ...],
                 keys: dict[str, str]) -> None:
    """Check the inputs the first stage will read, unless it is finished with these
    parameters: a local dump exists; --results_text holds parts and eval.txt, each file with
    an official md5 has it (those already imported intact are not hashed again)."""
    first = stages[0]
    finished, started = _markers(layout, first)
    ledger = _ledger(layout, first)
    if options.results_text:
        check_results_text_place(layout, options)
        if _holds(finished, keys[first.name]) and not first.sources_changed(
                layout, options, ledger):
            return
        entries = ledger.entries() if _holds(started, keys[first.name]) else {}
        check_official_md5s(import_jobs(layout, options, ledger, entries), options.nworker)
        return
    dump = local_dump(options.dump)
    if dump is not None and not _holds(finished, keys[first.name]):
        check_local_dump(dump)


def _run_stages(layout: DatasetLayout, options: Options) -> None:
    """The body of `run_pipeline`, once it holds the lock."""
    keys = stage_keys(options)
    check_inputs(layout, options, route(options), keys)
    leave_other_route(layout, options, route(options))
    source = os.path.realpath(options.results_text) if options.results_text else None
    if source and read_state(_results_source(layout)) != source:
        with atomic_output(_results_source(layout)) as out:
            out.write(source)
    for stage in pipeline(options):
        key = keys[stage.name]
        finished, started = _markers(layout, stage)
        ledger = _ledger(layout, stage)
        repairing = _holds(finished, key)
        if repairing and stage.sources_changed is not None:
            changed = stage.sources_changed(layout, options, ledger)
            if changed:
                logging.warning("%s: %d input(s) added, removed or changed since it finished "
                                "(first: %s); running it again with every stage after it",
                                stage.name, len(changed), changed[0])
                finished.unlink()
                started.unlink(missing_ok=True)
                repairing = False
        recorded = ledger.entries() if repairing else {}
        if repairing:
            required = stage.outputs(layout) if stage.outputs is not None else []
            damaged = ledger.damaged(options.verify_outputs, required)
            if not damaged:
                say(f"{stage.name}: already done with these parameters, skipped")
                continue
            logging.warning("%s: %d finished output(s) missing or changed since (first: %s); "
                            "redoing them", stage.name, len(damaged), damaged[0])
        else:
            if not _holds(started, key):
                ledger.reset()
                if stage.output_dir is not None:
                    _remove_tree(stage.output_dir(layout), layout, options)
            _forget_after(layout, options, stage)
            layout.manifest.unlink(missing_ok=True)
        with atomic_output(started) as out:
            out.write(key)
        # A repair stopped midway must not look finished: a re-run resumes it from `started`.
        finished.unlink(missing_ok=True)
        if stage.output_dir is None:
            ledger.reset()
        report(stage.run(layout, options, ledger))
        redone = ledger.entries()
        if any(redone.get(name, entry).md5 != entry.md5 for name, entry in recorded.items()):
            logging.warning("%s: redone outputs differ from the recorded ones; the stages after "
                            "it run again", stage.name)
            _forget_after(layout, options, stage)
        with atomic_output(finished) as out:
            out.write(key)
        started.unlink()


# ---- command line -------------------------------------------------------------------------------

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "build/dataset", "Directory for every output.")
flags.DEFINE_string("dump", None, "Wikipedia XML dump (.bz2 or .xml), local path or URL. "
                    "Default: the slice shipped in the repository.")
flags.DEFINE_string("results_text", None, "Folder of the official preprocessed text "
                    "(part-XXXXX-of-00500, eval.txt, eval.md5; `make download "
                    "ARTIFACTS=results`): build the TFRecords from it instead of a dump, "
                    "bit-exact with the official ones. Excludes --dump.")
flags.DEFINE_string("vocab_file", str(VOCAB_FILE), "WordPiece vocabulary.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the text before WordPiece.")
flags.DEFINE_string("date", constants.DUMP_DATE, "Date that time magic words expand to.")
flags.DEFINE_integer("num_test_articles", None, "Articles held out for eval "
                     f"(default {constants.NUM_TEST_ARTICLES}; {SAMPLE_NUM_TEST_ARTICLES} for "
                     "the embedded sample).")
flags.DEFINE_integer("seed", constants.SEPARATION_SEED, "Seed of the eval-article selection.")
flags.DEFINE_float("block_size", None, "Part size in MiB of extracted text (default "
                   f"{constants.GATHER_BLOCK_SIZE_MB}; {SAMPLE_BLOCK_SIZE_MB} for the sample).")
flags.DEFINE_integer("max_seq_length", constants.MAX_SEQ_LENGTH, "Tokens per sequence.")
flags.DEFINE_integer("max_predictions_per_seq", constants.MAX_PREDICTIONS_PER_SEQ,
                     "Masked positions per sequence.")
flags.DEFINE_float("masked_lm_prob", constants.MASKED_LM_PROB, "Fraction of tokens masked.")
flags.DEFINE_float("short_seq_prob", constants.SHORT_SEQ_PROB, "Chance of a short sequence.")
flags.DEFINE_integer("dupe_factor", constants.DUPE_FACTOR, "Maskings of each document.")
flags.DEFINE_integer("random_seed", constants.PRETRAINING_RANDOM_SEED,
                     "Seed of create_pretraining_data.")
flags.DEFINE_integer("num_eval_examples", constants.EVAL_SAMPLES, "Records in eval_10k.")
flags.DEFINE_integer("nworker", 0, "Worker processes (0: all cores).")
flags.DEFINE_bool("pack", False, "Also write tfrecords_packed/: the training parts and eval_10k "
                  "with up to --max_sequences_per_pack sequences per row "
                  "(cleanup_scripts.pack_pretraining_data).")
flags.DEFINE_integer("max_sequences_per_pack", MAX_SEQUENCES_PER_PACK,
                     "With --pack: the most sequences in one packed row.")
flags.DEFINE_bool("verify_outputs", False, "Hash every finished output before skipping it "
                  "(default: hash only those whose size or mtime changed since they were made).")


# Flags that only the route from a dump reads.
_DUMP_FLAGS = ("date", "num_test_articles", "seed", "block_size")


def options_from_flags() -> Options:
    """Options from the command line, with the sample's defaults when no dump is given.

    With --results_text the dump's flags do not apply (the benchmark's values fill them);
    --dump with it is an InputError.
    """
    results_text = FLAGS.results_text
    if results_text is not None:
        if FLAGS.dump is not None:
            raise InputError("--dump and --results_text exclude each other: give --dump to "
                             "build from a Wikipedia dump, --results_text from the official "
                             "results/ text")
        if not results_text:
            raise InputError("--results_text=: give the folder of the official results/ text")
        results_text = os.path.abspath(os.path.expanduser(results_text))
        for name in _DUMP_FLAGS:
            if FLAGS[name].present:
                logging.warning("--%s has no effect with --results_text", name)
    if FLAGS["max_sequences_per_pack"].present and not FLAGS.pack:
        logging.warning("--max_sequences_per_pack has no effect without --pack")
    sample = FLAGS.dump is None and results_text is None
    return Options(
        dump="" if results_text else str(SAMPLE_DUMP) if sample else FLAGS.dump,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case, date=FLAGS.date,
        num_test_articles=FLAGS.num_test_articles if FLAGS.num_test_articles is not None else (
            SAMPLE_NUM_TEST_ARTICLES if sample else constants.NUM_TEST_ARTICLES),
        seed=FLAGS.seed,
        block_size=FLAGS.block_size if FLAGS.block_size is not None else (
            SAMPLE_BLOCK_SIZE_MB if sample else constants.GATHER_BLOCK_SIZE_MB),
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
        dupe_factor=FLAGS.dupe_factor, random_seed=FLAGS.random_seed,
        num_eval_examples=FLAGS.num_eval_examples, nworker=FLAGS.nworker,
        results_text=results_text or "", verify_outputs=FLAGS.verify_outputs, pack=FLAGS.pack,
        max_sequences_per_pack=FLAGS.max_sequences_per_pack)


def main(argv: list[str]) -> None:
    """Entry point for `python -m cleanup_scripts.preprocess`.

    The console gets one line per stage (its summary, or why it was skipped), a progress bar
    while it runs (on a terminal), warnings and errors; nothing per file or article. absl's
    INFO lines (the stages' per-file counts) show with --verbosity=0.
    """
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    started = time.time()
    try:
        run_pipeline(FLAGS.output_dir, options_from_flags())
    except DiskFullError as err:
        raise SystemExit(f"error: {printable(err)}; free some space and run the same command "
                         f"again, it goes on from there")
    except InputError as err:  # one line, whatever the file names in it hold
        raise SystemExit(f"error: {printable(err)}")
    print(f"preprocess: done in {time.time() - started:.1f} s; manifest "
          f"{os.path.join(FLAGS.output_dir, 'manifest.tsv')}", flush=True)


if __name__ == "__main__":
    app.run(main)
