"""Where a run computes: the tf.distribute strategy its options ask for (`strategy_for`), and
this process's role and share of each batch on it (`place` -> `Placement`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from absl import logging

from reference.preflight import CheckedInputs
from reference.run_options import DistributionOptions, RunOptions


def strategy_for(distribution: DistributionOptions, deterministic: bool = False):
    """The tf.distribute strategy `distribution` asks for. Before TensorFlow runs anything (the
    caller's part), a CPU run with `deterministic` is set to run one op at a time (the other
    half of a repeatable run, oneDNN's kernels off, is the caller's, before it imports
    TensorFlow: `reference.repeatable`); with cpu_devices > 1 the CPU is split into that many
    devices. StrategyError if the devices or threads cannot be had."""
    from reference import distribution as dist
    from reference import repeatable
    if deterministic and dist.on_cpu(distribution.strategy):
        try:
            repeatable.one_op_at_a_time()
        except repeatable.TooLate as err:
            raise dist.StrategyError(f"--deterministic: {err}") from err
    count = distribution.cpu_devices
    devices = tuple(dist.logical_cpu_devices(count)) if count > 1 else ()
    return dist.make_strategy(dataclasses.replace(distribution.strategy, devices=devices))


def packed_rows_per_replica(train_batch_size: int, sequences_per_row: float,
                            replicas: int) -> int:
    """Packed rows each replica takes per micro-step: round(train_batch_size / mean sequences
    per row) rows in all (at least one per replica), so that a step trains about
    `train_batch_size` sequences."""
    return max(1, round(train_batch_size / sequences_per_row / replicas))


def _per_replica(flag: str, total: int, strategy) -> int:
    """`total` (the value of `flag`) / the strategy's replicas; StrategyError naming the flag
    when it does not divide evenly."""
    from reference.distribution import StrategyError
    replicas = strategy.num_replicas_in_sync
    if total % replicas:
        raise StrategyError(f"{flag}={total} is not a multiple of the {replicas} replicas")
    return total // replicas


@dataclass(frozen=True)
class Placement:
    """Where this process computes and how a batch splits over the replicas."""
    strategy: Any  # tf.distribute.Strategy
    chief: bool  # this process writes the run's outputs
    task: int  # this worker's index
    train_per_replica: int  # records (packed: rows) per replica and micro-step
    eval_per_replica: int  # records per replica and eval step


def place(options: RunOptions, inputs: CheckedInputs, strategy=None) -> Placement:
    """The placement of a run on `strategy` (default: made from options.distribution); logs the
    strategy and the global batch. StrategyError when a batch does not split evenly."""
    from reference import distribution
    strategy = strategy or strategy_for(options.distribution)
    data = options.data
    if inputs.packed:
        train = packed_rows_per_replica(data.train_batch_size, inputs.train.sequences_per_row,
                                        strategy.num_replicas_in_sync)
    else:
        train = _per_replica("--train_batch_size", data.train_batch_size, strategy)
    evaluation = _per_replica("--eval_batch_size", options.eval.batch_size, strategy)
    logging.info("%s; global batch %d (%d %s per replica x %d micro-batches)",
                 distribution.describe(strategy), data.global_batch_size, train,
                 "packed rows" if inputs.packed else "records", data.steps_per_update)
    return Placement(strategy, distribution.is_chief(strategy), distribution.task_id(strategy),
                     train, evaluation)
