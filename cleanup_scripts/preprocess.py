"""`make preprocess`: a Wikipedia dump, or the official results/ text, to the MLPerf BERT dataset
in one resumable command.

    python -m cleanup_scripts.preprocess --output_dir=build/dataset [--dump=PATH_OR_URL]
    python -m cleanup_scripts.preprocess --output_dir=build/dataset --results_text=DIR

Run the same command again after a crash or kill: finished stages with the same parameters are
skipped, an unfinished one goes on from its finished files, and a changed flag redoes its stage
and every stage after it (the state is in OUTPUT_DIR/.state/). Without --dump the Wikipedia
slice shipped in the repository is used, with defaults sized for it.
"""
# For maintainers (absl prints the docstring above as --help): a route is a tuple of `Stage`s,
# STAGES from a dump, RESULTS_STAGES from the official text; --pack adds PACK_STAGE before the
# manifest. `run_pipeline` runs them (`run_stage` says when a stage is skipped, repaired,
# resumed or run afresh).
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

from absl import app, flags, logging

from benchmark import constants, files
from benchmark.errors import exit_on_user_error
from benchmark.files import (DiskFullError, InputError, ensure_dir, exclusive_lock, naming,
                             require_regular_file)
from cleanup_scripts import (SAMPLE_DUMP, VOCAB_FILE, create_pretraining_data as pretraining,
                             pick_eval_samples, process_wiki)
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.do_gather import GatherSource
from cleanup_scripts.pack_pretraining_data import (MAX_SEQUENCES_PER_PACK, PackOptions,
                                                   pack_files)
from cleanup_scripts.pack_pretraining_data import check_options as check_pack_options
from cleanup_scripts.packing.plan import PackStats
from cleanup_scripts.pipeline import import_results
from cleanup_scripts.pipeline.layout import DatasetLayout
from cleanup_scripts.pipeline.ledger import (Entry, read_marker, read_state, write_manifest,
                                             write_marker, write_state)
from cleanup_scripts.pipeline.runner import (TENSORFLOW_WORKERS, StageProgress, StageSummary,
                                             report, run_jobs, say, shared_workers, total_bytes,
                                             worker_count)
from cleanup_scripts.text import extract

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


@dataclass(frozen=True)
class Stage:
    """A step of a route: `run` writes its outputs, `outputs(layout)` lists them (once the
    earlier stages' outputs are there), `params` name the Options fields they depend on.
    `output_dir`, where given, holds nothing else: emptied when the stage starts afresh, and
    the stage skips the outputs already there."""

    name: str
    run: Callable[[DatasetLayout, Options], StageSummary]
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
    """InputError unless `path` is a regular file that starts as a MediaWiki dump does."""
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
    path = local_dump(options.dump)
    if path is None:
        # Imported here: requests and its kin are a fifth of this program's start-up, and only
        # a dump given as a URL needs them.
        from cleanup_scripts.artifacts import transfer  # pylint: disable=import-outside-toplevel
        path = layout.download_dir / name
        transfer.fetch(options.dump, path, expected_md5=official.md5 if official else None,
                       expected_size=official.size if official else None)
        return path
    check_local_dump(path)
    if official is not None and not files.verify_file(path, official.md5):
        raise InputError(f"{path}: md5 differs from the official {official.md5}")
    return path


def run_extract(layout: DatasetLayout, options: Options) -> StageSummary:
    """text/XX/wiki_NN from the dump (fetched first if it is a URL), in `nworker` processes."""
    started = time.time()
    dump = fetch_dump(layout, options)
    extraction = extract.extract_dump(dump, layout.text_dir, date=options.date,
                                      processes=worker_count(options.nworker))
    return StageSummary("extract", extraction.files, extraction.pages, dump.stat().st_size,
                        started)


def _todo(jobs: list[tuple]) -> list[tuple]:
    """The jobs whose output (second item) is not there yet (an output there is complete)."""
    return [job for job in jobs if not os.path.exists(job[1])]


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
    """work/cleaned/: cleanup_file + clean.sh of each extracted file not cleaned yet."""
    jobs = [(source, target, "") for source, target in _mirror_jobs(layout, None, "cleaned")]
    return run_jobs("clean", process_wiki.clean_job, _todo(jobs), options.nworker)


def run_segment(layout: DatasetLayout, options: Options) -> StageSummary:
    """work/sentences/: one sentence per line, for each cleaned file not segmented yet."""
    jobs = _todo(_mirror_jobs(layout, "cleaned", "sentences"))
    return run_jobs("segment", process_wiki.segment_job, jobs, options.nworker)


def run_separate(layout: DatasetLayout, options: Options) -> StageSummary:
    """A fresh work/train/ without the held-out articles, which go to results/eval.txt and
    their md5s to results/eval.md5."""
    shutil.rmtree(layout.work_dir("train"), ignore_errors=True)
    pairs = _mirror_jobs(layout, "sentences", "train")
    return process_wiki.separate("separate", pairs, options.num_test_articles, options.seed,
                                 str(layout.results_dir), options.nworker)


def run_gather(layout: DatasetLayout, options: Options) -> StageSummary:
    """results/part-XXXXX-of-00500 (all of them anew) from the training articles."""
    for old in layout.results_dir.glob("part-*"):
        old.unlink()
    sources = [GatherSource(str(extracted), str(layout.mirror(extracted, "train")))
               for extracted in layout.extracted_files()]
    return process_wiki.gather_parts("gather", sources, str(layout.results_dir),
                                     options.block_size, options.nworker)


def run_import_results(layout: DatasetLayout, options: Options) -> StageSummary:
    """OUT/results from --results_text (`import_results.import_text`)."""
    return import_results.import_text(layout, Path(options.results_text), options.nworker)


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
    jobs = _todo([(str(text), str(target), options)
                  for text, target in layout.tfrecord_sources()])
    return run_jobs("tfrecords", _pretraining_job, jobs, options.nworker)


def run_eval_10k(layout: DatasetLayout, options: Options) -> StageSummary:
    """tfrecords/eval_10k: `num_eval_examples` records picked from eval_intermediate."""
    started = time.time()
    source = layout.tfrecord_dir / "eval_intermediate"
    with StageProgress("eval_10k", options.num_eval_examples, unit="records") as bar:
        picked = pick_eval_samples.pick_examples(
            str(source), str(layout.tfrecord_dir / "eval_10k"), options.num_eval_examples,
            options.max_seq_length, options.max_predictions_per_seq, progress=bar.advance,
            repeats_level=logging.INFO)  # a small dump's eval set always repeats records
    return StageSummary("eval_10k", 1, picked, os.path.getsize(source), started)


def run_pack(layout: DatasetLayout, options: Options) -> StageSummary:
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
    # One pool for both packer calls (as many workers as there are training parts, at most):
    # eval_10k is packed by a worker that has started TensorFlow already.
    workers = min(worker_count(options.nworker), max(1, len(pairs) - 1))
    with StageProgress("pack", 2 * len(pairs), 2 * nbytes), \
            shared_workers(workers, TENSORFLOW_WORKERS):
        for group in (pairs[:-1], pairs[-1:]):
            result = pack_files([str(source) for source, _ in group],
                                [str(target) for _, target in group], settings, options.nworker)
            packing.add(result.stats)
    return StageSummary("pack", len(pairs), packing.rows, nbytes, started, packing.line())


def run_manifest(layout: DatasetLayout, options: Options) -> StageSummary:
    """manifest.tsv (path, bytes, md5 of every output), and the same with mtimes in
    .state/manifest.outputs, which lets `make verify` and `make upload` trust an md5 while its
    file keeps its size and mtime; the manifest's own size and md5 in .state/manifest.record,
    which they hold it to (`ledger.write_manifest`). A link there leading out of OUT is an
    InputError (`resolve_inside`): nothing outside is hashed into the manifest."""
    started = time.time()
    folders = [layout.text_dir, layout.results_dir, layout.tfrecord_dir] + (
        [layout.packed_dir] if options.pack else [])
    outputs = sorted(files.resolve_inside(layout.root, str(path.relative_to(layout.root)),
                                          str(layout.root))
                     for folder in folders for path in folder.rglob("*")
                     if (path.is_file() or path.is_symlink()) and not path.name.startswith("."))
    entries = {}
    with StageProgress("manifest", len(outputs), total_bytes(outputs)) as bar:
        for path in outputs:
            entries[str(path.relative_to(layout.root))] = entry = Entry.of(path)
            bar.advance(1, entry.size)
    write_manifest(layout, entries)
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
    Stage("manifest", run_manifest, ("pack",),
          lambda layout: [layout.manifest, layout.manifest_record]),
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
          import_results.imported_files, output_dir=lambda layout: layout.results_dir),
    *_LATER_STAGES,
)

# With --pack, before the manifest. The stages before it that run again make it run again.
PACK_STAGE = Stage("pack", run_pack, ("max_sequences_per_pack",),
                   lambda layout: [target for _, target in layout.packed_sources()])


def route(options: Options, pack: bool) -> tuple[Stage, ...]:
    """The stages of the route `options` take (RESULTS_STAGES with --results_text, else
    STAGES), with the pack stage before the manifest when `pack`."""
    stages = RESULTS_STAGES if options.results_text else STAGES
    return (*stages[:-1], PACK_STAGE, stages[-1]) if pack else stages


# ---- resumption ---------------------------------------------------------------------------------

def stage_key(stage: Stage, options: Options) -> str:
    """The md5 of `stage`'s name and the values of its parameters."""
    values = {name: getattr(options, name) for name in stage.params}
    return hashlib.md5(json.dumps([stage.name, values], sort_keys=True).encode()).hexdigest()


def markers(layout: DatasetLayout, name: str) -> tuple[Path, Path]:
    """The (finished, started) markers of stage `name`."""
    finished = layout.state_dir / name
    return finished, finished.with_name(name + ".started")


def changed_outputs(layout: DatasetLayout, stage: Stage, recorded: dict[str, int]) -> list[str]:
    """The outputs of a finished stage (those it recorded, and those the earlier stages'
    outputs call for) that are gone or no longer have their recorded size. InputError for one
    that leads outside OUT or is no regular file (`resolve_inside`): nothing of it is removed."""
    wanted = {str(path.relative_to(layout.root)): None for path in stage.outputs(layout)}
    changed = []
    for name, size in (wanted | recorded).items():
        path = files.resolve_inside(layout.root, name, str(layout.root))
        if not path.exists() or size not in (None, path.stat().st_size):
            changed.append(name)
    return changed


def remove_folder(layout: DatasetLayout, options: Options, folder: Path) -> None:
    """Remove `folder`, unless it is the official text imported in place."""
    if folder != layout.results_dir or not import_results.in_place(layout, options.results_text):
        shutil.rmtree(folder, ignore_errors=True)


def remove_unfinished_files(root: Path) -> None:
    """Delete the temporaries (`.NAME.partial-PID`) a killed run left anywhere under `root`."""
    for leftover in sorted(root.rglob(".*.partial-*"), reverse=True):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def leave_other_route(layout: DatasetLayout, options: Options) -> None:
    """If OUT holds the work of the other route (a dump's text/ and work/, or the imported
    text), remove it, its records and the manifest: the two never mix. A build from a dump
    into an OUT whose results/ is official text used in place is an InputError."""
    from_dump = not options.results_text
    other = RESULTS_STAGES[:1] if from_dump else STAGES[:-len(_LATER_STAGES)]
    state = [path for stage in other for path in markers(layout, stage.name)]
    state += [layout.results_md5s] if from_dump else []
    if not any(path.exists() for path in state):
        return
    if from_dump and import_results.imported_in_place(layout):
        raise InputError(f"{layout.results_dir}: holds the official text, used in place by "
                         f"--results_text; a build from a dump would overwrite it: give another "
                         f"--output_dir")
    folders = [layout.results_dir] if from_dump else [layout.text_dir, layout.root / "work",
                                                      layout.results_dir]
    logging.warning("%s: holds the outputs of the route from %s; removing them (%s)",
                    layout.root, "--results_text" if from_dump else "a dump",
                    ", ".join(folder.name for folder in folders))
    for path in folders:
        remove_folder(layout, options, path)
    for path in state + [layout.manifest]:
        path.unlink(missing_ok=True)


def run_stage(layout: DatasetLayout, options: Options, stage: Stage,
              later: tuple[Stage, ...]) -> None:
    """Run `stage` unless it finished with its key and its outputs are all there.

    Outputs appear only complete (`atomic_output`). A finished stage redoes the outputs gone
    or of another size since. Any other stage goes on from the outputs there if it started
    with the same key, else starts afresh (`output_dir` emptied); either way the stages
    `later` and the manifest lose their record first, so they run too.
    """
    key = stage_key(stage, options)
    finished, started = markers(layout, stage.name)
    marker = read_marker(finished, layout.root)
    changed = changed_outputs(layout, stage, marker[1]) if marker and marker[0] == key else None
    if changed == []:
        say(f"{stage.name}: already done with these parameters, skipped")
        return
    if changed:
        logging.warning("%s: %d finished output(s) missing or changed since (first: %s); "
                        "redoing them", stage.name, len(changed), changed[0])
        for name in changed:
            (layout.root / name).unlink(missing_ok=True)
    else:
        if marker and marker[0] != key:  # a flag changed, or a version with other keys wrote it
            say(f"{stage.name}: finished with other parameters; running it again")
        if read_state(started) != key and stage.output_dir is not None:
            remove_folder(layout, options, stage.output_dir(layout))
        for path in [path for each in later for path in markers(layout, each.name)] + [
                finished, layout.manifest]:
            path.unlink(missing_ok=True)
        write_state(started, key)
    report(stage.run(layout, options))
    write_marker(finished, key, layout.root, stage.outputs(layout))
    started.unlink(missing_ok=True)


def check_inputs(layout: DatasetLayout, options: Options) -> Options:
    """`options` with the digest of --results_text's files (`import_results.text_digest`, which
    checks them); or, from a local dump, the dump checked unless extract finished with these
    parameters. Before anything changes."""
    if options.results_text:
        return replace(options, results_digest=import_results.text_digest(
            layout, options.results_text, options.nworker))
    dump = local_dump(options.dump)
    marker = read_marker(markers(layout, STAGES[0].name)[0], layout.root)
    if dump is not None and (marker is None or marker[0] != stage_key(STAGES[0], options)):
        check_local_dump(dump)
    return options


def run_pipeline(output_dir: str, options: Options) -> None:
    """Run, into `output_dir`, every stage that is not finished with these parameters.

    The options are checked first (`check_options`, and that eval_10k's records can fit on
    the disk of `output_dir`). One run at a time: the run holds
    `.state/lock` throughout, and a second one is refused (InputError naming the holder)
    before it changes anything; so is a link planted where the run writes
    (`DatasetLayout.check_outputs`). A run that fails removes its unfinished temporaries.
    """
    check_options(options)
    with naming(f"--num_eval_examples={options.num_eval_examples}"):
        pick_eval_samples.check_room(options.num_eval_examples, options.max_seq_length,
                                     options.max_predictions_per_seq,
                                     str(DatasetLayout(Path(output_dir)).tfrecord_dir /
                                         "eval_10k"))
    if options.results_text and not os.path.isdir(os.path.join(output_dir, ".state")):
        import_results.text_names(Path(options.results_text))  # no new OUT for a bad DIR
    layout = DatasetLayout(ensure_dir(output_dir))
    layout.check_outputs()
    with exclusive_lock(ensure_dir(layout.state_dir) / "lock", layout.root, "preprocess"):
        remove_unfinished_files(layout.root)
        try:
            options = check_inputs(layout, options)
            leave_other_route(layout, options)
            stages, every = route(options, options.pack), route(options, True)
            for stage in stages:  # pack's record goes too: a later --pack run redoes it
                run_stage(layout, options, stage, every[every.index(stage) + 1:])
        except BaseException:
            remove_unfinished_files(layout.root)
            raise


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
flags.DEFINE_integer("dupe_factor", constants.DUPE_FACTOR, "Maskings of each document "
                     "(refused when the instances cannot fit in memory).")
flags.DEFINE_integer("random_seed", constants.PRETRAINING_RANDOM_SEED,
                     "Seed of create_pretraining_data.")
flags.DEFINE_integer("num_eval_examples", constants.EVAL_SAMPLES, "Records in eval_10k "
                     "(refused when they cannot fit on the disk of --output_dir).")
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


def _build() -> None:
    """Run the pipeline the flags describe, then say where its manifest is."""
    started = time.time()
    try:
        run_pipeline(FLAGS.output_dir, options_from_flags())
    except DiskFullError as err:
        raise DiskFullError(f"{err}; free some space and run the same command again, it goes "
                            f"on from there") from err
    print(f"preprocess: done in {time.time() - started:.1f} s; manifest "
          f"{os.path.join(FLAGS.output_dir, 'manifest.tsv')}", flush=True)


def main(argv: list[str]) -> None:
    """Entry point for `python -m cleanup_scripts.preprocess`.

    The console gets one line per stage (its summary, or why it was skipped), a progress bar
    while it runs (on a terminal), warnings and errors; nothing per file or article. absl's
    INFO lines (the stages' per-file counts) show with --verbosity=0.
    """
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    exit_on_user_error(_build)


if __name__ == "__main__":
    app.run(main)
