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
twice is an error, and missing output directories are created. Flag defaults are the
benchmark's: --max_seq_length=512 and --max_predictions_per_seq=76 (the reference defaults to
128 and 20; the MLPerf flow always passes 512 and 76) and --vocab_file is the vendored BERT
vocabulary (the reference has no default).

Instances are held compactly (token ids in arrays, each instance as spans of the corpus plus its
masked positions), records are built in numpy batches, and TensorFlow is not imported.
"""
from __future__ import annotations

import contextlib
import functools
import os
import random
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
from absl import app, flags, logging
from tqdm import tqdm

from benchmark import constants
from cleanup_scripts import VOCAB_FILE
from cleanup_scripts.fileio import InputError, atomic_output, ensure_dir, expand_inputs
from cleanup_scripts.pretraining_features import encode_examples, feature_spec, frame_record
from cleanup_scripts.runner import StageSummary, exit_on_input_error, report, total_bytes
from cleanup_scripts.tokenization import FullTokenizer

WRITE_BATCH = 512


# ---- reading ------------------------------------------------------------------------------------

@dataclass
class Corpus:
    """Tokenized documents: every sentence's ids in one array, sentences as spans of it."""

    tokens: array
    sentence_lengths: array = field(default_factory=lambda: array("q"))
    # (first sentence, number of sentences) of each non-empty document, in reading order.
    documents: list[tuple[int, int]] = field(default_factory=list)

    def sentence_starts(self) -> list[int]:
        """Start of each sentence in `tokens`, plus the end of the last one."""
        starts = np.zeros(len(self.sentence_lengths) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self.sentence_lengths, dtype=np.int64), out=starts[1:])
        return starts.tolist()


def read_corpus(input_files: list[str], tokenizer: FullTokenizer) -> Corpus:
    """Tokenize the sentence-per-line `input_files` (in order) into documents."""
    corpus = Corpus(array("H" if len(tokenizer) <= 1 << 16 else "i"))
    lengths, documents = corpus.sentence_lengths, []
    new_document = True
    try:
        size = total_bytes(input_files)
    except OSError as err:
        raise InputError(f"{err.filename}: cannot read input ({err.strerror})") from err
    bar = tqdm(total=size, desc="tokenizing", unit="B", unit_scale=True, disable=None,
               leave=False)
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
                    ids = tokenizer.tokenize_to_ids(line)
                    if ids:
                        if new_document:
                            documents.append([len(lengths), 0])
                            new_document = False
                        documents[-1][1] += 1
                        corpus.tokens.extend(ids)
                        lengths.append(len(ids))
    finally:
        bar.close()
    corpus.documents = [tuple(document) for document in documents]
    return corpus


# ---- instances ----------------------------------------------------------------------------------

@dataclass
class Instances:
    """Training instances, each as two spans of `Corpus.tokens` plus its masked positions.

    Instance k is [CLS] tokens[a_start[k]:+a_length[k]] [SEP] tokens[b_start[k]:+b_length[k]]
    [SEP]; `mask_count[k]` of its positions (in masking order, not sorted) are in `mask_position`,
    with the id written there in `mask_id` (-1: the original token is kept).
    """

    a_start: array = field(default_factory=lambda: array("q"))
    a_length: array = field(default_factory=lambda: array("q"))
    b_start: array = field(default_factory=lambda: array("q"))
    b_length: array = field(default_factory=lambda: array("q"))
    random_next: array = field(default_factory=lambda: array("q"))
    mask_count: array = field(default_factory=lambda: array("q"))
    mask_position: array = field(default_factory=lambda: array("i"))
    mask_id: array = field(default_factory=lambda: array("i"))

    def __len__(self) -> int:
        return len(self.a_start)


@dataclass(frozen=True)
class MaskingConfig:
    """What the masking needs to know about the vocabulary and the flags."""

    max_seq_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    short_seq_prob: float
    vocab_size: int
    mask_id: int


class InstanceMaker:
    """Creates the instances of documents with exactly the reference's random calls."""

    def __init__(self, corpus: Corpus, documents: list[tuple[int, int]], config: MaskingConfig,
                 rng: random.Random):
        self.documents = documents
        self.starts = corpus.sentence_starts()
        self.lengths = corpus.sentence_lengths
        self.config = config
        self.rng = rng
        self.out = Instances()
        # (i, bit length of i + 1) for i from the most candidates - 1 down to 1: the draws of a
        # Fisher-Yates shuffle as random.Random.shuffle makes them.
        most = config.max_seq_length - 3
        self._draws = [(i, (i + 1).bit_length()) for i in range(most - 1, 0, -1)]
        self._positions = list(range(config.max_seq_length))

    def shuffled_candidates(self, a_length: int, b_length: int) -> list[int]:
        """Positions of the pair's tokens, shuffled as `rng.shuffle` would shuffle them.

        The same `getrandbits` calls as `random.Random.shuffle` (via `_randbelow`), inlined.
        """
        positions = self._positions
        candidates = positions[1:a_length + 1] + positions[a_length + 2:a_length + b_length + 2]
        getrandbits = self.rng.getrandbits
        draws = self._draws
        for i, bits in draws[len(draws) - len(candidates) + 1:]:
            j = getrandbits(bits)
            while j > i:
                j = getrandbits(bits)
            candidates[i], candidates[j] = candidates[j], candidates[i]
        return candidates

    def add_document(self, document_index: int) -> None:
        """Append the instances of one document (reference `create_instances_from_document`)."""
        config, rng, out = self.config, self.rng, self.out
        rand, randint = rng.random, rng.randint
        starts, lengths = self.starts, self.lengths
        first, count = self.documents[document_index]
        max_num_tokens = config.max_seq_length - 3
        target_length = max_num_tokens
        if rand() < config.short_seq_prob:
            target_length = randint(2, max_num_tokens)

        chunk_size = 0
        chunk_length = 0
        i = 0
        while i < count:
            chunk_size += 1
            chunk_length += lengths[first + i]
            if i == count - 1 or chunk_length >= target_length:
                chunk_first = first + i - chunk_size + 1
                a_end = 1
                if chunk_size >= 2:
                    a_end = randint(1, chunk_size - 1)
                a_start = starts[chunk_first]
                a_length = starts[chunk_first + a_end] - a_start

                if chunk_size == 1 or rand() < 0.5:
                    random_next = 1
                    target_b_length = target_length - a_length
                    for _ in range(10):
                        other = randint(0, len(self.documents) - 1)
                        if other != document_index:
                            break
                    other_first, other_count = self.documents[other]
                    sentence = other_first + randint(0, other_count - 1)
                    b_start = starts[sentence]
                    b_length = 0
                    for sentence in range(sentence, other_first + other_count):
                        b_length += lengths[sentence]
                        if b_length >= target_b_length:
                            break
                    # The chunk's unused sentences go back to the document.
                    i -= chunk_size - a_end
                else:
                    random_next = 0
                    b_start = starts[chunk_first + a_end]
                    b_length = starts[chunk_first + chunk_size] - b_start

                # Truncate the longer side, from the front or the back, until the pair fits.
                for _ in range(a_length + b_length - max_num_tokens):
                    if a_length > b_length:
                        if rand() < 0.5:
                            a_start += 1
                        a_length -= 1
                    else:
                        if rand() < 0.5:
                            b_start += 1
                        b_length -= 1

                self._mask(a_length, b_length)
                out.a_start.append(a_start)
                out.a_length.append(a_length)
                out.b_start.append(b_start)
                out.b_length.append(b_length)
                out.random_next.append(random_next)
                chunk_size = 0
                chunk_length = 0
            i += 1

    def _mask(self, a_length: int, b_length: int) -> None:
        """Choose the masked positions of one instance and what replaces each token."""
        config, out = self.config, self.out
        rand, random_word, mask_id = self.rng.random, self._random_word, config.mask_id
        candidates = self.shuffled_candidates(a_length, b_length)
        num_tokens = a_length + b_length + 3
        num_to_predict = min(config.max_predictions_per_seq,
                             max(1, int(round(num_tokens * config.masked_lm_prob))))
        chosen = candidates[:num_to_predict]
        # Per position, in order: [MASK] with random() < 0.8, else the token kept (-1) with
        # random() < 0.5, else a random vocabulary id (randint(0, vocab_size - 1)).
        replacements = [mask_id if rand() < 0.8 else -1 if rand() < 0.5 else random_word()
                        for _ in chosen]
        out.mask_count.append(len(chosen))
        out.mask_position.extend(chosen)
        out.mask_id.extend(replacements)

    def _random_word(self) -> int:
        """`rng.randint(0, vocab_size - 1)`, with the same `getrandbits` calls, inlined."""
        size = self.config.vocab_size
        bits = size.bit_length()
        getrandbits = self.rng.getrandbits
        word = getrandbits(bits)
        while word >= size:
            word = getrandbits(bits)
        return word


def create_instances(corpus: Corpus, config: MaskingConfig, dupe_factor: int,
                     rng: random.Random) -> tuple[Instances, list[int]]:
    """All instances of `corpus`, and the order in which they are written."""
    documents = list(corpus.documents)
    rng.shuffle(documents)
    maker = InstanceMaker(corpus, documents, config, rng)
    with tqdm(total=dupe_factor * len(documents), desc="instances", unit="doc", disable=None,
              leave=False) as bar:
        for _ in range(dupe_factor):
            for document_index in range(len(documents)):
                maker.add_document(document_index)
            bar.update(len(documents))
    order = list(range(len(maker.out)))
    rng.shuffle(order)
    return maker.out, order


# ---- records ------------------------------------------------------------------------------------

class RecordBuilder:
    """Turns batches of instances into the features of their records (numpy)."""

    def __init__(self, corpus: Corpus, instances: Instances, config: MaskingConfig,
                 cls_id: int, sep_id: int):
        self.tokens = (np.frombuffer(corpus.tokens, dtype=corpus.tokens.typecode)
                       if len(corpus.tokens) else np.zeros(1, dtype=np.int64))
        as_np = lambda values: np.frombuffer(values, dtype=np.int64)  # noqa: E731
        self.a_start, self.a_length = as_np(instances.a_start), as_np(instances.a_length)
        self.b_start, self.b_length = as_np(instances.b_start), as_np(instances.b_length)
        self.random_next = as_np(instances.random_next)
        self.mask_count = as_np(instances.mask_count)
        self.mask_offset = np.concatenate(([0], np.cumsum(self.mask_count)[:-1]))
        self.mask_position = np.frombuffer(instances.mask_position, dtype=np.int32)
        self.mask_id = np.frombuffer(instances.mask_id, dtype=np.int32)
        self.config = config
        self.cls_id, self.sep_id = cls_id, sep_id

    def features(self, batch: np.ndarray) -> "OrderedDict[str, np.ndarray]":
        """The seven feature arrays (one row per instance of `batch`), zero padded."""
        seq, max_pred = self.config.max_seq_length, self.config.max_predictions_per_seq
        tokens, cls_id, sep_id = self.tokens, self.cls_id, self.sep_id
        a_length, b_length = self.a_length[batch], self.b_length[batch]
        input_ids = np.zeros((len(batch), seq), dtype=np.int64)
        for row, a_start, a_len, b_start, b_len in zip(
                input_ids, self.a_start[batch].tolist(), a_length.tolist(),
                self.b_start[batch].tolist(), b_length.tolist()):
            row[0] = cls_id
            row[1:a_len + 1] = tokens[a_start:a_start + a_len]
            row[a_len + 1] = sep_id
            row[a_len + 2:a_len + b_len + 2] = tokens[b_start:b_start + b_len]
            row[a_len + b_len + 2] = sep_id

        # Mark each masked position with its replacement (-1: kept); reading the marks back
        # row by row gives every instance's positions in increasing order.
        counts = self.mask_count[batch]
        picks = (np.repeat(self.mask_offset[batch] - np.cumsum(counts) + counts, counts)
                 + np.arange(int(counts.sum())))
        marks = np.full(input_ids.shape, -2, dtype=np.int32)
        marks[np.repeat(np.arange(len(batch)), counts), self.mask_position[picks]] = \
            self.mask_id[picks]
        rows, positions = np.nonzero(marks != -2)
        replacement = marks[rows, positions]
        rank = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
        labels = input_ids[rows, positions]
        replaced = replacement >= 0
        input_ids[rows[replaced], positions[replaced]] = replacement[replaced]

        masked_positions = np.zeros((len(batch), max_pred), dtype=np.int64)
        masked_ids = np.zeros((len(batch), max_pred), dtype=np.int64)
        masked_weights = np.zeros((len(batch), max_pred), dtype=np.float32)
        masked_positions[rows, rank] = positions
        masked_ids[rows, rank] = labels
        masked_weights[rows, rank] = 1.0
        col = np.arange(seq)
        end = (a_length + b_length + 3)[:, None]
        columns = OrderedDict([
            ("input_ids", input_ids),
            ("input_mask", (col < end).view(np.uint8)),
            ("segment_ids", ((col >= (a_length + 2)[:, None]) & (col < end)).view(np.uint8)),
            ("masked_lm_positions", masked_positions),
            ("masked_lm_ids", masked_ids),
            ("masked_lm_weights", masked_weights),
            ("next_sentence_labels", self.random_next[batch, None]),
        ])
        assert list(columns) == list(feature_spec(seq, max_pred))
        return columns


def write_instances(builder: RecordBuilder, order: list[int], output_files: list[str]) -> None:
    """Write the records in `order`, round-robin over `output_files` (each written atomically)."""
    order_array = np.asarray(order, dtype=np.int64)
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(atomic_output(path, "wb")) for path in output_files]
        with tqdm(total=len(order), desc="writing", unit="record", disable=None,
                  leave=False) as bar:
            for begin in range(0, len(order), WRITE_BATCH):
                batch = order_array[begin:begin + WRITE_BATCH]
                records = encode_examples(builder.features(batch))
                for offset in range(len(handles)):
                    handle = handles[(begin + offset) % len(handles)]
                    handle.write(b"".join(frame_record(record)
                                          for record in records[offset::len(handles)]))
                bar.update(len(batch))


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
    """InputError for flag values the reference cannot turn into valid records."""
    if max_seq_length < 5:
        raise InputError(f"--max_seq_length={max_seq_length}: must be at least 5")
    if max_predictions_per_seq < 1:
        raise InputError(f"--max_predictions_per_seq={max_predictions_per_seq}: must be at least 1")
    if dupe_factor < 1:
        raise InputError(f"--dupe_factor={dupe_factor}: must be at least 1")
    if not 0.0 <= masked_lm_prob <= 1.0:
        raise InputError(f"--masked_lm_prob={masked_lm_prob}: must be between 0 and 1")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise InputError(f"--short_seq_prob={short_seq_prob}: must be between 0 and 1")


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
    without any tokens, or an output that cannot be written.
    """
    check_options(max_seq_length, max_predictions_per_seq, dupe_factor, masked_lm_prob,
                  short_seq_prob)
    if not input_files:
        raise InputError("--input_file: no input files")
    if not output_files or any(not path for path in output_files):
        raise InputError(f"--output_file={','.join(output_files)}: empty output file name")
    if len(set(map(os.path.abspath, output_files))) != len(output_files):
        raise InputError(f"--output_file={','.join(output_files)}: a file is listed twice")
    for path in output_files:
        ensure_dir(os.path.dirname(os.path.abspath(path)))
    tokenizer = get_tokenizer(vocab_file, do_lower_case, preserve_unused_tokens)
    vocab = tokenizer.vocab

    corpus = read_corpus(list(input_files), tokenizer)
    if not corpus.documents:
        raise InputError(f"{','.join(input_files)}: no text to make instances from")
    logging.info("read %d documents, %d sentences, %d tokens", len(corpus.documents),
                 len(corpus.sentence_lengths), len(corpus.tokens))

    config = MaskingConfig(max_seq_length, max_predictions_per_seq, masked_lm_prob,
                           short_seq_prob, len(vocab), vocab["[MASK]"])
    rng = random.Random(random_seed)
    instances, order = create_instances(corpus, config, dupe_factor, rng)
    builder = RecordBuilder(corpus, instances, config, vocab["[CLS]"], vocab["[SEP]"])
    write_instances(builder, order, list(output_files))
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
                         "Maximum number of masked LM predictions per sequence.")
    flags.DEFINE_integer("random_seed", constants.PRETRAINING_RANDOM_SEED,
                         "Random seed for data generation.")
    flags.DEFINE_integer("dupe_factor", constants.DUPE_FACTOR,
                         "Number of times to duplicate the input data (with different masks).")
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
    exit_on_input_error(lambda: run(flags.FLAGS))


if __name__ == "__main__":
    define_flags()
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(main)
