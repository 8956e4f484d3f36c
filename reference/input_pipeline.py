"""tf.data input pipelines for pre-training and evaluation over the benchmark's TFRecords.

Records are parsed with the shared feature spec (`cleanup_scripts.records.pretraining_features`),
and every int64 feature is cast to int32 (accelerators work in int32, as the MLCommons reference
does).

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

Records are unpacked (create_pretraining_data's) or packed (`cleanup_scripts.pack_pretraining_data`:
several sequences a row); `detect_layout` reads which from the first record, and every file of a
set must hold the same (`RecordLayout`). A packed eval set is evaluated by sequences: the rows
that hold the first `num_sequences` sequences, the sequences after those in the last row
weighted 0 (`count_packed`).

Checking records (`check_first_records`, `check_all_records`, `find_bad_record`): each record's
TFRecord framing (length, length CRC, data, data CRC) is verified in Python and its features
parsed with the expected shapes, so that a damaged record is reported as one line naming the
file, the record's 0-based index within it and the problem; tf.data only says "corrupted
record at <byte>" or names a feature, without the file. Given `IdRanges` (the BERT config's table
sizes), the checks also find ids that index outside a table: token ids outside [0, vocab_size),
type ids outside [0, type_vocab_size), masked positions outside [0, max_seq_length), next-sentence
labels other than 0 and 1. On a GPU such an id is not an error (a gather out of range returns
zeros, and so does one_hot, on any device), so the training stream asserts the same ranges
(`train_dataset(id_ranges=...)`): a record out of range fails the run, and the scan then names it.

Paths may be local or any file system TensorFlow reads (gs://...); patterns are comma-separated
globs, as the MLCommons reference's `--input_file`.
"""
from __future__ import annotations

import itertools
import glob
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np
import tensorflow as tf

from benchmark.errors import one_line, printable
from benchmark.files import InputError, file_kind
from cleanup_scripts.records.pretraining_features import (DecodeError, FramingError, RecordLayout,
                                                          decode_example, feature_problem,
                                                          framed_records, packed_row_problem,
                                                          record_layout, spec_problem,
                                                          tf_feature_spec, tf_parse_errors)

EXAMPLE_WEIGHT = "example_weight"
SHUFFLE_BUFFER = 1000  # records, as the MLCommons reference
CYCLE_LENGTH = 4  # files read at once
PARSE_CHUNK = 1024  # records parsed per TensorFlow call while checking
CHECK_THREADS = 16  # files whose first record is checked at once (remote files: latency)
SEQUENCES_SAMPLE_ROWS = 20_000  # packed rows read to find the mean sequences per row
# What parsing a record that does not parse raises (a record of random bytes: UnicodeDecodeError),
# and what reading the data during a run raises for a damaged record (locate_bad_record's cue).
PARSE_ERRORS = tf_parse_errors()
DATA_ERRORS = (tf.errors.DataLossError, *PARSE_ERRORS)

def expand_patterns(patterns: str) -> list[str]:
    """The files matching comma-separated glob patterns, each pattern's matches sorted.

    Raises InputError naming the pattern when it matches nothing, naming the file when a local
    match is no regular file (a device such as /dev/zero, a FIFO), or when there is no pattern.
    """
    files: list[str] = []
    for pattern in (p.strip() for p in (patterns or "").split(",")):
        if not pattern:
            continue
        try:
            matches = sorted(tf.io.gfile.glob(pattern))
        except tf.errors.OpError as err:
            raise InputError(f"{printable(pattern)}: cannot list files ({one_line(err)})") \
                from err
        matches = [m for m in matches if not tf.io.gfile.isdir(m)]
        if not matches:
            raise InputError(f"{printable(pattern)}: no file matches{_hint(pattern)}")
        for match in matches:
            _require_regular(match)
        files.extend(matches)
    if not files:
        raise InputError("names no files: give one or more TFRecord files or globs")
    return files


def _hint(pattern: str) -> str:
    """Where the files may be when `pattern` names a `make preprocess` output folder (OUT)
    instead of its tfrecords/ (or tfrecords_packed/): "; OUT/tfrecords holds part-*", or ""."""
    folder, name = os.path.split(pattern)
    for inner in ("tfrecords", "tfrecords_packed"):
        nested = os.path.join(folder, inner, name)
        if "://" not in pattern and glob.glob(nested):
            return (f"; {os.path.join(folder, inner)} holds {name} (give the TFRecord folder: "
                    f"make train DATA={os.path.join(folder, inner)})")
    return ""


def _require_regular(path: str) -> None:
    """InputError "<path>: is not a regular file (a FIFO)" for a local `path` that is a
    device, FIFO or socket: stat()ed only, since reading a FIFO waits for a writer for ever
    and /dev/zero never ends (a remote path, gs://..., is an object: nothing to check)."""
    if "://" in path:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read ({err.strerror})") from err
    if not stat.S_ISREG(mode):
        raise InputError(f"{printable(path)}: is not a regular file "
                         f"({file_kind(mode)})")


@dataclass(frozen=True)
class IdRanges:
    """The sizes of the tables that a record's ids index (from the BERT config)."""

    vocab_size: int
    type_vocab_size: int

    def limits(self, layout: RecordLayout) -> list[tuple[str, str, int, str]]:
        """(feature, what its values are, the exclusive upper bound, where the bound comes
        from) for every feature that indexes a table or a position; every bound's lower end
        is 0."""
        vocab = f"vocab_size {self.vocab_size} of --bert_config_file"
        seq = layout.max_seq_length
        found = [("input_ids", "id", self.vocab_size, vocab),
                 ("segment_ids", "id", self.type_vocab_size,
                  f"type_vocab_size {self.type_vocab_size} of --bert_config_file"),
                 ("masked_lm_positions", "position", seq, f"--max_seq_length={seq}"),
                 ("masked_lm_ids", "id", self.vocab_size, vocab),
                 ("next_sentence_labels", "label", 2, "2 (0 or 1)")]
        if layout.packed:
            found += [("sequence_ids", "sequence index", layout.max_sequences + 1,
                       f"{layout.max_sequences + 1} (the row's sequence slots + 1)"),
                      ("position_ids", "position", seq, f"--max_seq_length={seq}"),
                      ("next_sentence_positions", "position", seq, f"--max_seq_length={seq}")]
        return found

    def first_problem(self, columns: Mapping[str, np.ndarray],
                      layout: RecordLayout) -> tuple[int, str] | None:
        """The first row of parsed feature columns ([records, length] arrays) holding a value
        out of range, with the problem (e.g. "input_ids has id 40000 >= vocab_size 30522 of
        --bert_config_file"); None if every value is in range."""
        found = None
        for name, what, bound, source in self.limits(layout):
            values = np.asarray(columns[name]).reshape(len(columns[name]), -1)
            rows = np.flatnonzero(((values < 0) | (values >= bound)).any(axis=1))
            if rows.size and (found is None or rows[0] < found[0]):
                row = values[rows[0]]
                value = int(row[(row < 0) | (row >= bound)][0])
                found = (int(rows[0]), f"{name} has {what} {value} < 0" if value < 0 else
                         f"{name} has {what} {value} >= {source}")
        return found

    def assert_in_range(self, features: dict[str, tf.Tensor],
                        layout: RecordLayout) -> dict[str, tf.Tensor]:
        """`features` behind an assertion that fails (InvalidArgumentError naming the feature)
        when any value of a batch is out of range."""
        checks = [tf.debugging.Assert(
            tf.reduce_all((features[name] >= 0) & (features[name] < bound)),
            [f"{name} holds a {what} outside [0, {bound})"])
            for name, what, bound, _ in self.limits(layout)]
        with tf.control_dependencies(checks):
            return {name: tf.identity(value) for name, value in features.items()}


def row_checks(features: dict[str, tf.Tensor], layout: RecordLayout) -> list[tf.Operation]:
    """Assertions over a parsed [B] batch (int64 features) that fail (InvalidArgumentError)
    when a row is not what the layout promises, checked whole-batch at once: unpacked, no
    real prediction (weight != 0) in the padding (input_mask 0); packed, the structure that
    `packed_row_problem` checks one row at a time (sequence ids 1..k then 0, positions that
    restart with each sequence, next-sentence slots and weights of the k sequences, real
    predictions inside the sequences and in their order). A row these fail,
    `packed_row_problem` / `_bad_unpacked_row` fail too, so the scan names it."""
    weights = features["masked_lm_weights"]
    positions = features["masked_lm_positions"]
    if not layout.packed:
        inside = tf.clip_by_value(positions, 0, layout.max_seq_length - 1)  # IdRanges' own
        in_padding = tf.gather(features["input_mask"], inside, batch_dims=1) == 0
        return [tf.debugging.Assert(tf.reduce_all(~(in_padding & (weights != 0))),
                                    ["a real masked position lies in the padding"])]
    ids = tf.cast(features["sequence_ids"], tf.int32)
    positions_in_row = tf.cast(features["position_ids"], tf.int32)
    real = ids != 0
    steps = ids[:, 1:] - ids[:, :-1]
    contiguous = tf.reduce_all(ids[:, 0] == 1) & tf.reduce_all(
        ~real[:, 1:] | (real[:, :-1] & ((steps == 0) | (steps == 1))))
    # Given contiguous ids: a sequence's positions are 0 at its first token, then +1 each.
    counting = tf.reduce_all(positions_in_row[:, 0] == 0) & tf.reduce_all(
        ~real[:, 1:] | tf.where(steps != 0, positions_in_row[:, 1:] == 0,
                                positions_in_row[:, 1:] == positions_in_row[:, :-1] + 1))
    slots = layout.max_sequences
    used = tf.range(slots)[None, :] < tf.reduce_max(ids, axis=1, keepdims=True)
    last = layout.max_seq_length - 1  # positions out of range are IdRanges' to name
    cls = tf.clip_by_value(tf.cast(features["next_sentence_positions"], tf.int32), 0, last)
    owners = tf.gather(ids, tf.clip_by_value(tf.cast(positions, tf.int32), 0, last),
                       batch_dims=1)
    predicted = weights != 0
    structured = (
        counting
        & tf.reduce_all(features["next_sentence_weights"] == tf.cast(used, tf.float32))
        & tf.reduce_all(~used | ((tf.gather(ids, cls, batch_dims=1) == tf.range(1, slots + 1))
                                 & (tf.gather(positions_in_row, cls, batch_dims=1) == 0)))
        & tf.reduce_all(~predicted | (owners != 0))
        & tf.reduce_all(~(predicted[:, 1:] & predicted[:, :-1])
                        | (owners[:, 1:] >= owners[:, :-1])))
    return [tf.debugging.Assert(contiguous & structured,
                                ["a packed row is not well formed"])]


def _as_written(function):
    """`function` for Dataset.map, traced as written: its code uses TensorFlow's ops for
    every decision on a tensor, so autograph's conversion (about a second of each run's
    start) is skipped."""
    return tf.autograph.experimental.do_not_convert(function)


def parse_batch(serialized: tf.Tensor, layout: RecordLayout,
                id_ranges: IdRanges | None = None) -> dict[str, tf.Tensor]:
    """Parse a [B] batch of serialized examples of `layout`; int64 features become int32.

    id_ranges: assert that every id is in range (see `IdRanges.assert_in_range`) and that every
    row is well formed (`row_checks`): the training stream checks each record it reads.
    """
    features = tf.io.parse_example(serialized, tf_feature_spec(layout))
    if id_ranges is not None:
        with tf.control_dependencies(row_checks(features, layout)):
            features = id_ranges.assert_in_range(features, layout)
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
            for name, value in features.items()}


@dataclass(frozen=True)
class BadRecord:
    """A record that cannot be used: its file, its 0-based index in that file, the problem."""

    path: str
    index: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: record {self.index}: {self.problem}"


def _framed_records(path: str) -> Iterator[bytes]:
    """The data of each record of a TFRecord file (any tf.io.gfile path), checksums verified,
    read by the one TFRecord codec (`cleanup_scripts.records.pretraining_features`).

    Raises FramingError at the first record that is truncated, fails a CRC or cannot be read.
    """
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            yield from framed_records(handle, read_errors=(tf.errors.OpError,))
    except tf.errors.OpError as err:
        raise FramingError(0, f"cannot read ({one_line(err)})") from err


def _record_problem(data: bytes, layout: RecordLayout) -> str | None:
    """Why one serialized record does not fit `layout` (None: it fits); unpacked records name
    the flag that sets a wrong length."""
    if not layout.packed:
        return feature_problem(data, layout.max_seq_length, layout.max_predictions)
    try:
        return spec_problem(decode_example(data), layout.spec())
    except DecodeError as err:
        return f"not a tf.train.Example ({err})"


def _first_unparsable(path: str, first_index: int, records: list[bytes],
                      layout: RecordLayout) -> BadRecord | None:
    """The first of `records` (indices first_index, first_index + 1, ... of `path`) that
    TensorFlow cannot parse with the expected shapes, or None (one parse per record: for
    records known to hold one that does not parse)."""
    spec = tf_feature_spec(layout)
    for offset, data in enumerate(records):
        try:
            tf.io.parse_example(tf.constant([data]), spec)
        except PARSE_ERRORS as err:
            return BadRecord(path, first_index + offset, _record_problem(data, layout)
                             or f"does not parse ({printable(one_line(err))})")
    return None


def _bad_unpacked_row(columns: Mapping[str, np.ndarray]) -> tuple[int, str] | None:
    """The first unpacked row of parsed columns with a real prediction (weight != 0) in its
    padding (input_mask 0), with the problem; positions out of range are IdRanges' to name."""
    mask, positions = columns["input_mask"], columns["masked_lm_positions"]
    inside = (positions >= 0) & (positions < mask.shape[1])
    held = np.take_along_axis(mask, np.where(inside, positions, 0), axis=1)
    rows = np.flatnonzero((inside & (held == 0) & (columns["masked_lm_weights"] != 0))
                          .any(axis=1))
    return (int(rows[0]), "a real masked position lies in the padding (input_mask 0)") \
        if rows.size else None


def _bad_packed_row(columns: Mapping[str, np.ndarray]) -> tuple[int, str] | None:
    """The first packed row of parsed columns whose structure is wrong, with the problem."""
    for row in range(len(columns["sequence_ids"])):
        problem = packed_row_problem({name: values[row] for name, values in columns.items()})
        if problem:
            return row, problem
    return None


def _bad_in_chunk(path: str, first_index: int, records: list[bytes], layout: RecordLayout,
                  id_ranges: IdRanges | None = None) -> BadRecord | None:
    """The first of `records` (indices first_index, first_index + 1, ... of `path`) that does
    not parse with the expected shapes, is not a well-formed row (`_bad_packed_row`,
    `_bad_unpacked_row`) or, given id_ranges, holds a value out of range."""
    spec = tf_feature_spec(layout)
    try:
        columns = tf.io.parse_example(tf.constant(records), spec)
        bad = None
    except PARSE_ERRORS:
        bad = _first_unparsable(path, first_index, records, layout)
        records = records[:bad.index - first_index] if bad else []  # those before it parse
        columns = tf.io.parse_example(tf.constant(records), spec) if records else None
    if records:
        arrays = {name: value.numpy() for name, value in columns.items()}
        found = [problem for problem in (
            id_ranges.first_problem(arrays, layout) if id_ranges else None,
            (_bad_packed_row if layout.packed else _bad_unpacked_row)(arrays)) if problem]
        if found:
            row, problem = min(found)
            return BadRecord(path, first_index + row, problem)
    return bad


def _scan_file(path: str, layout: RecordLayout, limit: int | None,
               id_ranges: IdRanges | None) -> tuple[int, BadRecord | None]:
    """Check the first `limit` records of one file (all of them if None).

    Returns (records read, the first bad record or None); reading stops at the first bad one.
    """
    count, chunk, damaged = 0, [], None
    records = _framed_records(path)
    try:
        for data in itertools.islice(records, limit):
            chunk.append(data)
            count += 1
            if len(chunk) == PARSE_CHUNK:
                bad = _bad_in_chunk(path, count - len(chunk), chunk, layout, id_ranges)
                if bad:
                    return count, bad
                chunk = []
    except FramingError as err:
        damaged = BadRecord(path, err.index, err.problem)
    finally:
        records.close()
    bad = _bad_in_chunk(path, count - len(chunk), chunk, layout, id_ranges) if chunk else None
    return count, bad or damaged


def _scan(files: list[str], layout: RecordLayout, limit: int | None,
          id_ranges: IdRanges | None) -> tuple[int, BadRecord | None]:
    """Check the first `limit` records of `files` in order (all if None): (records, bad)."""
    total = 0
    for path in files:
        remaining = None if limit is None else limit - total
        if remaining == 0:
            break
        count, bad = _scan_file(path, layout, remaining, id_ranges)
        total += count
        if bad:
            return total, bad
    return total, None


def find_bad_record(files: list[str], layout: RecordLayout, limit: int | None = None,
                    id_ranges: IdRanges | None = None) -> BadRecord | None:
    """The first record of `files` (read in order; the first `limit` records in all, or every
    record) that is truncated, fails a CRC, does not parse with the layout's shapes, is not a
    well-formed packed row or, given id_ranges, holds an id out of range."""
    return _scan(files, layout, limit, id_ranges)[1]


def check_all_records(files: list[str], layout: RecordLayout,
                      limit: int | None = None, id_ranges: IdRanges | None = None) -> int:
    """Check the first `limit` records of `files` in order (every record if None), their ids
    too if id_ranges is given.

    Returns the number of records checked (fewer than `limit` when the files hold fewer).
    Raises InputError "<file>: record <i>: <problem>", or when there are no records.
    """
    count, bad = _scan(files, layout, limit, id_ranges)
    if bad:
        raise InputError(str(bad))
    if not count:
        raise InputError(f"{files[0]}{' ...' if len(files) > 1 else ''}: "
                         "holds no records")
    return count


def _first_record(path: str) -> bytes:
    """The first record of `path`; InputError when it is damaged or the file holds none."""
    records = _framed_records(path)
    try:
        first = next(records, None)
    except FramingError as err:
        raise InputError(str(BadRecord(path, err.index, err.problem))) from err
    finally:
        records.close()
    if first is None:
        raise InputError(f"{path}: holds no records")
    return first


def detect_layout(files: list[str], max_seq_length: int, max_predictions_per_seq: int
                  ) -> RecordLayout:
    """The layout of `files`, read off the first record of the first file: packed rows (their
    sizes from the record; the rows must be --max_seq_length tokens long) or unpacked records
    (of the flags' sizes, which `check_first_records` then holds every file to).

    Raises InputError (one line naming the file) for a first record that is damaged or
    missing, or packed rows of another length than --max_seq_length.
    """
    path = files[0]
    first = _first_record(path)
    try:
        found = record_layout(decode_example(first))
    except DecodeError:
        found = None  # not an Example: check_first_records names the problem
    if found is None or not found.packed:
        return RecordLayout.unpacked(max_seq_length, max_predictions_per_seq)
    if found.max_seq_length != max_seq_length:
        raise InputError(f"{path}: packed rows of {found.max_seq_length} tokens, "
                         f"but --max_seq_length={max_seq_length}")
    return found


def _first_record_error(path: str, layout: RecordLayout,
                        id_ranges: IdRanges | None) -> str | None:
    """The InputError message for a file whose first record is missing or unusable, or None."""
    try:
        first = _first_record(path)
    except InputError as err:
        return str(err)
    try:
        found = record_layout(decode_example(first))
    except DecodeError:
        found = None
    if found is not None and found.packed != layout.packed:
        return (f"{path}: {'packed' if found.packed else 'unpacked'} records among "
                f"{'packed' if layout.packed else 'unpacked'} ones: a set of files must be all "
                "packed or all unpacked")
    bad = _first_unparsable(path, 0, [first], layout) if not layout.packed else \
        _bad_in_chunk(path, 0, [first], layout)
    if bad and not layout.packed:
        return (f"{path}: records do not match --max_seq_length={layout.max_seq_length} "
                f"--max_predictions_per_seq={layout.max_predictions} (record 0: {bad.problem})")
    if bad:
        return f"{path}: not {layout.describe()} (record 0: {bad.problem})"
    bad = _bad_in_chunk(path, 0, [first], layout, id_ranges)
    return str(bad) if bad else None


def check_first_records(files: list[str], layout: RecordLayout,
                        id_ranges: IdRanges | None = None) -> None:
    """Read and parse the first record of every file (several files at once), and check its
    ids if id_ranges is given.

    Raises InputError (one line, the first failing file in order) when a file holds no records
    or its first record is damaged, of another layout or shapes, or holds an id out of range.
    """
    with ThreadPoolExecutor(max_workers=max(1, min(CHECK_THREADS, len(files)))) as pool:
        errors = pool.map(lambda path: _first_record_error(path, layout, id_ranges), files)
        message = next((error for error in errors if error), None)
    if message:
        raise InputError(message)


@dataclass(frozen=True)
class PackedCount:
    """A packed eval set cut at a number of sequences: the rows read, the sequences they hold
    up to the cut, and how many sequences of the last row count (its others weigh 0)."""

    rows: int
    sequences: int
    last_row_sequences: int


def count_packed(files: list[str], layout: RecordLayout, limit: int | None = None,
                 max_rows: int | None = None) -> PackedCount:
    """The rows of packed `files` (read in order) that hold their first `limit` sequences (all
    if None), read no further than `max_rows` rows; counted from next_sentence_weights.
    InputError "<file>: record <i>: <problem>" for a record that does not parse."""
    spec = {"next_sentence_weights": tf_feature_spec(layout)["next_sentence_weights"]}
    rows = sequences = last = 0
    for path in files:
        if max_rows is not None and rows >= max_rows:
            break
        records = _framed_records(path)
        first_row = rows  # this file's first row among all rows read
        try:
            while chunk := list(itertools.islice(
                    records, PARSE_CHUNK if max_rows is None else min(PARSE_CHUNK,
                                                                      max_rows - rows))):
                try:
                    counts = tf.io.parse_example(tf.constant(chunk), spec)[
                        "next_sentence_weights"].numpy().sum(axis=1).astype(np.int64)
                except PARSE_ERRORS as err:
                    bad = _first_unparsable(path, rows - first_row, chunk, layout)
                    raise InputError(str(bad or path)) from err
                totals = sequences + np.cumsum(counts)
                if limit is not None and totals[-1] >= limit:
                    end = int(np.searchsorted(totals, limit))
                    before = int(totals[end - 1]) if end else sequences
                    return PackedCount(rows + end + 1, limit, limit - before)
                rows, sequences, last = rows + len(chunk), int(totals[-1]), int(counts[-1])
        except FramingError as err:
            raise InputError(str(BadRecord(path, err.index, err.problem))) from err
        finally:
            records.close()
    return PackedCount(rows, sequences, last)


def mean_sequences_per_row(files: list[str], layout: RecordLayout,
                           rows: int = SEQUENCES_SAMPLE_ROWS) -> float:
    """Sequences per row over the first `rows` rows of packed `files` in order (every row of
    a smaller set; the packer shuffles its rows, so the first ones are a fair sample)."""
    counted = count_packed(files, layout, max_rows=rows)
    return counted.sequences / max(counted.rows, 1)


def _pipelines(input_context) -> tuple[int, int]:
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def train_dataset(files: list[str], batch_size: int, layout: RecordLayout, seed: int,
                  steps_per_update: int = 1,
                  input_context: tf.distribute.InputContext | None = None,
                  shuffle_buffer: int = SHUFFLE_BUFFER, skip_batches: int = 0,
                  id_ranges: IdRanges | None = None) -> tf.data.Dataset:
    """The endless training stream of one input pipeline.

    Args:
      files: TFRecord files.
      batch_size: records (packed: rows) per replica per micro-step.
      layout: the records' layout and shapes.
      seed: seeds the file and record shuffles (same seed, same order).
      steps_per_update: micro-batches per optimizer update; with n > 1 each element holds n
        micro-batches stacked on a new leading axis ([n, batch_size, ...]).
      input_context: from `distribute_datasets_from_function` (None: a single pipeline).
      shuffle_buffer: records in the shuffle buffer (0: no record shuffle).
      skip_batches: micro-batches of this pipeline's stream already trained on (a resumed
        run); their skip_batches * batch_size records are read and dropped before batching
        and parsing, so the stream continues exactly where that many batches left it.
      id_ranges: assert every batch's ids (`IdRanges.assert_in_range`): a record out of range
        fails the stream with InvalidArgumentError.

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
    if skip_batches:
        dataset = dataset.skip(skip_batches * batch_size)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.map(_as_written(lambda r: parse_batch(r, layout, id_ranges)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if steps_per_update > 1:
        dataset = dataset.batch(steps_per_update, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _cut_row(features: dict[str, tf.Tensor], keep: tf.Tensor) -> dict[str, tf.Tensor]:
    """A packed row whose sequences after the first `keep` weigh 0 (masked LM and next
    sentence)."""
    keep = tf.cast(keep, tf.int32)
    slots = tf.range(tf.shape(features["next_sentence_weights"])[0])
    owner = tf.gather(features["sequence_ids"], features["masked_lm_positions"])
    return {**features,
            "next_sentence_weights": features["next_sentence_weights"] * tf.cast(
                slots < keep, tf.float32),
            "masked_lm_weights": features["masked_lm_weights"] * tf.cast(owner <= keep,
                                                                         tf.float32)}


def padded_eval_size(num_records: int, global_batch_size: int) -> int:
    """`num_records` rounded up to a whole number of global eval batches."""
    return -(-num_records // global_batch_size) * global_batch_size


def eval_dataset(files: list[str], batch_size: int, num_records: int, padded_records: int,
                 layout: RecordLayout,
                 input_context: tf.distribute.InputContext | None = None,
                 last_row_sequences: int | None = None) -> tf.data.Dataset:
    """One pass over the first `num_records` records, padded to `padded_records`.

    Args:
      files: TFRecord files, read in order.
      batch_size: records per replica per step.
      num_records: real records to evaluate (the first ones; packed: rows).
      padded_records: total after padding; a multiple of the global batch size.
      layout: the records' layout and shapes.
      input_context: as for `train_dataset`; records are dealt round-robin to the pipelines.
      last_row_sequences: packed layouts: how many sequences of the last real row are
        evaluated (`count_packed`); the masked-LM and next-sentence weights of its others are
        set to 0. None: all.

    Returns:
      Dataset of feature dicts [batch_size, ...] with the extra float feature
      `example_weight` (1 real, 0 padding).
    """
    num_pipelines, pipeline_id = _pipelines(input_context)
    records = tf.data.TFRecordDataset(files).take(num_records)
    real = records.batch(256).map(_as_written(lambda r: parse_batch(r, layout))).unbatch()
    real = real.map(_as_written(lambda f: {**f, EXAMPLE_WEIGHT: tf.constant(1.0)}))
    if layout.packed and last_row_sequences is not None:
        real = real.enumerate().map(_as_written(lambda index, features: _cut_row(
            features, tf.where(index == num_records - 1, last_row_sequences,
                               layout.max_sequences))))
    spec = tf_feature_spec(layout)
    blank = {name: tf.zeros(feature.shape, tf.float32 if feature.dtype == tf.float32
                            else tf.int32) for name, feature in spec.items()}
    blank[EXAMPLE_WEIGHT] = tf.constant(0.0)
    padding = tf.data.Dataset.from_tensors(blank).repeat(padded_records - num_records)
    dataset = real.concatenate(padding)
    if num_pipelines > 1:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
