"""`make preprocess`: a Wikipedia dump to the MLPerf BERT dataset, in one resumable command.

    python -m cleanup_scripts.preprocess --output_dir=build/dataset [--dump=PATH_OR_URL]

Stages, in order (each ends with a summary line; see cleanup_scripts.layout for the tree):
fetch (download and md5-verify the dump when it is a URL or an official file), extract
(WikiExtractor with time magic words fixed to --date), clean (cleanup_file + clean.sh),
segment (Punkt as NLTK 3.4.5), separate (eval articles), gather (parts), tfrecords
(create_pretraining_data per part and for eval.txt), eval_10k (pick_eval_samples) and manifest.

Without --dump it runs on the Wikipedia slice shipped in the repository with small-input
defaults (20 test articles, 1.5 MiB parts); with --dump the benchmark's values apply. A finished
stage records its parameters under .state/, and every finished output its size, mtime and md5
(cleanup_scripts.ledger). A re-run with the same parameters skips a stage whose outputs still
match; it redoes only the outputs that are missing or changed (a part deleted or truncated
since), and a stage killed midway keeps the outputs it finished (clean, segment and tfrecords
work file by file). A stage whose parameters (or an earlier stage's) changed runs again from
scratch with everything after it.

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
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from absl import app, flags, logging

from benchmark import constants
from cleanup_scripts import SAMPLE_DUMP, VOCAB_FILE
from cleanup_scripts import create_pretraining_data as pretraining
from cleanup_scripts import checksums, download, extract, pick_eval_samples, verify
from cleanup_scripts.clean import write_cleaned
from cleanup_scripts.cleanup_file import stripped_bytes
from cleanup_scripts.do_gather import GatherSource, gather
from cleanup_scripts.do_sentence_segmentation import segment_file
from cleanup_scripts.fileio import (DiskFullError, InputError, atomic_output, disk_full,
                                    ensure_dir, exclusive_lock)
from cleanup_scripts.layout import DatasetLayout
from cleanup_scripts.ledger import OutputLedger
from cleanup_scripts.runner import (StageSummary, map_in_workers, report, total_bytes,
                                    worker_count)
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
    verify_outputs: bool = False


StageBody = Callable[[DatasetLayout, Options, OutputLedger], StageSummary]


@dataclass
class Stage:
    """A named step; `params` lists the Options fields its output depends on.

    `run(layout, options, ledger)` records each output in `ledger` once it is complete. A stage
    with an `output_dir` works file by file: restarted with the same parameters it skips the
    outputs its ledger shows intact; run afresh, that directory is emptied first. A stage
    without one always redoes all its outputs. `outputs(layout)`, where the earlier stages'
    outputs decide them, lists the outputs the stage must have finished: one its ledger lacks
    is redone like a damaged one (else only the recorded outputs are checked).
    """

    name: str
    run: StageBody
    params: tuple[str, ...]
    output_dir: Callable[[DatasetLayout], Path] | None = None
    outputs: Callable[[DatasetLayout], list[Path]] | None = None


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
    """InputError unless `path` is a file (a directory or a missing path is no dump)."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a dump file")
    if not path.is_file():
        raise InputError(f"{path}: dump file does not exist")


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
    if expected is not None and not verify.verify_file(path, expected):
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
        logging.info("%s: %d of %d outputs already finished, kept", stage,
                     len(jobs) - len(todo), len(jobs))
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
        records = map_in_workers(_Recorded(function, ledger), jobs, options.nworker, desc=name)
        return StageSummary(name, len(jobs), sum(records), total_bytes(s for s, _ in jobs),
                            started)
    return run


def run_separate(layout: DatasetLayout, options: Options, ledger: OutputLedger
                 ) -> StageSummary:
    started = time.time()
    shutil.rmtree(layout.work_dir("train"), ignore_errors=True)
    jobs = _mirror_jobs(layout, "sentences", "train")
    ensure_dir(layout.results_dir)
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
    parts = gather(sources, str(layout.results_dir), options.block_size,
                   constants.GATHER_NUM_OUTPUTS, nworker=1, nprocs=options.nworker)
    ledger.record_all(parts)
    return StageSummary("gather", len(sources), len(parts),
                        total_bytes(s.text_path for s in sources), started)


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
    records = map_in_workers(_Recorded(_pretraining_job, ledger), jobs, options.nworker,
                             desc="tfrecords")
    return StageSummary("tfrecords", len(jobs), sum(records),
                        total_bytes(text for text, _, _ in jobs), started)


def run_eval_10k(layout: DatasetLayout, options: Options, ledger: OutputLedger
                 ) -> StageSummary:
    started = time.time()
    source = layout.tfrecord_dir / "eval_intermediate"
    target = layout.tfrecord_dir / "eval_10k"
    picked = pick_eval_samples.pick_examples(
        str(source), str(target), options.num_eval_examples, options.max_seq_length,
        options.max_predictions_per_seq)
    ledger.record(target)
    return StageSummary("eval_10k", 1, picked, os.path.getsize(source), started)


def run_manifest(layout: DatasetLayout, options: Options, ledger: OutputLedger
                 ) -> StageSummary:
    started = time.time()
    outputs = sorted(p for folder in (layout.text_dir, layout.results_dir, layout.tfrecord_dir)
                     for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    with atomic_output(layout.manifest) as out:
        out.write("path\tbytes\tmd5\n")
        for path in outputs:
            out.write(f"{path.relative_to(layout.root)}\t{path.stat().st_size}\t"
                      f"{verify.md5_file(path)}\n")
    ledger.record(layout.manifest)
    return StageSummary("manifest", len(outputs), len(outputs),
                        total_bytes(map(str, outputs)), started)


_PRETRAINING_PARAMS = ("vocab_file", "do_lower_case", "max_seq_length", "max_predictions_per_seq",
                       "masked_lm_prob", "short_seq_prob", "dupe_factor", "random_seed")

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
    Stage("tfrecords", run_tfrecords, _PRETRAINING_PARAMS,
          output_dir=lambda layout: layout.tfrecord_dir,
          outputs=lambda layout: [target for _, target in layout.tfrecord_sources()]),
    Stage("eval_10k", run_eval_10k, ("num_eval_examples",),
          outputs=lambda layout: [layout.tfrecord_dir / "eval_10k"]),
    Stage("manifest", run_manifest, (), outputs=lambda layout: [layout.manifest]),
)


# ---- resumption ---------------------------------------------------------------------------------

def stage_keys(options: Options) -> dict[str, str]:
    """A key per stage that changes when its parameters or any earlier stage's change."""
    keys, previous = {}, ""
    values = asdict(options)
    for stage in STAGES:
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


def _holds(marker: Path, key: str) -> bool:
    return marker.is_file() and marker.read_text() == key


def _forget_after(layout: DatasetLayout, index: int) -> None:
    """Make every stage after STAGES[index] look never run (markers removed)."""
    for stage in STAGES[index + 1:]:
        for marker in _markers(layout, stage):
            marker.unlink(missing_ok=True)


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
    layout = DatasetLayout(ensure_dir(output_dir))
    ensure_dir(layout.state_dir)
    with exclusive_lock(layout.state_dir / "lock", layout.root, "preprocess"):
        remove_unfinished_files(layout.root)
        try:
            _run_stages(layout, options)
        except BaseException:
            remove_unfinished_files(layout.root)
            raise


def _run_stages(layout: DatasetLayout, options: Options) -> None:
    """The body of `run_pipeline`, once it holds the lock."""
    keys = stage_keys(options)
    dump = local_dump(options.dump)
    if dump is not None and not _holds(_markers(layout, STAGES[0])[0], keys[STAGES[0].name]):
        check_local_dump(dump)
    for index, stage in enumerate(STAGES):
        key = keys[stage.name]
        finished, started = _markers(layout, stage)
        ledger = OutputLedger(layout.state_dir / f"{stage.name}.outputs", layout.root)
        repairing = _holds(finished, key)
        recorded = ledger.entries() if repairing else {}
        if repairing:
            required = stage.outputs(layout) if stage.outputs is not None else []
            damaged = ledger.damaged(options.verify_outputs, required)
            if not damaged:
                logging.info("%s: already done with these parameters, skipped", stage.name)
                continue
            logging.warning("%s: %d finished output(s) missing or changed since (first: %s); "
                            "redoing them", stage.name, len(damaged), damaged[0])
        else:
            if not _holds(started, key):
                ledger.reset()
                if stage.output_dir is not None:
                    shutil.rmtree(stage.output_dir(layout), ignore_errors=True)
            _forget_after(layout, index)
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
            _forget_after(layout, index)
        with atomic_output(finished) as out:
            out.write(key)
        started.unlink()


# ---- command line -------------------------------------------------------------------------------

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "build/dataset", "Directory for every output.")
flags.DEFINE_string("dump", None, "Wikipedia XML dump (.bz2 or .xml), local path or URL. "
                    "Default: the slice shipped in the repository.")
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
flags.DEFINE_bool("verify_outputs", False, "Hash every finished output before skipping it "
                  "(default: hash only those whose size or mtime changed since they were made).")


def options_from_flags() -> Options:
    """Options from the command line, with the sample's defaults when no dump is given."""
    sample = FLAGS.dump is None
    return Options(
        dump=str(SAMPLE_DUMP) if sample else FLAGS.dump,
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
        verify_outputs=FLAGS.verify_outputs)


def main(argv: list[str]) -> None:
    """Entry point for `python -m cleanup_scripts.preprocess`."""
    del argv
    started = time.time()
    try:
        run_pipeline(FLAGS.output_dir, options_from_flags())
    except DiskFullError as err:
        raise SystemExit(f"error: {err}; free some space and run the same command again, "
                         f"it goes on from there")
    except InputError as err:
        raise SystemExit(f"error: {err}")
    print(f"preprocess: done in {time.time() - started:.1f} s; manifest "
          f"{os.path.join(FLAGS.output_dir, 'manifest.tsv')}", flush=True)


if __name__ == "__main__":
    app.run(main)
