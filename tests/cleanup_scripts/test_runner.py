"""Worker pools of the pipeline stages: one pool per call, or one shared by a whole run."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

from cleanup_scripts.pipeline.runner import map_in_workers, shared_workers

# Not tests.conftest's (which imports TensorFlow): the workers below import this module.
REPO = Path(__file__).resolve().parents[2]


def _worker_pid(item: int) -> tuple[int, int]:
    time.sleep(0.002)
    return item, os.getpid()


def test_results_come_back_in_item_order_from_any_worker_count():
    for nworker in (1, 2, 3):
        results = map_in_workers(_worker_pid, list(range(20)), nworker, desc="test")
        assert [item for item, _ in results] == list(range(20))


def test_calls_inside_shared_workers_reuse_one_pool():
    with shared_workers(2):
        first = {pid for _, pid in map_in_workers(_worker_pid, list(range(40)), 2, desc="a")}
        second = {pid for _, pid in map_in_workers(_worker_pid, list(range(40)), 2, desc="b")}
        # One item, or one worker asked for: a worker of the pool too (it holds what the
        # work loaded, e.g. the packer's TensorFlow), not this process.
        [(_, single)] = map_in_workers(_worker_pid, [0], 1, desc="c")
    assert len(first | second | {single}) <= 2 and os.getpid() not in first | second | {single}
    separate = {pid for _, pid in map_in_workers(_worker_pid, list(range(40)), 2, desc="c")}
    assert not separate & (first | second)


def _hold_memory(megabytes: int) -> int:
    block = bytearray(megabytes * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    return len(block)


def test_peak_rss_counts_workers_of_a_shared_pool_that_are_still_running():
    from cleanup_scripts.pipeline.runner import peak_rss_mb
    before = peak_rss_mb()
    with shared_workers(2):
        map_in_workers(_hold_memory, [int(before) + 200, 1], 2, desc="memory")
        assert peak_rss_mb() >= before + 200


def _tensorflow_was_imported(item: int) -> tuple[int, bool]:
    time.sleep(0.2)  # long enough that both workers take items
    return os.getpid(), "tensorflow" in sys.modules


# A fresh interpreter (the test process's own forkserver is the suite's, TensorFlow preloaded):
# two workers of a TensorFlow pool report whether TensorFlow was imported before their work.
_TENSORFLOW_POOL = ("from cleanup_scripts.pipeline.runner import TENSORFLOW_WORKERS, "
                    "map_in_workers\n"
                    "from tests.cleanup_scripts.test_runner import _tensorflow_was_imported\n"
                    "print(sorted(set(map_in_workers(_tensorflow_was_imported, list(range(8)), "
                    "2, 'tf', TENSORFLOW_WORKERS))))\n")


def test_workers_of_a_tensorflow_pool_start_with_tensorflow_imported():
    """They are forked from a process that imported it once: none pays the import again."""
    result = subprocess.run([sys.executable, "-c", _TENSORFLOW_POOL], cwd=REPO, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    workers = ast.literal_eval(result.stdout)
    assert len(workers) == 2 and all(loaded for _, loaded in workers), workers
