"""Preflight: the checks of a run's files before TensorFlow trains anything.

`preflight` reads the BERT config, checks that a training and an eval step can fit in this
machine's memory (`check_memory`), expands --input_file / --eval_file and checks their records
(the first record of every training file, every eval record evaluated), and probes
--init_checkpoint; it returns the options with what those files hold. `prepare_output_dir`
proves --output_dir writable, `peek_progress` reads the counters and run settings of a
checkpoint to resume from, and `locate_bad_record` finds the record that made a run fail.
"""
from __future__ import annotations

import dataclasses
import json
import os
import uuid
from dataclasses import dataclass

from absl import logging

from benchmark import constants
from benchmark.errors import one_line
from reference.error_text import writing
from reference.run_flags import UsageError, require
from reference.run_options import RunOptions

# Bytes a record takes once parsed: every value an int32 (or float32) of 4 bytes.
VALUE_BYTES = 4


def preflight(options: RunOptions) -> RunOptions:
    """Check the files that `options` name; returns the options with the files expanded, the
    eval records counted and the BERT config read.

    Raises UsageError, InputError, ConfigError or CheckpointError with a one-line message.
    """
    from reference import checkpoint as ckpt
    from reference import input_pipeline
    from reference.bert_config import load_bert_config

    o = options
    config = load_bert_config(o.bert_config_file)
    require(2 <= o.max_seq_length <= config.max_position_embeddings,
            f"--max_seq_length={o.max_seq_length} must be in [2, max_position_embeddings="
            f"{config.max_position_embeddings}] of {o.bert_config_file}")
    require(1 <= o.max_predictions_per_seq <= o.max_seq_length,
            f"--max_predictions_per_seq={o.max_predictions_per_seq} must be in [1, "
            f"--max_seq_length]")
    check_memory(o, config, host_memory_bytes(), runs_on_cpu(o))

    id_ranges = input_pipeline.IdRanges(config.vocab_size, config.type_vocab_size)
    noncompliant = list(o.noncompliant)
    input_files: list[str] = []
    eval_files: list[str] = []
    train_layout = eval_layout = eval_count = None
    sequences_per_row = 1.0
    if o.do_train:
        input_files = input_pipeline.expand_patterns(o.input_file, "--input_file")
        train_layout = input_pipeline.detect_layout(input_files, o.max_seq_length,
                                                    o.max_predictions_per_seq, "--input_file")
        input_pipeline.check_first_records(input_files, train_layout, "--input_file", id_ranges)
        if train_layout.packed:
            sequences_per_row = input_pipeline.mean_sequences_per_row(input_files, train_layout)
            logging.info("--input_file: %s, %.3f sequences per row", train_layout.describe(),
                         sequences_per_row)
    if o.eval_file:
        eval_files = input_pipeline.expand_patterns(o.eval_file, o.eval_flag)
    eval_records = 0
    if eval_files:
        eval_layout, eval_records, eval_count = _check_eval_files(o, eval_files, id_ranges)
        if o.do_train and eval_records != constants.EVAL_SAMPLES:
            if eval_layout.packed and o.submission_division == "closed":
                raise UsageError(f"{o.eval_flag}: the packed eval files hold {eval_records:,} "
                                 f"sequences evaluated; a closed-division run evaluates the "
                                 f"{constants.EVAL_SAMPLES:,} of eval_10k (pack eval_10k alone)")
            # First, where options_from_flags' reasons come after it.
            noncompliant.insert(0, f"the eval covers {eval_records:,} records, not the "
                                f"benchmark's {constants.EVAL_SAMPLES:,}")

    if o.init_checkpoint:
        try:
            ckpt.checkpoint_format(o.init_checkpoint)
        except ckpt.CheckpointError:
            # --nodo_train may evaluate one of our own checkpoints (read when evaluating).
            if o.do_train or not _checkpoint_exists(o.init_checkpoint):
                raise
    return dataclasses.replace(o, input_files=input_files, eval_files=eval_files,
                               eval_records=eval_records, bert_config=config,
                               id_ranges=id_ranges, noncompliant=noncompliant,
                               train_layout=train_layout, eval_layout=eval_layout,
                               sequences_per_row=sequences_per_row, eval_count=eval_count)


def host_memory_bytes() -> int:
    """This machine's memory in bytes: its physical memory, or the cgroup's limit if lower (a
    container's)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read(64).strip()
        except (OSError, ValueError):
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def runs_on_cpu(o: RunOptions) -> bool:
    """Whether the model runs on this machine's CPU (no TPU, no GPU that TensorFlow sees), so
    that its activations and weights take this machine's memory too."""
    if o.strategy.use_tpu:
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
    seq, h = o.max_seq_length, config.hidden_size
    one_layer = seq * config.intermediate_size + config.num_attention_heads * seq * seq
    if not training:
        return seq * h + max(seq * config.intermediate_size,
                             config.num_attention_heads * seq * seq)
    layers = config.num_hidden_layers
    if o.recompute_layers:
        return (layers + 1) * seq * h + one_layer
    return (layers + 1) * seq * h + layers * one_layer


def check_memory(o: RunOptions, config, available: int, on_cpu: bool) -> None:
    """UsageError naming the flag when a training micro-step or an eval step cannot fit in
    `available` bytes, by a lower bound of what it needs: its records, parsed (the input
    pipeline holds them in this machine's memory); and, `on_cpu`, the activations that
    autodiff must keep (`_activations_per_record`) and the weights (with their gradients and
    two optimizer slots when training). The message says how many records would fit. An
    absurd batch (or a huge config) fails here, in one line, rather than after run_start as a
    TensorFlow shape or allocation error (which would take the machine's memory first).
    """
    record = (3 * o.max_seq_length + 3 * o.max_predictions_per_seq + 1) * VALUE_BYTES
    activation_bytes = 2 if o.mixed_precision != "none" else 4
    steps = [("train_batch_size", "a micro-step", o.train_batch_size, True, 4)] \
        if o.do_train else []
    steps.append(("eval_batch_size", "an eval step", o.eval_batch_size, False, 1))
    for flag, what, batch, training, copies in steps:
        per_record = record + (activation_bytes * _activations_per_record(o, config, training)
                               if on_cpu else 0)
        fixed = copies * _model_weights(config) * 4 if on_cpu else 0
        need = fixed + batch * per_record
        if need <= available:
            continue
        model = f"the {config.num_hidden_layers}-layer, hidden-{config.hidden_size} model"
        if fixed >= available:
            raise UsageError(f"--bert_config_file={o.bert_config_file}: the weights of {model} "
                             f"need at least {fixed / 1e9:.1f} GB of memory on the CPU, more "
                             f"than the {available / 1e9:.1f} GB this machine has")
        held = f"the records, and the activations and weights of {model} on the CPU" \
            if on_cpu else "its records, which the input pipeline holds in this machine's memory"
        raise UsageError(f"--{flag}={batch}: {what} of {batch:,} records of {o.max_seq_length} "
                         f"tokens needs at least {need / 1e9:.1f} GB of memory ({held}), more "
                         f"than the {available / 1e9:.1f} GB this machine has; at most "
                         f"{(available - fixed) // per_record:,} records fit")


def _check_eval_files(o: RunOptions, eval_files: list[str], id_ranges):
    """The eval files' layout, the sequences evaluated (at most eval_batch_size x
    max_eval_steps, the first ones in file order) and, packed, the rows that hold them; every
    record read is checked now, so that a damaged eval set fails before training."""
    from reference import input_pipeline
    layout = input_pipeline.detect_layout(eval_files, o.max_seq_length,
                                          o.max_predictions_per_seq, o.eval_flag)
    input_pipeline.check_first_records(eval_files, layout, o.eval_flag)
    wanted = o.eval_batch_size * o.max_eval_steps
    count = None
    rows = wanted
    if layout.packed:
        count = input_pipeline.count_packed(eval_files, layout, limit=wanted, flag=o.eval_flag)
        rows = count.rows
    checked = input_pipeline.check_all_records(eval_files, layout, o.eval_flag, limit=rows,
                                               id_ranges=id_ranges)
    sequences = count.sequences if count else checked
    if sequences < wanted:
        logging.info("eval files hold %d sequences (< eval_batch_size * max_eval_steps = %d): "
                     "all of them are evaluated once", sequences, wanted)
    return layout, sequences, count


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
        except ValueError as err:
            raise UsageError(f"--output_dir: {path}: its run settings do not read back "
                             f"({one_line(err)}); use a new --output_dir") from err
    return Progress(int(tensor("global_step") or 0), int(tensor("trained_samples") or 0),
                    bool(tensor("target_reached")), settings)


def locate_bad_record(options: RunOptions) -> str | None:
    """After reading the data failed mid-run: where and why, or None if every record is fine
    (framing, shapes and id ranges).

    Scans the records evaluated (named by options.eval_flag) and then every training record, in
    file order; returns "<flag>: <file>: record <index>: <problem>" for the first bad one.
    """
    from reference import input_pipeline
    eval_rows = options.eval_count.rows if options.eval_count else options.eval_records
    for flag, files, layout, limit in (
            (options.eval_flag, options.eval_files, options.eval_layout, eval_rows),
            ("--input_file", options.input_files, options.train_layout, None)):
        if not files:
            continue
        logging.warning("reading the data failed: checking every record of %s (%d files)",
                        flag, len(files))
        bad = input_pipeline.find_bad_record(files, layout, limit, options.id_ranges)
        if bad:
            return f"{flag}: {bad}"
    return None
