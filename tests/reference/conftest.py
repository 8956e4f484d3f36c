"""Fixtures for the TF2 reference-model tests: the reference-made tiny checkpoint and batches.

Everything under tests/fixtures/reference_model/ was produced by running the MLPerf reference's
TF1 code (and the reference TF2 port's model code) outside this repository; its README says how.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from reference.bert_config import BertConfig, load_bert_config

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "reference_model"


def read_batch(path: Path, seq_length: int, max_predictions: int) -> dict[str, tf.Tensor]:
    """All records of a pre-training TFRecord file as one batch (ints as int32)."""
    spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64)
            for name in ("input_ids", "input_mask", "segment_ids")}
    spec.update({name: tf.io.FixedLenFeature([max_predictions], tf.int64)
                 for name in ("masked_lm_positions", "masked_lm_ids")})
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    batch = tf.io.parse_example(records, spec)
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in batch.items()}


@pytest.fixture(scope="session")
def ref_dir() -> Path:
    """The reference-model fixture directory."""
    return FIXTURE_DIR


@pytest.fixture(scope="session")
def ref_results() -> dict:
    """reference_results.json: metrics, LAMB settings and per-step values from the reference."""
    return json.loads((FIXTURE_DIR / "reference_results.json").read_text())


@pytest.fixture(scope="session")
def ref_arrays() -> dict[str, np.ndarray]:
    """reference_arrays.npz: per-prediction losses and variables after the LAMB steps."""
    with np.load(FIXTURE_DIR / "reference_arrays.npz") as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="session")
def tiny_config(ref_results) -> BertConfig:
    """The tiny BERT configuration the fixtures were made with."""
    return load_bert_config(FIXTURE_DIR / ref_results["bert_config"])


@pytest.fixture(scope="session")
def tiny_config_no_dropout(tiny_config) -> BertConfig:
    """The tiny configuration with both dropout probabilities 0 (the reference's eval model),
    for comparisons that must not draw dropout masks."""
    return dataclasses.replace(tiny_config, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)


@pytest.fixture(scope="session")
def tf1_checkpoint(ref_results) -> str:
    """Prefix of the reference-made TF1 checkpoint (weights + Adam/LAMB slots + global step)."""
    return str(FIXTURE_DIR / ref_results["tf1_checkpoint"])


@pytest.fixture(scope="session")
def tf2_checkpoint(ref_results) -> str:
    """Prefix of the same weights in the reference TF2 port's checkpoint layout."""
    return str(FIXTURE_DIR / ref_results["tf2_checkpoint"])


@pytest.fixture(scope="session")
def eval_batch(ref_results) -> dict[str, tf.Tensor]:
    """The 16-example eval batch the reference metrics were computed on."""
    return read_batch(FIXTURE_DIR / "eval.tfrecord", ref_results["seq_length"],
                      ref_results["max_predictions_per_seq"])


@pytest.fixture(scope="session")
def train_batch(ref_results) -> dict[str, tf.Tensor]:
    """The 8-example batch the reference's three LAMB steps were taken on."""
    return read_batch(FIXTURE_DIR / "train.tfrecord", ref_results["seq_length"],
                      ref_results["max_predictions_per_seq"])
