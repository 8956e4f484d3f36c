"""Stage 7: BERT pretraining TFRecords from sentence-per-line text (reference script of that name).

    python -m cleanup_scripts.create_pretraining_data --input_file=results/part-00000-of-00500 \\
        --output_file=tfrecord/part-00000-of-00500 --vocab_file=vocab.txt --do_lower_case=True \\
        --max_seq_length=512 --max_predictions_per_seq=76 --masked_lm_prob=0.15 \\
        --random_seed=12345 --dupe_factor=10

Output is record for record the reference's (same decoded features in the same order) for the
same flags. What makes that so is the sequence of calls on one `random.Random(random_seed)`, which
this module repeats exactly:

1. the documents are shuffled (`shuffle`);
2. `dupe_factor` times, for each document in shuffled order: a target length (`random()`, and
   `randint(2, max_seq_length - 3)` for a short one); then per chunk of sentences: where segment A
   ends (`randint`, for chunks of 2+ sentences), whether B is a random next (`random()`, for
   chunks of 2+), and if so a random document (`randint`, up to 10 tries to avoid this one) and
   start sentence (`randint`); the pair's truncation (one `random()` per token removed, from
   the longer side: front or back); the masking (`shuffle` of the candidate positions, then
   per masked position `random()` < 0.8 for [MASK], else `random()` < 0.5 to keep the token,
   else a random vocabulary id via `randint`);
3. the instances are shuffled (`shuffle`) and written round-robin over the output files.

The input is read as the reference's `tf.gfile` reader reads it: lines end at "\\n", every "\\r"
is dropped, each line is `str.strip()`-ed; a blank line ends a document, lines without tokens
are skipped, empty documents are dropped; a document may run on from one input file into the
next when the first does not end with a blank line. Differences from the reference, all for
inputs it cannot handle or cannot reproduce: text that is not UTF-8 stops with an error naming the
file and line (the reference dies with UnicodeDecodeError there); glob matches are read in
sorted order (the reference reads them in directory order, and also matches hidden files);
input with no tokens at all is an error (the reference writes empty files); an output listed
twice is an error, and missing output directories are created. Limits the reference does not
have: --max_seq_length and --max_predictions_per_seq above 4096 are refused (see
`pretraining_instances.MAX_SEQ_LENGTH`), and so is a --dupe_factor whose instances cannot fit
in this machine's memory, or their records on the output's disk (each document makes at least
one instance per duplicate: checked once the input is read, before any instance is made). Flag
defaults are the benchmark's: --max_seq_length=512 and --max_predictions_per_seq=76 (the
reference defaults to 128 and 20; the MLPerf flow always passes 512 and 76) and --vocab_file is
the vendored BERT vocabulary (the reference has no default).

Instances are made by `pretraining_instances.create_instances` (the draws in bulk, from the
generator's words read ahead), held compactly (token ids in arrays, each instance as spans of the
corpus plus its sorted masked positions), and written as records assembled from precomputed byte
fragments (`pretraining_features.PretrainingEncoder`); TensorFlow is not imported.
"""
from __future__ import annotations

import contextlib
import functools
import os
import random
import time
from array import array

import numpy as np
from absl import app, flags, logging
from tqdm import tqdm

from benchmark import constants
from benchmark.capacity import require_disk, require_memory
from benchmark.errors import exit_on_user_error
from benchmark.files import (InputError, atomic_output, check_output, ensure_dir, expand_inputs,
                             naming, refuse_outputs_over_inputs)
from cleanup_scripts import VOCAB_FILE
from cleanup_scripts.pipeline.runner import StageSummary, inner_bar_disabled, report, total_bytes
from cleanup_scripts.records.pretraining_features import (PretrainingEncoder, feature_spec,
                                                          smallest_record_bytes)
from cleanup_scripts.records.pretraining_instances import (KEEP, MAX_SEQ_LENGTH, Corpus, Instances,
                                                           MaskingConfig, create_instances)
from cleanup_scripts.records.tokenization import FullTokenizer

WRITE_BATCH = 1024
# Bytes an instance takes in memory at the least: its six int64 spans and flags, one masked
# position (uint16) and its id (int32), and its place in the write order (a list slot and an int).
INSTANCE_BYTES = 6 * 8 + 2 + 4 + 8 + 28


# ---- reading ------------------------------------------------------------------------------------

def read_corpus(input_files: list[str], tokenizer: FullTokenizer) -> Corpus:
    """Tokenize the sentence-per-line `input_files` (in order) into documents."""
    corpus = Corpus(array(tokenizer.typecode))
    tokens, lengths, documents = corpus.tokens, corpus.sentence_lengths, []
    packed_ids, item_size = tokenizer.packed_ids, corpus.tokens.itemsize
    new_document = True
    try:
        size = total_bytes(input_files)
    except OSError as err:
        raise InputError(f"{err.filename}: cannot read input ({err.strerror})") from err
    bar = tqdm(total=size, desc="tokenizing", unit="B", unit_scale=True,
               disable=inner_bar_disabled(), leave=False)
    try:
        for path in input_files:
            try:
                handle = open(path, "rb")
            except OSError as err:
                raise InputError(f"{path}: cannot read input ({err.strerror})") from err
            with handle:
                for number, raw in enumerate(handle, 1):
                    bar.update(len(raw))
                    if b"\r" in raw:
                        raw = raw.replace(b"\r", b"")
                        if not raw:  # a last line of only "\r": the reference sees end of file
                            break
                    try:
                        line = raw.decode("utf-8").strip()
                    except UnicodeDecodeError as err:
                        raise InputError(f"{path}: line {number} is not UTF-8 text "
                                         f"(byte {err.start} of the line)") from err
                    if not line:
                        new_document = True
                        continue
                    ids = packed_ids(line)
                    if ids:
                        if new_document:
                            documents.append([len(lengths), 0])
                            new_document = False
                        documents[-1][1] += 1
                        tokens.frombytes(ids)
                        lengths.append(len(ids) // item_size)
    finally:
        bar.close()
    corpus.documents = [tuple(document) for document in documents]
    return corpus


# ---- records ------------------------------------------------------------------------------------

def range_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[0], starts[0] + 1, ... (lengths[0] of them), then the same for each range."""
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))


class RecordWriter:
    """The TFRecords of instances: each batch's token ids and masked labels are built with
    numpy, their bytes by `PretrainingEncoder`."""

    def __init__(self, corpus: Corpus, instances: Instances, config: MaskingConfig,
                 cls_id: int, sep_id: int):
        # The corpus tokens, then [CLS] and [SEP]: every part of an instance is a range of these.
        self.source = np.concatenate((np.frombuffer(corpus.tokens, dtype=corpus.tokens.typecode),
                                      np.array([cls_id, sep_id], dtype=corpus.tokens.typecode)))
        self.cls_at, self.sep_at = len(corpus.tokens), len(corpus.tokens) + 1
        as_np = lambda values: np.frombuffer(values, dtype=np.int64)  # noqa: E731
        self.a_start, self.a_length = as_np(instances.a_start), as_np(instances.a_length)
        self.b_start, self.b_length = as_np(instances.b_start), as_np(instances.b_length)
        self.random_next = as_np(instances.random_next)
        self.mask_count = as_np(instances.mask_count)
        self.mask_offset = np.cumsum(self.mask_count) - self.mask_count
        self.mask_position = np.frombuffer(instances.mask_position, dtype=np.uint16)
        self.mask_id = np.frombuffer(instances.mask_id, dtype=np.int32)
        self.encoder = PretrainingEncoder(config.max_seq_length, config.max_predictions_per_seq,
                                          config.vocab_size)

    def records(self, batch: np.ndarray) -> list[bytes]:
        """The framed records of the instances in `batch` (indices), in that order."""
        a_length, b_length = self.a_length[batch], self.b_length[batch]
        token_counts = a_length + b_length + 3
        tokens = self._tokens(batch)
        mask_counts = self.mask_count[batch]
        mask_at = range_indices(self.mask_offset[batch], mask_counts)
        positions = self.mask_position.take(mask_at).astype(np.int64)
        cells = np.repeat(np.cumsum(token_counts) - token_counts, mask_counts) + positions
        labels = tokens.take(cells)
        replacement = self.mask_id.take(mask_at)
        replaced = replacement != KEEP
        tokens[cells[replaced]] = replacement[replaced]
        return self.encoder.records(tokens, token_counts, a_length, positions, labels,
                                    mask_counts, self.random_next[batch])

    def _tokens(self, batch: np.ndarray) -> np.ndarray:
        """[CLS] A [SEP] B [SEP] of each instance of `batch`, one after another (int64)."""
        rows = len(batch)
        cls, sep = np.full(rows, self.cls_at), np.full(rows, self.sep_at)
        ones = np.ones(rows, dtype=np.int64)
        starts = np.stack((cls, self.a_start[batch], sep, self.b_start[batch], sep), axis=1)
        lengths = np.stack((ones, self.a_length[batch], ones, self.b_length[batch], ones), axis=1)
        return self.source.take(range_indices(starts.ravel(), lengths.ravel())).astype(np.int64)


def write_instances(writer: RecordWriter, order: list[int], output_files: list[str]) -> None:
    """Write the records in `order`, round-robin over `output_files` (each written atomically)."""
    order_array = np.asarray(order, dtype=np.int64)
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(atomic_output(path, "wb")) for path in output_files]
        with tqdm(total=len(order), desc="writing", unit="record", disable=inner_bar_disabled(),
                  leave=False) as bar:
            for begin in range(0, len(order), WRITE_BATCH):
                records = writer.records(order_array[begin:begin + WRITE_BATCH])
                for offset in range(len(handles)):
                    handle = handles[(begin + offset) % len(handles)]
                    handle.write(b"".join(records[offset::len(handles)]))
                bar.update(len(records))


# ---- the stage ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=2)
def _cached_tokenizer(vocab_file: str, stamp: tuple, do_lower_case: bool,
                      preserve_unused_tokens: bool) -> FullTokenizer:
    del stamp  # part of the key only: a changed file is loaded again
    return FullTokenizer(vocab_file, do_lower_case, preserve_unused_tokens)


def get_tokenizer(vocab_file: str, do_lower_case: bool,
                  preserve_unused_tokens: bool = False) -> FullTokenizer:
    """A tokenizer for `vocab_file`, shared (with its word cache) by calls in one process."""
    try:
        stat = os.stat(vocab_file)
    except OSError as err:
        raise InputError(f"{vocab_file}: cannot read vocab file ({err.strerror})") from err
    return _cached_tokenizer(str(vocab_file), (stat.st_mtime_ns, stat.st_size, stat.st_ino),
                             do_lower_case, preserve_unused_tokens)


def check_options(max_seq_length: int, max_predictions_per_seq: int, dupe_factor: int,
                  masked_lm_prob: float, short_seq_prob: float) -> None:
    """InputError for flag values the reference cannot turn into valid records, or whose
    instances could not fit in this machine's memory even from one document."""
    if not 5 <= max_seq_length <= MAX_SEQ_LENGTH:
        raise InputError(f"--max_seq_length={max_seq_length}: must be at least 5 "
                         f"and at most {MAX_SEQ_LENGTH}")
    if not 1 <= max_predictions_per_seq <= MAX_SEQ_LENGTH:
        raise InputError(f"--max_predictions_per_seq={max_predictions_per_seq}: must be at least "
                         f"1 and at most {MAX_SEQ_LENGTH}")
    if dupe_factor < 1:
        raise InputError(f"--dupe_factor={dupe_factor}: must be at least 1")
    with naming(f"--dupe_factor={dupe_factor}"):
        require_memory(f"{dupe_factor:,} instances (at least one per duplicate of a document)",
                       dupe_factor * INSTANCE_BYTES)
    if not 0.0 <= masked_lm_prob <= 1.0:
        raise InputError(f"--masked_lm_prob={masked_lm_prob}: must be between 0 and 1")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise InputError(f"--short_seq_prob={short_seq_prob}: must be between 0 and 1")


def check_capacity(documents: int, dupe_factor: int, max_seq_length: int,
                   max_predictions_per_seq: int, output_files: list[str]) -> None:
    """InputError naming --dupe_factor when the instances of `documents` documents (at least
    one per document per duplicate) cannot fit in this machine's memory, or their records
    (at least `smallest_record_bytes` each, round-robin over `output_files`) on the disks of
    the output files' folders."""
    instances = dupe_factor * documents
    with naming(f"--dupe_factor={dupe_factor}"):
        require_memory(f"{instances:,} instances (at least one per duplicate of each of "
                       f"{documents:,} documents)", instances * INSTANCE_BYTES)
        record = smallest_record_bytes(feature_spec(max_seq_length, max_predictions_per_seq))
        by_disk: dict[int, list] = {}  # device -> [a folder on it, records written there]
        for path in output_files:
            folder = os.path.dirname(os.path.abspath(path))
            by_disk.setdefault(os.stat(folder).st_dev, [folder, 0])[1] += (
                instances // len(output_files))
        for folder, records in by_disk.values():
            require_disk(f"{records:,} records of at least {record:,} bytes",
                         records * record, folder)


def write_pretraining_data(input_files: list[str], output_files: list[str],
                           vocab_file: str = str(VOCAB_FILE), do_lower_case: bool = True,
                           max_seq_length: int = constants.MAX_SEQ_LENGTH,
                           max_predictions_per_seq: int = constants.MAX_PREDICTIONS_PER_SEQ,
                           random_seed: int = constants.PRETRAINING_RANDOM_SEED,
                           dupe_factor: int = constants.DUPE_FACTOR,
                           masked_lm_prob: float = constants.MASKED_LM_PROB,
                           short_seq_prob: float = constants.SHORT_SEQ_PROB,
                           preserve_unused_tokens: bool = False) -> int:
    """Read `input_files` (in order), write the TFRecords to `output_files`; returns the count.

    InputError (and no output file) for a bad vocabulary, unreadable or non-UTF-8 input, input
    without any tokens, instances that cannot fit (`check_capacity`), or an output that cannot
    be written; RefusedOutput, before anything is read, for an output that is an input, a link
    or a special file (`/dev/null`).
    """
    check_options(max_seq_length, max_predictions_per_seq, dupe_factor, masked_lm_prob,
                  short_seq_prob)
    if not input_files:
        raise InputError("--input_file: no input files")
    if not output_files or any(not path for path in output_files):
        raise InputError(f"--output_file={','.join(output_files)}: empty output file name")
    if len(set(map(os.path.abspath, output_files))) != len(output_files):
        raise InputError(f"--output_file={','.join(output_files)}: a file is listed twice")
    with naming("--output_file"):
        refuse_outputs_over_inputs(input_files, output_files)
    for path in output_files:
        check_output(path)
        ensure_dir(os.path.dirname(os.path.abspath(path)))
    tokenizer = get_tokenizer(vocab_file, do_lower_case, preserve_unused_tokens)
    vocab = tokenizer.vocab

    corpus = read_corpus(list(input_files), tokenizer)
    if not corpus.documents:
        raise InputError(f"{','.join(input_files)}: no text to make instances from")
    logging.info("read %d documents, %d sentences, %d tokens", len(corpus.documents),
                 len(corpus.sentence_lengths), len(corpus.tokens))
    check_capacity(len(corpus.documents), dupe_factor, max_seq_length, max_predictions_per_seq,
                   list(output_files))

    config = MaskingConfig(max_seq_length, max_predictions_per_seq, masked_lm_prob,
                           short_seq_prob, len(vocab), vocab["[MASK]"])
    rng = random.Random(random_seed)
    instances, order = create_instances(corpus, config, dupe_factor, rng)
    writer = RecordWriter(corpus, instances, config, vocab["[CLS]"], vocab["[SEP]"])
    write_instances(writer, order, list(output_files))
    logging.info("wrote %d instances to %s", len(order), ",".join(output_files))
    return len(order)


def define_flags() -> None:
    """The reference's flags (see the module docstring for the two defaults that differ)."""
    flags.DEFINE_string("input_file", None,
                        "Input text file, or a comma-separated list of files or globs.")
    flags.DEFINE_string("output_file", None,
                        "Output TFRecord file, or a comma-separated list (records go round-robin).")
    flags.DEFINE_string("vocab_file", str(VOCAB_FILE), "WordPiece vocabulary of the model.")
    flags.DEFINE_bool("do_lower_case", True,
                      "Lower-case (and strip accents from) the text: True for uncased models.")
    flags.DEFINE_integer("max_seq_length", constants.MAX_SEQ_LENGTH, "Maximum sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", constants.MAX_PREDICTIONS_PER_SEQ,
                         f"Maximum number of masked LM predictions per sequence (1 to "
                         f"{MAX_SEQ_LENGTH}).")
    flags.DEFINE_integer("random_seed", constants.PRETRAINING_RANDOM_SEED,
                         "Random seed for data generation.")
    flags.DEFINE_integer("dupe_factor", constants.DUPE_FACTOR,
                         "Number of times to duplicate the input data (with different masks); "
                         "refused when the instances cannot fit in memory or their records on "
                         "the output's disk.")
    flags.DEFINE_float("masked_lm_prob", constants.MASKED_LM_PROB, "Masked LM probability.")
    flags.DEFINE_float("short_seq_prob", constants.SHORT_SEQ_PROB,
                       "Probability of a sequence shorter than the maximum length.")
    flags.DEFINE_bool("preserve_unused_tokens", False,
                      "Keep [unusedN] vocabulary tokens whole instead of WordPiece-splitting them.")


def run(flag_values: flags.FlagValues) -> None:
    """The CLI's work: expand the inputs, write the records, print the summary line."""
    started = time.time()
    input_files: list[str] = []
    for pattern in flag_values.input_file.split(","):
        input_files.extend(expand_inputs(pattern))
    output_files = flag_values.output_file.split(",")
    count = write_pretraining_data(
        input_files, output_files, vocab_file=flag_values.vocab_file,
        do_lower_case=flag_values.do_lower_case, max_seq_length=flag_values.max_seq_length,
        max_predictions_per_seq=flag_values.max_predictions_per_seq,
        random_seed=flag_values.random_seed, dupe_factor=flag_values.dupe_factor,
        masked_lm_prob=flag_values.masked_lm_prob, short_seq_prob=flag_values.short_seq_prob,
        preserve_unused_tokens=flag_values.preserve_unused_tokens)
    report(StageSummary("create_pretraining_data", len(input_files), count,
                        total_bytes(input_files), started))


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    exit_on_user_error(lambda: run(flags.FLAGS))


if __name__ == "__main__":
    define_flags()
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(main)
