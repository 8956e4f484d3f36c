"""Packed TFRecords: the benchmark's pretraining records with up to K sequences in each row.

    python -m cleanup_scripts.pack_pretraining_data --input_file='tfrecords/part-*' \\
        --output_file=tfrecords_packed --max_seq_length=512 --max_predictions_per_seq=76 \\
        --max_sequences_per_pack=3

Half of the tokens of the official training records are padding; a packed row holds several
sequences, so a trainer computes about half the rows for the same sequences. The rows'
features are documented in `cleanup_scripts.records.pretraining_features` (per-token sequence index,
position ids restarting with each sequence, every sequence's predictions, [CLS] position and
next-sentence label).

How: each input file is packed on its own, file-parallel (`--nworker`), so memory is bounded
by the largest input file, never by the data set (a 27 MB-text part of the benchmark, 313,000
records, is held in about 0.4 GB as token arrays). Two passes over the inputs:
1. per file, the length histogram and each sequence's prediction count (only input_mask and
   masked_lm_weights are parsed); the file's plan (`cleanup_scripts.packing.plan.pack_plan`) gives
   the most predictions any of its rows holds, and the largest over all files is the rows'
   masked-LM width (a limit derived from the data, about 80 for 512-token rows of the
   official records, not 3 x 76);
2. per file, the records are read again, placed by the plan (`assign_sequences`), the rows
   shuffled with a seed from --random_seed and the file's name, and written to a temporary
   beside the output; once every file is packed, the temporaries are renamed to their final
   names (a run that fails or is interrupted leaves none of its outputs; the temporaries a
   killed run left are removed by the next run that writes the same outputs).
Same inputs and flags, same bytes. One input: --output_file is the output file; several:
--output_file is a folder and each packed file keeps its input's name. An output that is one
of the inputs (through a link too), a link, a special file (`/dev/null`), or a folder holding
the inputs, is refused before anything is written.

Input records must be create_pretraining_data's: input_mask 1s then 0s, segment_ids 0s then 1s
within the sequence (from [CLS]'s 0), masked_lm_weights 1 (a real prediction, inside the
sequence) or 0, a next_sentence label of 0 or 1, no negative id. Anything else (a record of
random bytes too) is a one-line error naming the file and record, and no output is left under
a final name.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import time
import zlib
from dataclasses import dataclass

import numpy as np
from absl import app, flags

from benchmark import constants
from benchmark.errors import exit_on_user_error, printable
from benchmark.files import (InputError, check_output, create_new, disk_full, ensure_dir,
                             expand_inputs, naming, refuse_outputs_over_inputs,
                             remove_stale_temporaries, replace_output, temporary_name)
from cleanup_scripts.create_pretraining_data import range_indices
from cleanup_scripts.packing.plan import PackStats, Rows, most_per_row, pack_lengths
from cleanup_scripts.pipeline.runner import (TENSORFLOW_WORKERS, map_in_workers, peak_rss_mb,
                                             shared_workers, total_bytes, worker_count)
from cleanup_scripts.records.pretraining_features import (RecordLayout, encode_examples,
                                                          feature_problem, read_records,
                                                          tf_feature_spec, tf_parse_errors,
                                                          write_records)

MAX_SEQUENCES_PER_PACK = 3  # NVIDIA's and Graphcore's choice: 3 gives ~2x on the official data
MAX_SEQ_LENGTH = 8192  # 16x the benchmark's rows; longer ones would only exhaust memory
PARSE_TOKENS = 2048 * 512  # tokens of the records parsed per TensorFlow call
WRITE_TOKENS = 1024 * 512  # tokens of the rows encoded at once


@dataclass(frozen=True)
class PackOptions:
    """The packer's settings: input shapes, the most sequences per row, the shuffle seed."""

    max_seq_length: int = constants.MAX_SEQ_LENGTH
    max_predictions_per_seq: int = constants.MAX_PREDICTIONS_PER_SEQ
    max_sequences_per_pack: int = MAX_SEQUENCES_PER_PACK
    random_seed: int = constants.PRETRAINING_RANDOM_SEED


def check_options(options: PackOptions) -> None:
    """InputError (one line naming the flag) for settings the packer cannot work with."""
    if not 2 <= options.max_seq_length <= MAX_SEQ_LENGTH:
        raise InputError(f"--max_seq_length={options.max_seq_length}: must be between 2 and "
                         f"{MAX_SEQ_LENGTH}")
    if not 1 <= options.max_predictions_per_seq <= options.max_seq_length:
        raise InputError(f"--max_predictions_per_seq={options.max_predictions_per_seq}: must "
                         "be between 1 and --max_seq_length")
    if not 1 <= options.max_sequences_per_pack <= 64:
        raise InputError(f"--max_sequences_per_pack={options.max_sequences_per_pack}: must be "
                         "between 1 and 64")


# ---- reading ------------------------------------------------------------------------------------

def _parse_chunks(path: str, options: PackOptions, names: tuple[str, ...]):
    """(index of the chunk's first record, {feature: [n, length] numpy array}) for chunks of
    `path`'s records, parsed with the unpacked spec (only `names`); InputError naming the
    record that is damaged or of other shapes."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up lines
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    layout = RecordLayout.unpacked(options.max_seq_length, options.max_predictions_per_seq)
    spec = {name: feature for name, feature in tf_feature_spec(layout).items()
            if name in names}
    records = read_records(path)
    first = 0
    while chunk := list(itertools.islice(records,
                                         max(1, PARSE_TOKENS // options.max_seq_length))):
        try:
            parsed = tf.io.parse_example(tf.constant(chunk), spec)
        except tf_parse_errors():
            for offset, data in enumerate(chunk):
                problem = feature_problem(data, options.max_seq_length,
                                          options.max_predictions_per_seq)
                if problem:
                    raise InputError(f"{path}: record {first + offset}: {problem}") from None
            raise InputError(f"{path}: records {first}..{first + len(chunk) - 1} do not parse")
        yield first, {name: value.numpy() for name, value in parsed.items()}
        first += len(chunk)


def _lengths_and_predictions(path: str, first: int, mask: np.ndarray, weights: np.ndarray,
                             positions: np.ndarray | None = None
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Each record's token count and real predictions (weight 1), checked: the input mask is
    1s then 0s, every weight 0 or 1, and (given positions) every real prediction lies in the
    sequence."""
    lengths = mask.sum(axis=1)
    expected = np.arange(mask.shape[1])[None, :] < lengths[:, None]
    bad = np.flatnonzero((mask != expected).any(axis=1) | (lengths < 1))
    if bad.size:
        raise InputError(f"{path}: record {first + bad[0]}: input_mask is not 1s then 0s (not "
                         "a create_pretraining_data record)")
    odd = np.flatnonzero(((weights != 0) & (weights != 1)).any(axis=1))
    if odd.size:
        row = weights[odd[0]]
        value = row[(row != 0) & (row != 1)][0]
        raise InputError(f"{path}: record {first + odd[0]}: masked_lm_weights holds {value}, "
                         "not 0 or 1")
    real = weights != 0
    if positions is not None:
        outside = np.flatnonzero((real & ((positions < 0) | (positions >= lengths[:, None])))
                                 .any(axis=1))
        if outside.size:
            raise InputError(f"{path}: record {first + outside[0]}: a masked position lies "
                             "outside the sequence")
    return lengths, real.sum(axis=1)


@dataclass(frozen=True)
class FileScan:
    """Pass 1 of one file: its sequences' length histogram, its rows' most predictions and
    what packing it does."""

    path: str
    max_row_predictions: int
    stats: PackStats


def scan_file(job: tuple[str, PackOptions]) -> FileScan:
    """Pass 1 for one input file (job: path, options)."""
    path, options = job
    lengths, predictions = [], []
    for first, chunk in _parse_chunks(path, options, ("input_mask", "masked_lm_weights")):
        chunk_lengths, chunk_predictions = _lengths_and_predictions(
            path, first, chunk["input_mask"], chunk["masked_lm_weights"])
        lengths.append(chunk_lengths)
        predictions.append(chunk_predictions)
    if not lengths:
        raise InputError(f"{path}: holds no records")
    lengths, predictions = np.concatenate(lengths), np.concatenate(predictions)
    rows = pack_lengths(lengths, options.max_seq_length, options.max_sequences_per_pack)
    return FileScan(path, most_per_row(rows, predictions), PackStats(
        int(lengths.size), rows.count, int(lengths.sum()), options.max_seq_length))


@dataclass
class Sequences:
    """The sequences of one file, compact: tokens and segment ids one after another, each
    sequence's length, its predictions (positions within the sequence, ids, weights) one
    after another, and its next-sentence label."""

    tokens: np.ndarray
    segments: np.ndarray
    lengths: np.ndarray
    prediction_counts: np.ndarray
    prediction_positions: np.ndarray
    prediction_ids: np.ndarray
    prediction_weights: np.ndarray
    labels: np.ndarray

    @functools.cached_property
    def token_starts(self) -> np.ndarray:
        """Where each sequence's tokens start in `tokens`."""
        return np.cumsum(self.lengths, dtype=np.int64) - self.lengths

    @functools.cached_property
    def prediction_starts(self) -> np.ndarray:
        """Where each sequence's predictions start in the prediction arrays."""
        return np.cumsum(self.prediction_counts, dtype=np.int64) - self.prediction_counts


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative ints in uint16 when they fit (token ids of a 30,522-word vocabulary), else
    int64: about a quarter of the memory for the usual vocabularies."""
    return values.astype(np.uint16) if values.size == 0 or (
        values.min() >= 0 and values.max() < 1 << 16) else values.astype(np.int64)


def sequences_from_columns(columns: dict[str, np.ndarray]) -> Sequences:
    """`Sequences` from unpacked feature columns ([records, length] arrays of
    create_pretraining_data's features; checked by the caller)."""
    lengths = columns["input_mask"].sum(axis=1)
    filled = np.arange(columns["input_mask"].shape[1])[None, :] < lengths[:, None]
    real = columns["masked_lm_weights"] != 0
    return Sequences(
        tokens=_narrow(columns["input_ids"][filled]),
        segments=_narrow(columns["segment_ids"][filled]),
        lengths=lengths.astype(np.int32), prediction_counts=real.sum(axis=1).astype(np.int32),
        prediction_positions=columns["masked_lm_positions"][real].astype(np.int32),
        prediction_ids=_narrow(columns["masked_lm_ids"][real]),
        prediction_weights=columns["masked_lm_weights"][real].astype(np.float32),
        labels=np.asarray(columns["next_sentence_labels"])[:, 0])


def _check_segments_and_labels(path: str, first: int, columns: dict[str, np.ndarray]) -> None:
    """InputError naming the first record (of parsed columns whose first is record `first`)
    whose segment_ids are not 0s then 1s within the sequence, starting with [CLS]'s 0, or
    whose next_sentence label is not 0 or 1."""
    segments = columns["segment_ids"]
    inside = columns["input_mask"] != 0
    bad = (segments[:, 0] != 0) | (inside & (segments != 0) & (segments != 1)).any(axis=1) | (
        inside[:, 1:] & (np.diff(segments, axis=1) < 0)).any(axis=1)
    rows = np.flatnonzero(bad)
    if rows.size:
        raise InputError(f"{path}: record {first + rows[0]}: segment_ids are not 0s then 1s "
                         "within the sequence (not a create_pretraining_data record)")
    labels = columns["next_sentence_labels"][:, 0]
    rows = np.flatnonzero((labels != 0) & (labels != 1))
    if rows.size:
        raise InputError(f"{path}: record {first + rows[0]}: next_sentence_labels holds "
                         f"{labels[rows[0]]}, not 0 or 1")


def read_sequences(path: str, options: PackOptions) -> Sequences:
    """Every record of `path` as `Sequences` (checked as in pass 1, and every id >= 0, the
    segment ids and next-sentence labels as `_check_segments_and_labels`)."""
    names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
             "masked_lm_weights", "next_sentence_labels")
    parts: list[Sequences] = []
    for first, chunk in _parse_chunks(path, options, names):
        _lengths_and_predictions(path, first, chunk["input_mask"], chunk["masked_lm_weights"],
                                 chunk["masked_lm_positions"])
        for name in ("input_ids", "masked_lm_ids"):
            negative = np.flatnonzero((chunk[name] < 0).any(axis=1))
            if negative.size:
                raise InputError(f"{path}: record {first + negative[0]}: {name} holds a "
                                 "negative value")
        _check_segments_and_labels(path, first, chunk)
        parts.append(sequences_from_columns(chunk))
    if not parts:
        raise InputError(f"{path}: holds no records")
    return Sequences(**{field.name: np.concatenate([getattr(part, field.name) for part in parts])
                        for field in dataclasses.fields(Sequences)})


# ---- writing ------------------------------------------------------------------------------------

def _grouped_offsets(group: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """For items sorted by `group`: the sum of the sizes of the items before each in its group."""
    ends = np.cumsum(sizes)
    starts = ends - sizes
    first_of_group = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    group_start = np.repeat(starts[first_of_group], np.diff(np.r_[first_of_group, group.size]))
    return starts - group_start


def row_columns(data: Sequences, order: Rows, begin: int, rows: int,
                layout: RecordLayout) -> dict[str, np.ndarray]:
    """The packed features (`layout`'s) of output rows begin .. begin + rows - 1 of `order`
    (`row_order`: sorted by row, then slot)."""
    seq, pred, packs = layout.max_seq_length, layout.max_predictions, layout.max_sequences
    low, high = np.searchsorted(order.row, [begin, begin + rows])
    row, slot, sequence = order.row[low:high] - begin, order.slot[low:high], \
        order.sequence[low:high]
    lengths = data.lengths[sequence].astype(np.int64)
    offsets = _grouped_offsets(row, lengths)
    into = range_indices(row * seq + offsets, lengths)
    take = range_indices(data.token_starts[sequence], lengths)
    columns = {name: np.zeros((rows, seq), dtype=np.int64)
               for name in ("input_ids", "segment_ids", "sequence_ids", "position_ids")}
    columns["input_ids"].reshape(-1)[into] = data.tokens[take]
    columns["segment_ids"].reshape(-1)[into] = data.segments[take]
    columns["sequence_ids"].reshape(-1)[into] = np.repeat(slot + 1, lengths)
    columns["position_ids"].reshape(-1)[into] = into - np.repeat(row * seq + offsets, lengths)

    counts = data.prediction_counts[sequence].astype(np.int64)
    prediction_offsets = _grouped_offsets(row, counts)
    targets = range_indices(row * pred + prediction_offsets, counts)
    sources = range_indices(data.prediction_starts[sequence], counts)
    for name in ("masked_lm_positions", "masked_lm_ids"):
        columns[name] = np.zeros((rows, pred), dtype=np.int64)
    columns["masked_lm_positions"].reshape(-1)[targets] = (
        data.prediction_positions[sources] + np.repeat(offsets, counts))
    columns["masked_lm_ids"].reshape(-1)[targets] = data.prediction_ids[sources]
    weights = np.zeros((rows, pred), dtype=np.float32)
    weights.reshape(-1)[targets] = data.prediction_weights[sources]
    columns["masked_lm_weights"] = weights
    slots = row * packs + slot
    columns["next_sentence_positions"] = np.zeros((rows, packs), dtype=np.int64)
    columns["next_sentence_positions"].reshape(-1)[slots] = offsets
    columns["next_sentence_labels"] = np.zeros((rows, packs), dtype=np.int64)
    columns["next_sentence_labels"].reshape(-1)[slots] = data.labels[sequence]
    nsp_weights = np.zeros((rows, packs), dtype=np.float32)
    nsp_weights.reshape(-1)[slots] = 1.0
    columns["next_sentence_weights"] = nsp_weights
    return {name: columns[name] for name in layout.spec()}


def file_seed(random_seed: int, path: str) -> int:
    """The row-shuffle seed of one file: from --random_seed and the file's name (not its
    folder), so a file packs to the same bytes wherever it lies and whatever else is packed."""
    return zlib.crc32(f"{random_seed}:{os.path.basename(path)}".encode()) & 0xFFFFFFFF


def row_order(data: Sequences, options: PackOptions, seed: int) -> Rows:
    """The packed rows of `data` (`pack_lengths`), shuffled by `seed`, as `Rows` sorted by
    output row, then slot."""
    rows = pack_lengths(data.lengths, options.max_seq_length, options.max_sequences_per_pack)
    order = np.random.RandomState(seed).permutation(rows.count)
    position_of_row = np.empty(rows.count, dtype=np.int64)
    position_of_row[order] = np.arange(rows.count)
    out_row = position_of_row[rows.row]
    by_output = np.lexsort((rows.slot, out_row))
    return Rows(out_row[by_output], rows.slot[by_output], rows.sequence[by_output], rows.count)


def pack_file(job: tuple[str, str, str, PackOptions, int]) -> PackStats:
    """Pass 2 for one file (job: input path, output path, the temporary the rows are written
    to, options, the rows' masked-LM width): write its packed rows, shuffled, to the temporary
    (the caller renames it); returns its counts."""
    path, output, temporary, options, max_predictions = job
    data = read_sequences(path, options)
    order = row_order(data, options, file_seed(options.random_seed, path))
    layout = RecordLayout(True, options.max_seq_length, max_predictions,
                          options.max_sequences_per_pack)
    rows_at_once = max(1, WRITE_TOKENS // options.max_seq_length)
    try:
        with create_new(temporary) as handle:
            for begin in range(0, order.count, rows_at_once):
                columns = row_columns(data, order, begin,
                                      min(rows_at_once, order.count - begin), layout)
                write_records(handle, encode_examples(columns))
    except OSError as err:
        raise disk_full(output, err) or InputError(
            f"{output}: cannot write output ({err.strerror})") from err
    return PackStats(int(data.lengths.size), order.count, int(data.lengths.sum()),
                     options.max_seq_length)


# ---- the tool -----------------------------------------------------------------------------------

def output_paths(input_files: list[str], output_file: str) -> list[str]:
    """Where each input's packed rows go: `output_file` itself for one input, else
    `output_file/<input's name>`. InputError if two inputs share a name, if one input's
    `output_file` is a folder, or if the folder of several holds an input (or is its folder)."""
    if len(input_files) == 1 and not output_file.endswith(os.sep):
        if os.path.isdir(output_file):
            raise InputError(f"--output_file={printable(output_file)}: is a folder; with one "
                             "input it names the packed file (end it with / to write into it)")
        return [output_file]
    folder = os.path.realpath(output_file)
    for path in input_files:
        if os.path.realpath(path).startswith(folder.rstrip(os.sep) + os.sep):
            raise InputError(f"--output_file: {printable(output_file)}: holds the input "
                             f"{printable(path)}; the packed files must go to a folder of their "
                             "own, not over or beside their inputs")
    names = [os.path.basename(path) for path in input_files]
    if len(set(names)) != len(names):
        raise InputError(f"--output_file={output_file}: two inputs share a file name, so "
                         "their packed files would too")
    return [os.path.join(output_file, name) for name in names]


@dataclass(frozen=True)
class PackResult:
    """What a packing run did: its counts, the rows' layout, the seconds and input bytes."""

    stats: PackStats
    layout: RecordLayout
    seconds: float
    input_bytes: int

    def line(self) -> str:
        """The one summary line."""
        megabytes = self.input_bytes / 1e6
        return (f"pack_pretraining_data: {self.stats.line()}; rows of "
                f"{self.layout.max_seq_length} tokens, {self.layout.max_predictions} "
                f"predictions; {megabytes:.1f} MB in {self.seconds:.1f} s, peak RSS "
                f"{peak_rss_mb():.0f} MB")


def pack_files(input_files: list[str], output_files: list[str], options: PackOptions,
               nworker: int = 0, max_predictions: int | None = None) -> PackResult:
    """Pack `input_files` into `output_files` (one each), all or nothing: the files are
    written to temporaries and renamed once every one is done; a failure removes them.

    max_predictions: the rows' masked-LM width; None derives it from the data (pass 1).
    Raises InputError (one line) for bad options or records, no inputs, or an output that is
    an input, a link or a special file (`/dev/null`; nothing is written then); no output of a
    failed run is left.
    """
    check_options(options)
    started = time.time()
    if not input_files:
        raise InputError("--input_file: names no files")
    if len(output_files) != len(input_files):
        raise InputError("--output_file: one output per input file is needed")
    with naming("--output_file"):
        refuse_outputs_over_inputs(input_files, output_files)
    for path in output_files:
        check_output(path)
        ensure_dir(os.path.dirname(os.path.abspath(path)))
        remove_stale_temporaries(path)
    temporaries = [str(temporary_name(path)) for path in output_files]
    try:
        stats, width = _pack_into(input_files, output_files, temporaries, options, nworker,
                                  max_predictions)
        for temporary, path in zip(temporaries, output_files):
            replace_output(temporary, path)
    except BaseException:
        for temporary in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        raise
    layout = RecordLayout(True, options.max_seq_length, width, options.max_sequences_per_pack)
    return PackResult(stats, layout, time.time() - started, total_bytes(input_files))


def _pack_into(input_files: list[str], output_files: list[str], temporaries: list[str],
               options: PackOptions, nworker: int, max_predictions: int | None
               ) -> tuple[PackStats, int]:
    """Both passes, the rows of each input written to its temporary; returns the counts and
    the rows' masked-LM width."""
    stats = PackStats(max_seq_length=options.max_seq_length)
    # One pool for both passes, its workers forked from a process that imported TensorFlow.
    nworker = min(worker_count(nworker), len(input_files))
    sizes = [os.path.getsize(path) for path in input_files]
    with shared_workers(nworker, TENSORFLOW_WORKERS):
        scans = map_in_workers(scan_file, [(path, options) for path in input_files], nworker,
                               desc="pack: scan", start_method=TENSORFLOW_WORKERS, sizes=sizes)
        width = max(max_predictions or max(scan.max_row_predictions for scan in scans), 1)
        jobs = [(path, output, temporary, options, width) for path, output, temporary
                in zip(input_files, output_files, temporaries)]
        for done in map_in_workers(pack_file, jobs, nworker, desc="pack: write",
                                   start_method=TENSORFLOW_WORKERS, sizes=sizes):
            stats.add(done)
    return stats, width


def define_flags() -> None:
    """The packer's flags (the first four named as create_pretraining_data's)."""
    flags.DEFINE_string("input_file", None,
                        "Pretraining TFRecords: a file, or comma-separated files or globs.")
    flags.DEFINE_string("output_file", None,
                        "The packed file (one input), or a folder (several inputs).")
    flags.DEFINE_integer("max_seq_length", constants.MAX_SEQ_LENGTH,
                         "Tokens per input record and per packed row.")
    flags.DEFINE_integer("max_predictions_per_seq", constants.MAX_PREDICTIONS_PER_SEQ,
                         "Masked-LM slots per input record.")
    flags.DEFINE_integer("max_sequences_per_pack", MAX_SEQUENCES_PER_PACK,
                         "The most sequences in one packed row.")
    flags.DEFINE_integer("random_seed", constants.PRETRAINING_RANDOM_SEED,
                         "Seeds the shuffle of each file's rows.")
    flags.DEFINE_integer("nworker", 0, "Files packed at once (0: every core).")


def run(flag_values: flags.FlagValues) -> PackResult:
    """The CLI's work: expand the inputs, pack them, print the summary line."""
    input_files: list[str] = []
    for pattern in flag_values.input_file.split(","):
        if pattern.strip():
            input_files.extend(expand_inputs(pattern.strip()))
    options = PackOptions(flag_values.max_seq_length, flag_values.max_predictions_per_seq,
                          flag_values.max_sequences_per_pack, flag_values.random_seed)
    result = pack_files(input_files, output_paths(input_files, flag_values.output_file),
                        options, flag_values.nworker)
    print(result.line(), flush=True)
    return result


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    exit_on_user_error(lambda: run(flags.FLAGS))


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow: no CUDA probing lines
    define_flags()
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(main)
