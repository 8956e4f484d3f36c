"""The reference's loss and metric definitions on hand-made logits."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from reference.losses import (EvalMetrics, masked_lm_loss, metric_sums, next_sentence_loss,
                              pretraining_losses)


def batch():
    # 2 examples x 3 predictions over a vocabulary of 4; the last prediction of each is padding.
    logits = tf.constant(np.log([[[0.7, 0.1, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1], [1, 1, 1, 1]],
                                 [[0.25, 0.25, 0.25, 0.25], [0.1, 0.1, 0.1, 0.7], [9, 1, 1, 1]]]),
                         tf.float32)
    features = {
        "masked_lm_ids": tf.constant([[0, 2, 3], [1, 3, 0]]),
        "masked_lm_weights": tf.constant([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]),
        "next_sentence_labels": tf.constant([[0], [1]]),
    }
    nsp_logits = tf.constant(np.log([[0.8, 0.2], [0.6, 0.4]]), tf.float32)
    return {"masked_lm_logits": logits, "next_sentence_logits": nsp_logits}, features


def test_masked_lm_loss_uses_weights_and_the_epsilon_denominator():
    outputs, features = batch()
    ce = [-math.log(0.7), -math.log(0.2), -math.log(0.25), -math.log(0.7)]
    loss = masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                          features["masked_lm_weights"])
    assert float(loss) == pytest.approx(sum(ce) / (4 + 1e-5), rel=1e-6)
    zero = masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                          tf.zeros([2, 3]))
    assert float(zero) == 0.0  # no predictions: 0 / 1e-5, not NaN


def test_next_sentence_loss_and_total():
    outputs, features = batch()
    expected_nsp = (-math.log(0.8) - math.log(0.4)) / 2
    assert float(next_sentence_loss(outputs["next_sentence_logits"],
                                    features["next_sentence_labels"])) == \
        pytest.approx(expected_nsp, rel=1e-6)
    losses = pretraining_losses(outputs, features)
    assert float(losses["total_loss"]) == pytest.approx(
        float(losses["masked_lm_loss"]) + expected_nsp, rel=1e-6)


def test_metrics_are_weighted_and_accumulate_over_batches():
    outputs, features = batch()
    whole = EvalMetrics()
    whole.update(metric_sums(outputs, features))
    result = whole.result()
    # Real predictions: argmax 0 (label 0, right), 1 (label 2, wrong), 0 (tie; label 1, wrong),
    # 3 (label 3, right); the padded third predictions are ignored despite their logits.
    assert result["masked_lm_accuracy"] == pytest.approx(0.5)
    assert result["masked_lm_loss"] == pytest.approx(
        (-math.log(0.7) - math.log(0.2) - math.log(0.25) - math.log(0.7)) / 4, rel=1e-6)
    assert result["next_sentence_accuracy"] == pytest.approx(0.5)  # predicts 0 twice

    split = EvalMetrics()
    for i in range(2):
        part_out = {k: v[i:i + 1] for k, v in outputs.items()}
        part_feat = {k: v[i:i + 1] for k, v in features.items()}
        split.update(metric_sums(part_out, part_feat))
    for key, value in split.result().items():
        assert value == pytest.approx(result[key], rel=1e-7)
    split.reset()
    assert math.isnan(split.result()["masked_lm_accuracy"])
