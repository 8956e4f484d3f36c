"""The run of `python -m reference.run_pretraining`: an MLPerf training run with evals at the
benchmark's cadence (`train`), or one evaluation (`evaluate_only`), from the run's options and
what preflight found in its files (`CheckedInputs`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from absl import logging

from benchmark import cadence, log_keys
from benchmark.errors import UserError, printable
from reference import interrupts
from reference.console import CallPace, LiveLine, duration, eval_line, time_to_target
from reference.error_text import SetupError, tensorflow_failure, writing
from reference.placement import Placement, place
from reference.preflight import CheckedInputs, prepare_output_dir
from reference.resume import ResumePoint, find_resume_point, resumed_options, run_settings
from reference.run_options import RunOptions, UsageError
from reference.run_outputs import (output_dir_lock, save_checkpoint, set_aside_earlier_run,
                                   summary_writer, write_eval, write_scalars)

if TYPE_CHECKING:  # TensorFlow-importing modules are imported where used (fast --help)
    from benchmark.mlperf_log import BertLogger
    from reference.run_log import LogFile


class InternalError(RuntimeError):
    """A state the trainer must never be in (a bug, or counters crafted by hand); one line."""


class Interrupted(Exception):
    """Training stopped by Ctrl-C (KeyboardInterrupt): the global step it had reached and the
    newest checkpoint saved (None: none yet), which the same command resumes from."""

    def __init__(self, step: int, checkpoint: str | None) -> None:
        super().__init__(f"interrupted at step {step}")
        self.step, self.checkpoint = step, checkpoint


class TrainingDiverged(UserError):
    """Training produced a non-finite loss, gradient norm or weight: the run stops at once
    (its log ends with run_stop "aborted", no checkpoint of that state is saved); one line
    naming the step."""


# The values of Trainer.train_steps that must stay finite.
FINITE_KEYS = ("total_loss", "masked_lm_loss", "next_sentence_loss", "gradient_norm")


def diverged(losses: dict, fp16: bool) -> str | None:
    """What is not finite in the values of one `Trainer.train_steps` call ("total_loss nan"),
    or None. With fp16, non-finite values of a call whose updates loss scaling skipped are
    what scaling is for, while the scale can still drop (above 1.0): not a divergence."""
    bad = [f"{key} {losses[key]}" for key in FINITE_KEYS
           if key in losses and not math.isfinite(losses[key])]
    if bad and fp16 and losses["skipped_updates"] and losses["loss_scale"] > 1.0:
        return None
    return ", ".join(bad) or None


def save_finite_checkpoint(manager, trainer) -> None:
    """Save the trainer's state as checkpoint `<name>-<step>`, unless a weight is not finite
    (TrainingDiverged then, and the last checkpoint stays the newest)."""
    import tensorflow as tf
    weights = trainer.model.trainable_variables
    if not bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(w)) for w in weights])):
        raise TrainingDiverged(f"training diverged at step {trainer.step}: the weights hold "
                               f"non-finite values; not saved (last checkpoint: "
                               f"{manager.latest_checkpoint or 'none'})")
    save_checkpoint(manager, trainer.step)


@dataclass
class RunResult:
    """What a run did: status ("success", "aborted", "evaluated", "already-finished"), the
    global step and samples at the end, and every eval as (samples, metrics)."""
    status: str
    step: int
    samples: int
    evals: list[tuple[int, dict[str, float]]] = field(default_factory=list)


# ------------------------------------------------------------------------------ set-up failures
class _Phase:
    """Whether a run is still being set up: until its first compiled training call returns
    (an eval-only run: until it ends)."""

    def __init__(self) -> None:
        self.setting_up = True


@contextlib.contextmanager
def _setup_failures(phase: _Phase):
    """A TensorFlow error or MemoryError raised while `phase` is setting up becomes SetupError
    (one line, the error as its cause); later ones keep their traceback (a bug, or damaged data
    that run_pretraining locates). A UnicodeDecodeError counts as TensorFlow's: it stands for a
    parse error whose message quotes a record's bytes that are not UTF-8."""
    import tensorflow as tf
    try:
        yield
    except (tf.errors.OpError, UnicodeDecodeError, MemoryError) as err:
        if not phase.setting_up:
            raise
        raise SetupError(f"setting up the run failed: {tensorflow_failure(err)}") from err


# ------------------------------------------------------------------------------ the run
class _Run:
    """One process's part of a run: its options, inputs and placement, the trainer once built,
    and the datasets it feeds."""

    def __init__(self, options: RunOptions, inputs: CheckedInputs, placement: Placement):
        self.options, self.inputs, self.placement = options, inputs, placement
        self.trainer = None

    def build_trainer(self):
        """Set the precision policy and TensorFlow's seed, then build the Trainer."""
        import tensorflow as tf
        from reference.trainer import Trainer, set_mixed_precision
        options = self.options
        compute = options.compute
        set_mixed_precision(compute.mixed_precision)
        config = self.inputs.bert_config
        dropout = options.model.dropout_override
        if dropout is not None:
            config = dataclasses.replace(config, hidden_dropout_prob=dropout,
                                         attention_probs_dropout_prob=dropout)
        tf.random.set_seed(options.seed)
        self.trainer = Trainer(
            self.placement.strategy, config, options.optimizer, options.data.train_batch_size,
            steps_per_update=options.data.steps_per_update,
            mixed_precision=compute.mixed_precision, use_xla=compute.use_xla,
            recompute_layers=compute.recompute_layers,
            masked_lm_block_rows=compute.masked_lm_block_rows, packed=self.inputs.packed)
        return self.trainer

    @property
    def eval_steps(self) -> int:
        """Global eval batches per eval: the records read, padded to whole batches."""
        from reference import input_pipeline
        batch = self.options.eval.batch_size
        return input_pipeline.padded_eval_size(self.inputs.eval.rows, batch) // batch

    def eval_dataset(self):
        """The distributed eval dataset: the records evaluated, padded to whole batches with
        records of weight 0."""
        from reference import input_pipeline
        records = self.inputs.eval
        padded = self.eval_steps * self.options.eval.batch_size
        count = records.packed_count

        def dataset_fn(context):
            return input_pipeline.eval_dataset(
                list(records.files), self.placement.eval_per_replica, records.rows, padded,
                records.layout, context,
                last_row_sequences=count.last_row_sequences if count else None)

        return self.placement.strategy.distribute_datasets_from_function(dataset_fn)

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
        options, records = self.options, self.inputs.train
        consumed_steps = self.trainer.step

        def dataset_fn(context):
            replicas_fed = context.num_replicas_in_sync // context.num_input_pipelines
            return input_pipeline.train_dataset(
                list(records.files), self.placement.train_per_replica, records.layout,
                options.seed, options.data.steps_per_update, context,
                skip_batches=consumed_steps * replicas_fed, id_ranges=self.inputs.id_ranges)

        dataset = self.placement.strategy.distribute_datasets_from_function(dataset_fn)
        return iter(dataset)

    def evaluate(self, dataset) -> dict[str, float]:
        """The metrics of one eval over the run's eval steps (its callers time and report it)."""
        return self.trainer.evaluate(dataset, self.eval_steps)

    def platform(self) -> str:
        """submission_platform: --submission_platform, else e.g. "8xGPU"."""
        submission, request = self.options.submission, self.options.distribution.strategy
        if submission.platform:
            return submission.platform
        kind = "TPU" if request.use_tpu else "GPU" if request.num_gpus else "CPU"
        return f"{self.placement.strategy.num_replicas_in_sync}x{kind}"


def _several_workers(strategy) -> bool:
    """Whether `strategy` spans several worker processes (their host calls must agree)."""
    import tensorflow as tf
    from reference.distribution import is_multi_worker, tf_config
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) \
        and is_multi_worker(tf_config())


# ------------------------------------------------------------------------------ eval only
def evaluate_only(options: RunOptions, inputs: CheckedInputs, strategy=None) -> RunResult:
    """--do_eval --nodo_train: one eval of --init_checkpoint or the latest checkpoint in
    --output_dir; writes eval_results.txt.

    strategy: the tf.distribute strategy (default: made from options.distribution). A
    TensorFlow error on the way is a SetupError; another run holding --output_dir an
    InputError (`output_dir_lock`).
    """
    with _setup_failures(_Phase()):
        run = _Run(options, inputs, place(options, inputs, strategy))
        output_dir = options.output.output_dir
        prepare_output_dir(output_dir)
        with output_dir_lock(output_dir, run.placement.task):
            return _evaluate_locked(run, options, inputs)


def _evaluate_locked(run: _Run, options: RunOptions, inputs: CheckedInputs) -> RunResult:
    """`evaluate_only` once this worker holds --output_dir's lock."""
    output_dir = options.output.output_dir
    trainer = run.build_trainer()
    _restore_for_eval(trainer, options.model.init_checkpoint, output_dir)
    started = time.time()
    metrics = run.evaluate(run.eval_dataset())
    logging.info("eval of %d records in %.1f s: masked_lm_accuracy %.5f, masked_lm_loss "
                 "%.4f, next_sentence_accuracy %.4f", inputs.eval.sequences,
                 time.time() - started, metrics["masked_lm_accuracy"],
                 metrics["masked_lm_loss"], metrics["next_sentence_accuracy"])
    if run.placement.chief:
        write_eval(output_dir, trainer.step, trainer.samples, metrics,
                   summary_writer(output_dir, "eval", chief=True))
    return RunResult("evaluated", trainer.step, trainer.samples,
                     [(trainer.samples, metrics)])


def _restore_for_eval(trainer, init_checkpoint: str | None, output_dir: str) -> None:
    """Load the weights to evaluate: `init_checkpoint` (an official checkpoint, or one of ours
    or a folder of them) or else the latest complete checkpoint in `output_dir`."""
    import tensorflow as tf
    from reference import checkpoint as ckpt
    from reference.trainer import CHECKPOINT_NAME
    source = init_checkpoint or ckpt.latest_complete_checkpoint(output_dir, CHECKPOINT_NAME)[0]
    if not source:
        raise UsageError(f"nothing to evaluate: no --init_checkpoint and no checkpoint in "
                         f"{output_dir}")
    try:
        ckpt.checkpoint_format(source)
    except ckpt.CheckpointError:  # not an official checkpoint: one of ours
        path = ckpt.latest_complete_checkpoint(source, CHECKPOINT_NAME)[0] \
            if tf.io.gfile.isdir(source) else source
        if not path:
            raise UsageError(f"{source}: holds no complete checkpoint to evaluate") from None
        trainer.restore(path, model_only=True)
    else:
        trainer.load_initial_checkpoint(source)


# ------------------------------------------------------------------------------ training
def train(options: RunOptions, inputs: CheckedInputs, strategy=None) -> RunResult:
    """--do_train [--do_eval]: an MLPerf run, resumed from the newest complete checkpoint in
    --output_dir if there is one.

    strategy: the tf.distribute strategy (default: made from options.distribution).
    Raises InputError (before anything is written) when another live trainer holds OUTPUT_DIR
    (`output_dir_lock`), UsageError (before anything is logged) when OUTPUT_DIR holds a
    checkpoint of a run with other run-defining settings or only damaged checkpoints of a
    started run, TrainingDiverged when a loss turns non-finite, OutputError when an output
    cannot be written,
    InternalError when the training loop would not advance, and SetupError for a TensorFlow
    error before the first compiled training call has returned; an error after run_start ends
    the MLPerf log with run_stop "aborted" first.
    """
    phase = _Phase()
    with _setup_failures(phase):
        placement = place(options, inputs, strategy)
        prepare_output_dir(options.output.output_dir)
        with output_dir_lock(options.output.output_dir, placement.task):
            return _train_locked(options, inputs, placement, phase)


def _train_locked(options: RunOptions, inputs: CheckedInputs, placement: Placement,
                  phase: _Phase) -> RunResult:
    """`train` once this worker holds --output_dir's lock: resume or start, then run."""
    options, point = _resume(options, inputs, placement.chief)
    finished = point and point.finished(options.budget_steps)
    if finished:
        progress = point.progress
        logging.warning("%s already %s at step %d (%d samples); nothing to train",
                        point.checkpoint, finished, progress.step, progress.samples)
        return RunResult("already-finished", progress.step, progress.samples)
    return _logged_run(_Run(options, inputs, placement), point, phase)


def _resume(options: RunOptions, inputs: CheckedInputs,
            chief: bool) -> tuple[RunOptions, ResumePoint | None]:
    """The options that continue the run in --output_dir and the checkpoint they resume from
    (None: a new run); the chief also removes the folders that killed saves left there and,
    for a new run, sets aside the outputs of an earlier one that stopped before its first
    checkpoint (`set_aside_earlier_run`: its log, evals and scalars never mix with this run's)."""
    from reference import checkpoint as ckpt
    from reference.trainer import CHECKPOINT_NAME
    output_dir = options.output.output_dir
    point = find_resume_point(output_dir, options.output.mlperf_log)
    if point:
        options = resumed_options(options, inputs, point)
    if chief:
        with writing("--output_dir", output_dir):
            ckpt.remove_orphan_save_folders(output_dir, CHECKPOINT_NAME)
            moved = [] if point else set_aside_earlier_run(output_dir,
                                                            options.output.mlperf_log)
        if moved:
            logging.warning("no checkpoint to resume from: the run starts over; what an earlier "
                            "run left is renamed to %s",
                            ", ".join(printable(new) for _, new in moved))
    return options, point


@dataclass(frozen=True)
class _Outputs:
    """The open outputs of a training run: the MLPerf log (its logger and file) and the
    TensorBoard writers of OUTPUT_DIR/train and OUTPUT_DIR/eval."""
    log: BertLogger
    log_file: LogFile
    train_writer: Any
    eval_writer: Any


def _open_outputs(run: _Run) -> _Outputs:
    """The summary writers first (a folder that cannot be written stops the run unlogged),
    then the MLPerf log (the chief's; other workers log nowhere)."""
    from benchmark.mlperf_log import BertLogger
    from reference.run_log import LogFile
    output, chief = run.options.output, run.placement.chief
    writers = (summary_writer(output.output_dir, "train", chief),
               summary_writer(output.output_dir, "eval", chief))
    log_file = LogFile(output.mlperf_log, sys.stdout if output.mlperf_log_to_console else None) \
        if chief else LogFile(None)
    return _Outputs(BertLogger(stream=log_file), log_file, *writers)


def _logged_run(run: _Run, point: ResumePoint | None, phase: _Phase) -> RunResult:
    """The MLPerf-logged part of a training run, init_start to run_stop; a failure after
    run_start logs run_stop "aborted" first."""
    from reference.trainer import worker_checkpoint_dir
    options = run.options
    reasons = (*run.inputs.noncompliant, *options.submission.noncompliant)
    division = _division(options.submission.division, reasons)
    outputs = _open_outputs(run)
    log = outputs.log
    started = stopped = False
    try:
        _log_init_start(run, outputs, division, reasons)
        manager = _initialise(run, log, point)
        _log_hyperparameters(log, options, run.inputs)
        iterator = run.train_iterator()
        eval_data = run.eval_dataset() if options.do_eval else None
        log.init_stop()
        outputs.log_file.check()
        log.run_start()
        started = True
        result = _TrainingLoop(run, outputs, manager, eval_data, phase).train(iterator)
        log.train_samples(run.trainer.samples)
        log.run_stop(result.status)
        stopped = True
        outputs.log_file.check()
        save_finite_checkpoint(manager, run.trainer)
        logging.debug("run %s at step %d, %d samples; checkpoint %s", result.status,
                      run.trainer.step, run.trainer.samples, manager.latest_checkpoint)
    except BaseException:
        if started and not stopped:  # whatever stopped it, the log says the run ended
            log.run_stop(log_keys.ABORTED)
        raise
    finally:
        log.close()
        outputs.log_file.close()
    outputs.log_file.check()
    if not run.placement.chief:
        shutil.rmtree(worker_checkpoint_dir(options.output.output_dir, False, run.placement.task),
                      ignore_errors=True)
    return result


def _division(asked: str, reasons: tuple[str, ...]) -> str:
    """The division the run is logged in: open when it has noncompliant `reasons`."""
    if reasons and asked == "closed":
        logging.warning("not a closed-division run (%s): logging it as open division",
                        "; ".join(reasons))
        return "open"
    return asked


def _log_init_start(run: _Run, outputs: _Outputs, division: str,
                    reasons: tuple[str, ...]) -> None:
    """The submission records, init_start, each noncompliant reason (warned on the console
    too), the target and the seed."""
    options, log = run.options, outputs.log
    submission = options.submission
    log.submission(org=submission.org, platform=run.platform(), division=division,
                   status=submission.status)
    log.cache_clear()
    outputs.log_file.check()  # a log that cannot be written stops the run before init_start
    log.init_start()
    for reason in reasons:
        logging.warning("non-compliant: %s", reason)
        log.event(log_keys.NONCOMPLIANT, reason)
    log.event(log_keys.TARGET_ACCURACY, options.eval.target_accuracy)
    log.seed(options.seed)


def _initialise(run: _Run, log: BertLogger, point: ResumePoint | None):
    """Build the trainer and set its weights and counters: restored from `point`, else from
    --init_checkpoint, else drawn from the seed. Returns the CheckpointManager of this worker."""
    from reference import checkpoint as ckpt
    from reference.trainer import worker_checkpoint_dir
    options, placement = run.options, run.placement
    trainer = run.build_trainer()
    manager = trainer.checkpoint_manager(
        worker_checkpoint_dir(options.output.output_dir, placement.chief, placement.task),
        options.output.keep_checkpoint_max or None)
    init_checkpoint = options.model.init_checkpoint
    if point:
        trainer.restore(point.checkpoint)
        resume = {"checkpoint": point.checkpoint, "global_step": trainer.step,
                  "samples": trainer.samples}
        if point.skipped:
            resume["skipped_checkpoints"] = list(point.skipped)
        log.event(log_keys.RESUME, None, resume)
        if init_checkpoint:
            logging.warning("--init_checkpoint ignored: resuming from %s", point.checkpoint)
    else:
        trainer.set_seed(options.seed)
        if init_checkpoint:
            names = trainer.load_initial_checkpoint(init_checkpoint)
            log.weights_initialization(ckpt.restored_tensor_names(names))
        else:
            logging.warning("no --init_checkpoint: training starts from random weights "
                            "(the benchmark starts from model.ckpt-28252)")
            trainer.initialize_weights(options.seed)
    trainer.set_run_settings(json.dumps(run_settings(options, run.inputs)))
    return manager


def _log_hyperparameters(log: BertLogger, options: RunOptions, inputs: CheckedInputs) -> None:
    """The hyperparameter records, in the optimizer's view: global batch, step counts in
    updates (micro-steps / steps_per_update)."""
    from benchmark.mlperf_log import Hyperparameters
    opt, n = options.optimizer, options.data.steps_per_update
    for key, value in ((log_keys.OPT_NAME, opt.name),
                       (log_keys.MAX_SEQUENCE_LENGTH, options.data.max_seq_length),
                       (log_keys.MAX_PREDICTIONS_PER_SEQ, options.data.max_predictions_per_seq),
                       (log_keys.OPT_LAMB_LR_DECAY_POLY_POWER, opt.poly_power),
                       (log_keys.MIXED_PRECISION, options.compute.mixed_precision)):
        log.event(key, value)
    hp = Hyperparameters(
        global_batch_size=options.data.global_batch_size,
        opt_base_learning_rate=opt.learning_rate, opt_epsilon=opt.epsilon,
        opt_learning_rate_training_steps=opt.num_train_steps // n,
        opt_learning_rate_warmup_steps=opt.num_warmup_steps // n,
        num_warmup_steps=opt.num_warmup_steps // n,
        start_warmup_step=opt.start_warmup_step // n,
        opt_lamb_beta_1=opt.beta_1, opt_lamb_beta_2=opt.beta_2,
        opt_lamb_weight_decay_rate=opt.weight_decay_rate, gradient_accumulation_steps=n)
    log.hyperparameters(hp, eval_samples=inputs.eval.sequences if inputs.eval else 0)


class _TrainingLoop:
    """Train from the trainer's step to the budget, in blocks that end at each eval: the first
    update at whose end the samples trained reach the next multiple of the eval interval (with
    packed rows an update's sample count varies, so the eval falls a few sequences after it,
    and each block is logged when it is trained, with its true sample count and start time).
    Checkpoints are saved at each multiple of --save_checkpoints_steps (after the eval due at
    the same step)."""

    def __init__(self, run: _Run, outputs: _Outputs, manager, eval_data, phase: _Phase):
        """`eval_data`: the distributed eval set, None without evals; `manager`: the
        CheckpointManager; `phase` says when the set-up is over."""
        self.run, self.outputs, self.manager, self.phase = run, outputs, manager, phase
        self.eval_data = eval_data
        self.options, self.trainer = run.options, run.trainer
        self.n = self.options.data.steps_per_update
        self.batch = self.options.data.global_batch_size
        self.budget_updates = self.options.budget_steps // self.n
        self.update = self.trainer.step // self.n
        self.result = RunResult(log_keys.ABORTED, self.trainer.step, self.trainer.samples)
        schedule = self.options.schedule
        self.live = LiveLine(every_s=max(60.0, schedule.progress_seconds))
        self.pace = CallPace(schedule.iterations_per_loop // self.n, schedule.progress_seconds,
                             timed=not _several_workers(run.placement.strategy))
        self.train_folder = os.path.join(self.options.output.output_dir, "train")
        self.paced_from: tuple[float, int] | None = None  # (time, samples) after compiling

    def train(self, iterator) -> RunResult:
        """Train from the distributed `iterator` and evaluate until the target or the budget;
        returns the result. Ctrl-C ends the progress line and raises Interrupted."""
        try:
            with interrupts.noticed():
                return self._train(iterator)
        except KeyboardInterrupt:
            self.live.close()
            raise Interrupted(self.trainer.step, self.manager.latest_checkpoint) from None

    def _train(self, iterator) -> RunResult:
        trainer = self.trainer
        if self.eval_data is not None and self.options.eval.at_start and trainer.samples == 0:
            if self._evaluate():
                return self._success()
        self._check_counters()
        while self.update < self.budget_updates:
            reached, save_due = self._block(iterator)
            if reached and self._evaluate():
                self._success()
                break
            if save_due and self.update < self.budget_updates:  # after the eval at this step
                save_finite_checkpoint(self.manager, trainer)
        self.live.close()
        with writing("--output_dir", self.train_folder):
            self.outputs.train_writer.flush()
        self.result.step, self.result.samples = trainer.step, trainer.samples
        retraced = trainer.retraced()
        if retraced:  # a changing shape: each retrace recompiles (XLA, TPU) and costs time
            logging.warning("step functions traced more than once: %s", retraced)
        return self.result

    def _check_counters(self) -> None:
        """Unpacked records: InternalError when the step and sample counters disagree (samples
        = updates x global batch), before anything is trained."""
        samples, update, batch = self.trainer.samples, self.update, self.batch
        if not self.run.inputs.packed and samples != update * batch:
            raise InternalError(f"step {self.trainer.step} with {samples} samples trained, "
                                f"where {update} updates of {batch} make {update * batch}: "
                                "the step and sample counters disagree")

    def _success(self) -> RunResult:
        self.trainer.target_reached.assign(1)
        self.result.status = log_keys.SUCCESS
        return self.result

    def _block(self, iterator) -> tuple[bool, bool]:
        """Train one block, up to the next eval or the budget, saving checkpoints on the way;
        returns whether the eval is due and whether a checkpoint is (one not saved before
        the eval)."""
        trainer, log = self.trainer, self.outputs.log
        first = trainer.samples
        frequency = self.options.eval.frequency
        eval_due = cadence.next_eval_index(first, frequency) * frequency \
            if self.eval_data is not None else None
        started_ms = log.now_ms()
        if not self.run.inputs.packed:  # whole updates of `batch` samples, up to the eval
            expected = (self.budget_updates - self.update) * self.batch
            if eval_due is not None:
                expected = min(expected, cadence.rounded_to_step(eval_due - first, self.batch))
            log.block_start(first, expected)
        save_due = reached = False
        while self.update < self.budget_updates and not reached:
            reached, passed_save = self._host_call(iterator, eval_due)
            interrupts.raise_if_pressed()  # a Ctrl-C that Python dropped (reference.interrupts)
            save_due = save_due or passed_save
            if save_due and not reached and self.update < self.budget_updates:
                save_finite_checkpoint(self.manager, trainer)
                save_due = False
        if self.run.inputs.packed:  # a packed block's sample count is known once it is trained
            log.block_start(first, trainer.samples - first, started_ms)
        log.block_stop(first)
        self.outputs.log_file.check()
        return reached, save_due

    def _host_call(self, iterator, eval_due: int | None) -> tuple[bool, bool]:
        """One compiled call of up to --iterations_per_loop micro-steps, ending at the next
        checkpoint step or the eval; returns whether the eval is due and whether the call
        passed a checkpoint step."""
        trainer = self.trainer
        every = self.options.schedule.save_checkpoints_steps
        before, before_samples = trainer.step, trainer.samples
        to_save = every - before % every  # micro-steps to the next checkpoint step
        room = min(self.budget_updates - self.update, max(1, to_save // self.n))
        started = time.time()
        losses = trainer.train_steps(iterator, self.pace.updates(room), eval_due)
        self.phase.setting_up = False  # compiled, and it ran: what fails now is no set-up
        elapsed = max(time.time() - started, 1e-9)
        self.pace.took(losses["updates"], elapsed)
        if self.paced_from is None:  # the speed shown counts from the end of compilation
            self.paced_from = (time.time(), trainer.samples)
        self.update += losses["updates"]
        self._stop_if_diverged(losses, before)
        reached = eval_due is not None and trainer.samples >= eval_due
        self.live.update(self._progress_line(losses, eval_due, reached))
        values = {key: losses[key] for key in ("total_loss", "masked_lm_loss",
                                               "next_sentence_loss", "learning_rate")}
        values["samples_per_second"] = (trainer.samples - before_samples) / elapsed
        if self.options.compute.mixed_precision == "fp16":
            values.update(loss_scale=losses["loss_scale"],
                          skipped_updates=losses["skipped_updates"])
        write_scalars(self.outputs.train_writer, self.train_folder, trainer.step, values)
        return reached, trainer.step // every > before // every

    def _stop_if_diverged(self, losses: dict, before: int) -> None:
        """TrainingDiverged naming the step when the call that began after micro-step `before`
        gave non-finite values (`diverged`), before anything of that state is saved."""
        problem = diverged(losses, self.options.compute.mixed_precision == "fp16")
        if problem is None:
            return
        self.live.close()
        steps = self.trainer.step - before
        over = f" (the mean of steps {before + 1}..{self.trainer.step})" if steps > 1 else ""
        raise TrainingDiverged(
            f"training diverged at step {self.trainer.step}: {problem}{over}; stopped without "
            f"saving it (last checkpoint: {self.manager.latest_checkpoint or 'none'}; a lower "
            "--learning_rate, or the data, may be the cause)")

    def _evaluate(self) -> bool:
        """Evaluate, log and write the eval; returns whether it reached the target."""
        trainer, log = self.trainer, self.outputs.log
        samples = trainer.samples
        log.eval_start(samples)
        started = time.time()
        metrics = self.run.evaluate(self.eval_data)
        log.eval_stop(samples)
        log.eval_accuracy(samples, metrics["masked_lm_accuracy"])
        self.result.evals.append((samples, metrics))
        target = self.options.eval.target_accuracy
        self.live.keep(eval_line(len(self.result.evals), trainer.step, samples, metrics,
                                  target, time.time() - started))
        if self.run.placement.chief:
            write_eval(self.options.output.output_dir, trainer.step, samples, metrics,
                       self.outputs.eval_writer)
        self.outputs.log_file.check()
        return metrics["masked_lm_accuracy"] >= target

    def _progress_line(self, losses: dict, eval_due: int | None, eval_now: bool) -> str:
        """The live line: step, samples, speed since compilation ended (samples/s), loss,
        learning rate, time to the next eval (or, without evals, to the step budget), the time
        to the target (`time_to_target`), the accuracy of the last eval; with fp16 the loss
        scale."""
        trainer, evals = self.trainer, self.result.evals
        since, first = self.paced_from or (0.0, trainer.samples)
        speed = (trainer.samples - first) / max(time.time() - since, 1e-9) \
            if trainer.samples > first else None
        to_budget = (self.budget_updates - self.update) * self.batch
        pace = f"{speed:,.1f} samples/s" if speed else "measuring the pace"
        if eval_now:
            ahead = "eval now"
        elif eval_due is not None and eval_due - trainer.samples < to_budget:
            ahead = (f"next eval in {duration((eval_due - trainer.samples) / speed)}"
                     if speed else "next eval") + f" (at {eval_due:,})"
        else:
            ahead = f"step budget in {duration(to_budget / speed)}" if speed else ""
        if self.eval_data is not None and not eval_now and speed:
            points = [(samples, metrics["masked_lm_accuracy"]) for samples, metrics in evals]
            eta = time_to_target(points, self.options.eval.target_accuracy, trainer.samples,
                                 trainer.samples + to_budget, speed)
            # No eval before the budget: the ETA names the budget itself.
            ahead = eta if ahead.startswith("step budget") else f"{ahead} | {eta}"
        last = f" | last eval {evals[-1][1]['masked_lm_accuracy']:.4f}" if evals else ""
        scale = (f" | loss scale {losses['loss_scale']:g}, {losses['skipped_updates']} updates "
                 "skipped" if self.options.compute.mixed_precision == "fp16" else "")
        parts = [f"step {trainer.step:,}/{self.options.budget_steps:,}",
                 f"{trainer.samples:,} samples", pace, f"loss {losses['total_loss']:.4f}",
                 f"lr {losses['learning_rate']:.3g}", ahead]
        return " | ".join(part for part in parts if part) + last + scale
