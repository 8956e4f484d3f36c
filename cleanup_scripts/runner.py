"""Running a stage over many files: worker pools, progress bars, summary lines."""
from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.pool
import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from absl import logging
from tqdm import tqdm

from cleanup_scripts.fileio import expand_inputs

Item = TypeVar("Item")
Result = TypeVar("Result")


def worker_count(requested: int) -> int:
    """Workers to use: `requested` if positive, else every core of this machine."""
    return requested if requested > 0 else (os.cpu_count() or 1)


class _SharedPool:
    """The pool that `shared_workers` keeps open, with its size and start method (None when
    there is none)."""

    pool: multiprocessing.pool.Pool | None = None
    size = 0
    start_method = ""


@contextlib.contextmanager
def shared_workers(nworker: int, start_method: str = "fork") -> Iterator[None]:
    """Within the block, `map_in_workers` calls asking for `nworker` workers (0: all cores) and
    `start_method` use one pool of that many processes, started here, instead of starting a
    pool each.

    State that the block's work needs in every worker (a loaded model) is best set up before
    (fork), or is loaded once per worker (spawn).
    """
    size = worker_count(nworker)
    if size == 1 or _SharedPool.pool is not None:
        yield
        return
    with multiprocessing.get_context(start_method).Pool(size) as pool:
        _SharedPool.pool, _SharedPool.size, _SharedPool.start_method = pool, size, start_method
        try:
            yield
        finally:
            _SharedPool.pool, _SharedPool.size, _SharedPool.start_method = None, 0, ""


def map_in_workers(function: Callable[[Item], Result], items: Sequence[Item], nworker: int,
                   desc: str, start_method: str = "fork") -> list[Result]:
    """Apply `function` to each item in up to `nworker` processes, in order, with a progress bar.

    `function` must be picklable (a module-level function). Returns results in item order.
    Inside `shared_workers(nworker, start_method)` the shared pool does the work. start_method
    "spawn" starts fresh interpreters instead of forking this one: for work that imports
    TensorFlow, whose threads do not survive a fork of a process that has imported it.
    """
    wanted = worker_count(nworker)
    nworker = min(wanted, max(1, len(items)))
    bar = tqdm(total=len(items), desc=desc, unit="file", disable=None, leave=False)
    try:
        if nworker == 1:
            results = []
            for item in items:
                results.append(function(item))
                bar.update()
            return results
        if _SharedPool.pool is not None and _SharedPool.size == wanted and \
                _SharedPool.start_method == start_method:
            return _collect(_SharedPool.pool, function, items, bar)
        with multiprocessing.get_context(start_method).Pool(nworker) as pool:
            return _collect(pool, function, items, bar)
    finally:
        bar.close()


class _WorkerPeak:
    """The largest peak RSS (KiB) reported by a worker that is still running."""

    kib = 0


@dataclass(frozen=True)
class _WithPeak:
    """`function`, returning (its result, this worker process's peak RSS in KiB)."""

    function: Callable

    def __call__(self, item):
        result = self.function(item)
        return result, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _collect(pool: multiprocessing.pool.Pool, function: Callable[[Item], Result],
             items: Sequence[Item], bar: tqdm) -> list[Result]:
    """`function` over `items` in `pool`, results in item order, advancing `bar` per item."""
    results = []
    for result, peak_kib in pool.imap(_WithPeak(function), items):
        results.append(result)
        _WorkerPeak.kib = max(_WorkerPeak.kib, peak_kib)
        bar.update()
    return results


def peak_rss_mb() -> float:
    """Peak resident memory of the largest of this process, its finished children and the
    pool workers that are still running, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children, _WorkerPeak.kib) / 1024.0


@dataclass
class StageSummary:
    """What a stage did: counts and input bytes, for its one-line summary."""

    stage: str
    files: int
    records: int
    input_bytes: int
    started: float

    def line(self) -> str:
        """The summary line: files, records, MB, seconds, MB/s and peak RSS."""
        seconds = max(time.time() - self.started, 1e-9)
        megabytes = self.input_bytes / 1e6
        return (f"{self.stage}: {self.files} files, {self.records} records, "
                f"{megabytes:.1f} MB in {seconds:.1f} s ({megabytes / seconds:.2f} MB/s), "
                f"peak RSS {peak_rss_mb():.0f} MB")


def report(summary: StageSummary) -> None:
    """Log a stage's summary line through absl logging and echo it on stderr."""
    line = summary.line()
    logging.info(line)
    print(line, file=sys.stderr, flush=True)


def total_bytes(paths: Iterable[str]) -> int:
    """Sum of the sizes of `paths`, in bytes."""
    return sum(os.path.getsize(path) for path in paths)


def run_suffix_stage(stage: str, function: Callable[[tuple[str, str]], int], pattern: str,
                     input_suffix: str, output_suffix: str, nworker: int) -> None:
    """Run a reference-style per-file stage: for each file F matching `pattern`, call
    `function((F + input_suffix, F + output_suffix))` (returning a record count) in workers,
    then report the stage's summary line."""
    started = time.time()
    inputs = expand_inputs(pattern, input_suffix)
    jobs = [(path + input_suffix, path + output_suffix) for path in inputs]
    records = map_in_workers(function, jobs, nworker, desc=stage)
    report(StageSummary(stage, len(jobs), sum(records), total_bytes(job[0] for job in jobs),
                        started))

