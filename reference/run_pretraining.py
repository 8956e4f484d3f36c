"""`python -m reference.run_pretraining`: MLPerf BERT pre-training and evaluation in TF2.

The reference's command lines work unchanged (same flag names and meanings), e.g. the TPU
v3-128 run of the benchmark README, plus `--eval_file` for the evaluation set that training
evaluates on as it goes (the reference evaluates offline, on saved checkpoints, in a second job):

    python -m reference.run_pretraining --bert_config_file=bert_config.json \
        --init_checkpoint=tf1_ckpt/model.ckpt-28252 --input_file='gs://b/tfrecord/part-*' \
        --eval_file=gs://b/tfrecord/eval_10k --output_dir=gs://b/run0 --do_train --do_eval \
        --train_batch_size=8192 --learning_rate=0.00288293 --lamb_beta_1=0.88 \
        --lamb_beta_2=0.88 --lamb_weight_decay_rate=0.0166629 --log_epsilon=-6 \
        --num_train_steps=600 --num_warmup_steps=287 --start_warmup_step=-76 \
        --eval_batch_size=640 --max_eval_steps=125 --use_tpu --tpu_name=...
    python -m reference.run_pretraining --preset=v3-128 --data_dir=gs://b/tfrecord \
        --init_checkpoint=... --output_dir=...          # the same, from reference/presets/

Training (`--do_train --do_eval`): an MLPerf run. Every eval_frequency(global batch) samples
(benchmark.constants) the model is evaluated on the first eval_batch_size * max_eval_steps
records of --eval_file (all 10,000 of eval_10k when that product is >= 10,000); the run stops
with status success at the first masked-LM accuracy >= --target_mlm_accuracy (0.720), or
aborted when --num_train_steps (or --stop_steps) micro-steps are done. The MLPerf log
(--mlperf_log, default OUTPUT_DIR/mlperf.log) is written through benchmark.mlperf_log;
OUTPUT_DIR gets eval_results.txt (after every eval), checkpoints model.ckpt-<step>, and
TensorBoard summaries under train/ and eval/.

Evaluation only (`--do_eval --nodo_train`): one pass over max_eval_steps * eval_batch_size
records of --eval_file (or --input_file, as in the reference) with --init_checkpoint (an
official TF1/TF2 checkpoint or one of ours) or else the latest checkpoint in OUTPUT_DIR;
writes eval_results.txt.

Resuming: when OUTPUT_DIR holds a checkpoint of ours, training continues from it (weights,
optimizer state, global step and samples trained; --init_checkpoint is then ignored), so the
same command restarts a killed run. The newest checkpoint whose files all read back is used
(a damaged or half-deleted newer one is skipped with a warning); the data stream, the dropout
masks and the seed (stored in the checkpoint) continue exactly, so the run ends as an
uninterrupted one would, bit for bit. The new process appends a complete section to the
MLPerf log (init_start ... run_stop) preceded by a `resume` record, with sample counts
continuing from the checkpoint. A resumed run is therefore never a valid MLPerf result: its log
holds two run_start records, the official checker rejects it and `benchmark.check` reports it
(bert/single-run), which is the honest outcome (the time of the lost segment is not in either).
A run whose checkpoint already reached the target, or its step budget, is not restarted.

A resumed run must be the run that wrote the checkpoint: every checkpoint stores the settings
that define the run (`run_settings`: global batch, accumulation, the learning-rate schedule and
optimizer constants, seed, record shapes, the training files' names, precision, clipping,
dropout, eval cadence and target, the BERT config), and a run that finds one with other values
stops before init_start with one line naming the first flag that differs, the checkpoint's value
and its own. Without --seed the checkpoint's seed is taken, as before. Checkpoints written
before the settings were stored are refused the same way (there is no telling which flags wrote
them; a different batch size used to be trained on silently, or to spin for ever on counters
that no longer agreed with the eval schedule): finish such a run with the version that wrote
it, or start a new --output_dir. The number of replicas may change (--train_batch_size counts
all of them); the data's location too (the files are compared by name).

Step counts (--num_train_steps, --num_warmup_steps, --start_warmup_step, --stop_steps,
--save_checkpoints_steps, --iterations_per_loop) are micro-steps of --train_batch_size records,
as in the reference; with --steps_per_update=n they are the counts for batch bs*n scaled up n
times and must be multiples of n. The MLPerf log states the optimizer's view: global_batch_size
= train_batch_size * n, and step counts divided by n.

Untrusted inputs end the run with one line "error: ..." and exit status 1: a token, type or
position id out of range of the BERT config (checked in the first record of every training file
and every eval record before init_start, and asserted in the training stream, since a GPU gather
out of range returns zeros instead of failing), an output (--output_dir, checked by writing a
file in it before anything is logged; --mlperf_log; checkpoints, summaries, eval_results.txt)
that cannot be written, e.g. a read-only folder or a full disk. A run that fails after run_start
ends its MLPerf log with run_stop status "aborted". A checkpoint whose save failed is left
incomplete and is skipped when the run is started again.

Settings that the closed division does not allow (another eval cadence, a target below 0.720,
an eval over fewer than 10,000 samples, no eval at all) are accepted, each logged with a warning
and a `noncompliant` record, and the run is logged as open division.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from absl import app, flags, logging

from benchmark import cadence, constants
from reference.error_text import OutputError, one_line, write_failure

if TYPE_CHECKING:  # TensorFlow-importing modules are imported where used (fast --help)
    from reference.distribution import StrategyRequest
    from reference.input_pipeline import IdRanges
    from reference.trainer import OptimizerSettings

FLAGS = flags.FLAGS
MAX_SEED = 2 ** 31 - 1  # a drawn seed is below this too
MIN_LOG_EPSILON = -30  # LAMB's epsilon 1e-30 is still a normal float32

# The command line: (kind, name, default, help[, choices]). The reference's flags come first,
# with its names and meanings; then those of the MLPerf run.
FLAG_TABLE = (
    ("string", "bert_config_file", None, "bert_config.json of the model to train."),
    ("string", "input_file", None, "Training TFRecords: comma-separated files or globs (local "
     "or gs://). With --nodo_train, the eval records if no --eval_file."),
    ("string", "output_dir", None, "Checkpoints, eval_results.txt, summaries, the MLPerf log."),
    ("string", "init_checkpoint", None, "Initial weights: the official TF1 or TF2 "
     "model.ckpt-28252 (or, with --nodo_train, a checkpoint of ours)."),
    ("integer", "max_seq_length", constants.MAX_SEQ_LENGTH, "Tokens per record."),
    ("integer", "max_predictions_per_seq", constants.MAX_PREDICTIONS_PER_SEQ,
     "Masked positions per record."),
    ("bool", "do_train", False, "Train (with evals at the MLPerf cadence if --do_eval)."),
    ("bool", "do_eval", False, "Evaluate (alone, with --nodo_train: once)."),
    ("integer", "train_batch_size", 32, "Records per micro-step, all replicas together."),
    ("integer", "eval_batch_size", 8, "Records per eval step, all replicas together."),
    ("enum", "optimizer", "lamb", "The optimizer: lamb (the benchmark's) or adamw (the "
     "reference's AdamWeightDecayOptimizer).", ["lamb", "adamw"]),
    ("float", "learning_rate", 5e-5, "Peak learning rate."),
    ("float", "poly_power", 1.0, "Power of the polynomial decay."),
    ("integer", "num_train_steps", 100000, "Micro-steps over which the rate decays to 0; the "
     "step budget."),
    ("integer", "num_warmup_steps", 10000, "Warm-up micro-steps."),
    ("integer", "start_warmup_step", 0, "Micro-step at which warm-up counts 0 (may be < 0)."),
    ("integer", "stop_steps", None, "Stop after this many micro-steps (the schedule still spans "
     "--num_train_steps)."),
    ("integer", "save_checkpoints_steps", 1000, "Save a checkpoint every this many micro-steps "
     "(and always at the end)."),
    ("integer", "iterations_per_loop", 1000, "Micro-steps per compiled host call."),
    ("integer", "max_eval_steps", 100, "Eval batches: the first max_eval_steps * "
     "eval_batch_size records are evaluated."),
    ("bool", "use_tpu", False, "Run on a Cloud TPU (TPUStrategy)."),
    ("string", "tpu_name", None, "TPU name or grpc:// address."),
    ("string", "tpu_zone", None, "GCE zone of the TPU."),
    ("string", "gcp_project", None, "GCP project of the TPU."),
    ("string", "master", None, "Accepted for the reference's command lines; unused."),
    ("integer", "num_tpu_cores", 8, "TPU cores (checked against the TPU found)."),
    ("integer", "num_gpus", 0, "GPUs to mirror over (> 1: MirroredStrategy)."),
    ("integer", "steps_per_update", 1, "Micro-batches accumulated per optimizer update."),
    ("integer", "keep_checkpoint_max", 5, "Checkpoints kept (0: all)."),
    ("float", "lamb_weight_decay_rate", 0.01, "LAMB weight decay."),
    ("float", "lamb_beta_1", 0.9, "LAMB beta_1."),
    ("float", "lamb_beta_2", 0.999, "LAMB beta_2."),
    ("float", "log_epsilon", -6, "LAMB epsilon is 10 ** log_epsilon."),
    ("bool", "clip_by_global_norm_after_gradient_allreduce", False, "Clip the averaged "
     "gradient once instead of each replica's micro-batch gradient (the reference's default)."),
    # The MLPerf run.
    ("string", "eval_file", None, "Eval TFRecords (eval_10k) for --do_train --do_eval."),
    ("float", "target_mlm_accuracy", constants.TARGET_MLM_ACCURACY, "Stop at the first eval "
     "with masked-LM accuracy >= this (another value: open division)."),
    ("integer", "eval_frequency_samples", 0, "Samples between evals; 0: the benchmark's "
     "eval_frequency(global batch). Another value needs --noncompliant_eval_frequency."),
    ("bool", "noncompliant_eval_frequency", False, "Allow --eval_frequency_samples to differ "
     "from the benchmark's cadence (the run is then logged as open division)."),
    ("bool", "eval_at_start", False, "Also evaluate before training, at 0 samples (the official "
     "checkpoint scores about 0.34085)."),
    ("string", "mlperf_log", None, "MLPerf log file (local); default OUTPUT_DIR/mlperf.log "
     "(./mlperf.log when OUTPUT_DIR is remote)."),
    ("string", "submission_org", "reference", "submission_org of the MLPerf log."),
    ("string", "submission_platform", None, "submission_platform; default e.g. 8xGPU."),
    ("enum", "submission_division", "closed", "submission_division.", ["closed", "open"]),
    ("enum", "submission_status", "onprem", "submission_status.",
     ["onprem", "cloud", "preview", "research"]),
    ("integer", "seed", None, "Random seed (weights, dropout, data order); default: drawn at "
     "start and logged."),
    ("enum", "mixed_precision", "none", "Compute type; fp16 adds dynamic loss scaling.",
     ["none", "bf16", "fp16"]),
    ("float", "dropout_override", None, "Set both dropout probabilities of the BERT config."),
    ("string", "preset", None, "A preset of reference/presets/ (v3-128, v100-8, a100-8, demo); "
     "flags given on the command line win."),
    ("string", "data_dir", None, "For --preset: the folder with part-* and eval_10k."),
    ("integer", "cpu_devices", 0, "Split the CPU into this many devices and mirror over them "
     "(tests and demos of the multi-replica path)."),
)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> flags.FlagValues:
    """Define FLAG_TABLE on `flag_values` (the script uses the global FLAGS; tests their own)."""
    for kind, name, default, help_text, *choices in FLAG_TABLE:
        if kind == "enum":
            flags.DEFINE_enum(name, default, choices[0], help_text, flag_values=flag_values)
        else:
            getattr(flags, f"DEFINE_{kind}")(name, default, help_text, flag_values=flag_values)
    return flag_values


class UsageError(ValueError):
    """A bad command line; the message is one line naming the flag."""


class InternalError(RuntimeError):
    """A state the trainer must never be in (a bug, or counters crafted by hand); one line."""


@dataclass
class RunOptions:
    """Everything a run needs, validated (see `options_from_flags`)."""
    bert_config_file: str
    output_dir: str
    do_train: bool
    do_eval: bool
    input_files: list[str]
    eval_files: list[str]
    init_checkpoint: str | None
    max_seq_length: int
    max_predictions_per_seq: int
    train_batch_size: int
    eval_batch_size: int
    max_eval_steps: int
    eval_records: int  # records actually evaluated
    steps_per_update: int
    optimizer: OptimizerSettings
    stop_steps: int | None
    iterations_per_loop: int
    save_checkpoints_steps: int
    keep_checkpoint_max: int
    clip_after_allreduce: bool
    target_mlm_accuracy: float
    eval_frequency: int  # samples between evals
    eval_at_start: bool
    mlperf_log: str
    submission_org: str
    submission_platform: str | None
    submission_division: str
    submission_status: str
    seed: int
    mixed_precision: str
    dropout_override: float | None
    strategy: StrategyRequest
    id_ranges: IdRanges  # the BERT config's table sizes, which the records' ids index
    noncompliant: list[str] = field(default_factory=list)
    seed_drawn: bool = False  # no --seed: the seed was drawn (a resumed run takes the run's)

    @property
    def global_batch_size(self) -> int:
        """Records per optimizer update (what MLPerf calls global_batch_size)."""
        return self.train_batch_size * self.steps_per_update

    @property
    def budget_steps(self) -> int:
        """Micro-steps this process may train to (global step)."""
        steps = self.optimizer.num_train_steps
        return min(steps, self.stop_steps) if self.stop_steps else steps


@dataclass
class RunResult:
    """What a run did: status ("success", "aborted", "evaluated", "finished-before"), the
    global step and samples at the end, and every eval as (samples, metrics)."""
    status: str
    step: int
    samples: int
    evals: list[tuple[int, dict[str, float]]] = field(default_factory=list)


# ------------------------------------------------------------------------------ validation
def _require(condition: bool, message: str) -> None:
    if not condition:
        raise UsageError(message)


def _multiple(flag: str, value: int, n: int) -> None:
    _require(value % n == 0, f"--{flag}={value} is not a multiple of --steps_per_update={n}; "
             "with accumulation give the step counts of batch bs*n scaled up n times")


def _check_ranges(f: flags.FlagValues) -> None:
    """Check every numeric flag against its allowed range (not those that need the BERT config).

    Raises UsageError naming the flag, its value and the range, e.g. "--learning_rate=0.0 must
    be > 0".
    """
    for kind, name, *_ in FLAG_TABLE:
        if kind == "float" and f[name].value is not None:
            _require(math.isfinite(f[name].value), f"--{name}={f[name].value} must be a finite "
                     "number")
    n = f.steps_per_update
    _require(n >= 1, f"--steps_per_update={n} must be at least 1")
    for name in ("train_batch_size", "eval_batch_size", "max_eval_steps", "num_train_steps",
                 "iterations_per_loop", "save_checkpoints_steps", "num_tpu_cores"):
        _require(f[name].value >= 1, f"--{name}={f[name].value} must be at least 1")
    _require(0 <= f.num_warmup_steps <= f.num_train_steps,
             f"--num_warmup_steps={f.num_warmup_steps} must be in [0, --num_train_steps="
             f"{f.num_train_steps}]")
    if f.num_warmup_steps:
        _require(f.start_warmup_step <= 0,
                 f"--start_warmup_step={f.start_warmup_step} must be <= 0 (a later start gives "
                 "negative learning rates before it)")
    for name in ("keep_checkpoint_max", "eval_frequency_samples", "num_gpus", "cpu_devices"):
        _require(f[name].value >= 0, f"--{name}={f[name].value} must be >= 0")
    if f.stop_steps is not None:
        _require(f.stop_steps >= 1, f"--stop_steps={f.stop_steps} must be at least 1")
    for name in ("num_train_steps", "num_warmup_steps", "start_warmup_step",
                 "save_checkpoints_steps"):
        _multiple(name, f[name].value, n)
    if f.stop_steps is not None:
        _multiple("stop_steps", f.stop_steps, n)
    if f.seed is not None:
        _require(0 <= f.seed <= MAX_SEED, f"--seed={f.seed} must be in [0, {MAX_SEED}]")
    _require(f.learning_rate > 0, f"--learning_rate={f.learning_rate} must be > 0")
    _require(f.poly_power > 0, f"--poly_power={f.poly_power} must be > 0")
    for name in ("lamb_beta_1", "lamb_beta_2"):
        _require(0 < f[name].value < 1, f"--{name}={f[name].value} must be in (0, 1)")
    _require(f.lamb_weight_decay_rate >= 0,
             f"--lamb_weight_decay_rate={f.lamb_weight_decay_rate} must be >= 0")
    _require(MIN_LOG_EPSILON <= f.log_epsilon <= 0,
             f"--log_epsilon={f.log_epsilon} must be in [{MIN_LOG_EPSILON}, 0] (epsilon "
             "10 ** log_epsilon in [1e-30, 1])")
    _require(0 < f.target_mlm_accuracy <= 1,
             f"--target_mlm_accuracy={f.target_mlm_accuracy} must be in (0, 1]")
    if f.dropout_override is not None:
        _require(0 <= f.dropout_override < 1,
                 f"--dropout_override={f.dropout_override} must be in [0, 1)")


def apply_preset(flag_values=FLAGS) -> list[str]:
    """Fill flags not given on the command line from --preset; returns the names set."""
    from reference import presets
    if not flag_values.preset:
        return []
    values = presets.resolve(flag_values.preset, flag_values.data_dir)
    applied = []
    for name, value in values.items():
        if name not in flag_values:
            raise presets.PresetError(f"--preset={flag_values.preset}: unknown flag {name!r}")
        if flag_values[name].present:
            continue
        flag_values[name].value = value
        applied.append(name)
    logging.info("preset %s: %s", flag_values.preset,
                 ", ".join(f"--{n}={flag_values[n].value}" for n in applied))
    return applied


def options_from_flags(flag_values=FLAGS) -> RunOptions:
    """Validate the flags (and the files they name) into RunOptions.

    Raises UsageError, InputError, ConfigError or CheckpointError with a one-line message.
    """
    # Imported here so that `--help` and flag errors do not wait for TensorFlow.
    from reference import checkpoint as ckpt
    from reference import input_pipeline
    from reference.bert_config import load_bert_config
    from reference.distribution import StrategyRequest
    from reference.trainer import OptimizerSettings

    f = flag_values
    _require(f.do_train or f.do_eval, "at least one of --do_train or --do_eval must be set")
    for name in ("bert_config_file", "output_dir"):
        _require(bool(f[name].value), f"--{name} is required")
    _check_ranges(f)
    n = f.steps_per_update

    config = load_bert_config(f.bert_config_file)
    _require(2 <= f.max_seq_length <= config.max_position_embeddings,
             f"--max_seq_length={f.max_seq_length} must be in [2, max_position_embeddings="
             f"{config.max_position_embeddings}] of {f.bert_config_file}")
    _require(1 <= f.max_predictions_per_seq <= f.max_seq_length,
             f"--max_predictions_per_seq={f.max_predictions_per_seq} must be in [1, "
             f"--max_seq_length]")

    id_ranges = input_pipeline.IdRanges(config.vocab_size, config.type_vocab_size)
    noncompliant: list[str] = []
    input_files: list[str] = []
    eval_files: list[str] = []
    if f.do_train:
        _require(bool(f.input_file), "--input_file is required with --do_train")
        input_files = input_pipeline.expand_patterns(f.input_file, "--input_file")
        input_pipeline.check_first_records(input_files, f.max_seq_length,
                                           f.max_predictions_per_seq, "--input_file", id_ranges)
        if f.do_eval:
            _require(bool(f.eval_file), "--eval_file is required with --do_train --do_eval "
                     "(the eval_10k TFRecord)")
            eval_files = input_pipeline.expand_patterns(f.eval_file, "--eval_file")
        else:
            noncompliant.append("--nodo_eval: the run is never evaluated, so it cannot reach "
                                "the target")
    else:
        source, flag = (f.eval_file, "--eval_file") if f.eval_file else \
            (f.input_file, "--input_file")
        _require(bool(source), "--eval_file (or --input_file) is required with --do_eval")
        eval_files = input_pipeline.expand_patterns(source, flag)
    eval_records = 0
    if eval_files:
        # Every record evaluated is checked now: a damaged eval set fails before training.
        wanted = f.eval_batch_size * f.max_eval_steps
        eval_records = input_pipeline.check_all_records(
            eval_files, f.max_seq_length, f.max_predictions_per_seq,
            "--eval_file" if f.eval_file else "--input_file", limit=wanted, id_ranges=id_ranges)
        if eval_records < wanted:
            logging.info("eval files hold %d records (< eval_batch_size * max_eval_steps = %d): "
                         "all of them are evaluated once", eval_records, wanted)
        if f.do_train and eval_records != constants.EVAL_SAMPLES:
            noncompliant.append(f"the eval covers {eval_records:,} records, not the "
                                f"benchmark's {constants.EVAL_SAMPLES:,}")

    if f.init_checkpoint:
        try:
            ckpt.checkpoint_format(f.init_checkpoint)
        except ckpt.CheckpointError:
            # --nodo_train may evaluate one of our own checkpoints (read when evaluating).
            if f.do_train or not _checkpoint_exists(f.init_checkpoint):
                raise
    elif f.do_train:
        logging.warning("no --init_checkpoint: training starts from random weights (the "
                        "benchmark starts from model.ckpt-28252)")

    global_batch = f.train_batch_size * n
    rule_frequency = cadence.eval_frequency(global_batch)
    frequency = f.eval_frequency_samples or rule_frequency
    if frequency != rule_frequency:
        _require(f.noncompliant_eval_frequency,
                 f"--eval_frequency_samples={frequency} differs from the benchmark's "
                 f"{rule_frequency:,} for global batch {global_batch}; add "
                 "--noncompliant_eval_frequency to run with it (open division)")
        noncompliant.append(f"evals every {frequency:,} samples instead of the benchmark's "
                            f"{rule_frequency:,}")
    if f.target_mlm_accuracy != constants.TARGET_MLM_ACCURACY:
        noncompliant.append(f"target masked-LM accuracy {f.target_mlm_accuracy} instead of "
                            f"{constants.TARGET_MLM_ACCURACY}")

    seed = f.seed
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little") % MAX_SEED

    output_dir = f.output_dir
    mlperf_log = f.mlperf_log
    if not mlperf_log:
        mlperf_log = os.path.join(output_dir, "mlperf.log") if "://" not in output_dir \
            else "mlperf.log"
    iterations = max(1, -(-f.iterations_per_loop // n)) * n
    optimizer = OptimizerSettings(
        name=f.optimizer, learning_rate=f.learning_rate, num_train_steps=f.num_train_steps,
        num_warmup_steps=f.num_warmup_steps, start_warmup_step=f.start_warmup_step,
        poly_power=f.poly_power, beta_1=f.lamb_beta_1, beta_2=f.lamb_beta_2,
        weight_decay_rate=f.lamb_weight_decay_rate, log_epsilon=f.log_epsilon)
    return RunOptions(
        bert_config_file=f.bert_config_file, output_dir=output_dir, do_train=f.do_train,
        do_eval=f.do_eval, input_files=input_files, eval_files=eval_files,
        init_checkpoint=f.init_checkpoint, max_seq_length=f.max_seq_length,
        max_predictions_per_seq=f.max_predictions_per_seq,
        train_batch_size=f.train_batch_size, eval_batch_size=f.eval_batch_size,
        max_eval_steps=f.max_eval_steps, eval_records=eval_records, steps_per_update=n,
        optimizer=optimizer, stop_steps=f.stop_steps, iterations_per_loop=iterations,
        save_checkpoints_steps=f.save_checkpoints_steps,
        keep_checkpoint_max=f.keep_checkpoint_max,
        clip_after_allreduce=f.clip_by_global_norm_after_gradient_allreduce,
        target_mlm_accuracy=f.target_mlm_accuracy, eval_frequency=frequency,
        eval_at_start=f.eval_at_start, mlperf_log=mlperf_log,
        submission_org=f.submission_org, submission_platform=f.submission_platform,
        submission_division=f.submission_division, submission_status=f.submission_status,
        seed=seed, mixed_precision=f.mixed_precision, dropout_override=f.dropout_override,
        strategy=StrategyRequest(use_tpu=f.use_tpu, tpu_name=f.tpu_name, tpu_zone=f.tpu_zone,
                                 gcp_project=f.gcp_project, num_tpu_cores=f.num_tpu_cores,
                                 num_gpus=f.num_gpus),
        id_ranges=id_ranges, noncompliant=noncompliant, seed_drawn=f.seed is None)


def _checkpoint_exists(path: str) -> bool:
    import tensorflow as tf
    if tf.io.gfile.isdir(path):
        return tf.train.latest_checkpoint(path) is not None
    return tf.io.gfile.exists(path + ".index")




# ------------------------------------------------------------------------------ outputs
@contextlib.contextmanager
def _writing(flag: str, path: str):
    """Turn a failed write to `path` (an OSError, or any TensorFlow error: the block only
    writes) into OutputError "<flag>: <path>: cannot write (<reason>)"."""
    import tensorflow as tf
    try:
        yield
    except (OSError, tf.errors.OpError) as err:
        raise OutputError(f"{flag}: {path}: cannot write ({write_failure(err)})") from err


def _prepare_output_dir(output_dir: str) -> None:
    """Create --output_dir and write (then delete) a file in it, so that a folder that cannot
    be written fails at once, in one line, before anything is logged."""
    import tensorflow as tf
    probe = os.path.join(output_dir, f".write-check-{uuid.uuid4().hex}")
    with _writing("--output_dir", output_dir):
        tf.io.gfile.makedirs(output_dir)
        with tf.io.gfile.GFile(probe, "w") as handle:
            handle.write("")
        tf.io.gfile.remove(probe)


def _save(manager, step: int) -> None:
    """Save checkpoint `<name>-<step>`; a write that fails (e.g. a full disk) is an OutputError
    (the incomplete checkpoint is skipped when the run is started again)."""
    from reference.trainer import CHECKPOINT_NAME
    with _writing("--output_dir", os.path.join(manager.directory, f"{CHECKPOINT_NAME}-{step}")):
        manager.save(checkpoint_number=step)


# ------------------------------------------------------------------------------ running
def _write_eval_results(output_dir: str, step: int, metrics: dict[str, float]) -> None:
    import tensorflow as tf
    path = os.path.join(output_dir, "eval_results.txt")
    lines = [f"global_step = {step}"] + [f"{key} = {metrics[key]}" for key in sorted(metrics)]
    partial = f"{path}.partial-{os.getpid()}"  # written whole, then renamed over the old one
    with _writing("--output_dir", path):
        with tf.io.gfile.GFile(partial, "w") as out:
            out.write("\n".join(lines) + "\n")
        tf.io.gfile.rename(partial, path, overwrite=True)
    logging.info("eval results (%s): %s", path, ", ".join(lines))


def _platform(options: RunOptions, strategy) -> str:
    if options.submission_platform:
        return options.submission_platform
    kind = "TPU" if options.strategy.use_tpu else "GPU" if options.strategy.num_gpus else "CPU"
    return f"{strategy.num_replicas_in_sync}x{kind}"


@dataclass(frozen=True)
class _Progress:
    """The counters of a training checkpoint: micro-steps, samples, whether an eval reached
    the target, and the settings of the run that wrote it (`run_settings`; None in a
    checkpoint without them)."""
    step: int
    samples: int
    reached: bool
    settings: dict | None


def _peek_progress(path: str) -> _Progress:
    """The counters and run settings stored in the training checkpoint at prefix `path` (an
    absent counter reads 0). Raises UsageError if the settings do not read back."""
    import tensorflow as tf
    reader = tf.train.load_checkpoint(path)
    names = reader.get_variable_to_shape_map()

    def tensor(name):
        key = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
        return reader.get_tensor(key) if key in names else None

    settings = tensor("run_settings") or None  # a trainer that never set them saved ""
    if settings is not None:
        try:
            settings = json.loads(settings)
            if not isinstance(settings, dict):
                raise ValueError(f"a JSON {type(settings).__name__}, not an object")
        except ValueError as err:
            raise UsageError(f"--output_dir: {path}: its run settings do not read back "
                             f"({one_line(err)}); use a new --output_dir") from err
    return _Progress(int(tensor("global_step") or 0), int(tensor("trained_samples") or 0),
                     bool(tensor("target_reached")), settings)


def _file_names(files: list[str]) -> str:
    """The training files as a run setting: how many, and a digest of their names in order
    (not their folder, which may move)."""
    names = "\n".join(os.path.basename(path) for path in files)
    digest = hashlib.sha256(names.encode("utf-8")).hexdigest()[:12]
    return f"{len(files)} file{'' if len(files) == 1 else 's'} (names' sha256 {digest})"


def run_settings(options: RunOptions) -> dict[str, object]:
    """The settings that define a run, stored in its checkpoints and compared on resume.

    Keys are flag names (a BERT config key is "bert_config_file.<key>"); values are what
    changes the arithmetic, the data stream or the sample count: batch and accumulation, the
    schedule and the optimizer's constants (LAMB's only with --optimizer=lamb), seed, record
    shapes, training file names, precision, clipping, dropout, eval cadence (samples) and
    target, and the config. Not included: how long this process trains and how it saves, logs
    and evaluates (--stop_steps, --iterations_per_loop, --save_checkpoints_steps, the eval
    batch), where the files are, and the number of replicas (--train_batch_size counts them
    all, so the global batch does not depend on it).
    """
    from reference.bert_config import load_bert_config
    opt = options.optimizer
    settings: dict[str, object] = {
        "train_batch_size": options.train_batch_size,
        "steps_per_update": options.steps_per_update,
        "max_seq_length": options.max_seq_length,
        "max_predictions_per_seq": options.max_predictions_per_seq,
        "input_file": _file_names(options.input_files),
        "seed": options.seed,
        "optimizer": opt.name,
        "learning_rate": opt.learning_rate,
        "poly_power": opt.poly_power,
        "num_train_steps": opt.num_train_steps,
        "num_warmup_steps": opt.num_warmup_steps,
        "start_warmup_step": opt.start_warmup_step,
    }
    if opt.name == "lamb":
        settings.update(lamb_beta_1=opt.beta_1, lamb_beta_2=opt.beta_2,
                        lamb_weight_decay_rate=opt.weight_decay_rate,
                        log_epsilon=opt.log_epsilon)
    settings.update({
        "clip_by_global_norm_after_gradient_allreduce": options.clip_after_allreduce,
        "mixed_precision": options.mixed_precision,
        "dropout_override": options.dropout_override,
        "eval_frequency_samples": options.eval_frequency,
        "target_mlm_accuracy": options.target_mlm_accuracy,
    })
    config = load_bert_config(options.bert_config_file)
    settings.update({f"bert_config_file.{key}": value
                     for key, value in config.to_dict().items()})
    return settings


def _shown(value: object) -> str:
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _resumed_options(options: RunOptions, stored: dict | None, checkpoint: str) -> RunOptions:
    """The options that resume the run of `checkpoint`, whose run settings are `stored`.

    Without --seed the run's seed is taken (with a warning if it differs from the one drawn);
    every other setting of `run_settings` must be the checkpoint's. Raises UsageError naming
    the first flag that differs, its value in the checkpoint and in this run, or a checkpoint
    that stores no settings.
    """
    if stored is None:
        raise UsageError(f"--output_dir: {checkpoint} does not store the settings of the run "
                         "that wrote it (an older version of this trainer did not), so this "
                         "run's flags cannot be checked against it; use a new --output_dir")
    seed = stored.get("seed")
    if options.seed_drawn and isinstance(seed, int) and seed != options.seed:
        logging.warning("resuming with the run's seed %d stored in %s (not %d): the data order "
                        "and dropout continue the run's", seed, checkpoint, options.seed)
        options = dataclasses.replace(options, seed=seed)
    ours = run_settings(options)
    for key in [*ours, *(key for key in stored if key not in ours)]:
        if stored.get(key) != ours.get(key):
            flag, _, config_key = key.partition(".")
            name = f"--{flag}: {config_key}" if config_key else f"--{flag}"
            raise UsageError(f"{name}: the checkpoint in {options.output_dir} was trained with "
                             f"{_shown(stored.get(key))}, this run asks for "
                             f"{_shown(ours.get(key))}; use the same value or a new "
                             "--output_dir")
    return options


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else \
        f"{rest // 60}m{rest % 60:02d}s"


class _Run:
    """One process's part of a run: strategy, trainer, datasets, logs."""

    def __init__(self, options: RunOptions, strategy=None):
        import tensorflow as tf
        from reference import distribution
        self.tf = tf
        self.options = options
        self.strategy = strategy or distribution.make_strategy(options.strategy)
        self.chief = distribution.is_chief(self.strategy)
        self.task = distribution.task_id(self.strategy)
        self.train_per_replica = distribution.per_replica(options.train_batch_size,
                                                          self.strategy, "--train_batch_size")
        self.eval_per_replica = distribution.per_replica(options.eval_batch_size,
                                                         self.strategy, "--eval_batch_size")
        logging.info("%s; global batch %d (%d per replica x %d micro-batches)",
                     distribution.describe(self.strategy), options.global_batch_size,
                     self.train_per_replica, options.steps_per_update)

    def build_trainer(self):
        from reference.bert_config import load_bert_config
        from reference.trainer import Trainer, set_mixed_precision
        options = self.options
        set_mixed_precision(options.mixed_precision)
        config = load_bert_config(options.bert_config_file)
        if options.dropout_override is not None:
            config = dataclasses.replace(config, hidden_dropout_prob=options.dropout_override,
                                         attention_probs_dropout_prob=options.dropout_override)
        self.tf.random.set_seed(options.seed)
        self.trainer = Trainer(self.strategy, config, options.optimizer,
                               options.train_batch_size, options.steps_per_update,
                               options.clip_after_allreduce, options.mixed_precision)
        return self.trainer

    # -------------------------------------------------------------- datasets
    def eval_dataset(self):
        from reference import input_pipeline
        options = self.options
        padded = input_pipeline.padded_eval_size(options.eval_records, options.eval_batch_size)
        self.eval_steps = padded // options.eval_batch_size

        def dataset_fn(context):
            return input_pipeline.eval_dataset(
                options.eval_files, self.eval_per_replica, options.eval_records, padded,
                options.max_seq_length, options.max_predictions_per_seq, context)

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def train_iterator(self):
        """The distributed training stream, continuing where the trainer's global step left it.

        A resumed run must feed exactly the batches an uninterrupted run feeds from that step
        on. Each input pipeline rebuilds the same seeded stream and skips the micro-batches its
        replicas consumed: global step (micro-steps) x the replicas it feeds, dropped as
        serialized records before batching and parsing. This is preferred to checkpointing the
        tf.data iterator, whose state holds every worker's shuffle and prefetch buffers and ties
        a checkpoint to one strategy and worker count; skipping costs one read of the consumed
        records per resume and works alike for every strategy and for accumulation.
        """
        from reference import input_pipeline
        options = self.options
        consumed_steps = self.trainer.step

        def dataset_fn(context):
            replicas_fed = context.num_replicas_in_sync // context.num_input_pipelines
            return input_pipeline.train_dataset(
                options.input_files, self.train_per_replica, options.max_seq_length,
                options.max_predictions_per_seq, options.seed, options.steps_per_update,
                context, skip_batches=consumed_steps * replicas_fed,
                id_ranges=options.id_ranges)

        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def evaluate(self, dataset) -> dict[str, float]:
        started = time.time()
        metrics = self.trainer.evaluate(dataset, self.eval_steps)
        logging.info("eval of %d records in %.1f s: masked_lm_accuracy %.5f, masked_lm_loss "
                     "%.4f, next_sentence_accuracy %.4f", self.options.eval_records,
                     time.time() - started, metrics["masked_lm_accuracy"],
                     metrics["masked_lm_loss"], metrics["next_sentence_accuracy"])
        return metrics


def evaluate_only(options: RunOptions, strategy=None) -> RunResult:
    """--do_eval --nodo_train: one eval of --init_checkpoint or the latest checkpoint.

    strategy: the tf.distribute strategy (default: made from options.strategy).
    """
    from reference import checkpoint as ckpt
    from reference.trainer import CHECKPOINT_NAME
    run = _Run(options, strategy)
    tf = run.tf
    _prepare_output_dir(options.output_dir)
    trainer = run.build_trainer()
    source = options.init_checkpoint or ckpt.latest_complete_checkpoint(
        options.output_dir, CHECKPOINT_NAME)[0]
    if not source:
        raise UsageError(f"nothing to evaluate: no --init_checkpoint and no checkpoint in "
                         f"{options.output_dir}")
    try:
        fmt = ckpt.checkpoint_format(source)
    except ckpt.CheckpointError:
        fmt = None
    if fmt is None:
        path = ckpt.latest_complete_checkpoint(source, CHECKPOINT_NAME)[0] \
            if tf.io.gfile.isdir(source) else source
        if not path:
            raise UsageError(f"{source}: holds no complete checkpoint to evaluate")
        trainer.restore(path, model_only=True)
    else:
        trainer.load_initial_checkpoint(source)
    metrics = run.evaluate(run.eval_dataset())
    if run.chief:
        _write_eval_results(options.output_dir, trainer.step, metrics)
        folder = os.path.join(options.output_dir, "eval")
        with _writing("--output_dir", folder):
            writer = tf.summary.create_file_writer(folder)
            with writer.as_default(step=trainer.step):
                for key, value in metrics.items():
                    tf.summary.scalar(key, value)
            writer.flush()
    return RunResult("evaluated", trainer.step, trainer.samples, [(trainer.samples, metrics)])


def train(options: RunOptions, strategy=None) -> RunResult:
    """--do_train [--do_eval]: an MLPerf run (see the module docstring).

    strategy: the tf.distribute strategy (default: made from options.strategy).
    Raises UsageError (before anything is logged) when OUTPUT_DIR holds a checkpoint of a run
    with other run-defining settings, OutputError when an output cannot be written, and
    InternalError when the training loop would not advance; an error after run_start ends the
    MLPerf log with run_stop "aborted" first.
    """
    from benchmark.mlperf_log import BertLogger, Hyperparameters
    from reference import checkpoint as ckpt
    from benchmark.log_keys import NONCOMPLIANT, RESUME
    from reference.run_log import LogFile
    from reference.trainer import CHECKPOINT_NAME, worker_checkpoint_dir

    run = _Run(options, strategy)
    tf = run.tf
    _prepare_output_dir(options.output_dir)
    # The newest checkpoint that reads back whole: a kill mid-save, or a damaged file, makes
    # the run resume from the one before (each skipped one is named in a warning).
    latest, skipped = ckpt.latest_complete_checkpoint(options.output_dir, CHECKPOINT_NAME)
    progress = None
    if latest:
        progress = _peek_progress(latest)
        options = run.options = _resumed_options(options, progress.settings, latest)
    n = options.steps_per_update
    batch = options.global_batch_size
    budget_updates = options.budget_steps // n
    if run.chief:
        with _writing("--output_dir", options.output_dir):
            ckpt.remove_orphan_save_folders(options.output_dir, CHECKPOINT_NAME)
    if progress and (progress.reached or progress.step >= options.budget_steps):
        why = "reached the target" if progress.reached else \
            f"used its step budget ({options.budget_steps})"
        logging.warning("%s already %s at step %d (%d samples); nothing to train", latest, why,
                        progress.step, progress.samples)
        return RunResult("finished-before", progress.step, progress.samples)

    division = options.submission_division
    if options.noncompliant and division == "closed":
        logging.warning("not a closed-division run (%s): logging it as open division",
                        "; ".join(options.noncompliant))
        division = "open"

    def summary_writer(folder: str):
        if not run.chief:
            return tf.summary.create_noop_writer()
        path = os.path.join(options.output_dir, folder)
        with _writing("--output_dir", path):
            return tf.summary.create_file_writer(path)

    # Before the log is opened: a folder that cannot be written stops the run unlogged.
    summaries, eval_summaries = summary_writer("train"), summary_writer("eval")
    log_file = LogFile(options.mlperf_log, sys.stdout) if run.chief else LogFile(None)
    log = BertLogger(stream=log_file)
    result = RunResult("aborted", 0, 0)
    run_started = run_stopped = False
    try:
        log.submission(org=options.submission_org, platform=_platform(options, run.strategy),
                       division=division, status=options.submission_status)
        log.cache_clear()
        log_file.check()  # a log that cannot be written stops the run before init_start
        log.init_start()
        for reason in options.noncompliant:
            logging.warning("non-compliant: %s", reason)
            log.event(NONCOMPLIANT, reason)
        log.seed(options.seed)
        trainer = run.build_trainer()
        manager = trainer.checkpoint_manager(
            worker_checkpoint_dir(options.output_dir, run.chief, run.task),
            options.keep_checkpoint_max or None)
        if latest:
            trainer.restore(latest)
            resume = {"checkpoint": latest, "global_step": trainer.step,
                      "samples": trainer.samples}
            if skipped:
                resume["skipped_checkpoints"] = skipped
            log.event(RESUME, None, resume)
            if options.init_checkpoint:
                logging.info("--init_checkpoint ignored: resuming from %s", latest)
        else:
            trainer.set_seed(options.seed)
            if options.init_checkpoint:
                names = trainer.load_initial_checkpoint(options.init_checkpoint)
                log.weights_initialization(ckpt.restored_tensor_names(names))
            else:
                trainer.initialize_weights(options.seed)
        trainer.set_run_settings(json.dumps(run_settings(options)))
        for key, value in (("opt_name", options.optimizer.name),
                           ("max_sequence_length", options.max_seq_length),
                           ("max_predictions_per_seq", options.max_predictions_per_seq),
                           ("opt_lamb_learning_rate_decay_poly_power",
                            options.optimizer.poly_power),
                           ("mixed_precision", options.mixed_precision)):
            log.event(key, value)
        hp = Hyperparameters(
            global_batch_size=batch, opt_base_learning_rate=options.optimizer.learning_rate,
            opt_epsilon=options.optimizer.epsilon,
            opt_learning_rate_training_steps=options.optimizer.num_train_steps // n,
            opt_learning_rate_warmup_steps=options.optimizer.num_warmup_steps // n,
            num_warmup_steps=options.optimizer.num_warmup_steps // n,
            start_warmup_step=options.optimizer.start_warmup_step // n,
            opt_lamb_beta_1=options.optimizer.beta_1, opt_lamb_beta_2=options.optimizer.beta_2,
            opt_lamb_weight_decay_rate=options.optimizer.weight_decay_rate,
            gradient_accumulation_steps=n)
        log.hyperparameters(hp, eval_samples=options.eval_records)
        iterator = run.train_iterator()
        eval_data = run.eval_dataset() if options.do_eval else None
        log.init_stop()
        log_file.check()

        log.run_start()
        run_started = True
        result = _train_loop(run, options, log, log_file, iterator, eval_data, manager,
                             budget_updates, summaries, eval_summaries)
        log.train_samples(trainer.samples)
        log.run_stop(result.status)
        run_stopped = True
        log_file.check()
        _save(manager, trainer.step)
        logging.info("run %s at step %d, %d samples; checkpoint %s", result.status,
                     trainer.step, trainer.samples, manager.latest_checkpoint)
    except BaseException:
        if run_started and not run_stopped:  # whatever stopped it, the log says the run ended
            log.run_stop("aborted")
        raise
    finally:
        log.close()
        log_file.close()
    log_file.check()
    if not run.chief:
        shutil.rmtree(worker_checkpoint_dir(options.output_dir, False, run.task),
                      ignore_errors=True)
    return result


def _train_loop(run: _Run, options: RunOptions, log, log_file, iterator, eval_data, manager,
                budget_updates: int, summaries, eval_summaries) -> RunResult:
    """Train from the trainer's step to the budget, in blocks that end at each eval.

    Every block trains at least one update: a block that would not (the step and sample
    counters disagree with each other, so the next eval lies behind the step) raises
    InternalError instead of looping without training.
    """
    tf = run.tf
    trainer = run.trainer
    n = options.steps_per_update
    batch = options.global_batch_size
    frequency = options.eval_frequency
    result = RunResult("aborted", trainer.step, trainer.samples)
    train_folder = os.path.join(options.output_dir, "train")
    eval_folder = os.path.join(options.output_dir, "eval")

    def do_eval() -> bool:
        samples = trainer.samples
        log.eval_start(samples)
        metrics = run.evaluate(eval_data)
        log.eval_stop(samples)
        log.eval_accuracy(samples, metrics["masked_lm_accuracy"])
        result.evals.append((samples, metrics))
        if run.chief:
            _write_eval_results(options.output_dir, trainer.step, metrics)
            with _writing("--output_dir", eval_folder), \
                    eval_summaries.as_default(step=trainer.step):
                for key, value in metrics.items():
                    tf.summary.scalar(key, value)
                eval_summaries.flush()
        log_file.check()
        return metrics["masked_lm_accuracy"] >= options.target_mlm_accuracy

    if eval_data is not None and options.eval_at_start and trainer.samples == 0:
        if do_eval():
            trainer.target_reached.assign(1)
            result.status = "success"
            return result

    update = trainer.step // n
    eval_index = cadence.next_eval_index(trainer.samples, frequency)
    updates_per_call = options.iterations_per_loop // n
    run_started = time.time()
    first_samples = trainer.samples
    every = options.save_checkpoints_steps
    while update < budget_updates:
        eval_at = cadence.eval_update(eval_index, frequency, batch) if eval_data is not None \
            else budget_updates + 1
        block_end = min(eval_at, budget_updates)
        if block_end <= update:
            raise InternalError(f"a training block from update {update} to update {block_end} "
                                f"({(block_end - update) * batch} samples) at step "
                                f"{trainer.step}, {trainer.samples} samples: the step and "
                                "sample counters disagree")
        block_first = trainer.samples
        log.block_start(block_first, (block_end - update) * batch)
        save_due = False
        while update < block_end:
            count = min(updates_per_call, block_end - update)
            before = trainer.step
            started = time.time()
            losses = trainer.train_steps(iterator, count)
            elapsed = time.time() - started
            update += count
            _log_progress(options, trainer, losses, count * batch / max(elapsed, 1e-9),
                          (trainer.samples - first_samples) / max(time.time() - run_started,
                                                                  1e-9),
                          update, eval_at, budget_updates)
            with _writing("--output_dir", train_folder), \
                    summaries.as_default(step=trainer.step):
                for key in ("total_loss", "masked_lm_loss", "next_sentence_loss",
                            "learning_rate"):
                    tf.summary.scalar(key, losses[key])
                tf.summary.scalar("samples_per_second", count * batch / max(elapsed, 1e-9))
            save_due = save_due or trainer.step // every > before // every
            if save_due and update < block_end:
                _save(manager, trainer.step)
                save_due = False
        log.block_stop(block_first)
        log_file.check()
        if update == eval_at:
            eval_index += 1
            if do_eval():
                trainer.target_reached.assign(1)
                result.status = "success"
                break
        if save_due and update < budget_updates:  # after the eval at the same step
            _save(manager, trainer.step)
    with _writing("--output_dir", train_folder):
        summaries.flush()
    result.step, result.samples = trainer.step, trainer.samples
    return result


def _log_progress(options: RunOptions, trainer, losses: dict, rate: float, overall: float,
                  update: int, eval_at: int, budget_updates: int) -> None:
    """One absl line per host call: progress, losses, speed and the time left."""
    batch = options.global_batch_size
    next_stop = min(eval_at, budget_updates)
    logging.info(
        "step %d/%d, %d samples | loss %.4f (mlm %.4f, nsp %.4f), lr %.3g | %.1f samples/s "
        "(%.1f since start) | %s to %s, %s to the step budget",
        trainer.step, options.budget_steps, trainer.samples, losses["total_loss"],
        losses["masked_lm_loss"], losses["next_sentence_loss"], losses["learning_rate"], rate,
        overall, _duration((next_stop - update) * batch / max(overall, 1e-9)),
        "the next eval" if eval_at <= budget_updates else "the end",
        _duration((budget_updates - update) * batch / max(overall, 1e-9)))


def _locate_bad_record(options: RunOptions, eval_flag: str) -> str | None:
    """After reading the data failed mid-run: where and why, or None if every record is fine
    (framing, shapes and id ranges).

    Scans the records evaluated (eval_flag names their flag) and then every training record, in
    file order; returns "<flag>: <file>: record <index>: <problem>" for the first bad one.
    """
    from reference import input_pipeline
    for flag, files, limit in ((eval_flag, options.eval_files, options.eval_records),
                               ("--input_file", options.input_files, None)):
        if not files:
            continue
        logging.warning("reading the data failed: checking every record of %s (%d files)",
                        flag, len(files))
        bad = input_pipeline.find_bad_record(files, options.max_seq_length,
                                             options.max_predictions_per_seq, limit,
                                             options.id_ranges)
        if bad:
            return f"{flag}: {bad}"
    return None


def main(argv: list[str]) -> None:
    """Entry point for `python -m reference.run_pretraining`.

    A bad command line or input, or an output that cannot be written, ends the process with
    one line "error: <what>: <problem>" on stderr and exit status 1; an InternalError with
    "error: internal error: <what>". A damaged record or an id out of range met during the run
    (TensorFlow's DataLossError or InvalidArgumentError) is located by a scan of the data and
    reported the same way; any other failure keeps its traceback.
    """
    if len(argv) > 1:
        raise SystemExit(f"error: unexpected arguments {' '.join(argv[1:])} (flags are "
                         "--name=value)")
    import tensorflow as tf
    from reference import distribution, presets
    from reference.bert_config import ConfigError
    from reference.checkpoint import CheckpointError
    from reference.input_pipeline import InputError
    errors = (UsageError, ConfigError, CheckpointError, InputError, OutputError,
              distribution.StrategyError, presets.PresetError)
    options = None
    try:
        # The strategy comes first: multi-worker collectives and TPUs must be set up before
        # TensorFlow runs anything (the flag checks read files with tf.data).
        devices = tuple(distribution.logical_cpu_devices(FLAGS.cpu_devices)) \
            if FLAGS.cpu_devices > 1 else ()
        apply_preset()
        strategy = distribution.make_strategy(distribution.StrategyRequest(
            use_tpu=FLAGS.use_tpu, tpu_name=FLAGS.tpu_name, tpu_zone=FLAGS.tpu_zone,
            gcp_project=FLAGS.gcp_project, num_tpu_cores=FLAGS.num_tpu_cores,
            num_gpus=FLAGS.num_gpus, devices=devices))
        options = options_from_flags()
        if options.do_train:
            result = train(options, strategy)
        else:
            result = evaluate_only(options, strategy)
    except errors as err:
        failure = str(err)
        if isinstance(err, CheckpointError) and options is not None:
            # Raised while restoring weights into the model that the config describes.
            failure += f" (model of --bert_config_file={options.bert_config_file})"
    except InternalError as err:
        failure = f"internal error: {err}"
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
        failure = options and _locate_bad_record(
            options, "--eval_file" if FLAGS.eval_file else "--input_file")
        if not failure:
            raise
    else:
        last = result.evals[-1][1] if result.evals else {}
        print(f"run_pretraining: {result.status} at step {result.step}, {result.samples} "
              "samples" + (f", masked_lm_accuracy {last['masked_lm_accuracy']:.5f}"
                           if last else ""), flush=True)
        return
    # Free the failed run's objects first: TensorFlow's warnings about them (e.g. a checkpoint
    # deleted half-restored) then come before the error, which stays the last line on stderr.
    gc.collect()
    raise SystemExit(f"error: {failure}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
