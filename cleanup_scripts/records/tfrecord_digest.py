"""Digests of pretraining TFRecords: record count and an md5 of the decoded features.

The md5 runs over every record's features in sorted name order, each as the raw bytes of its
int64 or float32 values, so two files with the same records in the same order agree whatever
the byte layout of their protos. Decoding goes through TensorFlow's own parser
(`tf.io.parse_example` with the standard fixed-length spec), independent of the project's
writer; the records are read by the project's one TFRecord reader (checksums verified). Command
line: python -m cleanup_scripts.records.tfrecord_digest FILE [SEQ_LEN] [MAX_PRED].
"""
from __future__ import annotations

import hashlib
import itertools
import os
import sys

import numpy as np

from benchmark import constants
from cleanup_scripts.records.pretraining_features import RecordLayout, read_records, tf_feature_spec

BATCH = 256  # records parsed per TensorFlow call


def tfrecord_digest(path: str | os.PathLike, max_seq_length: int = constants.MAX_SEQ_LENGTH,
                    max_predictions_per_seq: int = constants.MAX_PREDICTIONS_PER_SEQ
                    ) -> tuple[int, str]:
    """(number of records, md5 of their decoded features) of a pretraining TFRecord file."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    spec = tf_feature_spec(RecordLayout.unpacked(max_seq_length, max_predictions_per_seq))
    names = sorted(spec)
    digest = hashlib.md5()
    count = 0
    records = read_records(path)
    while serialized := list(itertools.islice(records, BATCH)):
        parsed = tf.io.parse_example(tf.constant(serialized), spec)
        columns = [parsed[name].numpy() for name in names]
        for row in range(columns[0].shape[0]):
            for column in columns:
                digest.update(np.ascontiguousarray(column[row]).tobytes())
            count += 1
    return count, digest.hexdigest()


if __name__ == "__main__":
    args = sys.argv[1:]
    count, md5 = tfrecord_digest(args[0], *(int(arg) for arg in args[1:3]))
    print(count, md5)
