"""Synthetic but realistic BERT runs, written through `benchmark.mlperf_log` (the trainer's API).

A run trains in blocks of eval_frequency samples, evaluates after each block and stops at the
first eval at or above 0.720, with timestamps from a simulated clock (throughput, eval time,
init time), so the logs look like a real 8-accelerator run. Used to make the committed
fixtures under tests/fixtures/logs/ and the submission trees the tests build.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from benchmark import cadence, constants
from benchmark.mlperf_log import BertLogger, Hyperparameters

REPO = Path(__file__).resolve().parents[2]
T0_MS = 1_763_800_000_000  # 2025-11-22, the clock every synthetic run starts from

# The RCP hyperparameters for batch 256 (mlperf_logging's training_1.0.0/rcps_bert.json).
HYPERPARAMETERS_256 = Hyperparameters(
    global_batch_size=256, opt_base_learning_rate=0.00035, opt_epsilon=1e-6,
    opt_learning_rate_training_steps=13700, opt_learning_rate_warmup_steps=0,
    num_warmup_steps=0, start_warmup_step=0, opt_lamb_beta_1=0.9, opt_lamb_beta_2=0.999,
    opt_lamb_weight_decay_rate=0.01, gradient_accumulation_steps=1)
HYPERPARAMETERS_3072 = Hyperparameters(
    global_batch_size=3072, opt_base_learning_rate=0.002, opt_epsilon=1e-6,
    opt_learning_rate_training_steps=1141, opt_learning_rate_warmup_steps=100,
    num_warmup_steps=100, start_warmup_step=0, opt_lamb_beta_1=0.66, opt_lamb_beta_2=0.998,
    opt_lamb_weight_decay_rate=0.01, gradient_accumulation_steps=96)


@dataclass(frozen=True)
class RunSpec:
    """One synthetic run.

    converge_at: index (1-based) of the first eval at target; None: never reaches it.
    max_evals: evals before the sample budget ends (only used when converge_at is None).
    step_boundary: evaluate at the first step boundary after each multiple of
        eval_frequency (what a trainer does when the batch does not divide it) instead of
        exactly at the multiple.
    samples_per_second: training throughput; eval_seconds: time of one eval.
    """
    seed: int = 7
    hyperparameters: Hyperparameters = HYPERPARAMETERS_256
    division: str = "closed"
    converge_at: int | None = 18
    max_evals: int = 20
    step_boundary: bool = False
    samples_per_second: float = 900.0
    eval_seconds: float = 8.0
    init_seconds: float = 185.0
    org: str = "ExampleOrg"
    platform: str = "1xSyntheticA100x8"


def accuracy_curve(spec: RunSpec) -> list[float]:
    """Masked-LM accuracy after each eval: rising from ~0.5, first >= 0.720 at converge_at."""
    rng = random.Random(spec.seed)
    n = spec.converge_at if spec.converge_at is not None else spec.max_evals
    freq = cadence.eval_frequency(spec.hyperparameters.global_batch_size)
    top = (constants.TARGET_MLM_ACCURACY + 0.00035 if spec.converge_at is not None
           else constants.TARGET_MLM_ACCURACY - 0.0040)
    curve = []
    for j in range(1, n + 1):
        late = 0.0009 * (n - j)
        early = 0.38 * (math.exp(-j * freq / 200_000) - math.exp(-n * freq / 200_000))
        noise = rng.uniform(-0.0002, 0.0002) if j < n - 1 else 0.0
        curve.append(round(top - late - early + noise, 6))
    return curve


def eval_points(spec: RunSpec, count: int) -> list[int]:
    """Samples trained at each of the first `count` evals."""
    batch = spec.hyperparameters.global_batch_size
    freq = cadence.eval_frequency(batch)
    points = [j * freq for j in range(1, count + 1)]
    if spec.step_boundary:
        points = [-(-p // batch) * batch for p in points]
    return points


def write_run(path: str | Path, spec: RunSpec = RunSpec()) -> None:
    """Write the MLPerf log of the run `spec` to `path` (overwritten)."""
    path = Path(path)
    path.write_text("")
    clock = [float(T0_MS)]

    def now() -> int:
        return int(clock[0])

    def advance(seconds: float) -> None:
        clock[0] += seconds * 1000.0

    curve = accuracy_curve(spec)
    points = eval_points(spec, len(curve))
    with BertLogger(str(path), clock_ms=now, root_dir=str(REPO)) as log:
        log.submission(spec.org, spec.platform, spec.division, "onprem")
        advance(1.6)
        log.cache_clear()
        advance(2.3)
        log.init_start()
        log.seed(spec.seed)
        log.hyperparameters(spec.hyperparameters)
        advance(spec.init_seconds)
        log.init_stop()
        advance(0.1)
        log.run_start()
        trained = 0
        stopped = False
        for samples, accuracy in zip(points, curve):
            log.block_start(trained, samples - trained)
            advance((samples - trained) / spec.samples_per_second)
            log.block_stop(trained)
            log.eval_start(samples)
            advance(spec.eval_seconds)
            log.eval_stop(samples)
            log.eval_accuracy(samples, accuracy)
            trained = samples
            if accuracy >= constants.TARGET_MLM_ACCURACY:
                stopped = True
                break
            advance(0.05)
        if not stopped:  # sample budget spent: a final partial block, then abort
            log.block_start(trained, points[0])
            advance(points[0] / spec.samples_per_second / 2)
            trained += points[0] // 2
        advance(0.01)
        log.train_samples(trained)
        log.run_stop("success" if stopped else "aborted")


# --------------------------------------------------------------------------------------------
# Line-level editing of a log, for the broken gallery.

def load_lines(path: str | Path) -> list[str]:
    """The log's lines, without line ends."""
    return Path(path).read_text().splitlines()


def record(line: str) -> dict | None:
    """The JSON of an `:::MLLOG` line (None for other lines)."""
    if not line.startswith(":::MLLOG "):
        return None
    return json.loads(line[len(":::MLLOG "):])


def render(obj: dict) -> str:
    """An `:::MLLOG` line for `obj` (key order kept)."""
    return ":::MLLOG " + json.dumps(obj)


def find(lines: list[str], key: str, nth: int = 0, **metadata) -> int:
    """Index of the `nth` line with `key` (and the given metadata values); -1 for the last."""
    hits = [i for i, line in enumerate(lines)
            if (r := record(line)) is not None and r["key"] == key
            and all(r["metadata"].get(m) == v for m, v in metadata.items())]
    return hits[nth]
