"""Choosing the tf.distribute strategy from the MLCommons reference's flags and the environment.

    --use_tpu [--tpu_name --tpu_zone --gcp_project]  TPUStrategy over the TPU's cores
    TF_CONFIG set (a cluster with workers)           MultiWorkerMirroredStrategy
    --num_gpus > 1                                   MirroredStrategy over /gpu:0 .. /gpu:N-1
    otherwise                                        the default strategy (one device)

`logical_cpu_devices(n)` splits the host CPU into n logical devices before TensorFlow starts
using it; with `devices=` a MirroredStrategy can then run n replicas on one CPU (how the
distributed code paths are tested without accelerators).

A strategy's replicas share one *global* batch: `--train_batch_size` and `--eval_batch_size` are
totals across all replicas (and workers), as in the MLCommons reference.

TensorFlow is imported where a strategy or device is set up, not with this module: the
command line's options (`StrategyRequest`) are read before TensorFlow's import, which must come
after --deterministic turned oneDNN off (`reference.repeatable`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from absl import logging

from benchmark.errors import UserError, one_line

if TYPE_CHECKING:
    import tensorflow as tf


class StrategyError(UserError, ValueError):
    """The requested devices cannot be set up; the message is one line."""


@dataclass(frozen=True)
class StrategyRequest:
    """What the command line asks for (the MLCommons reference's flag names)."""
    use_tpu: bool = False
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    num_tpu_cores: int | None = None
    num_gpus: int = 0
    devices: tuple[str, ...] = ()  # explicit devices for MirroredStrategy (tests)


def tf_config() -> dict:
    """The parsed TF_CONFIG environment variable ({} when unset or empty)."""
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise StrategyError(f"TF_CONFIG is not valid JSON ({err.msg})") from err
    except RecursionError as err:
        raise StrategyError("TF_CONFIG nests lists or objects too deep to read") from err
    if not isinstance(value, dict):
        raise StrategyError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    return value


def is_multi_worker(config: dict) -> bool:
    """Whether a TF_CONFIG describes a cluster of more than one task."""
    cluster = config.get("cluster") or {}
    return sum(len(tasks) for tasks in cluster.values()) > 1


def logical_cpu_devices(count: int) -> list[str]:
    """Split the (first) CPU into `count` logical devices; returns their names.

    Must run before TensorFlow initialises its devices (before any op runs).
    """
    import tensorflow as tf
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError as err:
        raise StrategyError(f"cannot split the CPU into {count} devices after TensorFlow "
                            f"started ({err})") from err
    return [device.name for device in tf.config.list_logical_devices("CPU")][:count]


def on_cpu(request: StrategyRequest) -> bool:
    """Whether `request` computes on the host CPU (no TPU, no GPUs asked for)."""
    return not request.use_tpu and not request.num_gpus


def make_strategy(request: StrategyRequest) -> tf.distribute.Strategy:
    """The strategy for `request` (see the module docstring); StrategyError if impossible."""
    import tensorflow as tf
    if request.use_tpu:
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu=request.tpu_name or "", zone=request.tpu_zone, project=request.gcp_project)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except Exception as err:  # noqa: BLE001 - the resolver raises URLError, HttpError, ...
            # No TPU to be had is a user's problem, whatever layer says so (the GCE metadata
            # server unreachable, an unknown name, a refused grpc address): one line.
            raise StrategyError(f"--use_tpu --tpu_name={request.tpu_name}: cannot reach the "
                                f"TPU ({type(err).__name__}: {one_line(err)})") from err
        strategy = tf.distribute.TPUStrategy(resolver)
        cores = strategy.num_replicas_in_sync
        if request.num_tpu_cores and request.num_tpu_cores != cores:
            logging.warning("--num_tpu_cores=%d but the TPU has %d cores; using %d",
                            request.num_tpu_cores, cores, cores)
        logging.info("TPUStrategy on %s: %d cores", request.tpu_name, cores)
        return strategy

    config = tf_config()
    if is_multi_worker(config):
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        task = config.get("task", {})
        logging.info("MultiWorkerMirroredStrategy: task %s/%s, %d replicas in sync",
                     task.get("type"), task.get("index"), strategy.num_replicas_in_sync)
        return strategy

    if request.devices:
        strategy = tf.distribute.MirroredStrategy(devices=list(request.devices))
        logging.info("MirroredStrategy over %s", ", ".join(request.devices))
        return strategy

    if request.num_gpus > 1:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < request.num_gpus:
            raise StrategyError(f"--num_gpus={request.num_gpus} but TensorFlow sees "
                                f"{len(gpus)} GPU(s)")
        devices = [f"/gpu:{i}" for i in range(request.num_gpus)]
        logging.info("MirroredStrategy over %d GPUs", request.num_gpus)
        return tf.distribute.MirroredStrategy(devices=devices)

    if request.num_gpus == 1 and not tf.config.list_logical_devices("GPU"):
        logging.warning("--num_gpus=1 but TensorFlow sees no GPU; running on the CPU")
    return tf.distribute.get_strategy()


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's outputs (logs, summaries, the real checkpoints)."""
    extended = strategy.extended
    return bool(getattr(extended, "should_checkpoint", True))


def describe(strategy: tf.distribute.Strategy) -> str:
    """A few words for logs: the strategy's class and replica count."""
    name = type(strategy).__name__.lstrip("_")
    return f"{name} with {strategy.num_replicas_in_sync} replica(s)"


def task_id(strategy: tf.distribute.Strategy) -> int:
    """This worker's index (0 for single-worker strategies)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_id is None:
        return 0
    return int(resolver.task_id)

