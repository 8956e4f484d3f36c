"""Resuming a run from its --output_dir: the settings that define a run (`run_settings`, stored
in every checkpoint), the checkpoint to resume from and its counters (`find_resume_point`), and
the options that continue the run (`resumed_options`), which must be the run's own.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

from absl import logging

from benchmark.errors import one_line
from reference.preflight import CheckedInputs
from reference.run_options import RunOptions, UsageError


def _file_names(files: tuple[str, ...]) -> str:
    """The training files as a run setting: how many, and a digest of their names in order
    (not their folder, which may move)."""
    names = "\n".join(os.path.basename(path) for path in files)
    digest = hashlib.sha256(names.encode("utf-8")).hexdigest()[:12]
    return f"{len(files)} file{'' if len(files) == 1 else 's'} (names' sha256 {digest})"


def run_settings(options: RunOptions, inputs: CheckedInputs) -> dict[str, object]:
    """The settings that define a training run, stored in its checkpoints and compared on
    resume.

    Keys are flag names (a BERT config key is "bert_config_file.<key>"); values are what
    changes the arithmetic, the data stream or the sample count: batch and accumulation, the
    schedule and the optimizer's constants (LAMB's only with --optimizer=lamb), seed, record
    shapes, training file names, precision, clipping, dropout, eval cadence (samples) and
    target, and the config. Not included: how long this process trains and how it saves, logs
    and evaluates (--stop_steps, --iterations_per_loop, --save_checkpoints_steps, the eval
    batch), where the files are, and the number of replicas (--train_batch_size counts them
    all, so the global batch does not depend on it).
    """
    opt, data = options.optimizer, options.data
    settings: dict[str, object] = {
        "train_batch_size": data.train_batch_size,
        "steps_per_update": data.steps_per_update,
        "max_seq_length": data.max_seq_length,
        "max_predictions_per_seq": data.max_predictions_per_seq,
        "input_file": _file_names(inputs.train.files),
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
        "clip_by_global_norm_after_gradient_allreduce": opt.clip_after_allreduce,
        "mixed_precision": options.compute.mixed_precision,
        "dropout_override": options.model.dropout_override,
        "eval_frequency_samples": options.eval.frequency,
        "target_mlm_accuracy": options.eval.target_accuracy,
    })
    settings.update({f"bert_config_file.{key}": value
                     for key, value in inputs.bert_config.to_dict().items()})
    if inputs.packed:  # packed and unpacked parts share their names: the layout tells them apart
        settings["input_file.layout"] = inputs.train.layout.describe()
    return settings


@dataclass(frozen=True)
class Progress:
    """The counters of a training checkpoint: micro-steps, samples, whether an eval reached
    the target, and the settings of the run that wrote it (`run_settings`; None in a
    checkpoint without them)."""
    step: int
    samples: int
    reached: bool
    settings: dict | None


def peek_progress(path: str) -> Progress:
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
        except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
            raise UsageError(f"--output_dir: {path}: its run settings do not read back "
                             f"({one_line(err)}); use a new --output_dir") from err
    return Progress(int(tensor("global_step") or 0), int(tensor("trained_samples") or 0),
                    bool(tensor("target_reached")), settings)


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from: its prefix, the newer ones skipped because they do not
    read back whole, and its counters."""
    checkpoint: str
    skipped: tuple[str, ...]
    progress: Progress

    def finished(self, budget_steps: int) -> str | None:
        """Why the run has nothing left to train (its target reached, or `budget_steps`
        micro-steps done), or None."""
        if self.progress.reached:
            return "reached the target"
        if self.progress.step >= budget_steps:
            return f"used its step budget ({budget_steps})"
        return None


def find_resume_point(output_dir: str, mlperf_log: str | None) -> ResumePoint | None:
    """The newest checkpoint in `output_dir` that reads back whole (a kill mid-save, or a damaged
    file, makes the run resume from the one before; each skipped one is named in a warning),
    or None when there is none. Raises UsageError if its run settings do not read back, or if
    every checkpoint there is damaged while `mlperf_log` shows a started run: starting again
    would train from the start into that run's folder and log."""
    from reference import checkpoint as ckpt
    from reference.trainer import CHECKPOINT_NAME
    latest, skipped = ckpt.latest_complete_checkpoint(output_dir, CHECKPOINT_NAME)
    if not latest:
        if skipped and _shows_run_start(mlperf_log):
            names = ", ".join(os.path.basename(path) for path in skipped)
            raise UsageError(f"--output_dir: {output_dir}: every checkpoint of the run that "
                             f"{mlperf_log} shows started is damaged ({names}; the warnings "
                             "above say how); restore one or use a new --output_dir")
        return None
    return ResumePoint(latest, tuple(skipped), peek_progress(latest))


def _shows_run_start(mlperf_log: str | None) -> bool:
    """Whether the local MLPerf log `mlperf_log` (None: none) holds a run_start record."""
    if not mlperf_log or not os.path.isfile(mlperf_log):
        return False
    with open(mlperf_log, "rb") as handle:
        return any(b'"key": "run_start"' in line for line in handle)


def _shown(value: object) -> str:
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def resumed_options(options: RunOptions, inputs: CheckedInputs,
                    point: ResumePoint) -> RunOptions:
    """The options that resume the run of `point`'s checkpoint.

    Without --seed the run's seed is taken (with a warning if it differs from the one drawn);
    every other setting of `run_settings` must be the checkpoint's. Raises UsageError naming
    the first flag that differs, its value in the checkpoint and in this run, or a checkpoint
    that stores no settings.
    """
    stored, checkpoint = point.progress.settings, point.checkpoint
    if stored is None:
        raise UsageError(f"--output_dir: {checkpoint} does not store the settings of the run "
                         "that wrote it (an older version of this trainer did not), so this "
                         "run's flags cannot be checked against it; use a new --output_dir")
    seed = stored.get("seed")
    if options.seed_drawn and isinstance(seed, int) and seed != options.seed:
        logging.warning("resuming with the run's seed %d stored in %s (not %d): the data order "
                        "and dropout continue the run's", seed, checkpoint, options.seed)
        options = dataclasses.replace(options, seed=seed)
    ours = run_settings(options, inputs)
    for key in [*ours, *(key for key in stored if key not in ours)]:
        if stored.get(key) != ours.get(key):
            flag, _, config_key = key.partition(".")
            name = f"--{flag}: {config_key}" if config_key else f"--{flag}"
            raise UsageError(f"{name}: the checkpoint in {options.output.output_dir} was "
                             f"trained with {_shown(stored.get(key))}, this run asks for "
                             f"{_shown(ours.get(key))}; use the same value or a new "
                             "--output_dir")
    return options
