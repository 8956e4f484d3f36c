"""The options of a run, read from its flags once (`options_from_flags`), and the settings that
define a run (`run_settings`), stored in its checkpoints and compared on resume.

Pure: nothing here reads or writes a file. The files the options name (TFRecords, the BERT
config, --init_checkpoint) are checked by reference/preflight.py, which fills in what they hold
(`input_files`, `eval_files`, `eval_records`, `bert_config`, `id_ranges`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from absl import flags, logging

from benchmark import cadence, constants
from reference.optimizer_settings import OptimizerSettings
from reference.run_flags import MAX_SEED, UsageError, check_ranges, require

if TYPE_CHECKING:  # TensorFlow-importing modules are imported where used (fast --help)
    from reference.bert_config import BertConfig
    from reference.distribution import StrategyRequest
    from reference.input_pipeline import IdRanges, PackedCount
    from cleanup_scripts.pretraining_features import RecordLayout


@dataclass
class RunOptions:
    """Everything a run needs, validated (see `options_from_flags`; the fields marked
    "preflight" are filled in by `reference.preflight.preflight`)."""
    bert_config_file: str
    output_dir: str
    do_train: bool
    do_eval: bool
    input_file: str | None  # --input_file as given (patterns)
    eval_file: str | None  # the eval records' patterns: --eval_file, or --input_file (nodo_train)
    eval_flag: str  # the flag that names them: "--eval_file" or "--input_file"
    init_checkpoint: str | None
    max_seq_length: int
    max_predictions_per_seq: int
    train_batch_size: int
    eval_batch_size: int
    max_eval_steps: int
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
    use_xla: bool
    recompute_layers: bool  # gradient checkpointing: memory only, not run-defining
    masked_lm_block_rows: int  # memory only, not run-defining
    dropout_override: float | None
    strategy: StrategyRequest
    progress_seconds: float = 5.0  # console only: seconds between progress lines
    mlperf_log_to_console: bool = False  # console only: copy the MLPerf log to stdout
    noncompliant: list[str] = field(default_factory=list)
    seed_drawn: bool = False  # no --seed: the seed was drawn (a resumed run takes the run's)
    # preflight:
    input_files: list[str] = field(default_factory=list)  # the training files, expanded
    eval_files: list[str] = field(default_factory=list)  # the eval files, expanded
    eval_records: int = 0  # sequences actually evaluated
    train_layout: RecordLayout | None = None  # what the training files hold (packed or not)
    eval_layout: RecordLayout | None = None  # what the eval files hold
    sequences_per_row: float = 1.0  # packed training rows: mean sequences per row
    eval_count: PackedCount | None = None  # packed eval: the rows that hold the evaluated
    bert_config: BertConfig | None = None  # --bert_config_file, read
    id_ranges: IdRanges | None = None  # the BERT config's table sizes, which the ids index

    @property
    def global_batch_size(self) -> int:
        """Records per optimizer update (what MLPerf calls global_batch_size)."""
        return self.train_batch_size * self.steps_per_update

    @property
    def budget_steps(self) -> int:
        """Micro-steps this process may train to (global step)."""
        steps = self.optimizer.num_train_steps
        return min(steps, self.stop_steps) if self.stop_steps else steps


def options_from_flags(f: flags.FlagValues) -> RunOptions:
    """Check the flags (each on its own, and against each other) and read them into RunOptions.

    Reads no file (see reference.preflight for the checks that do). Raises UsageError with a
    one-line message naming the flag.
    """
    from reference.distribution import StrategyRequest  # imports TensorFlow

    require(f.do_train or f.do_eval, "at least one of --do_train or --do_eval must be set")
    for name in ("bert_config_file", "output_dir"):
        require(bool(f[name].value), f"--{name} is required")
    check_ranges(f)
    n = f.steps_per_update

    noncompliant: list[str] = []
    eval_file = None
    if f.do_train:
        require(bool(f.input_file), "--input_file is required with --do_train")
        if f.do_eval:
            require(bool(f.eval_file), "--eval_file is required with --do_train --do_eval "
                    "(the eval_10k TFRecord)")
            eval_file = f.eval_file
        else:
            noncompliant.append("--nodo_eval: the run is never evaluated, so it cannot reach "
                                "the target")
    else:
        eval_file = f.eval_file or f.input_file
        require(bool(eval_file), "--eval_file (or --input_file) is required with --do_eval")
    eval_flag = "--eval_file" if f.eval_file else "--input_file"

    global_batch = f.train_batch_size * n
    rule_frequency = cadence.eval_frequency(global_batch)
    frequency = f.eval_frequency_samples or rule_frequency
    if frequency != rule_frequency:
        require(f.noncompliant_eval_frequency,
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
        do_eval=f.do_eval, input_file=f.input_file, eval_file=eval_file, eval_flag=eval_flag,
        init_checkpoint=f.init_checkpoint, max_seq_length=f.max_seq_length,
        max_predictions_per_seq=f.max_predictions_per_seq,
        train_batch_size=f.train_batch_size, eval_batch_size=f.eval_batch_size,
        max_eval_steps=f.max_eval_steps, steps_per_update=n,
        optimizer=optimizer, stop_steps=f.stop_steps, iterations_per_loop=iterations,
        save_checkpoints_steps=f.save_checkpoints_steps,
        keep_checkpoint_max=f.keep_checkpoint_max,
        clip_after_allreduce=f.clip_by_global_norm_after_gradient_allreduce,
        target_mlm_accuracy=f.target_mlm_accuracy, eval_frequency=frequency,
        eval_at_start=f.eval_at_start, mlperf_log=mlperf_log,
        submission_org=f.submission_org, submission_platform=f.submission_platform,
        submission_division=f.submission_division, submission_status=f.submission_status,
        seed=seed, mixed_precision=f.mixed_precision, use_xla=f.use_xla,
        recompute_layers=f.recompute_layers, masked_lm_block_rows=f.masked_lm_block_rows,
        dropout_override=f.dropout_override,
        strategy=StrategyRequest(use_tpu=f.use_tpu, tpu_name=f.tpu_name, tpu_zone=f.tpu_zone,
                                 gcp_project=f.gcp_project, num_tpu_cores=f.num_tpu_cores,
                                 num_gpus=f.num_gpus),
        progress_seconds=f.progress_seconds, mlperf_log_to_console=f.mlperf_log_to_console,
        noncompliant=noncompliant, seed_drawn=f.seed is None)


# ------------------------------------------------------------------------------ run settings
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
    settings.update({f"bert_config_file.{key}": value
                     for key, value in options.bert_config.to_dict().items()})
    if options.train_layout is not None and options.train_layout.packed:
        # Packed and unpacked parts share their names: the layout tells them apart.
        settings["input_file.layout"] = options.train_layout.describe()
    return settings


def _shown(value: object) -> str:
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def resumed_options(options: RunOptions, stored: dict | None, checkpoint: str) -> RunOptions:
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

