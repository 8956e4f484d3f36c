"""The reference `process_wiki.sh` flow in one command, on already extracted files; and its four
text stages on explicit paths, which `make preprocess` runs too.

    python -m cleanup_scripts.process_wiki 'text/*/wiki_??' [--results_dir=./results]

For every extracted file F it writes F.1 (cleanup_file), F.2 (clean), F.3 (sentence
segmentation) and F.4 (training articles), then `results/eval.txt`, `results/eval.md5` and the
`results/part-XXXXX-of-00500` parts, exactly as the reference's shell script does with its
defaults (10,000 test articles, seed 12345, 26.92 MB parts). The flags change those defaults.
"""
from __future__ import annotations

import argparse
import os
import time

from benchmark import constants
from benchmark.errors import exit_on_user_error
from benchmark.files import atomic_output, ensure_dir, expand_inputs
from cleanup_scripts.cleanup_file import stripped_bytes
from cleanup_scripts.do_gather import GatherSource, gather
from cleanup_scripts.do_sentence_segmentation import segment_file
from cleanup_scripts.pipeline.runner import (StageProgress, StageSummary, report, run_jobs,
                                             shared_workers, total_bytes)
from cleanup_scripts.seperate_test_set import separate_files
from cleanup_scripts.text.clean import write_cleaned
from cleanup_scripts.text.sentence_splitter import get_splitter


def clean_job(job: tuple[str, str, str]) -> int:
    """cleanup_file then clean.sh, in memory, for an (extracted, cleaned, stripped) job: writes
    the cleaned file, and the cleanup_file output too when `stripped` is not empty. Returns the
    cleaned lines."""
    source, target, stripped_path = job
    stripped = stripped_bytes(source)
    if stripped_path:
        with atomic_output(stripped_path, "wb") as out:
            out.write(stripped)
    return write_cleaned(stripped, target)


def segment_job(job: tuple[str, str]) -> int:
    """Punkt sentence segmentation of a (cleaned, sentences) job; returns the sentences."""
    return segment_file(*job)


def separate(stage: str, pairs: list[tuple[str, str]], num_test_articles: int, seed: int,
             results_dir: str, nworker: int) -> StageSummary:
    """Hold `num_test_articles` out of the (sentences, training) pairs into results_dir/eval."""
    started, nbytes = time.time(), total_bytes(source for source, _ in pairs)
    ensure_dir(results_dir)
    with StageProgress(stage, len(pairs), nbytes):
        held_out = separate_files(pairs, num_test_articles, seed,
                                  os.path.join(results_dir, "eval"), nworker)
    return StageSummary(stage, len(pairs), held_out, nbytes, started)


def gather_parts(stage: str, sources: list[GatherSource], results_dir: str, block_size_mb: float,
                 nworker: int) -> StageSummary:
    """Write the part-XXXXX-of-00500 files of `sources` into `results_dir`."""
    started, nbytes = time.time(), total_bytes(source.text_path for source in sources)
    with StageProgress(stage, None, nbytes, unit="parts"):
        parts = gather(sources, results_dir, block_size_mb, constants.GATHER_NUM_OUTPUTS,
                       nworker=1, nprocs=nworker)
    return StageSummary(stage, len(sources), len(parts), nbytes, started)


def process_wiki(pattern: str, results_dir: str, num_test_articles: int, seed: int,
                 block_size_mb: float, nworker: int) -> None:
    """Run cleanup, clean, segmentation, separation and gather on the files matching `pattern`,
    every stage in the same `nworker` processes (0: all cores)."""
    inputs = expand_inputs(pattern)
    get_splitter()  # check the Punkt model before any work; the workers inherit it
    with shared_workers(nworker):
        report(run_jobs("cleanup_file+clean", clean_job, [(f, f + ".2", f + ".1") for f in inputs],
                        nworker))
        report(run_jobs("do_sentence_segmentation", segment_job,
                        [(f + ".2", f + ".3") for f in inputs], nworker))
        report(separate("seperate_test_set", [(f + ".3", f + ".4") for f in inputs],
                        num_test_articles, seed, results_dir, nworker))
        report(gather_parts("do_gather", [GatherSource(f, f + ".4") for f in inputs],
                            results_dir, block_size_mb, nworker))


def main(argv: list[str] | None = None) -> None:
    """CLI: `python -m cleanup_scripts.process_wiki GLOB [flags]`."""
    parser = argparse.ArgumentParser(description="Clean, segment, separate and gather wiki text.")
    parser.add_argument("inputs", help="Glob of extracted files, e.g. 'text/*/wiki_??'.")
    parser.add_argument("--results_dir", default="./results", help="Where parts and eval go.")
    parser.add_argument("--num_test_articles", type=int, default=constants.NUM_TEST_ARTICLES)
    parser.add_argument("--seed", type=int, default=constants.SEPARATION_SEED)
    parser.add_argument("--block_size", type=float, default=constants.GATHER_BLOCK_SIZE_MB,
                        help="Part size in MiB of original extracted text.")
    parser.add_argument("--nworker", type=int, default=0, help="Worker processes (0: all cores).")
    args = parser.parse_args(argv)
    process_wiki(args.inputs, args.results_dir, args.num_test_articles, args.seed,
                 args.block_size, args.nworker)


if __name__ == "__main__":
    exit_on_user_error(main)
