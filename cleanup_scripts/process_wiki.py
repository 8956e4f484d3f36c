"""The reference `process_wiki.sh` flow in one command, on already extracted files.

    python -m cleanup_scripts.process_wiki 'text/*/wiki_??' [--results_dir=./results]

For every extracted file F it writes F.1 (cleanup_file), F.2 (clean), F.3 (sentence
segmentation) and F.4 (training articles), then `results/eval.txt`, `results/eval.md5` and the
`results/part-XXXXX-of-00500` parts, exactly as the reference's shell script does with its
defaults (10,000 test articles, seed 12345, 26.92 MB parts). The flags below change those
defaults for small inputs.
"""
from __future__ import annotations

import argparse
import os
import time

from benchmark import constants
from benchmark.errors import exit_on_user_error
from cleanup_scripts.clean import write_cleaned
from cleanup_scripts.cleanup_file import stripped_bytes
from cleanup_scripts.do_gather import GatherSource, gather
from cleanup_scripts.do_sentence_segmentation import segment_file
from cleanup_scripts.fileio import atomic_output, ensure_dir, expand_inputs
from cleanup_scripts.runner import (StageSummary, map_in_workers, report, shared_workers,
                                    total_bytes)
from cleanup_scripts.sentence_splitter import get_splitter
from cleanup_scripts.seperate_test_set import separate_files


def _cleanup_and_clean(path: str) -> int:
    """Write F.1 (cleanup_file) and F.2 (clean) for the extracted file F = `path`; the second
    stage works on the first one's bytes in memory. Returns the lines of F.2."""
    stripped = stripped_bytes(path)
    with atomic_output(path + ".1", "wb") as out:
        out.write(stripped)
    return write_cleaned(stripped, path + ".2")


def _segment(path: str) -> int:
    """Write F.3 (sentence segmentation) from F.2; returns its sentences."""
    return segment_file(path + ".2", path + ".3")


def process_wiki(pattern: str, results_dir: str, num_test_articles: int, seed: int,
                 block_size_mb: float, nworker: int) -> list[str]:
    """Run cleanup, clean, segmentation, separation and gather on the files matching `pattern`.

    Every stage runs in the same `nworker` processes (0: all cores), one file or part at a
    time. Returns the part paths written under `results_dir`.
    """
    inputs = expand_inputs(pattern)
    get_splitter()  # check the Punkt model before any work; the workers inherit it
    with shared_workers(nworker):
        started = time.time()
        lines = map_in_workers(_cleanup_and_clean, inputs, nworker, desc="clean")
        report(StageSummary("cleanup_file+clean", len(inputs), sum(lines), total_bytes(inputs),
                            started))
        started = time.time()
        sentences = map_in_workers(_segment, inputs, nworker, desc="segment")
        report(StageSummary("do_sentence_segmentation", len(inputs), sum(sentences),
                            total_bytes(path + ".2" for path in inputs), started))
        ensure_dir(results_dir)
        started = time.time()
        held_out = separate_files([(path + ".3", path + ".4") for path in inputs],
                                  num_test_articles, seed, os.path.join(results_dir, "eval"),
                                  nworker)
        report(StageSummary("seperate_test_set", len(inputs), held_out,
                            total_bytes(path + ".3" for path in inputs), started))
        started = time.time()
        parts = gather([GatherSource(path, path + ".4") for path in inputs], results_dir,
                       block_size_mb, constants.GATHER_NUM_OUTPUTS, nworker=1, nprocs=nworker)
        report(StageSummary("do_gather", len(inputs), len(parts),
                            total_bytes(path + ".4" for path in inputs), started))
    return parts


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
