"""Preflight: the checks of a run's files before TensorFlow trains anything, and what they
found (`CheckedInputs`: the BERT config, the training and eval records).

Also the output folder's write check (`prepare_output_dir`) and, after reading the data failed
mid-run, the scan that names the bad record (`locate_bad_record`).
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from absl import logging

from benchmark import constants
from benchmark.capacity import host_memory_bytes
from reference.error_text import writing
from reference.run_flags import UsageError, require
from reference.run_options import RunOptions

if TYPE_CHECKING:  # TensorFlow-importing modules are imported where used (fast --help)
    from cleanup_scripts.records.pretraining_features import RecordLayout
    from reference.bert_config import BertConfig
    from reference.input_pipeline import IdRanges, PackedCount

# Bytes a record takes once parsed: every value an int32 (or float32) of 4 bytes.
VALUE_BYTES = 4


@dataclass(frozen=True)
class TrainRecords:
    """The training files, expanded in order, and what their records hold."""
    files: tuple[str, ...]
    layout: RecordLayout  # packed or not, the shapes
    sequences_per_row: float  # packed: the mean over the first rows; else 1.0


@dataclass(frozen=True)
class EvalRecords:
    """The eval files, expanded in order, and how much of them is evaluated."""
    files: tuple[str, ...]
    layout: RecordLayout
    sequences: int  # sequences evaluated: at most eval batch size x max eval steps
    packed_count: PackedCount | None  # packed: the rows that hold those sequences

    @property
    def rows(self) -> int:
        """The records (rows) read to evaluate `sequences`."""
        return self.packed_count.rows if self.packed_count else self.sequences


@dataclass(frozen=True)
class CheckedInputs:
    """What preflight found in the files that a run's options name."""
    bert_config: BertConfig  # --bert_config_file, read (the dropout override not applied)
    id_ranges: IdRanges  # the table sizes that token and type ids index
    train: TrainRecords | None  # None without --do_train
    eval: EvalRecords | None  # None when nothing is evaluated
    noncompliant: tuple[str, ...]  # reasons in the files that the run is not closed-division

    @property
    def packed(self) -> bool:
        """Whether the training records are packed rows."""
        return self.train is not None and self.train.layout.packed


def preflight(options: RunOptions) -> CheckedInputs:
    """Check the files that `options` name: read the BERT config, check that a step fits in
    this machine's memory (`check_memory`), expand --input_file / --eval_file and check their
    records (the first record of every training file, every eval record evaluated), and probe
    --init_checkpoint. First of all, a link planted where the run writes in --output_dir (or
    a --mlperf_log that is a link or a FIFO) is refused (`run_outputs.check_outputs`).

    Raises UsageError, InputError, ConfigError or CheckpointError with a one-line message.
    """
    from reference import input_pipeline
    from reference.bert_config import load_bert_config
    from reference.run_outputs import check_outputs

    o = options
    check_outputs(o.output.output_dir, o.output.mlperf_log)
    config = load_bert_config(o.model.bert_config_file)
    seq, predictions = o.data.max_seq_length, o.data.max_predictions_per_seq
    require(2 <= seq <= config.max_position_embeddings,
            f"--max_seq_length={seq} must be in [2, max_position_embeddings="
            f"{config.max_position_embeddings}] of {o.model.bert_config_file}")
    require(1 <= predictions <= seq,
            f"--max_predictions_per_seq={predictions} must be in [1, --max_seq_length]")
    check_memory(o, config, host_memory_bytes(), runs_on_cpu(o))

    id_ranges = input_pipeline.IdRanges(config.vocab_size, config.type_vocab_size)
    train = _check_train_files(o, id_ranges) if o.do_train else None
    eval_files = input_pipeline.expand_patterns(o.eval.patterns, o.eval.flag) \
        if o.eval.patterns else []
    evaluated = _check_eval_files(o, eval_files, id_ranges) if eval_files else None
    noncompliant = ()
    if evaluated and o.do_train and evaluated.sequences != constants.EVAL_SAMPLES:
        # A closed-division BERT run evaluates the 10,000 samples of eval_10k (the reference
        # README; benchmark.rules' bert/eval-samples holds a log to it). Fewer, packed or not,
        # make the run open division, logged with the reason as every other non-benchmark
        # setting of the run's data and target is (the demo's 500-record evals): one rule for
        # both layouts, not a refusal for one and a downgrade for the other.
        what = "sequences" if evaluated.layout.packed else "records"
        noncompliant = (f"the eval covers {evaluated.sequences:,} {what}, not the benchmark's "
                        f"{constants.EVAL_SAMPLES:,}",)
    if o.model.init_checkpoint:
        _check_init_checkpoint(o)
    if o.do_train:
        check_output_dir_holds_no_input(o.output.output_dir, [
            ("--input_file", train.files), (o.eval.flag, eval_files),
            ("--init_checkpoint", [o.model.init_checkpoint] if o.model.init_checkpoint else [])])
    return CheckedInputs(config, id_ranges, train, evaluated, noncompliant)


def _resolved(path: str) -> str:
    """`path` with links and `..` resolved (local), or without a trailing / (gs://...)."""
    return path.rstrip("/") if "://" in path else os.path.realpath(path)


def check_output_dir_holds_no_input(output_dir: str, inputs: list[tuple[str, list[str]]]
                                    ) -> None:
    """UsageError naming the flag and file when a training run's --output_dir is, or holds
    (after resolving links), one of its inputs (`inputs`: (flag, paths) pairs; a checkpoint
    by its prefix): the run writes checkpoints, logs and summaries there, which a pattern or
    a resume would take for its own, and a data folder is no place for them."""
    folder = _resolved(output_dir)
    for flag, paths in inputs:
        for path in paths:
            resolved = _resolved(path)
            if resolved == folder or resolved.startswith(folder.rstrip("/") + "/"):
                raise UsageError(f"--output_dir={output_dir}: holds {path} of {flag}; a "
                                 "training run writes into a folder of its own")


def _check_train_files(o: RunOptions, id_ranges: IdRanges) -> TrainRecords:
    """The training files, their layout (from the records) and the first record of each
    checked; packed rows: the mean sequences per row."""
    from reference import input_pipeline
    files = input_pipeline.expand_patterns(o.data.patterns, "--input_file")
    layout = input_pipeline.detect_layout(files, o.data.max_seq_length,
                                          o.data.max_predictions_per_seq, "--input_file")
    input_pipeline.check_first_records(files, layout, "--input_file", id_ranges)
    sequences_per_row = 1.0
    if layout.packed:
        sequences_per_row = input_pipeline.mean_sequences_per_row(files, layout)
        logging.info("--input_file: %s, %.3f sequences per row", layout.describe(),
                     sequences_per_row)
    return TrainRecords(tuple(files), layout, sequences_per_row)


def _check_init_checkpoint(o: RunOptions) -> None:
    """CheckpointError unless --init_checkpoint is an official checkpoint (or, evaluating
    only, any checkpoint, which is read when evaluated)."""
    from reference import checkpoint as ckpt
    try:
        ckpt.checkpoint_format(o.model.init_checkpoint)
    except ckpt.CheckpointError:
        if o.do_train or not _checkpoint_exists(o.model.init_checkpoint):
            raise


def runs_on_cpu(o: RunOptions) -> bool:
    """Whether the model runs on this machine's CPU (no TPU, no GPU that TensorFlow sees), so
    that its activations and weights take this machine's memory too."""
    if o.distribution.strategy.use_tpu:
        return False
    import tensorflow as tf
    return not tf.config.list_physical_devices("GPU")


def _model_weights(config) -> int:
    """A lower bound on the model's weights: embedding tables, and each layer's attention
    (4 H x H) and feed-forward (2 H x I) matrices; biases, norms and heads left out."""
    h = config.hidden_size
    embeddings = (config.vocab_size + config.max_position_embeddings
                  + config.type_vocab_size) * h
    return embeddings + config.num_hidden_layers * (4 * h * h + 2 * h * config.intermediate_size)


def _activations_per_record(o: RunOptions, config, training: bool) -> int:
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


def check_memory(o: RunOptions, config, available: int, on_cpu: bool) -> None:
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


def _check_eval_files(o: RunOptions, files: list[str], id_ranges: IdRanges) -> EvalRecords:
    """The eval files' layout, the sequences evaluated (at most eval_batch_size x
    max_eval_steps, the first ones in file order) and, packed, the rows that hold them; every
    record read is checked now, so that a damaged eval set fails before training."""
    from reference import input_pipeline
    flag = o.eval.flag
    layout = input_pipeline.detect_layout(files, o.data.max_seq_length,
                                          o.data.max_predictions_per_seq, flag)
    input_pipeline.check_first_records(files, layout, flag)
    wanted = o.eval.batch_size * o.eval.max_steps
    count = None
    rows = wanted
    if layout.packed:
        count = input_pipeline.count_packed(files, layout, limit=wanted, flag=flag)
        rows = count.rows
    checked = input_pipeline.check_all_records(files, layout, flag, limit=rows,
                                               id_ranges=id_ranges)
    sequences = count.sequences if count else checked
    if sequences < wanted:
        logging.info("eval files hold %d sequences (< eval_batch_size * max_eval_steps = %d): "
                     "all of them are evaluated once", sequences, wanted)
    return EvalRecords(tuple(files), layout, sequences, count)


def _checkpoint_exists(path: str) -> bool:
    import tensorflow as tf
    if tf.io.gfile.isdir(path):
        return tf.train.latest_checkpoint(path) is not None
    return tf.io.gfile.exists(path + ".index")


def prepare_output_dir(output_dir: str) -> None:
    """Create --output_dir and write (then delete) a file in it, so that a folder that cannot
    be written fails at once, in one line, before anything is logged."""
    import tensorflow as tf
    probe = os.path.join(output_dir, f".write-check-{uuid.uuid4().hex}")
    with writing("--output_dir", output_dir):
        tf.io.gfile.makedirs(output_dir)
        with tf.io.gfile.GFile(probe, "w") as handle:
            handle.write("")
        tf.io.gfile.remove(probe)


def locate_bad_record(options: RunOptions, inputs: CheckedInputs) -> str | None:
    """After reading the data failed mid-run: where and why, or None if every record is fine
    (framing, shapes and id ranges).

    Scans the records evaluated (named by options.eval.flag) and then every training record, in
    file order; returns "<flag>: <file>: record <index>: <problem>" for the first bad one.
    """
    from reference import input_pipeline
    scans = []
    if inputs.eval:
        scans.append((options.eval.flag, inputs.eval, inputs.eval.rows))
    if inputs.train:
        scans.append(("--input_file", inputs.train, None))
    for flag, records, limit in scans:
        logging.warning("reading the data failed: checking every record of %s (%d files)",
                        flag, len(records.files))
        bad = input_pipeline.find_bad_record(list(records.files), records.layout, limit,
                                             inputs.id_ranges)
        if bad:
            return f"{flag}: {bad}"
    return None
