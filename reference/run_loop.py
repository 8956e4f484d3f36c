"""The run of `python -m reference.run_pretraining`: an MLPerf training run with evals at the
benchmark's cadence (`train`), or one evaluation (`evaluate_only`), from preflighted RunOptions
(reference/run_options.py, reference/preflight.py). See run_pretraining's docstring for what a
run does, writes and logs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

from absl import logging

from benchmark import cadence, log_keys
from reference.console import LiveLine
from reference.error_text import SetupError, tensorflow_failure, writing
from reference.preflight import peek_progress, prepare_output_dir
from reference.run_flags import UsageError
from reference.run_options import RunOptions, resumed_options, run_settings


class InternalError(RuntimeError):
    """A state the trainer must never be in (a bug, or counters crafted by hand); one line."""


@dataclass
class RunResult:
    """What a run did: status ("success", "aborted", "evaluated", "already-finished"), the
    global step and samples at the end, and every eval as (samples, metrics)."""
    status: str
    step: int
    samples: int
    evals: list[tuple[int, dict[str, float]]] = field(default_factory=list)


def _save(manager, step: int) -> None:
    """Save checkpoint `<name>-<step>`; a write that fails (e.g. a full disk) is an OutputError
    (the incomplete checkpoint is skipped when the run is started again)."""
    from reference.trainer import CHECKPOINT_NAME
    with writing("--output_dir", os.path.join(manager.directory, f"{CHECKPOINT_NAME}-{step}")):
        manager.save(checkpoint_number=step)


EVAL_HISTORY = "eval_history.csv"  # every eval of the run, beside eval_results.txt (the last)


def _write_eval_results(output_dir: str, step: int, samples: int,
                        metrics: dict[str, float]) -> None:
    """eval_results.txt (the last eval, written whole) and one row of eval_history.csv
    (global_step, samples, then the metrics in name order; the header with the first row)."""
    import tensorflow as tf
    path = os.path.join(output_dir, "eval_results.txt")
    lines = [f"global_step = {step}"] + [f"{key} = {metrics[key]}" for key in sorted(metrics)]
    partial = f"{path}.partial-{os.getpid()}"  # written whole, then renamed over the old one
    history = os.path.join(output_dir, EVAL_HISTORY)
    with writing("--output_dir", path):
        with tf.io.gfile.GFile(partial, "w") as out:
            out.write("\n".join(lines) + "\n")
        tf.io.gfile.rename(partial, path, overwrite=True)
        new = not tf.io.gfile.exists(history)
        with tf.io.gfile.GFile(history, "a") as out:
            if new:
                out.write(",".join(["global_step", "samples", *sorted(metrics)]) + "\n")
            out.write(",".join([str(step), str(samples)] +
                               [repr(float(metrics[key])) for key in sorted(metrics)]) + "\n")
    logging.debug("eval results (%s): %s", path, ", ".join(lines))


def _scalars(writer, step: int, values: dict[str, float]) -> None:
    """TensorBoard scalars as Summary simple_values (what TensorBoard's scalar readers and
    EventAccumulator.Scalars list; tf.summary.scalar writes tensors)."""
    import tensorflow as tf
    summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag=tag,
                                                                     simple_value=float(value))
                                          for tag, value in values.items()])
    with writer.as_default(step=step):
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)


def _platform(options: RunOptions, strategy) -> str:
    if options.submission_platform:
        return options.submission_platform
    kind = "TPU" if options.strategy.use_tpu else "GPU" if options.strategy.num_gpus else "CPU"
    return f"{strategy.num_replicas_in_sync}x{kind}"


def packed_rows_per_replica(train_batch_size: int, sequences_per_row: float,
                            replicas: int) -> int:
    """Packed rows each replica takes per micro-step: round(train_batch_size / mean sequences
    per row) rows in all (at least one per replica), so that a step trains about
    `train_batch_size` sequences."""
    return max(1, round(train_batch_size / sequences_per_row / replicas))


class _Phase:
    """Whether a run is still being set up: until its first compiled training call returns
    (an eval-only run: until it ends)."""

    def __init__(self) -> None:
        self.setting_up = True


@contextlib.contextmanager
def _setup_failures(phase: _Phase):
    """A TensorFlow error or MemoryError raised while `phase` is setting up becomes SetupError
    (one line, the error as its cause); later ones keep their traceback (a bug, or damaged data
    that run_pretraining locates)."""
    import tensorflow as tf
    try:
        yield
    except (tf.errors.OpError, MemoryError) as err:
        if not phase.setting_up:
            raise
        raise SetupError(f"setting up the run failed: {tensorflow_failure(err)}") from err


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
        self.packed = options.train_layout is not None and options.train_layout.packed
        if self.packed:
            self.train_per_replica = packed_rows_per_replica(
                options.train_batch_size, options.sequences_per_row,
                self.strategy.num_replicas_in_sync)
        else:
            self.train_per_replica = distribution.per_replica(
                options.train_batch_size, self.strategy, "--train_batch_size")
        self.eval_per_replica = distribution.per_replica(options.eval_batch_size,
                                                         self.strategy, "--eval_batch_size")
        logging.info("%s; global batch %d (%d %s per replica x %d micro-batches)",
                     distribution.describe(self.strategy), options.global_batch_size,
                     self.train_per_replica, "packed rows" if self.packed else "records",
                     options.steps_per_update)

    def build_trainer(self):
        from reference.trainer import Trainer, set_mixed_precision
        options = self.options
        set_mixed_precision(options.mixed_precision)
        config = options.bert_config
        if options.dropout_override is not None:
            config = dataclasses.replace(config, hidden_dropout_prob=options.dropout_override,
                                         attention_probs_dropout_prob=options.dropout_override)
        self.tf.random.set_seed(options.seed)
        self.trainer = Trainer(self.strategy, config, options.optimizer,
                               options.train_batch_size, options.steps_per_update,
                               options.clip_after_allreduce, options.mixed_precision,
                               options.use_xla, options.recompute_layers,
                               options.masked_lm_block_rows, packed=self.packed)
        return self.trainer

    # -------------------------------------------------------------- datasets
    def eval_dataset(self):
        from reference import input_pipeline
        options = self.options
        count = options.eval_count
        records = count.rows if count else options.eval_records
        padded = input_pipeline.padded_eval_size(records, options.eval_batch_size)
        self.eval_steps = padded // options.eval_batch_size

        def dataset_fn(context):
            return input_pipeline.eval_dataset(
                options.eval_files, self.eval_per_replica, records, padded,
                options.eval_layout, context,
                last_row_sequences=count.last_row_sequences if count else None)

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
                options.input_files, self.train_per_replica, options.train_layout,
                options.seed, options.steps_per_update, context,
                skip_batches=consumed_steps * replicas_fed, id_ranges=options.id_ranges)

        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    # -------------------------------------------------------------- outputs
    def summary_writer(self, folder: str):
        """The TensorBoard writer of OUTPUT_DIR/<folder> (the chief's; others write none)."""
        if not self.chief:
            return self.tf.summary.create_noop_writer()
        path = os.path.join(self.options.output_dir, folder)
        with writing("--output_dir", path):
            return self.tf.summary.create_file_writer(path)

    def write_eval(self, step: int, samples: int, metrics: dict[str, float], writer) -> None:
        """An eval's outputs: eval_results.txt, a row of eval_history.csv and the summaries of
        `writer` (OUTPUT_DIR/eval)."""
        _write_eval_results(self.options.output_dir, step, samples, metrics)
        with writing("--output_dir", os.path.join(self.options.output_dir, "eval")):
            _scalars(writer, step, metrics)
            writer.flush()

    def evaluate(self, dataset) -> dict[str, float]:
        """The metrics of one eval over the run's eval steps (its callers time and report it)."""
        return self.trainer.evaluate(dataset, self.eval_steps)


def evaluate_only(options: RunOptions, strategy=None) -> RunResult:
    """--do_eval --nodo_train: one eval of --init_checkpoint or the latest checkpoint.

    strategy: the tf.distribute strategy (default: made from options.strategy). A TensorFlow
    error on the way is a SetupError.
    """
    with _setup_failures(_Phase()):
        return _evaluate_only(options, strategy)


def _evaluate_only(options: RunOptions, strategy=None) -> RunResult:
    from reference import checkpoint as ckpt
    from reference.trainer import CHECKPOINT_NAME
    run = _Run(options, strategy)
    tf = run.tf
    prepare_output_dir(options.output_dir)
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
    started = time.time()
    metrics = run.evaluate(run.eval_dataset())
    logging.info("eval of %d records in %.1f s: masked_lm_accuracy %.5f, masked_lm_loss %.4f, "
                 "next_sentence_accuracy %.4f", options.eval_records, time.time() - started,
                 metrics["masked_lm_accuracy"], metrics["masked_lm_loss"],
                 metrics["next_sentence_accuracy"])
    if run.chief:
        run.write_eval(trainer.step, trainer.samples, metrics, run.summary_writer("eval"))
    return RunResult("evaluated", trainer.step, trainer.samples, [(trainer.samples, metrics)])


def train(options: RunOptions, strategy=None) -> RunResult:
    """--do_train [--do_eval]: an MLPerf run (see reference.run_pretraining's docstring).

    strategy: the tf.distribute strategy (default: made from options.strategy).
    Raises UsageError (before anything is logged) when OUTPUT_DIR holds a checkpoint of a run
    with other run-defining settings, OutputError when an output cannot be written, and
    InternalError when the training loop would not advance, and SetupError for a TensorFlow
    error before the first compiled training call has returned; an error after run_start ends
    the MLPerf log with run_stop "aborted" first.
    """
    phase = _Phase()
    with _setup_failures(phase):
        return _train(options, strategy, phase)


def _train(options: RunOptions, strategy, phase: _Phase) -> RunResult:
    from benchmark.mlperf_log import BertLogger, Hyperparameters
    from reference import checkpoint as ckpt
    from reference.run_log import LogFile
    from reference.trainer import CHECKPOINT_NAME, worker_checkpoint_dir

    run = _Run(options, strategy)
    prepare_output_dir(options.output_dir)
    # The newest checkpoint that reads back whole: a kill mid-save, or a damaged file, makes
    # the run resume from the one before (each skipped one is named in a warning).
    latest, skipped = ckpt.latest_complete_checkpoint(options.output_dir, CHECKPOINT_NAME)
    progress = None
    if latest:
        progress = peek_progress(latest)
        options = run.options = resumed_options(options, progress.settings, latest)
    n = options.steps_per_update
    batch = options.global_batch_size
    budget_updates = options.budget_steps // n
    if run.chief:
        with writing("--output_dir", options.output_dir):
            ckpt.remove_orphan_save_folders(options.output_dir, CHECKPOINT_NAME)
    if progress and (progress.reached or progress.step >= options.budget_steps):
        why = "reached the target" if progress.reached else \
            f"used its step budget ({options.budget_steps})"
        logging.warning("%s already %s at step %d (%d samples); nothing to train", latest, why,
                        progress.step, progress.samples)
        return RunResult("already-finished", progress.step, progress.samples)

    division = options.submission_division
    if options.noncompliant and division == "closed":
        logging.warning("not a closed-division run (%s): logging it as open division",
                        "; ".join(options.noncompliant))
        division = "open"

    # Before the log is opened: a folder that cannot be written stops the run unlogged.
    summaries, eval_summaries = run.summary_writer("train"), run.summary_writer("eval")
    log_file = LogFile(options.mlperf_log, sys.stdout if options.mlperf_log_to_console else None) \
        if run.chief else LogFile(None)
    log = BertLogger(stream=log_file)
    result = RunResult(log_keys.ABORTED, 0, 0)
    run_started = run_stopped = False
    try:
        log.submission(org=options.submission_org, platform=_platform(options, run.strategy),
                       division=division, status=options.submission_status)
        log.cache_clear()
        log_file.check()  # a log that cannot be written stops the run before init_start
        log.init_start()
        for reason in options.noncompliant:
            logging.warning("non-compliant: %s", reason)
            log.event(log_keys.NONCOMPLIANT, reason)
        log.event(log_keys.TARGET_ACCURACY, options.target_mlm_accuracy)
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
            log.event(log_keys.RESUME, None, resume)
            if options.init_checkpoint:
                logging.warning("--init_checkpoint ignored: resuming from %s", latest)
        else:
            trainer.set_seed(options.seed)
            if options.init_checkpoint:
                names = trainer.load_initial_checkpoint(options.init_checkpoint)
                log.weights_initialization(ckpt.restored_tensor_names(names))
            else:
                logging.warning("no --init_checkpoint: training starts from random weights "
                                "(the benchmark starts from model.ckpt-28252)")
                trainer.initialize_weights(options.seed)
        trainer.set_run_settings(json.dumps(run_settings(options)))
        for key, value in ((log_keys.OPT_NAME, options.optimizer.name),
                           (log_keys.MAX_SEQUENCE_LENGTH, options.max_seq_length),
                           (log_keys.MAX_PREDICTIONS_PER_SEQ, options.max_predictions_per_seq),
                           (log_keys.OPT_LAMB_LR_DECAY_POLY_POWER, options.optimizer.poly_power),
                           (log_keys.MIXED_PRECISION, options.mixed_precision)):
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
                             budget_updates, summaries, eval_summaries, phase)
        log.train_samples(trainer.samples)
        log.run_stop(result.status)
        run_stopped = True
        log_file.check()
        _save(manager, trainer.step)
        logging.debug("run %s at step %d, %d samples; checkpoint %s", result.status,
                      trainer.step, trainer.samples, manager.latest_checkpoint)
    except BaseException:
        if run_started and not run_stopped:  # whatever stopped it, the log says the run ended
            log.run_stop(log_keys.ABORTED)
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
                budget_updates: int, summaries, eval_summaries, phase: _Phase) -> RunResult:
    """Train from the trainer's step to the budget, in blocks that end at each eval: the first
    update at whose end the samples trained reach the next multiple of the eval interval (with
    packed rows an update's sample count varies, so the eval falls a few sequences after it,
    and each block is logged when it is trained, with its true sample count and start time).

    Unpacked records: a step and sample count that disagree (samples = updates x global batch)
    raise InternalError before anything is trained.
    """
    trainer = run.trainer
    n = options.steps_per_update
    batch = options.global_batch_size
    frequency = options.eval_frequency
    result = RunResult(log_keys.ABORTED, trainer.step, trainer.samples)
    train_folder = os.path.join(options.output_dir, "train")

    live = LiveLine(every_s=max(60.0, options.progress_seconds))

    def do_eval() -> bool:
        samples = trainer.samples
        log.eval_start(samples)
        started = time.time()
        metrics = run.evaluate(eval_data)
        log.eval_stop(samples)
        log.eval_accuracy(samples, metrics["masked_lm_accuracy"])
        result.evals.append((samples, metrics))
        reached = metrics["masked_lm_accuracy"] >= options.target_mlm_accuracy
        live.keep(_eval_line(len(result.evals), trainer.step, samples, metrics,
                             options.target_mlm_accuracy, time.time() - started))
        if run.chief:
            run.write_eval(trainer.step, samples, metrics, eval_summaries)
        log_file.check()
        return reached

    if eval_data is not None and options.eval_at_start and trainer.samples == 0:
        if do_eval():
            trainer.target_reached.assign(1)
            result.status = log_keys.SUCCESS
            return result

    update = trainer.step // n
    if not run.packed and trainer.samples != update * batch:
        raise InternalError(f"step {trainer.step} with {trainer.samples} samples trained, where "
                            f"{update} updates of {batch} make {update * batch}: the step and "
                            "sample counters disagree")
    pace = _CallPace(options.iterations_per_loop // n, options.progress_seconds)
    run_started = time.time()
    first_samples = trainer.samples
    every = options.save_checkpoints_steps
    while update < budget_updates:
        block_first = trainer.samples
        eval_due = cadence.next_eval_index(block_first, frequency) * frequency \
            if eval_data is not None else None
        block_started_ms = log.now_ms()
        if not run.packed:  # a whole number of updates of `batch` samples, up to the eval
            expected = (budget_updates - update) * batch
            if eval_due is not None:
                expected = min(expected, cadence.rounded_to_step(eval_due - block_first, batch))
            log.block_start(block_first, expected)
        save_due = reached = False
        while update < budget_updates and not reached:
            before, before_samples = trainer.step, trainer.samples
            to_save = every - trainer.step % every  # micro-steps to the next checkpoint step
            started = time.time()
            losses = trainer.train_steps(
                iterator, pace.updates(min(budget_updates - update, max(1, to_save // n))),
                eval_due)
            phase.setting_up = False  # compiled, and it ran: what fails now is no set-up
            elapsed = max(time.time() - started, 1e-9)
            pace.took(losses["updates"], elapsed)
            update += losses["updates"]
            reached = eval_due is not None and trainer.samples >= eval_due
            rate = (trainer.samples - before_samples) / elapsed
            overall = (trainer.samples - first_samples) / max(time.time() - run_started, 1e-9)
            live.update(_progress_line(options, trainer, losses, overall, update, eval_due,
                                       budget_updates, result.evals, reached))
            values = {key: losses[key] for key in ("total_loss", "masked_lm_loss",
                                                   "next_sentence_loss", "learning_rate")}
            values["samples_per_second"] = rate
            if options.mixed_precision == "fp16":
                values.update(loss_scale=losses["loss_scale"],
                              skipped_updates=losses["skipped_updates"])
            with writing("--output_dir", train_folder):
                _scalars(summaries, trainer.step, values)
            save_due = save_due or trainer.step // every > before // every
            if save_due and not reached and update < budget_updates:
                _save(manager, trainer.step)
                save_due = False
        if run.packed:  # a packed block's sample count is known once it is trained
            log.block_start(block_first, trainer.samples - block_first, block_started_ms)
        log.block_stop(block_first)
        log_file.check()
        if reached and do_eval():
            trainer.target_reached.assign(1)
            result.status = log_keys.SUCCESS
            break
        if save_due and update < budget_updates:  # after the eval at the same step
            _save(manager, trainer.step)
    live.close()
    with writing("--output_dir", train_folder):
        summaries.flush()
    result.step, result.samples = trainer.step, trainer.samples
    retraced = trainer.retraced()
    if retraced:  # a changing shape: each retrace recompiles (XLA, TPU) and costs time
        logging.warning("step functions traced more than once: %s", retraced)
    return result


class _CallPace:
    """How many updates the next compiled host call runs: at most `most` (the
    --iterations_per_loop of the reference), fewer when that would take longer than
    `seconds` at the pace measured so far, so that a progress line comes every few seconds.
    The call boundaries change no result: every update runs in the same order, dropout is
    keyed by the micro-step, and calls end at checkpoint steps whatever their length."""

    def __init__(self, most: int, seconds: float) -> None:
        self.most, self.seconds = max(1, most), seconds
        self.per_update: float | None = None
        self.calls = 0

    def updates(self, room: int) -> int:
        """The updates of the next call, at most `room` (the budget, the next checkpoint)."""
        if self.per_update is None:  # the first call compiles: one update, then measure
            return max(1, min(room, 1 if self.calls == 0 else self.most))
        fits = max(1, int(self.seconds / max(self.per_update, 1e-9)))
        return max(1, min(room, self.most, fits))

    def took(self, updates: int, seconds: float) -> None:
        """Record that a call of `updates` updates took `seconds` (the first is compilation)."""
        self.calls += 1
        if self.calls > 1 and updates:
            self.per_update = seconds / updates


def _eval_line(number: int, step: int, samples: int, metrics: dict[str, float],
               target: float, seconds: float) -> str:
    """The console line of eval `number`: where, the accuracy against the target, how long."""
    accuracy = metrics["masked_lm_accuracy"]
    verdict = "target reached" if accuracy >= target else f"target {target:.3f}"
    return (f"eval {number} at step {step:,} ({samples:,} samples): masked_lm_accuracy "
            f"{accuracy:.4f} ({verdict}), masked_lm_loss {metrics['masked_lm_loss']:.4f}, "
            f"{seconds:.1f} s")


def _progress_line(options: RunOptions, trainer, losses: dict, overall: float, update: int,
                   eval_due: int | None, budget_updates: int,
                   evals: list[tuple[int, dict[str, float]]], eval_now: bool) -> str:
    """The live line: step, samples, speed since the start of this process (samples/s),
    loss, learning rate, time to the next eval (or, without evals, to the step budget), the
    accuracy of the last eval; with fp16 the loss scale."""
    to_budget = (budget_updates - update) * options.global_batch_size
    if eval_now:
        ahead = "eval now"
    elif eval_due is not None and eval_due - trainer.samples < to_budget:
        ahead = (f"next eval in {_duration((eval_due - trainer.samples) / max(overall, 1e-9))} "
                 f"(at {eval_due:,})")
    else:
        ahead = f"step budget in {_duration(to_budget / max(overall, 1e-9))}"
    last = f" | last eval {evals[-1][1]['masked_lm_accuracy']:.4f}" if evals else ""
    scale = (f" | loss scale {losses['loss_scale']:g}, {losses['skipped_updates']} updates "
             "skipped"
             if options.mixed_precision == "fp16" else "")
    return (f"step {trainer.step:,}/{options.budget_steps:,} | {trainer.samples:,} samples | "
            f"{overall:,.1f} samples/s | loss {losses['total_loss']:.4f} | lr "
            f"{losses['learning_rate']:.3g} | {ahead}{last}{scale}")
