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
from benchmark.files import naming
from reference.error_text import writing
from reference.run_options import RunOptions, UsageError, check_with_model

if TYPE_CHECKING:  # TensorFlow-importing modules are imported where used (fast --help)
    from cleanup_scripts.records.pretraining_features import RecordLayout
    from reference.bert_config import BertConfig
    from reference.input_pipeline import IdRanges, PackedCount

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
    """Check the files that `options` name: read the BERT config, check the options against it
    and this machine's memory (`run_options.check_with_model`), expand --input_file /
    --eval_file and check their records (the first record of every training file, every eval
    record evaluated), and probe
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
    check_with_model(o, config, host_memory_bytes(), runs_on_cpu(o))

    id_ranges = input_pipeline.IdRanges(config.vocab_size, config.type_vocab_size)
    train = _check_train_files(o, id_ranges) if o.do_train else None
    eval_files, evaluated = [], None
    if o.eval.patterns:
        with naming(o.eval.flag):
            eval_files = input_pipeline.expand_patterns(o.eval.patterns)
            evaluated = _check_eval_files(o, eval_files, id_ranges)
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
    checked; packed rows: the mean sequences per row. InputError "--input_file: <file>: ..."."""
    from reference import input_pipeline
    with naming("--input_file"):
        files = input_pipeline.expand_patterns(o.data.patterns)
        layout = input_pipeline.detect_layout(files, o.data.max_seq_length,
                                              o.data.max_predictions_per_seq)
        input_pipeline.check_first_records(files, layout, id_ranges)
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


def _check_eval_files(o: RunOptions, files: list[str], id_ranges: IdRanges) -> EvalRecords:
    """The eval files' layout, the sequences evaluated (at most eval_batch_size x
    max_eval_steps, the first ones in file order) and, packed, the rows that hold them; every
    record read is checked now, so that a damaged eval set fails before training."""
    from reference import input_pipeline
    layout = input_pipeline.detect_layout(files, o.data.max_seq_length,
                                          o.data.max_predictions_per_seq)
    input_pipeline.check_first_records(files, layout)
    wanted = o.eval.batch_size * o.eval.max_steps
    count = None
    rows = wanted
    if layout.packed:
        count = input_pipeline.count_packed(files, layout, limit=wanted)
        rows = count.rows
    checked = input_pipeline.check_all_records(files, layout, limit=rows,
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
