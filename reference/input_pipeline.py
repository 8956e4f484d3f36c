"""tf.data input pipelines for pre-training and evaluation over the benchmark's TFRecords.

Records are parsed with the shared feature spec (`cleanup_scripts.pretraining_features`), and
every int64 feature is cast to int32 (accelerators work in int32, as the reference does).

Training (`train_dataset`), per input pipeline:
  files (shuffled, seeded) -> interleaved records (deterministic order for a seed) ->
  shuffle buffer (seeded) -> repeat -> [record-level shard] -> batch(per-replica batch,
  drop_remainder) -> parse -> [batch(steps_per_update): one element per optimizer update].
With several input pipelines (multi-worker) the *files* are sharded when there are at least as
many files as pipelines; otherwise every pipeline builds the same seeded stream and keeps every
k-th record, so that the union of the per-replica batches of a step is exactly the batch a
single device would have drawn.

Evaluation (`eval_dataset`): the first `num_records` records in file order, no shuffle, each
once; padded with all-zero records up to a whole number of global batches. The extra feature
`example_weight` is 1.0 for real records and 0.0 for padding, so sums over padded batches equal
sums over the real records.

Paths may be local or any file system TensorFlow reads (gs://...); patterns are comma-separated
globs, as the reference's `--input_file`.
"""
from __future__ import annotations

import tensorflow as tf

from cleanup_scripts.pretraining_features import tf_feature_spec

EXAMPLE_WEIGHT = "example_weight"
SHUFFLE_BUFFER = 1000  # records, as the reference
CYCLE_LENGTH = 4  # files read at once


class InputError(ValueError):
    """Input files that cannot be used; the message is one line naming the file or pattern."""


def _one_line(err: Exception) -> str:
    text = str(getattr(err, "message", err)).strip()
    return text.splitlines()[0] if text else type(err).__name__


def expand_patterns(patterns: str, flag: str = "--input_file") -> list[str]:
    """The files matching comma-separated glob patterns, each pattern's matches sorted.

    Raises InputError naming the flag and pattern when a pattern matches nothing.
    """
    files: list[str] = []
    for pattern in (p.strip() for p in (patterns or "").split(",")):
        if not pattern:
            continue
        try:
            matches = sorted(tf.io.gfile.glob(pattern))
        except tf.errors.OpError as err:
            raise InputError(f"{flag}={pattern}: cannot list files ({_one_line(err)})") from err
        matches = [m for m in matches if not tf.io.gfile.isdir(m)]
        if not matches:
            raise InputError(f"{flag}={pattern}: no file matches")
        files.extend(matches)
    if not files:
        raise InputError(f"{flag} is empty: give one or more TFRecord files or globs")
    return files


def parse_batch(serialized: tf.Tensor, max_seq_length: int,
                max_predictions_per_seq: int) -> dict[str, tf.Tensor]:
    """Parse a [B] batch of serialized examples; int64 features become int32."""
    features = tf.io.parse_example(serialized,
                                   tf_feature_spec(max_seq_length, max_predictions_per_seq))
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
            for name, value in features.items()}


def check_records(path: str, max_seq_length: int, max_predictions_per_seq: int,
                  flag: str = "--input_file") -> None:
    """Read and parse the first record of `path`; InputError (one line) if that fails."""
    try:
        first = list(tf.data.TFRecordDataset(path).take(1).as_numpy_iterator())
    except tf.errors.OpError as err:
        raise InputError(f"{flag}: {path}: not a readable TFRecord file "
                         f"({_one_line(err)})") from err
    if not first:
        raise InputError(f"{flag}: {path}: holds no records")
    try:
        parse_batch(tf.constant(first), max_seq_length, max_predictions_per_seq)
    except (tf.errors.OpError, ValueError) as err:
        raise InputError(f"{flag}: {path}: records do not match --max_seq_length="
                         f"{max_seq_length} --max_predictions_per_seq="
                         f"{max_predictions_per_seq} ({_one_line(err)})") from err


def count_records(files: list[str], limit: int | None = None) -> int:
    """Records in `files` (read in order), counting at most `limit`."""
    dataset = tf.data.TFRecordDataset(files)
    if limit is not None:
        dataset = dataset.take(limit)
    try:
        return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))
    except tf.errors.OpError as err:
        raise InputError(f"{files[0]}...: cannot read records ({_one_line(err)})") from err


def _pipelines(input_context) -> tuple[int, int]:
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def train_dataset(files: list[str], batch_size: int, max_seq_length: int,
                  max_predictions_per_seq: int, seed: int, steps_per_update: int = 1,
                  input_context: tf.distribute.InputContext | None = None,
                  shuffle_buffer: int = SHUFFLE_BUFFER) -> tf.data.Dataset:
    """The endless training stream of one input pipeline.

    Args:
      files: TFRecord files.
      batch_size: records per replica per micro-step.
      max_seq_length, max_predictions_per_seq: the records' shapes.
      seed: seeds the file and record shuffles (same seed, same order).
      steps_per_update: micro-batches per optimizer update; with n > 1 each element holds n
        micro-batches stacked on a new leading axis ([n, batch_size, ...]).
      input_context: from `distribute_datasets_from_function` (None: a single pipeline).
      shuffle_buffer: records in the shuffle buffer (0: no record shuffle).

    Returns:
      Dataset of feature dicts [batch_size, ...] (or [n, batch_size, ...]).
    """
    num_pipelines, pipeline_id = _pipelines(input_context)
    shard_files = num_pipelines > 1 and len(files) >= num_pipelines
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    if shard_files:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.interleave(tf.data.TFRecordDataset,
                                 cycle_length=min(CYCLE_LENGTH, len(files)),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.repeat()
    if num_pipelines > 1 and not shard_files:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(lambda r: parse_batch(r, max_seq_length, max_predictions_per_seq),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if steps_per_update > 1:
        dataset = dataset.batch(steps_per_update, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def padded_eval_size(num_records: int, global_batch_size: int) -> int:
    """`num_records` rounded up to a whole number of global eval batches."""
    return -(-num_records // global_batch_size) * global_batch_size


def eval_dataset(files: list[str], batch_size: int, num_records: int, padded_records: int,
                 max_seq_length: int, max_predictions_per_seq: int,
                 input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """One pass over the first `num_records` records, padded to `padded_records`.

    Args:
      files: TFRecord files, read in order.
      batch_size: records per replica per step.
      num_records: real records to evaluate (the first ones).
      padded_records: total after padding; a multiple of the global batch size.
      input_context: as for `train_dataset`; records are dealt round-robin to the pipelines.

    Returns:
      Dataset of feature dicts [batch_size, ...] with the extra float feature
      `example_weight` (1 real, 0 padding).
    """
    num_pipelines, pipeline_id = _pipelines(input_context)
    records = tf.data.TFRecordDataset(files).take(num_records)
    real = records.batch(256).map(
        lambda r: parse_batch(r, max_seq_length, max_predictions_per_seq)).unbatch()
    real = real.map(lambda f: {**f, EXAMPLE_WEIGHT: tf.constant(1.0)})
    spec = tf_feature_spec(max_seq_length, max_predictions_per_seq)
    blank = {name: tf.zeros(feature.shape, tf.float32 if feature.dtype == tf.float32
                            else tf.int32) for name, feature in spec.items()}
    blank[EXAMPLE_WEIGHT] = tf.constant(0.0)
    padding = tf.data.Dataset.from_tensors(blank).repeat(padded_records - num_records)
    dataset = real.concatenate(padding)
    if num_pipelines > 1:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
