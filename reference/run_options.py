"""A run's options: the flags (with --preset's values) read once, checked, into frozen groups
(`RunOptions`), as tensorflow/models' ExperimentConfig groups a task's, trainer's and runtime's.

Every check of a flag value is here, and raises UsageError naming the flag: each value on its
own and against the others (`options_from_flags`), and, once preflight has read the BERT
config, the sizes against the model and this machine's memory (`check_with_model`).

Pure: reads no file but the preset; reference/preflight.py checks the files the options name.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from absl import flags

from benchmark import cadence, constants
from benchmark.errors import UserError
from cleanup_scripts.records.pretraining_instances import MAX_SEQ_LENGTH
from reference.bert_config import BertConfig
from reference.distribution import StrategyRequest
from reference.optimizer_settings import OptimizerSettings
from reference.run_flags import FLAG_TABLE, MAX_BATCH_SIZE, read_flags

MAX_SEED = 2 ** 31 - 1  # a drawn seed is below this too
MIN_LOG_EPSILON = -30  # LAMB's epsilon 1e-30 is still a normal float32
# Bytes a record takes once parsed: every value an int32 (or float32) of 4 bytes.
VALUE_BYTES = 4


class UsageError(UserError, ValueError):
    """A bad command line; the message is one line naming the flag."""


def require(condition: bool, message: str) -> None:
    """Raise UsageError(message) unless `condition` holds."""
    if not condition:
        raise UsageError(message)


def _multiple(flag: str, value: int, n: int) -> None:
    require(value % n == 0, f"--{flag}={value} is not a multiple of --steps_per_update={n}; "
            "with accumulation give the step counts of batch bs*n scaled up n times")


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
    deterministic: bool  # oneDNN off and, on a CPU, one op at a time (`reference.repeatable`)
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
    _check_ranges(v)
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
    return DistributionOptions(
        StrategyRequest(use_tpu=v["use_tpu"], tpu_name=v["tpu_name"], tpu_zone=v["tpu_zone"],
                        gcp_project=v["gcp_project"], num_tpu_cores=v["num_tpu_cores"],
                        num_gpus=v["num_gpus"]),
        v["cpu_devices"])


def _check_ranges(v: Mapping[str, Any]) -> None:
    """Check every numeric flag value of `v` (flag name -> value, as `read_flags` gives them)
    against its allowed range; those that need the BERT config are `check_with_model`'s.

    Raises UsageError naming the flag, its value and the range, e.g. "--learning_rate=0.0 must
    be > 0".
    """
    _check_sizes(v)
    _check_step_counts(v)
    _check_rates(v)


def _check_sizes(v: Mapping[str, Any]) -> None:
    """Floats finite; batches, step counts and shapes at least 1 and at most their maxima."""
    for kind, name, *_ in FLAG_TABLE:
        if kind == "float" and v[name] is not None:
            require(math.isfinite(v[name]), f"--{name}={v[name]} must be a finite number")
    n = v["steps_per_update"]
    require(n >= 1, f"--steps_per_update={n} must be at least 1")
    for name in ("train_batch_size", "eval_batch_size", "max_eval_steps", "num_train_steps",
                 "iterations_per_loop", "save_checkpoints_steps", "num_tpu_cores"):
        require(v[name] >= 1, f"--{name}={v[name]} must be at least 1")
    require(v["progress_seconds"] > 0, f"--progress_seconds={v['progress_seconds']} must be > 0")
    for name, what in (("train_batch_size", "micro-step"), ("eval_batch_size", "eval step")):
        require(v[name] <= MAX_BATCH_SIZE, f"--{name}={v[name]} must be at most "
                f"{MAX_BATCH_SIZE} (records per {what}, all replicas together)")
    for name in ("max_seq_length", "max_predictions_per_seq"):
        require(v[name] <= MAX_SEQ_LENGTH, f"--{name}={v[name]} must be at most {MAX_SEQ_LENGTH}")


def _check_step_counts(v: Mapping[str, Any]) -> None:
    """Warm-up within the budget, counts >= 0, step counts multiples of --steps_per_update, the
    seed in range."""
    n = v["steps_per_update"]
    warmup, steps = v["num_warmup_steps"], v["num_train_steps"]
    require(0 <= warmup <= steps,
            f"--num_warmup_steps={warmup} must be in [0, --num_train_steps={steps}]")
    if warmup:
        require(v["start_warmup_step"] <= 0,
                f"--start_warmup_step={v['start_warmup_step']} must be <= 0 (a later start "
                "gives negative learning rates before it)")
    for name in ("keep_checkpoint_max", "eval_frequency_samples", "num_gpus", "cpu_devices",
                 "masked_lm_block_rows"):
        require(v[name] >= 0, f"--{name}={v[name]} must be >= 0")
    stop = v["stop_steps"]
    if stop is not None:
        require(stop >= 1, f"--stop_steps={stop} must be at least 1")
    for name in ("num_train_steps", "num_warmup_steps", "start_warmup_step",
                 "save_checkpoints_steps"):
        _multiple(name, v[name], n)
    if stop is not None:
        _multiple("stop_steps", stop, n)
    if v["seed"] is not None:
        require(0 <= v["seed"] <= MAX_SEED, f"--seed={v['seed']} must be in [0, {MAX_SEED}]")


def _check_rates(v: Mapping[str, Any]) -> None:
    """The optimizer's constants, the target accuracy and the dropout override in range."""
    for name in ("learning_rate", "poly_power"):
        require(v[name] > 0, f"--{name}={v[name]} must be > 0")
    for name in ("lamb_beta_1", "lamb_beta_2"):
        require(0 < v[name] < 1, f"--{name}={v[name]} must be in (0, 1)")
    require(v["lamb_weight_decay_rate"] >= 0,
            f"--lamb_weight_decay_rate={v['lamb_weight_decay_rate']} must be >= 0")
    require(MIN_LOG_EPSILON <= v["log_epsilon"] <= 0,
            f"--log_epsilon={v['log_epsilon']} must be in [{MIN_LOG_EPSILON}, 0] (epsilon "
            "10 ** log_epsilon in [1e-30, 1])")
    require(0 < v["target_mlm_accuracy"] <= 1,
            f"--target_mlm_accuracy={v['target_mlm_accuracy']} must be in (0, 1]")
    if v["dropout_override"] is not None:
        require(0 <= v["dropout_override"] < 1,
                f"--dropout_override={v['dropout_override']} must be in [0, 1)")


def check_with_model(o: RunOptions, config: BertConfig, available: int, on_cpu: bool) -> None:
    """The checks of `o` that need the BERT config (`config`, read from
    --bert_config_file): --max_seq_length within the config's positions,
    --max_predictions_per_seq within --max_seq_length, and a training micro-step and an eval
    step within `available` bytes of memory (`check_memory`; `on_cpu`: the model runs on
    this machine's CPU).

    Raises UsageError naming the flag.
    """
    seq, predictions = o.data.max_seq_length, o.data.max_predictions_per_seq
    require(2 <= seq <= config.max_position_embeddings,
            f"--max_seq_length={seq} must be in [2, max_position_embeddings="
            f"{config.max_position_embeddings}] of {o.model.bert_config_file}")
    require(1 <= predictions <= seq,
            f"--max_predictions_per_seq={predictions} must be in [1, --max_seq_length]")
    check_memory(o, config, available, on_cpu)


def _model_weights(config: BertConfig) -> int:
    """A lower bound on the model's weights: embedding tables, and each layer's attention
    (4 H x H) and feed-forward (2 H x I) matrices; biases, norms and heads left out."""
    h = config.hidden_size
    embeddings = (config.vocab_size + config.max_position_embeddings
                  + config.type_vocab_size) * h
    return embeddings + config.num_hidden_layers * (4 * h * h + 2 * h * config.intermediate_size)


def _activations_per_record(o: RunOptions, config: BertConfig, training: bool) -> int:
    """A lower bound on the activation values one record keeps alive in a step on the CPU.

    Training keeps, per layer, what its backward pass needs: the layer's input (S x H), the
    feed-forward's intermediate activation (S x I) and the attention probabilities
    (heads x S x S); with --recompute_layers only each layer's input, and one layer's full set
    while it is recomputed. An eval step holds a layer's input and its larger intermediate.
    """
    seq, h = o.data.max_seq_length, config.hidden_size
    one_layer = seq * config.intermediate_size + config.num_attention_heads * seq * seq
    if not training:
        return seq * h + max(seq * config.intermediate_size,
                             config.num_attention_heads * seq * seq)
    layers = config.num_hidden_layers
    if o.compute.recompute_layers:
        return (layers + 1) * seq * h + one_layer
    return (layers + 1) * seq * h + layers * one_layer


def check_memory(o: RunOptions, config: BertConfig, available: int, on_cpu: bool) -> None:
    """UsageError naming the flag when a training micro-step or an eval step cannot fit in
    `available` bytes, by a lower bound of what it needs: its records, parsed (the input
    pipeline holds them in this machine's memory); and, `on_cpu`, the activations that
    autodiff must keep (`_activations_per_record`) and the weights (with their gradients and
    two optimizer slots when training). The message says how many records would fit. An
    absurd batch (or a huge config) fails here, in one line, rather than after run_start as a
    TensorFlow shape or allocation error (which would take the machine's memory first). With
    --steps_per_update, an update's micro-batches are held parsed at once (one element of the
    training stream): their records must fit too (checked once a micro-step is known to fit).
    """
    seq = o.data.max_seq_length
    record = (3 * seq + 3 * o.data.max_predictions_per_seq + 1) * VALUE_BYTES
    activation_bytes = 2 if o.compute.mixed_precision != "none" else 4
    steps = [("train_batch_size", "a micro-step", o.data.train_batch_size, True, 4)] \
        if o.do_train else []
    steps.append(("eval_batch_size", "an eval step", o.eval.batch_size, False, 1))
    for flag, what, batch, training, copies in steps:
        per_record = record + (activation_bytes * _activations_per_record(o, config, training)
                               if on_cpu else 0)
        fixed = copies * _model_weights(config) * 4 if on_cpu else 0
        need = fixed + batch * per_record
        if need <= available:
            continue
        model = f"the {config.num_hidden_layers}-layer, hidden-{config.hidden_size} model"
        if fixed >= available:
            raise UsageError(f"--bert_config_file={o.model.bert_config_file}: the weights of "
                             f"{model} need at least {fixed / 1e9:.1f} GB of memory on the "
                             f"CPU, more than the {available / 1e9:.1f} GB this machine has")
        held = f"the records, and the activations and weights of {model} on the CPU" \
            if on_cpu else "its records, which the input pipeline holds in this machine's memory"
        raise UsageError(f"--{flag}={batch}: {what} of {batch:,} records of {seq} "
                         f"tokens needs at least {need / 1e9:.1f} GB of memory ({held}), more "
                         f"than the {available / 1e9:.1f} GB this machine has; at most "
                         f"{(available - fixed) // per_record:,} records fit")
    updates = o.data.steps_per_update
    update_bytes = updates * o.data.train_batch_size * record
    if o.do_train and update_bytes > available:
        raise UsageError(f"--steps_per_update={updates}: an update's {updates:,} micro-batches "
                         f"of {o.data.train_batch_size:,} records, which the input pipeline "
                         f"holds parsed, need at least {update_bytes / 1e9:.1f} GB of memory, "
                         f"more than the {available / 1e9:.1f} GB this machine has")
