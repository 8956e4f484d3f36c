"""Small, learnable pre-training TFRecords for the training-loop tests.

Each record is a cyclic run of token ids: position i holds FIRST_TOKEN + (offset + i) % PERIOD
with offset 0 or 1 (chosen per record), behind [CLS] and closed by [SEP]; MASKED positions are
replaced by [MASK] (id 3) and are the masked-LM labels (weight 1 each, so every record weighs
the same); next_sentence_labels is the offset. A one-layer model learns to read the offset from
any unmasked token, so masked-LM accuracy climbs from chance (1/vocab) to ~1.0 within a few
dozen updates, which lets a test reach the benchmark's real target 0.720.

Records are written with the shared feature spec's encoder
(cleanup_scripts.records.pretraining_features), the same protos create_pretraining_data writes.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from cleanup_scripts.records.pretraining_features import (encode_examples, feature_spec,
                                                          read_records, write_records)

SEQ_LENGTH = 16
MAX_PREDICTIONS = 4
VOCAB_SIZE = 32
FIRST_TOKEN = 8
PERIOD = 16
MASK_ID = 3

TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
    "max_position_embeddings": SEQ_LENGTH, "num_attention_heads": 2, "num_hidden_layers": 1,
    "type_vocab_size": 2, "vocab_size": VOCAB_SIZE,
}


def make_columns(count: int, seed: int) -> dict[str, np.ndarray]:
    """`count` records as feature columns (the order of feature_spec)."""
    rng = np.random.default_rng(seed)
    body = SEQ_LENGTH - 2
    offsets = rng.integers(0, 2, size=count)
    positions = np.arange(1, body + 1)
    tokens = FIRST_TOKEN + (offsets[:, None] + positions[None, :]) % PERIOD
    input_ids = np.zeros((count, SEQ_LENGTH), np.int64)
    input_ids[:, 0] = 1
    input_ids[:, 1:body + 1] = tokens
    input_ids[:, body + 1] = 2
    masked_positions = np.sort(np.stack([rng.choice(positions, MAX_PREDICTIONS, replace=False)
                                         for _ in range(count)]), axis=1)
    labels = np.take_along_axis(input_ids, masked_positions, axis=1)
    np.put_along_axis(input_ids, masked_positions, MASK_ID, axis=1)
    columns = {
        "input_ids": input_ids,
        "input_mask": np.ones((count, SEQ_LENGTH), np.int64),
        "segment_ids": (np.arange(SEQ_LENGTH)[None, :] >= SEQ_LENGTH // 2).astype(np.int64)
        .repeat(count, axis=0),
        "masked_lm_positions": masked_positions.astype(np.int64),
        "masked_lm_ids": labels.astype(np.int64),
        "masked_lm_weights": np.ones((count, MAX_PREDICTIONS), np.float32),
        "next_sentence_labels": offsets[:, None].astype(np.int64),
    }
    assert list(columns) == list(feature_spec(SEQ_LENGTH, MAX_PREDICTIONS))
    return columns


def write_tfrecord(path: Path, count: int, seed: int) -> Path:
    """Write `count` synthetic records to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        write_records(handle, encode_examples(make_columns(count, seed)))
    return path


# 256 random bytes: no tf.train.Example, and TensorFlow's parse error, which quotes them, is no
# UTF-8 (its message then fails to decode: a UnicodeDecodeError instead of InvalidArgumentError).
RANDOM_RECORD = random.Random(0).randbytes(256)


def put_random_record(path: Path, index: int) -> Path:
    """Rewrite the TFRecord file `path` with record `index` replaced by RANDOM_RECORD, every
    record framed by TensorFlow's own TFRecordWriter (so every CRC is valid)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    records = list(read_records(path))
    records[index] = RANDOM_RECORD
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return path


def write_dataset(root: Path, train_files: int = 2, train_records: int = 256,
                  eval_records: int = 200) -> dict[str, str]:
    """A tiny dataset under `root`: bert_config.json, part-0000N files and eval_10k.

    Returns the flags that point run_pretraining at it.
    """
    root.mkdir(parents=True, exist_ok=True)
    config = root / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    for index in range(train_files):
        write_tfrecord(root / f"part-{index:05d}-of-{train_files:05d}", train_records,
                       seed=100 + index)
    write_tfrecord(root / "eval_10k", eval_records, seed=7)
    return {"bert_config_file": str(config), "input_file": str(root / "part-*"),
            "eval_file": str(root / "eval_10k"), "max_seq_length": str(SEQ_LENGTH),
            "max_predictions_per_seq": str(MAX_PREDICTIONS)}
