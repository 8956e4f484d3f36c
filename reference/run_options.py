"""A run's options: the flags (with --preset's values) read once, checked, into frozen groups
(`RunOptions`), as tensorflow/models' ExperimentConfig groups a task's, trainer's and runtime's.

Pure: reads no file but the preset; reference/preflight.py checks the files the options name.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from absl import flags

from benchmark import cadence, constants
from reference.optimizer_settings import OptimizerSettings
from reference.run_flags import MAX_SEED, check_ranges, read_flags, require

if TYPE_CHECKING:  # reference.distribution imports TensorFlow; imported where used
    from reference.distribution import StrategyRequest


@dataclass(frozen=True)
class ModelOptions:
    """The model: its config, the weights it starts from, a dropout override."""
    bert_config_file: str
    init_checkpoint: str | None  # an official TF1/TF2 checkpoint (or, evaluating, one of ours)
    dropout_override: float | None  # both dropout probabilities of the config, when set


@dataclass(frozen=True)
class ComputeOptions:
    """How the steps compute: the precision, XLA, whether a CPU runs one op at a time (the same
    bytes every run), and two memory savings that change no result (recompute_layers,
    masked_lm_block_rows)."""
    mixed_precision: str  # "none", "bf16" or "fp16"
    use_xla: bool
    deterministic: bool  # on a CPU, one TensorFlow op at a time (`strategy_for`)
    recompute_layers: bool  # recompute each layer in the backward pass
    masked_lm_block_rows: int  # most masked-LM rows whose logits are formed at once; 0: all


@dataclass(frozen=True)
class DataOptions:
    """The training records and how they are batched."""
    patterns: str | None  # --input_file: comma-separated files or globs, as given
    max_seq_length: int  # tokens per record
    max_predictions_per_seq: int  # masked positions per record
    train_batch_size: int  # records per micro-step, all replicas together
    steps_per_update: int  # micro-batches accumulated per optimizer update

    @property
    def global_batch_size(self) -> int:
        """Records per optimizer update (what MLPerf calls global_batch_size)."""
        return self.train_batch_size * self.steps_per_update


@dataclass(frozen=True)
class ScheduleOptions:
    """How far this process trains and how it cuts the run into host calls and checkpoints; step
    counts are micro-steps."""
    stop_steps: int | None  # stop here (the learning-rate schedule still spans num_train_steps)
    iterations_per_loop: int  # most micro-steps per host call, a multiple of steps_per_update
    save_checkpoints_steps: int
    progress_seconds: float  # seconds between progress lines: host calls are shortened to fit


@dataclass(frozen=True)
class EvalOptions:
    """The evaluation: its records, batches, cadence and target."""
    patterns: str | None  # the eval records: --eval_file, or --input_file with --nodo_train
    flag: str  # the flag that names them, for messages: "--eval_file" or "--input_file"
    batch_size: int  # records per eval step, all replicas together
    max_steps: int  # the first batch_size x max_steps records are evaluated
    frequency: int  # samples between evals
    at_start: bool  # also evaluate at 0 samples
    target_accuracy: float  # the masked-LM accuracy that ends the run with success


@dataclass(frozen=True)
class OutputOptions:
    """Where the run writes: checkpoints, evals and summaries, and the MLPerf log."""
    output_dir: str
    keep_checkpoint_max: int  # 0: keep all
    mlperf_log: str  # a local file
    mlperf_log_to_console: bool  # also copy the MLPerf log's records to stdout


@dataclass(frozen=True)
class SubmissionOptions:
    """The MLPerf log's submission records, and why the flags make the run not closed-division."""
    org: str
    platform: str | None  # None: from the strategy, e.g. "8xGPU"
    division: str  # as asked: a run with noncompliant reasons is logged as open division
    status: str
    noncompliant: tuple[str, ...]


@dataclass(frozen=True)
class DistributionOptions:
    """Where the run computes: the tf.distribute strategy asked for, and a split of the CPU into
    `cpu_devices` mirrored devices when > 1 (tests and demos of the multi-replica path)."""
    strategy: StrategyRequest
    cpu_devices: int


@dataclass(frozen=True)
class RunOptions:
    """Everything the command line asks of a run, checked (`options_from_flags`). What the
    files it names hold is preflight's result (`reference.preflight.CheckedInputs`)."""
    do_train: bool
    do_eval: bool
    seed: int  # weights, dropout, data order
    seed_drawn: bool  # no --seed: drawn at start (a resumed run takes the run's)
    model: ModelOptions
    compute: ComputeOptions
    data: DataOptions
    optimizer: OptimizerSettings
    schedule: ScheduleOptions
    eval: EvalOptions
    output: OutputOptions
    submission: SubmissionOptions
    distribution: DistributionOptions

    @property
    def budget_steps(self) -> int:
        """Micro-steps this process may train to (global step)."""
        steps = self.optimizer.num_train_steps
        stop = self.schedule.stop_steps
        return min(steps, stop) if stop else steps


def options_from_flags(flag_values: flags.FlagValues) -> RunOptions:
    """The run's options from parsed flags and --preset (`read_flags`), each checked on its own
    and against the others.

    Reads no file but the preset. Raises UsageError (or PresetError) with a one-line message
    naming the flag.
    """
    v = read_flags(flag_values)
    require(v["do_train"] or v["do_eval"], "at least one of --do_train or --do_eval must be set")
    for name in ("bert_config_file", "output_dir"):
        require(bool(v[name]), f"--{name} is required")
    check_ranges(v)
    evaluation, eval_reasons = _eval_options(v)
    seed = v["seed"]
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little") % MAX_SEED
    return RunOptions(
        do_train=v["do_train"], do_eval=v["do_eval"], seed=seed, seed_drawn=v["seed"] is None,
        model=ModelOptions(v["bert_config_file"], v["init_checkpoint"], v["dropout_override"]),
        compute=ComputeOptions(v["mixed_precision"], v["use_xla"], v["deterministic"],
                               v["recompute_layers"], v["masked_lm_block_rows"]),
        data=DataOptions(v["input_file"], v["max_seq_length"], v["max_predictions_per_seq"],
                         v["train_batch_size"], v["steps_per_update"]),
        optimizer=_optimizer(v), schedule=_schedule(v), eval=evaluation, output=_output(v),
        submission=SubmissionOptions(v["submission_org"], v["submission_platform"],
                                     v["submission_division"], v["submission_status"],
                                     tuple(eval_reasons)),
        distribution=_distribution(v))


def _eval_options(v: Mapping[str, Any]) -> tuple[EvalOptions, list[str]]:
    """The eval group, and the reasons (in the order they are logged) that the training or eval
    flags make the run not closed-division."""
    reasons: list[str] = []
    patterns = None
    if v["do_train"]:
        require(bool(v["input_file"]), "--input_file is required with --do_train")
        if v["do_eval"]:
            require(bool(v["eval_file"]), "--eval_file is required with --do_train --do_eval "
                    "(the eval_10k TFRecord)")
            patterns = v["eval_file"]
        else:
            reasons.append("--nodo_eval: the run is never evaluated, so it cannot reach the "
                           "target")
    else:
        patterns = v["eval_file"] or v["input_file"]
        require(bool(patterns), "--eval_file (or --input_file) is required with --do_eval")

    global_batch = v["train_batch_size"] * v["steps_per_update"]
    rule_frequency = cadence.eval_frequency(global_batch)
    frequency = v["eval_frequency_samples"] or rule_frequency
    if frequency != rule_frequency:
        require(v["noncompliant_eval_frequency"],
                f"--eval_frequency_samples={frequency} differs from the benchmark's "
                f"{rule_frequency:,} for global batch {global_batch}; add "
                "--noncompliant_eval_frequency to run with it (open division)")
        reasons.append(f"evals every {frequency:,} samples instead of the benchmark's "
                       f"{rule_frequency:,}")
    target = v["target_mlm_accuracy"]
    if target != constants.TARGET_MLM_ACCURACY:
        reasons.append(f"target masked-LM accuracy {target} instead of "
                       f"{constants.TARGET_MLM_ACCURACY}")
    flag = "--eval_file" if v["eval_file"] else "--input_file"
    return EvalOptions(patterns, flag, v["eval_batch_size"], v["max_eval_steps"], frequency,
                       v["eval_at_start"], target), reasons


def _optimizer(v: Mapping[str, Any]) -> OptimizerSettings:
    return OptimizerSettings(
        name=v["optimizer"], learning_rate=v["learning_rate"],
        num_train_steps=v["num_train_steps"], num_warmup_steps=v["num_warmup_steps"],
        start_warmup_step=v["start_warmup_step"], poly_power=v["poly_power"],
        beta_1=v["lamb_beta_1"], beta_2=v["lamb_beta_2"],
        weight_decay_rate=v["lamb_weight_decay_rate"], log_epsilon=v["log_epsilon"],
        clip_after_allreduce=v["clip_by_global_norm_after_gradient_allreduce"])


def _schedule(v: Mapping[str, Any]) -> ScheduleOptions:
    n = v["steps_per_update"]
    iterations = max(1, -(-v["iterations_per_loop"] // n)) * n  # rounded up to whole updates
    return ScheduleOptions(v["stop_steps"], iterations, v["save_checkpoints_steps"],
                           v["progress_seconds"])


def _output(v: Mapping[str, Any]) -> OutputOptions:
    output_dir = v["output_dir"]
    mlperf_log = v["mlperf_log"]
    if not mlperf_log:  # the log is written locally: beside a remote output_dir, in .
        mlperf_log = os.path.join(output_dir, "mlperf.log") if "://" not in output_dir \
            else "mlperf.log"
    return OutputOptions(output_dir, v["keep_checkpoint_max"], mlperf_log,
                         v["mlperf_log_to_console"])


def _distribution(v: Mapping[str, Any]) -> DistributionOptions:
    from reference.distribution import StrategyRequest  # imports TensorFlow
    return DistributionOptions(
        StrategyRequest(use_tpu=v["use_tpu"], tpu_name=v["tpu_name"], tpu_zone=v["tpu_zone"],
                        gcp_project=v["gcp_project"], num_tpu_cores=v["num_tpu_cores"],
                        num_gpus=v["num_gpus"]),
        v["cpu_devices"])
