"""Shared pytest helpers: running the project's CLIs as a user would."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest

import benchmark  # noqa: F401  (TensorFlow's Keras 2, before a test imports TensorFlow)
from tests import forked

REPO = Path(__file__).resolve().parent.parent

# Tests run `make` as a user does, from a shell. Under `make test` (how CI runs the suite) the
# outer make exports its level and flags; a nested make then reports itself as `make[1]` and
# inherits the outer one's options, so those variables are dropped for every test.
for _variable in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
    os.environ.pop(_variable, None)
# TensorFlow's log level as the shell gave it. Modules the tests import set it in os.environ
# (`setdefault`, at import or when they load TensorFlow), and every process a test starts
# inherits os.environ; so before each test's set-up (its module fixtures too) it is the shell's
# value again, and what ran earlier does not decide whether a CLI prints TensorFlow's lines.
# pytest-xdist's workers inherit the environment of the controller, which may have imported
# TensorFlow (a conftest under a path given on the command line): the controller passes the
# shell's value on in _SHELL_LEVEL_VARIABLE ("" for none).
_SHELL_LEVEL_VARIABLE = "TESTS_SHELL_TF_CPP_MIN_LOG_LEVEL"
os.environ.setdefault(_SHELL_LEVEL_VARIABLE, os.environ.get("TF_CPP_MIN_LOG_LEVEL", ""))
_SHELL_TF_LOG_LEVEL = os.environ[_SHELL_LEVEL_VARIABLE] or None
# XLA as the suite compiles it, in this process and every process it starts: an executable
# compiled once in the run (same HLO, same options) is read back from a cache folder the whole
# run shares instead of compiled again (about half of an XLA test's time is compiling). The
# process that makes the folder (the controller, which starts the xdist workers with its
# environment) removes it at the end.
_XLA_CACHE_VARIABLE = "TESTS_XLA_CACHE"
_MADE_XLA_CACHE = _XLA_CACHE_VARIABLE not in os.environ
if _MADE_XLA_CACHE:
    os.environ[_XLA_CACHE_VARIABLE] = tempfile.mkdtemp(prefix="tests-xla-cache-")
    os.environ["TF_XLA_FLAGS"] = " ".join(filter(None, [
        os.environ.get("TF_XLA_FLAGS"),
        f"--tf_xla_persistent_cache_directory={os.environ[_XLA_CACHE_VARIABLE]}"]))


# TensorFlow's intra-op threads, one per process here and in every process it starts, as on a
# one-core machine: the suite's models are tiny, so splitting an op costs more than it saves,
# and three pytest processes share two cores: `make test` took 1,104 CPU-s instead of 1,295
# (docs/results.md). The thread count changes the last bits of some ops (a tiny run's
# checkpoint differs from a two-thread one), so tests about the bytes of a run on the machine
# as it is (tests/reference/test_repeatable_runs.py, the README's demo) take
# `with_machine_threads(env)`.
INTRA_OP_THREADS_VARIABLE = "TF_NUM_INTRAOP_THREADS"
_SHELL_INTRA_OP_THREADS = os.environ.get(INTRA_OP_THREADS_VARIABLE)
os.environ.setdefault(INTRA_OP_THREADS_VARIABLE, "1")


def with_machine_threads(environment: dict) -> dict:
    """`environment` (changed in place and returned) with TensorFlow's intra-op threads as the
    shell gave them: unset (one per core) unless the shell set them."""
    if _SHELL_INTRA_OP_THREADS is None:
        environment.pop(INTRA_OP_THREADS_VARIABLE, None)
    else:
        environment[INTRA_OP_THREADS_VARIABLE] = _SHELL_INTRA_OP_THREADS
    return environment


def pytest_unconfigure(config):
    """Remove the XLA cache folder where this process made it."""
    if _MADE_XLA_CACHE:
        shutil.rmtree(os.environ[_XLA_CACHE_VARIABLE], ignore_errors=True)


def _shell_log_level(environment) -> None:
    """Put TF_CPP_MIN_LOG_LEVEL in the mapping `environment` back to the shell's value."""
    if _SHELL_TF_LOG_LEVEL is None:
        environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    else:
        environment["TF_CPP_MIN_LOG_LEVEL"] = _SHELL_TF_LOG_LEVEL


# The files that take longest, longest first (the README's commands lead: the slow suite runs
# its 15-minute demo there). pytest-xdist hands each worker a whole file and the next one when
# it is nearly done; started last, one of these would leave the other workers idle for its
# length. `make test` passes --no-loadscope-reorder so the order given here is the order
# handed out (xdist would otherwise start the files with the most tests first); its
# --durations list shows when this list needs updating.
LONGEST_FILES = ("test_readme.py", "reference/test_trainer.py",
                 "cleanup_scripts/test_preprocess.py", "reference/test_packed_training.py",
                 "cleanup_scripts/test_preprocess_pack.py", "reference/test_crash_resume.py",
                 "reference/test_distributed_training.py", "devtools/test_bench_train.py",
                 "reference/test_run_pretraining.py", "cleanup_scripts/test_extract.py")


def pytest_collection_modifyitems(items):
    """Run LONGEST_FILES' tests first, in that order, the other files after them in the order
    collected (a stable sort: each file's own order is kept)."""
    tests = REPO / "tests"
    rank = {tests / name: index for index, name in enumerate(LONGEST_FILES)}
    missing = [name for name in LONGEST_FILES if not (tests / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: LONGEST_FILES names no file: {missing}")
    items.sort(key=lambda item: rank.get(item.path, len(rank)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Put TF_CPP_MIN_LOG_LEVEL back to the shell's value before `item`'s fixtures are set up."""
    _shell_log_level(os.environ)


def run_module(module: str, *args: str, cwd: str | os.PathLike | None = None,
               check: bool = True, tf_log_level: str | None = None
               ) -> subprocess.CompletedProcess:
    """Run `python -m module args...` as a process of its own (forked with its imports made,
    tests/forked.py says when); return it (stdout/stderr captured). `tf_log_level`: its
    TF_CPP_MIN_LOG_LEVEL, else the shell's; a test indifferent to TensorFlow's own lines gives
    the forked server's (forked.SERVER_LOG_LEVEL), so that a command which loads TensorFlow is
    forked, not started as a new interpreter."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    _shell_log_level(env)  # whatever an import in the test set since its set-up
    if tf_log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = tf_log_level
    result = forked.run([sys.executable, "-m", module, *args], env=env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"{module} failed ({result.returncode}):\n{result.stderr}")
    return result


# Runs argv[2:], then writes "<its exit status> <its peak RSS in KiB>" to the file argv[1].
_PEAK_RSS_REPORTER = ("import resource, subprocess, sys\n"
                      "status = subprocess.call(sys.argv[2:])\n"
                      "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
                      "with open(sys.argv[1], 'w', encoding='utf-8') as report:\n"
                      "    report.write(f'{status} {peak}')\n")


def reporting_peak_rss(command: list[str], report: Path) -> list[str]:
    """`command` started by a small interpreter that writes the command's exit status and peak
    RSS to the file `report` (read them with `read_peak_rss`). Measured there, the peak is the
    command's own: a process forked from a test process carries the test process's RSS at the
    fork into its high-water mark (Linux keeps it across exec), and RUSAGE_CHILDREN read in a
    test process is the largest child that process ever reaped."""
    return [sys.executable, "-c", _PEAK_RSS_REPORTER, str(report), *command]


def read_peak_rss(report: Path) -> tuple[int, int]:
    """(exit status, peak RSS in bytes) that `reporting_peak_rss`'s command wrote to `report`,
    which is then removed."""
    status, peak_kib = map(int, report.read_text(encoding="utf-8").split())
    report.unlink()
    return status, peak_kib * 1024


def md5_of(path: str | os.PathLike) -> str:
    """Hex md5 of a file's bytes."""
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def read_md5_manifest(path: str | os.PathLike) -> dict[str, str]:
    """Parse `md5sum` lines (`<md5>  <name>`), ignoring `#` comments, into {name: md5}."""
    table = {}
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            table[name] = digest
    return table


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, built by `build(folder)` once per test run and shared by every
    pytest-xdist worker: the first to ask builds it under a lock in the run's common temporary
    folder while the others wait, then all reuse it. Callers must not change it (copy it
    first). A build that raised is not reused: the next caller builds it again."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's basetemp is <run>/popen-gwN
        root = root.parent
    shared = root / "built-once"
    shared.mkdir(exist_ok=True)
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture
def fixtures_dir() -> Path:
    """The committed test fixtures."""
    return REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def sample_results_dir(tmp_path_factory) -> Path:
    """results/ of process_wiki on the committed wiki_00/wiki_01, with the reference fixture's
    flags (20 test articles, 1.5 MiB parts); every text output is checked against the md5 the
    reference scripts produced, so tests may use these parts as the reference's."""
    from cleanup_scripts.process_wiki import process_wiki

    def build(work: Path) -> None:
        for name in ("wiki_00", "wiki_01"):
            shutil.copy(REPO / "tests" / "fixtures" / "wiki-extracted" / name, work / name)
        process_wiki(str(work / "wiki_??"), str(work / "results"), num_test_articles=20,
                     seed=12345, block_size_mb=1.5, nworker=1)
        expected = read_md5_manifest(REPO / "tests" / "fixtures" / "reference-wiki_00-01" /
                                     "md5sums.txt")
        for name, digest in expected.items():
            assert md5_of(work / name.removeprefix("text/")) == digest, name

    return built_once(tmp_path_factory, "reference-wiki_00-01", build) / "results"
