"""Stage 8: the evaluation set, `num_examples_to_pick` records spread evenly over a TFRecord file.

    python -m cleanup_scripts.pick_eval_samples --input_tfrecord=eval_intermediate \\
        --output_tfrecord=eval_10k --num_examples_to_pick=10000 \\
        --max_seq_length=512 --max_predictions_per_seq=76

Output record i is input record `int(i * pick_ratio)`, `pick_ratio = num_records /
num_examples_to_pick` computed in floating point, exactly as the reference
`pick_eval_samples.py` does (this is not always `i * num_records // num_examples_to_pick`:
with 6 records and 10,000 picks, i = 5000 gives 2.9999999999999996, so record 2, not 3). Each
picked record is decoded with the pretraining feature spec (int64 values pass through int32,
as in the reference) and written again with just those seven features, so the records are the
reference's feature for feature.

When the input holds fewer records than asked for, the reference still writes
`num_examples_to_pick` records, repeating input records (each about `num_examples_to_pick /
num_records` times, in order); this does the same, with a warning. An input without records,
or a record without the expected features, is an error (the reference crashes on both), and so
is a --num_examples_to_pick whose records cannot fit on the output's disk (each takes at least
`smallest_record_bytes`; checked before the input is read).

The input is streamed twice (a count of the records, then the picking); only one batch of
picked records (at most BATCH, repeats included) is held in memory, and TensorFlow is not
needed.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable, Iterator

import numpy as np
from absl import logging

from benchmark import constants
from benchmark.capacity import require_disk
from benchmark.errors import exit_on_user_error
from benchmark.files import (InputError, atomic_output, check_output, ensure_dir, naming,
                             refuse_outputs_over_inputs)
from cleanup_scripts.pipeline.runner import StageSummary, report
from cleanup_scripts.records.pretraining_features import (DecodeError, count_records,
                                                          encode_examples, feature_spec,
                                                          parse_pretraining_example, read_records,
                                                          smallest_record_bytes, write_records)

BATCH = 512


def pick_indices(num_records: int, num_to_pick: int) -> Iterator[int]:
    """The input record of each output record, in output order (non-decreasing)."""
    pick_ratio = num_records / num_to_pick
    for i in range(num_to_pick):
        yield int(i * pick_ratio)


def _canonical(record: bytes, spec, path: str, index: int) -> dict[str, np.ndarray]:
    """The spec's features of one record as the reference re-encodes them."""
    try:
        features = parse_pretraining_example(record, spec)
    except DecodeError as err:
        raise InputError(f"{path}: record {index} is not a pretraining example ({err})") from err
    return {name: (values.astype(np.int32).astype(np.int64) if values.dtype == np.int64
                   else values) for name, values in features.items()}


def check_room(num_examples_to_pick: int, max_seq_length: int, max_predictions_per_seq: int,
               output_tfrecord: str) -> None:
    """InputError "N records of at least B bytes take at least ..." when `num_examples_to_pick`
    records of those shapes (at least `smallest_record_bytes` each) cannot fit on the disk of
    `output_tfrecord`'s folder; the caller names the flag that asked (`naming`)."""
    record = smallest_record_bytes(feature_spec(max_seq_length, max_predictions_per_seq))
    require_disk(f"{num_examples_to_pick:,} records of at least {record:,} bytes",
                 num_examples_to_pick * record, os.path.dirname(os.path.abspath(output_tfrecord)))


def pick_examples(input_tfrecord: str, output_tfrecord: str,
                  num_examples_to_pick: int = constants.EVAL_SAMPLES,
                  max_seq_length: int = constants.MAX_SEQ_LENGTH,
                  max_predictions_per_seq: int = constants.MAX_PREDICTIONS_PER_SEQ,
                  progress: Callable[[int], None] | None = None,
                  repeats_level: int = logging.WARNING) -> int:
    """Write the picked records of `input_tfrecord` to `output_tfrecord`; returns how many.

    `progress(n)`, when given, is called as each batch of n picked records is written.
    `repeats_level`: the absl level of the line saying that the input holds fewer records than
    asked for, so some are repeated (make preprocess: INFO, as the embedded slice always does).
    Messages name the reference script's flags (make preprocess checks its own first).

    InputError (and no output file) for an unreadable, empty or damaged input, a record that
    does not match the feature spec, more records than the output's disk can hold
    (`check_room`), or an output that cannot be written; RefusedOutput, before anything is
    read, for an output that is the input, a link or a special file.
    """
    if not input_tfrecord:
        raise InputError("--input_tfrecord: no input file given")
    if not output_tfrecord:
        raise InputError("--output_tfrecord: no output file given")
    if num_examples_to_pick < 1:
        raise InputError(f"--num_examples_to_pick={num_examples_to_pick}: must be at least 1")
    if max_seq_length < 1 or max_predictions_per_seq < 1:
        raise InputError("--max_seq_length and --max_predictions_per_seq must be at least 1")
    with naming("--output_tfrecord"):
        refuse_outputs_over_inputs([input_tfrecord], [output_tfrecord])
    check_output(output_tfrecord)
    with naming(f"--num_examples_to_pick={num_examples_to_pick}"):
        check_room(num_examples_to_pick, max_seq_length, max_predictions_per_seq,
                   output_tfrecord)
    num_records = count_records(input_tfrecord)
    if num_records == 0:
        raise InputError(f"{input_tfrecord}: no records to pick from")
    if num_records < num_examples_to_pick:
        logging.log(repeats_level, "%s: %d records, fewer than the %d asked for: records are "
                    "repeated, as the reference does", input_tfrecord, num_records,
                    num_examples_to_pick)
    ensure_dir(os.path.dirname(os.path.abspath(output_tfrecord)))
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    wanted = pick_indices(num_records, num_examples_to_pick)
    next_index = next(wanted)
    picked = 0
    batch: list[dict[str, np.ndarray]] = []
    with atomic_output(output_tfrecord, "wb") as out:

        def flush() -> None:
            columns = {name: np.stack([features[name] for features in batch]).reshape(
                len(batch), -1) for name in spec}
            write_records(out, encode_examples(columns))
            if progress is not None:
                progress(len(batch))
            batch.clear()

        for index, record in enumerate(read_records(input_tfrecord)):
            if index < next_index:
                continue
            features = _canonical(record, spec, input_tfrecord, index)
            while next_index == index:
                batch.append(features)
                picked += 1
                next_index = next(wanted, None)
                if len(batch) >= BATCH:
                    flush()
            if next_index is None:
                break
        if batch:
            flush()
    if picked != num_examples_to_pick:  # the file changed between the count and the reading
        raise InputError(f"{input_tfrecord}: changed while it was read")
    logging.info("picked %d of %d records", picked, num_records)
    return picked


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference pick_eval_samples.py: its argparse command line (same
    flags, defaults and abbreviations); messages through absl logging, as everywhere here."""
    parser = argparse.ArgumentParser(description="Eval sample picker for BERT.")
    parser.add_argument("--input_tfrecord", type=str, default="", help="Input TFRecord path.")
    parser.add_argument("--output_tfrecord", type=str, default="", help="Output TFRecord path.")
    parser.add_argument("--num_examples_to_pick", type=int, default=constants.EVAL_SAMPLES,
                        help="Number of examples to pick (refused when they cannot fit on the "
                        "output's disk).")
    parser.add_argument("--max_seq_length", type=int, default=constants.MAX_SEQ_LENGTH,
                        help="The maximum number of tokens within a sequence.")
    parser.add_argument("--max_predictions_per_seq", type=int,
                        default=constants.MAX_PREDICTIONS_PER_SEQ,
                        help="The maximum number of predictions within a sequence.")
    args = parser.parse_args(argv)
    logging.set_verbosity(logging.INFO)
    started = time.time()
    picked = pick_examples(args.input_tfrecord, args.output_tfrecord, args.num_examples_to_pick,
                           args.max_seq_length, args.max_predictions_per_seq)
    report(StageSummary("pick_eval_samples", 1, picked, os.path.getsize(args.input_tfrecord),
                        started))


if __name__ == "__main__":
    exit_on_user_error(main)
