"""Stage 5: hold out the eval articles (the reference's `seperate_test_set.py`, same spelling).

    python -m cleanup_scripts.seperate_test_set --data='text/*/wiki_??' --input_suffix=.3 \\
        --output_suffix=.4 --num_test_articles=10000 --test_output=./results/eval

Articles are a file's text split on "\\n\\n". File i of N (sorted order, 0-based) gives
`int((i+1)*K/N) - int(i*K/N)` of the K test articles, drawn with `random.Random(seed + 13*i)`
as `int(rng.random() * num_articles)` until that many distinct ids are found. Training articles
go to the file's output (each followed by "\\n\\n"); test articles go to `TEST_OUTPUT.txt` in file
order and their md5 (of the article with trailing whitespace stripped) to `TEST_OUTPUT.md5`.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import time
from dataclasses import dataclass

from benchmark import constants
from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output, ensure_dir, expand_inputs
from cleanup_scripts.pipeline.runner import StageSummary, map_in_workers, report, total_bytes


def test_article_count(file_index: int, num_files: int, num_test_articles: int) -> int:
    """How many test articles file `file_index` of `num_files` contributes (float rounding as in
    the reference)."""
    return (int((file_index + 1) * num_test_articles * 1.0 / num_files)
            - int(file_index * num_test_articles * 1.0 / num_files))


def pick_test_ids(num_articles: int, num_tests: int, seed: int) -> list[int]:
    """Distinct article indices in draw order, drawn as the reference draws them."""
    if num_tests > num_articles:
        raise ValueError(f"{num_tests} test articles wanted from {num_articles} articles")
    rng = random.Random(seed)
    picked: list[int] = []
    chosen: set[int] = set()
    while len(picked) < num_tests:
        article_id = int(rng.random() * num_articles)
        if article_id not in chosen:
            chosen.add(article_id)
            picked.append(article_id)
    return picked


@dataclass(frozen=True)
class SeparationJob:
    """One file to split: where to read, where to write, its index and the split parameters."""

    input_path: str
    output_path: str
    file_index: int
    num_files: int
    num_test_articles: int
    seed: int


def read_utf8(path: str) -> bytes:
    """The bytes of `path`, checked to be UTF-8; InputError if unreadable or not UTF-8."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        data.decode("utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from err
    return data


def separate_file(job: SeparationJob) -> list[str]:
    """Write the training articles of `job.input_path` to `job.output_path`.

    Articles are split on "\\n\\n" in the file's bytes (the same split as in its text, which
    the reference reads without newline translation). Returns the held-out articles in file
    order. Raises InputError when the file has fewer articles than it must give (where the
    reference would loop forever).
    """
    articles = read_utf8(job.input_path).split(b"\n\n")
    num_tests = test_article_count(job.file_index, job.num_files, job.num_test_articles)
    try:
        test_ids = set(pick_test_ids(
            len(articles), num_tests, job.seed + job.file_index * constants.SEPARATION_SEED_STRIDE))
    except ValueError as err:
        raise InputError(f"{job.input_path}: {err}; lower --num_test_articles") from err
    with atomic_output(job.output_path, "wb") as out:
        out.write(b"".join([article + b"\n\n" for index, article in enumerate(articles)
                            if index not in test_ids]))
    return [articles[index].decode("utf-8") for index in sorted(test_ids)]


def write_test_set(test_articles: list[str], test_output: str) -> None:
    """Write `test_output`.txt (articles, each followed by a blank line) and `test_output`.md5."""
    ensure_dir(os.path.dirname(os.path.abspath(test_output)))
    with atomic_output(test_output + ".txt", newline="\n") as text_out, \
            atomic_output(test_output + ".md5", newline="\n") as hash_out:
        for article in test_articles:
            text_out.write(article)
            text_out.write("\n\n")
            hash_out.write(hashlib.md5(article.rstrip().encode("utf-8")).hexdigest())
            hash_out.write("\n")


def separate_files(pairs: list[tuple[str, str]], num_test_articles: int, seed: int,
                   test_output: str, nworker: int) -> int:
    """Split each (input, output) pair's articles; write the test set. Returns test articles.

    `pairs` must be in the reference's sorted input order: it fixes each file's seed and share.
    """
    jobs = [SeparationJob(source, target, index, len(pairs), num_test_articles, seed)
            for index, (source, target) in enumerate(pairs)]
    per_file = map_in_workers(separate_file, jobs, nworker, desc="seperate_test_set",
                              sizes=[os.path.getsize(job.input_path) for job in jobs])
    test_articles = [article for articles in per_file for article in articles]
    write_test_set(test_articles, test_output)
    return len(test_articles)


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference seperate_test_set.py (same flags; --nworker 0 = all cores)."""
    parser = argparse.ArgumentParser(description="Separate training and test articles.")
    parser.add_argument("--data", default="./*/*.compact", help="Glob of input files.")
    parser.add_argument("--input_suffix", default=".3", help="Suffix of the files read.")
    parser.add_argument("--output_suffix", default=".4", help="Suffix of training outputs.")
    parser.add_argument("--nworker", type=int, default=0, help="Worker processes (0: all cores).")
    parser.add_argument("--seed", type=int, default=constants.SEPARATION_SEED,
                        help="Base seed; file i uses seed + 13 * i.")
    parser.add_argument("--num_test_articles", type=int, default=constants.NUM_TEST_ARTICLES,
                        help="Articles held out for the test set.")
    parser.add_argument("--test_output", default="./results/eval",
                        help="Test set path prefix; .txt and .md5 are added.")
    args = parser.parse_args(argv)
    started = time.time()
    inputs = expand_inputs(args.data, args.input_suffix)
    pairs = [(path + args.input_suffix, path + args.output_suffix) for path in inputs]
    held_out = separate_files(pairs, args.num_test_articles, args.seed, args.test_output,
                              args.nworker)
    report(StageSummary("seperate_test_set", len(pairs), held_out,
                        total_bytes(source for source, _ in pairs), started))


if __name__ == "__main__":
    exit_on_user_error(main)
