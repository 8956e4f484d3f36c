"""Running a stage over many files: worker pools (`map_in_workers`, `shared_workers`), the
stage's one progress bar (`StageProgress`, only on a terminal, hiding every bar inside the
stage's work) and its one summary line (`StageSummary`, `report`).
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.pool
import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from tqdm import tqdm

from benchmark.files import expand_inputs

Item = TypeVar("Item")
Result = TypeVar("Result")


# The start method of pools whose work imports TensorFlow: processes forked from a server
# process that imported TensorFlow once (multiprocessing's "forkserver", TensorFlow preloaded),
# so no worker pays TensorFlow's import (4-5 CPU-s) again. TensorFlow's runtime, whose threads
# do not survive a fork, starts in each worker; the server never runs an op.
TENSORFLOW_WORKERS = "forkserver"
_TENSORFLOW_PRELOAD = ["tensorflow"]


def _context(start_method: str) -> multiprocessing.context.BaseContext:
    """multiprocessing's context for `start_method`; TENSORFLOW_WORKERS' server imports
    TensorFlow before it forks (when this process has not started its server already)."""
    context = multiprocessing.get_context(start_method)
    if start_method == TENSORFLOW_WORKERS:
        context.set_forkserver_preload(_TENSORFLOW_PRELOAD)
    return context


def worker_count(requested: int) -> int:
    """Workers to use: `requested` if positive, else every core of this machine."""
    return requested if requested > 0 else (os.cpu_count() or 1)


class _SharedPool:
    """The pool `shared_workers` keeps open (None when there is none), and the start method
    it was started with."""

    pool: multiprocessing.pool.Pool | None = None
    start_method: str = ""


@contextlib.contextmanager
def shared_workers(nworker: int, start_method: str = "fork") -> Iterator[None]:
    """Within the block, `map_in_workers` calls with `start_method` use one pool of `nworker`
    processes (0: all cores), started here, whatever worker count they ask for (a single item
    too): state the work needs in every worker (a loaded model, an imported TensorFlow) is set
    up once, before the pool forks (fork) or in the server it forks from (TENSORFLOW_WORKERS)."""
    size = worker_count(nworker)
    if size == 1 or _SharedPool.pool is not None:
        yield
        return
    with _context(start_method).Pool(size) as pool:
        _SharedPool.pool, _SharedPool.start_method = pool, start_method
        try:
            yield
        finally:
            _SharedPool.pool, _SharedPool.start_method = None, ""


class StageProgress:
    """The one progress bar of a stage, on stderr when it is a terminal (tqdm's `disable=None`),
    cleared when the stage ends (its summary line follows).

    `items`: how many `unit` (files, parts, records) the stage works through; None when it is
    not known up front (each `map_in_workers` call inside then adds its items). `nbytes`: the
    input bytes it reads, when known: the bar then counts bytes (MB/s, ETA) after the items
    done ("clean 3/5 files"); else it counts items. While it is open (a context manager) it
    is the `active` bar of the process `pid`, which forked workers inherit: bars inside the
    stage's work stay hidden (`inner_bar_disabled`).
    """

    active: StageProgress | None = None
    pid = 0

    def __init__(self, stage: str, items: int | None, nbytes: int | None = None,
                 unit: str = "files") -> None:
        self.stage, self.items, self.nbytes, self.unit = stage, items, nbytes, unit
        self.done = 0
        self.discover = items is None

    def __enter__(self) -> StageProgress:
        by_bytes = self.nbytes is not None
        self.bar = tqdm(total=self.nbytes if by_bytes else self.items, desc=self._desc(),
                        unit="B" if by_bytes else f" {self.unit}", unit_scale=by_bytes,
                        unit_divisor=1000, leave=False, disable=None, file=sys.stderr,
                        dynamic_ncols=True, mininterval=0.5)
        StageProgress.active, StageProgress.pid = self, os.getpid()
        self._handlers = list(logging.getLogger().handlers)
        for handler in self._handlers:  # a warning clears the bar first, not mixed into it
            handler.addFilter(self._clear_for_log)
        return self

    def __exit__(self, *exc_info) -> None:
        for handler in self._handlers:
            handler.removeFilter(self._clear_for_log)
        StageProgress.active = None
        self.bar.close()

    def _clear_for_log(self, record: logging.LogRecord) -> bool:
        """A logging filter that lets every record through, clearing the bar's line first
        (it is drawn again at its next update)."""
        if not self.bar.disable and os.getpid() == StageProgress.pid:
            self.bar.clear()
        return True

    def _desc(self) -> str:
        if self.nbytes is None:
            return self.stage
        total = f"/{self.items}" if self.items is not None else ""
        return f"{self.stage} {self.done}{total} {self.unit}"

    def expect(self, items: int) -> None:
        """Add `items` to a total that was not known up front (a no-op when it was)."""
        if self.discover:
            self.items = (self.items or 0) + items

    def advance(self, items: int = 1, nbytes: int | None = None) -> None:
        """`items` more done, having read `nbytes` (None: the average item's share)."""
        self.done += items
        if self.nbytes is None:
            self.bar.update(items)
            return
        if nbytes is None:
            nbytes = self.nbytes * items // max(self.items or 1, 1)
        self.bar.set_description_str(self._desc(), refresh=False)
        self.bar.update(nbytes)


def active_stage_bar() -> StageProgress | None:
    """The stage bar this process has open, if any (never one a parent process opened)."""
    return StageProgress.active if StageProgress.pid == os.getpid() else None


def inner_bar_disabled() -> bool | None:
    """tqdm's `disable` for a bar inside a stage's work: True (hidden) while a stage's bar is
    open, here or in the process that forked this one; else None (shown on a terminal)."""
    return True if StageProgress.active is not None else None


def map_in_workers(function: Callable[[Item], Result], items: Sequence[Item], nworker: int,
                   desc: str, start_method: str = "fork",
                   sizes: Sequence[int] | None = None) -> list[Result]:
    """`function` (picklable: a module-level function) applied to each item in up to `nworker`
    processes (0: all cores); the results in item order.

    Inside `shared_workers(..., start_method)` its pool does the work. Work that imports
    TensorFlow, whose threads do not survive a fork, takes TENSORFLOW_WORKERS. Progress: the
    open stage bar advances by one item and its entry of `sizes` (bytes read) per item done;
    without one, a bar of its own, `desc`, counts the items.
    """
    nworker = min(worker_count(nworker), max(1, len(items)))
    stage_bar = active_stage_bar()
    own = None if stage_bar else tqdm(total=len(items), desc=desc, unit="file", leave=False,
                                      disable=inner_bar_disabled(), file=sys.stderr)
    if stage_bar:
        stage_bar.expect(len(items))
    sizes = list(sizes) if sizes is not None else [None] * len(items)
    with contextlib.ExitStack() as stack:
        if own is not None:
            stack.callback(own.close)
        if _SharedPool.pool is not None and _SharedPool.start_method == start_method:
            done = _SharedPool.pool.imap(_WithPeak(function), items)
        elif nworker == 1:
            done = ((function(item), 0) for item in items)
        else:
            pool = stack.enter_context(_context(start_method).Pool(nworker))
            done = pool.imap(_WithPeak(function), items)
        results = []
        for (result, peak_kib), size in zip(done, sizes):
            results.append(result)
            _WorkerPeak.kib = max(_WorkerPeak.kib, peak_kib)
            if stage_bar:
                stage_bar.advance(1, size)
            else:
                own.update(1)
        return results


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


def peak_rss_mb() -> float:
    """Peak resident memory of the largest of this process, its finished children and the
    pool workers that are still running, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children, _WorkerPeak.kib) / 1024.0


@dataclass
class StageSummary:
    """What a stage did, for its one-line summary: files and records, input bytes, its start
    (a `time.time()`) and what else it has to say (`note`)."""

    stage: str
    files: int
    records: int
    input_bytes: int
    started: float
    note: str = ""

    def line(self) -> str:
        """The summary line: files, records, MB, seconds, MB/s, peak RSS and the note."""
        seconds = max(time.time() - self.started, 1e-9)
        megabytes = self.input_bytes / 1e6
        return (f"{self.stage}: {self.files} files, {self.records} records, "
                f"{megabytes:.1f} MB in {seconds:.1f} s ({megabytes / seconds:.2f} MB/s), "
                f"peak RSS {peak_rss_mb():.0f} MB" + (f"; {self.note}" if self.note else ""))


def report(summary: StageSummary) -> None:
    """Print a stage's summary line on stderr: the stage's one line (never logged as well)."""
    say(summary.line())


def say(line: str) -> None:
    """Print one line about a stage (its summary, or why it was skipped) on stderr."""
    print(line, file=sys.stderr, flush=True)


def total_bytes(paths: Iterable[str]) -> int:
    """Sum of the sizes of `paths`, in bytes."""
    return sum(os.path.getsize(path) for path in paths)


def run_jobs(stage: str, function: Callable[[tuple], int], jobs: Sequence[tuple],
             nworker: int) -> StageSummary:
    """`function(job)` (a record count) for each job, whose first item is the path it reads, in
    up to `nworker` workers under one stage bar; returns the stage's summary."""
    started = time.time()
    sizes = [os.path.getsize(job[0]) for job in jobs]
    with StageProgress(stage, len(jobs), sum(sizes)):
        records = map_in_workers(function, jobs, nworker, desc=stage, sizes=sizes)
    return StageSummary(stage, len(jobs), sum(records), sum(sizes), started)


def run_suffix_stage(stage: str, function: Callable[[tuple[str, str]], int], pattern: str,
                     input_suffix: str, output_suffix: str, nworker: int) -> None:
    """Run a reference-style per-file stage: `function((F + input_suffix, F + output_suffix))`
    for each file F matching `pattern`, then print the stage's summary line."""
    jobs = [(path + input_suffix, path + output_suffix)
            for path in expand_inputs(pattern, input_suffix)]
    report(run_jobs(stage, function, jobs, nworker))
