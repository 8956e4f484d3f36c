"""`make preprocess`: a Wikipedia dump to the MLPerf BERT dataset, in one resumable command.

    python -m cleanup_scripts.preprocess --output_dir=build/dataset [--dump=PATH_OR_URL]
    python -m cleanup_scripts.preprocess --output_dir=build/dataset --results_text=DIR

The stages of each route are listed in STAGES (from a dump; the slice shipped in the
repository, with small-input defaults, when there is no --dump) and RESULTS_STAGES (from the
official results/ text); --pack adds PACK_STAGE before the manifest. `run_pipeline` runs them.

Resumption: every output appears under its final name only when complete (`atomic_output`), so
an output that exists is finished. Each stage has a key, the md5 of its parameters and of the
previous stage's key. A stage writes `.state/<stage>.started` (its key) before its first
output, and `.state/<stage>` (its key and the outputs it made) after its last. A re-run skips a
stage finished with the same key whose outputs are all there with their sizes; otherwise it
redoes the missing ones (a finished stage), goes on from the outputs there (a started one, same
key), or starts afresh, and every later stage runs too. Files changed by hand are `make
verify`'s business (cleanup_scripts.verify, from manifest.tsv), not a re-run's.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable

from absl import app, flags, logging

from benchmark import constants, files
from cleanup_scripts import SAMPLE_DUMP, VOCAB_FILE
from cleanup_scripts import create_pretraining_data as pretraining
from cleanup_scripts import checksums, extract, pick_eval_samples, process_wiki
from cleanup_scripts.artifacts import download
from cleanup_scripts.do_gather import GatherSource
from cleanup_scripts.fileio import (DiskFullError, InputError, atomic_output, disk_full,
                                    ensure_dir, exclusive_lock, printable, refuse_special_file,
                                    require_regular_file, temporary_name)
from cleanup_scripts.layout import DatasetLayout
from cleanup_scripts.ledger import (DamagedState, Entry, OutputLedger, read_marker, read_state,
                                    write_entries, write_marker, write_state)
from cleanup_scripts.pack_pretraining_data import (MAX_SEQUENCES_PER_PACK, PackOptions,
                                                   pack_files)
from cleanup_scripts.pack_pretraining_data import check_options as check_pack_options
from cleanup_scripts.packing import PackStats
from cleanup_scripts.runner import (StageProgress, StageSummary, map_in_workers, report, run_jobs,
                                    say, total_bytes, worker_count)

SAMPLE_NUM_TEST_ARTICLES = 20
SAMPLE_BLOCK_SIZE_MB = 1.5
MAX_NWORKER = 1024


@dataclass(frozen=True)
class Options:
    """Every parameter of the pipeline; all but `nworker` decide its output."""

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
    results_digest: str = ""  # md5 of its files' names and md5s (set by `check_inputs`)
    pack: bool = False  # also write tfrecords_packed/ (the pack stage)
    max_sequences_per_pack: int = MAX_SEQUENCES_PER_PACK


StageBody = Callable[[DatasetLayout, Options], StageSummary]


@dataclass(frozen=True)
class Stage:
    """A named step: `run` writes its outputs, `outputs(layout)` lists them (once the earlier
    stages' outputs are there), `params` are the Options fields they depend on. `output_dir`,
    where given, holds nothing else: it is emptied before the stage starts afresh, and the
    stage skips the outputs already there (work file by file)."""

    name: str
    run: StageBody
    params: tuple[str, ...]
    outputs: Callable[[DatasetLayout], list[Path]]
    output_dir: Callable[[DatasetLayout], Path] | None = None


# ---- from a dump --------------------------------------------------------------------------------

def local_dump(dump: str) -> Path | None:
    """The path `dump` names if it is local (a path or a file:// URL); None for a URL."""
    if "://" in dump and not dump.startswith("file://"):
        return None
    return Path(dump.removeprefix("file://"))


def check_local_dump(path: Path) -> None:
    """InputError unless `path` is a regular file that starts as a MediaWiki dump does
    (`</siteinfo>` within its first MiB)."""
    require_regular_file(path, "dump file")
    extract.check_dump_start(path)


def fetch_dump(layout: DatasetLayout, options: Options) -> Path:
    """The local dump to extract: downloaded (resumably) first if `options.dump` is a URL.

    A dump named like an official artifact must have its official md5, or InputError; a full
    disk during the download is a DiskFullError naming the `.partial` file a re-run resumes.
    """
    name = Path(options.dump.split("?")[0]).name
    official = next((artifact for artifact in checksums.known_artifacts().values()
                     if Path(artifact.path).name == name), None)
    expected = official.md5 if official else None
    path = local_dump(options.dump)
    if path is None:
        target = layout.download_dir / name
        try:
            download.fetch(options.dump, target, expected_md5=expected,
                           expected_size=official.size if official else None)
        except OSError as err:
            raise disk_full(download.partial_name(target), err) or err
        return target
    check_local_dump(path)
    if expected is not None and not files.verify_file(path, expected):
        raise InputError(f"{path}: md5 differs from the official {expected}")
    return path


def run_extract(layout: DatasetLayout, options: Options) -> StageSummary:
    started = time.time()
    dump = fetch_dump(layout, options)
    extraction = extract.extract_dump(dump, layout.text_dir, date=options.date,
                                      processes=worker_count(options.nworker))
    return StageSummary("extract", extraction.files, extraction.pages, dump.stat().st_size,
                        started)


def _todo(stage: str, jobs: list[tuple]) -> list[tuple]:
    """The jobs whose output (second item) is not there yet (an output there is finished)."""
    todo = [job for job in jobs if not os.path.exists(job[1])]
    if len(todo) < len(jobs):
        say(f"{stage}: {len(jobs) - len(todo)} of {len(jobs)} outputs already finished, kept")
    return todo


def _mirror_jobs(layout: DatasetLayout, source: str | None, target: str) -> list[tuple]:
    """(file of work/`source` (text/ for None), its counterpart in work/`target`) pairs."""
    extracted = layout.extracted_files()
    if not extracted:
        raise InputError(f"{layout.text_dir}: no extracted files (text/*/wiki_??)")
    sources = extracted if source is None else layout.mirrors(source)
    targets = layout.mirrors(target)
    for folder in {path.parent for path in targets}:
        ensure_dir(folder)
    return [(str(s), str(t)) for s, t in zip(sources, targets)]


def run_clean(layout: DatasetLayout, options: Options) -> StageSummary:
    jobs = [(source, target, "") for source, target in _mirror_jobs(layout, None, "cleaned")]
    return process_wiki.clean("clean", _todo("clean", jobs), options.nworker)


def run_segment(layout: DatasetLayout, options: Options) -> StageSummary:
    jobs = _todo("segment", _mirror_jobs(layout, "cleaned", "sentences"))
    return process_wiki.segment("segment", jobs, options.nworker)


def run_separate(layout: DatasetLayout, options: Options) -> StageSummary:
    shutil.rmtree(layout.work_dir("train"), ignore_errors=True)
    pairs = _mirror_jobs(layout, "sentences", "train")
    return process_wiki.separate("separate", pairs, options.num_test_articles, options.seed,
                                 str(layout.results_dir), options.nworker)


def run_gather(layout: DatasetLayout, options: Options) -> StageSummary:
    for old in layout.results_dir.glob("part-*"):
        old.unlink()
    sources = [GatherSource(str(extracted), str(layout.mirror(extracted, "train")))
               for extracted in layout.extracted_files()]
    return process_wiki.gather_parts("gather", sources, str(layout.results_dir),
                                     options.block_size, options.nworker)


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
    """Whether `path` is a regular file; InputError naming a device, FIFO or socket (never
    opened: it could block or never end)."""
    refuse_special_file(path)
    return path.is_file()


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


def _md5_job(path: str) -> str:
    return files.md5_file(path, progress=False)


def check_results_text(layout: DatasetLayout, options: Options) -> Options:
    """Check the --results_text files against their official md5s (InputError naming the first
    that differs), record their md5s and return `options` with their digest: a changed file
    changes the import_results key, so it and every later stage run again.

    A file with the size and mtime of the last run's record keeps its md5, the others are
    hashed (in parallel). When the folder is gone the record stands (OUT/results holds it).
    """
    check_results_text_place(layout, options)
    folder = Path(options.results_text)
    recorded = OutputLedger(layout.results_md5s, layout.root).entries()
    md5s = recorded
    if folder.exists() or not recorded:
        paths = [os.path.realpath(folder / name) for name in results_text_names(folder)]
        todo = [path for path in paths if not (
            path in recorded and recorded[path].vouches_for(path))]
        hashed = dict(zip(todo, map_in_workers(_md5_job, todo, options.nworker,
                                               desc="import_results md5")))
        md5s = {path: Entry.of(path, hashed[path]) if path in hashed else recorded[path]
                for path in paths}
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
    digest = hashlib.md5(json.dumps(sorted(names.items())).encode()).hexdigest()
    return replace(options, results_digest=digest)


def _place_one(job: tuple[str, str]) -> bool:
    """Hard-link (or, where that fails, copy) a DIR file to its place in OUT/results,
    atomically; True when it had to copy."""
    source, target = job
    temporary = temporary_name(target)
    temporary.unlink(missing_ok=True)
    copied = False
    try:
        try:
            os.link(source, temporary)
        except OSError as err:
            if disk_full(target, err) is not None:
                raise
            copied = True
            shutil.copy2(source, temporary)
        os.replace(temporary, target)
    except OSError as err:
        temporary.unlink(missing_ok=True)
        raise disk_full(target, err) or InputError(
            f"{source}: cannot place it as {target} ({err.strerror})") from err
    return copied


def run_import_results(layout: DatasetLayout, options: Options) -> StageSummary:
    """Place the official text of --results_text in OUT/results (files there kept)."""
    started = time.time()
    ensure_dir(layout.results_dir)
    source_dir = Path(options.results_text)
    names = results_text_names(source_dir)
    if not imports_in_place(layout, options):  # then OUT/results holds only what this puts
        for stray in layout.results_dir.iterdir():  # a file DIR lost while a run was killed
            if stray.is_file() and not stray.name.startswith(".") and stray.name not in names:
                stray.unlink()
    jobs = [] if imports_in_place(layout, options) else _todo("import_results", [
        (str(source_dir / name), str(layout.results_dir / name)) for name in names])
    with StageProgress("import_results", len(jobs)):
        copied = map_in_workers(_place_one, jobs, options.nworker, desc="import_results")
    if any(copied):
        logging.warning("import_results: %d of %d files copied, not hard-linked (%s is on "
                        "another file system or refuses links)", sum(copied), len(jobs),
                        options.results_text)
    parts = sum(1 for source, _ in jobs if _PART_NAME.fullmatch(Path(source).name))
    return StageSummary("import_results", len(jobs), parts,
                        total_bytes(source for source, _ in jobs), started)


def results_files(layout: DatasetLayout) -> list[Path]:
    """The official text files in OUT/results (what import_results places)."""
    return sorted(path for path in layout.results_dir.glob("*")
                  if _PART_NAME.fullmatch(path.name) or path.name in _EVAL_FILES)


# ---- both routes --------------------------------------------------------------------------------

def _pretraining_job(job: tuple[str, str, Options]) -> int:
    text_path, record_path, options = job
    return pretraining.write_pretraining_data(
        [text_path], [record_path], vocab_file=options.vocab_file,
        do_lower_case=options.do_lower_case, max_seq_length=options.max_seq_length,
        max_predictions_per_seq=options.max_predictions_per_seq,
        random_seed=options.random_seed, dupe_factor=options.dupe_factor,
        masked_lm_prob=options.masked_lm_prob, short_seq_prob=options.short_seq_prob)


def run_tfrecords(layout: DatasetLayout, options: Options) -> StageSummary:
    """create_pretraining_data for every part and eval.txt, skipping finished TFRecords."""
    jobs = _todo("tfrecords", [(str(text), str(target), options)
                               for text, target in layout.tfrecord_sources()])
    return run_jobs("tfrecords", _pretraining_job, jobs, options.nworker)


def run_eval_10k(layout: DatasetLayout, options: Options) -> StageSummary:
    started = time.time()
    source = layout.tfrecord_dir / "eval_intermediate"
    with StageProgress("eval_10k", options.num_eval_examples, unit="records") as bar:
        picked = pick_eval_samples.pick_examples(
            str(source), str(layout.tfrecord_dir / "eval_10k"), options.num_eval_examples,
            options.max_seq_length, options.max_predictions_per_seq, progress=bar.advance)
    return StageSummary("eval_10k", 1, picked, os.path.getsize(source), started)


@dataclass
class PackSummary(StageSummary):
    """The pack stage's summary: files packed, rows written, then what packing saved."""

    packing: PackStats

    def line(self) -> str:
        return f"{super().line()}; {self.packing.line()}"


def run_pack(layout: DatasetLayout, options: Options) -> PackSummary:
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
            packing.add(result.stats)
    return PackSummary("pack", len(pairs), packing.rows, nbytes, started, packing)


def manifest_folders(layout: DatasetLayout, options: Options) -> list[Path]:
    return [layout.text_dir, layout.results_dir, layout.tfrecord_dir] + (
        [layout.packed_dir] if options.pack else [])


def run_manifest(layout: DatasetLayout, options: Options) -> StageSummary:
    """manifest.tsv (path, bytes, md5 of every output), and the same with mtimes in
    .state/manifest.outputs, which lets `make verify` and `make upload` trust an md5 while its
    file keeps its size and mtime."""
    started = time.time()
    outputs = sorted(path for folder in manifest_folders(layout, options)
                     for path in folder.rglob("*")
                     if path.is_file() and not path.name.startswith("."))
    entries = {}
    with StageProgress("manifest", len(outputs), total_bytes(outputs)) as bar:
        for path in outputs:
            entries[str(path.relative_to(layout.root))] = entry = Entry.of(path)
            bar.advance(1, entry.size)
    write_entries(layout.state_dir / "manifest.outputs", entries)
    with atomic_output(layout.manifest) as out:
        out.write("path\tbytes\tmd5\n" + "".join(
            f"{name}\t{entry.size}\t{entry.md5}\n" for name, entry in entries.items()))
    return StageSummary("manifest", len(outputs), len(outputs),
                        sum(entry.size for entry in entries.values()), started)


_PRETRAINING_PARAMS = ("vocab_file", "do_lower_case", "max_seq_length", "max_predictions_per_seq",
                       "masked_lm_prob", "short_seq_prob", "dupe_factor", "random_seed")

_LATER_STAGES = (
    Stage("tfrecords", run_tfrecords, _PRETRAINING_PARAMS,
          lambda layout: [target for _, target in layout.tfrecord_sources()],
          output_dir=lambda layout: layout.tfrecord_dir),
    Stage("eval_10k", run_eval_10k, ("num_eval_examples",),
          lambda layout: [layout.tfrecord_dir / "eval_10k"]),
    Stage("manifest", run_manifest, (), lambda layout: [layout.manifest]),
)

# From a Wikipedia dump (the default route).
STAGES = (
    Stage("extract", run_extract, ("dump", "date"), lambda layout: layout.extracted_files()),
    Stage("clean", run_clean, (), lambda layout: layout.mirrors("cleaned"),
          output_dir=lambda layout: layout.work_dir("cleaned")),
    Stage("segment", run_segment, (), lambda layout: layout.mirrors("sentences"),
          output_dir=lambda layout: layout.work_dir("sentences")),
    Stage("separate", run_separate, ("num_test_articles", "seed"),
          lambda layout: layout.mirrors("train") + [layout.results_dir / "eval.txt",
                                                    layout.results_dir / "eval.md5"]),
    Stage("gather", run_gather, ("block_size",),
          lambda layout: sorted(layout.results_dir.glob("part-*"))),
    *_LATER_STAGES,
)

# From the official results/ text (--results_text).
RESULTS_STAGES = (
    Stage("import_results", run_import_results, ("results_text", "results_digest"),
          results_files, output_dir=lambda layout: layout.results_dir),
    *_LATER_STAGES,
)

# With --pack, between eval_10k and manifest; its key chains on the earlier stages' keys, so
# their parameters (max_seq_length, random_seed, ...) count for it too.
PACK_STAGE = Stage("pack", run_pack, ("max_sequences_per_pack",),
                   lambda layout: [target for _, target in layout.packed_sources()])


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


def _markers(layout: DatasetLayout, name: str) -> tuple[Path, Path]:
    """The (finished, started) markers of stage `name`."""
    finished = layout.state_dir / name
    return finished, finished.with_name(name + ".started")


def _missing(layout: DatasetLayout, stage: Stage, recorded: dict[str, int]) -> list[str]:
    """The outputs of a finished stage (those it recorded, and those the earlier stages' outputs
    call for) that are gone or no longer have their recorded size."""
    wanted = {str(path.relative_to(layout.root)): None for path in stage.outputs(layout)}
    wanted.update(recorded)
    missing = []
    for name, size in wanted.items():
        try:
            if size in (None, os.stat(layout.root / name).st_size):
                continue
        except FileNotFoundError:
            pass
        missing.append(name)
    return missing


def _remove_tree(folder: Path, layout: DatasetLayout, options: Options) -> None:
    """Remove `folder`, unless it is the --results_text folder (imported in place)."""
    if not (folder == layout.results_dir and imports_in_place(layout, options)):
        shutil.rmtree(folder, ignore_errors=True)


def _source_read(layout: DatasetLayout) -> str | None:
    """The real path of the folder a run from --results_text imported; InputError when its
    record is damaged (there is then no telling whether OUT/results holds the official text
    used in place, which must never be removed)."""
    try:
        text = read_state(layout.results_source, remove_damaged=False)
    except DamagedState as err:
        raise InputError(f"{err}: there is no telling whether results/ is official text used "
                         f"in place; remove it (and results/ unless it is that text) and run "
                         f"again") from err
    return os.path.realpath(text) if text is not None else None


def leave_other_route(layout: DatasetLayout, options: Options) -> None:
    """If the output directory holds the work of the other route (a dump's text/, work/ and
    results/, or linked official text), remove it and its records, and the manifest: the two
    never mix. Outputs go first, so a run killed midway does this again. Official text
    imported in place is never removed: a build from a dump there is an InputError."""
    stages = route(options)
    other = RESULTS_STAGES if stages is STAGES else STAGES
    names = {stage.name for stage in stages}
    state = [path for stage in other if stage.name not in names
             for path in _markers(layout, stage.name)]
    if other is RESULTS_STAGES:
        state += [layout.results_source, layout.results_md5s]
    if not any(path.exists() for path in state):
        return
    if other is RESULTS_STAGES and _source_read(layout) == \
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
    """Run, into `output_dir`, every stage that is not finished with these parameters.

    The options are checked first (`check_options`). One run at a time: the run holds
    `.state/lock` throughout, and a second one is refused (InputError naming the holder)
    before it changes anything. A run that fails removes its unfinished temporaries.
    """
    check_options(options)
    if options.results_text and not os.path.isdir(os.path.join(output_dir, ".state")):
        results_text_names(Path(options.results_text))  # a new OUT: not made for a bad DIR
    layout = DatasetLayout(ensure_dir(output_dir))
    ensure_dir(layout.state_dir)
    with exclusive_lock(layout.state_dir / "lock", layout.root, "preprocess"):
        remove_unfinished_files(layout.root)
        try:
            _run_stages(layout, check_inputs(layout, options))
        except BaseException:
            remove_unfinished_files(layout.root)
            raise


def check_inputs(layout: DatasetLayout, options: Options) -> Options:
    """Check the inputs of the first stage before anything changes: a local dump unless
    extract is finished with these parameters; --results_text (`check_results_text`)."""
    if options.results_text:
        return check_results_text(layout, options)
    dump = local_dump(options.dump)
    finished = read_marker(_markers(layout, "extract")[0])
    if dump is not None and (finished is None or finished[0] != stage_keys(options)["extract"]):
        check_local_dump(dump)
    return options


def _run_stages(layout: DatasetLayout, options: Options) -> None:
    """The body of `run_pipeline`, once it holds the lock and the inputs are checked."""
    leave_other_route(layout, options)
    source = os.path.realpath(options.results_text) if options.results_text else None
    if source and read_state(layout.results_source) != source:
        write_state(layout.results_source, source)
    keys = stage_keys(options)
    every = with_pack(route(options))  # pack too: a later --pack run must not keep old rows
    for stage in pipeline(options):
        key = keys[stage.name]
        finished, started = _markers(layout, stage.name)
        marker = read_marker(finished)
        if marker is not None and marker[0] == key:
            missing = _missing(layout, stage, marker[1])
            if not missing:
                say(f"{stage.name}: already done with these parameters, skipped")
                continue
            logging.warning("%s: %d finished output(s) missing or changed since (first: %s); "
                            "redoing them", stage.name, len(missing), missing[0])
            for name in missing:
                (layout.root / name).unlink(missing_ok=True)
        else:
            if read_state(started) != key and stage.output_dir is not None:
                _remove_tree(stage.output_dir(layout), layout, options)
            for later in every[every.index(stage) + 1:]:
                for path in _markers(layout, later.name):
                    path.unlink(missing_ok=True)
            layout.manifest.unlink(missing_ok=True)
        write_state(started, key)
        finished.unlink(missing_ok=True)  # a repair stopped midway resumes from `started`
        report(stage.run(layout, options))
        write_marker(finished, key, layout.root, stage.outputs(layout))
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
    values = {field.name: FLAGS[field.name].value for field in fields(Options)
              if field.name in FLAGS}
    defaults = (SAMPLE_NUM_TEST_ARTICLES, SAMPLE_BLOCK_SIZE_MB) if sample else (
        constants.NUM_TEST_ARTICLES, constants.GATHER_BLOCK_SIZE_MB)
    for name, default in zip(("num_test_articles", "block_size"), defaults):
        values[name] = default if values[name] is None else values[name]
    return Options(**{**values, "results_text": results_text or "",
                      "dump": "" if results_text else str(SAMPLE_DUMP) if sample else FLAGS.dump})


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
