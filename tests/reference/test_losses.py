"""The reference's loss and metric definitions on hand-made logits (the masked-LM head's rows are
the logits themselves: an identity output table and a zero bias)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from reference import losses
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
    return head_outputs(tf.reshape(logits, [-1, 4]), nsp_logits), features


def head_outputs(logits, nsp_logits):
    """Model outputs whose masked-LM logits are `logits` [N, vocab]."""
    vocab = logits.shape[-1]
    return {"masked_lm_hidden": logits, "masked_lm_output_weights": tf.eye(vocab),
            "masked_lm_output_bias": tf.zeros([vocab]), "next_sentence_logits": nsp_logits}


def test_masked_lm_loss_uses_weights_and_the_epsilon_denominator():
    outputs, features = batch()
    ce = [-math.log(0.7), -math.log(0.2), -math.log(0.25), -math.log(0.7)]
    head = [outputs[k] for k in ("masked_lm_hidden", "masked_lm_output_weights",
                                 "masked_lm_output_bias")]
    loss = masked_lm_loss(*head, features["masked_lm_ids"], features["masked_lm_weights"])
    assert float(loss) == pytest.approx(sum(ce) / (4 + 1e-5), rel=1e-6)
    zero = masked_lm_loss(*head, features["masked_lm_ids"], tf.zeros([2, 3]))
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
        part_out = head_outputs(outputs["masked_lm_hidden"][3 * i:3 * i + 3],
                                outputs["next_sentence_logits"][i:i + 1])
        part_feat = {k: v[i:i + 1] for k, v in features.items()}
        split.update(metric_sums(part_out, part_feat))
    for key, value in split.result().items():
        assert value == pytest.approx(result[key], rel=1e-7)
    split.reset()
    assert math.isnan(split.result()["masked_lm_accuracy"])


@pytest.mark.parametrize("rows,max_rows,count", [(2432, 512, 8), (608, 512, 2), (608, 1024, 1),
                                                 (7, 512, 1), (13, 4, 13), (24, 5, 6),
                                                 (0, 512, 1)])
def test_block_count_splits_rows_into_the_fewest_equal_blocks(rows, max_rows, count):
    assert losses.block_count(rows, max_rows) == count


def _one_hot_loss(hidden, table, bias, ids, weights):
    """The reference's masked-LM loss from whole logits and a one-hot product."""
    log_probs = tf.nn.log_softmax(tf.matmul(hidden, table, transpose_b=True) + bias, axis=-1)
    one_hot = tf.one_hot(tf.reshape(ids, [-1]), table.shape[0], dtype=tf.float32)
    ce = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    w = tf.reshape(weights, [-1])
    return tf.reduce_sum(w * ce) / (tf.reduce_sum(w) + 1e-5), log_probs


@pytest.mark.parametrize("block_rows", [0, 512, 5])
@pytest.mark.parametrize("compile_mode", ["eager", "function", "xla"])
def test_blocked_head_matches_whole_logits_loss_gradients_and_predictions(block_rows,
                                                                          compile_mode):
    rng = np.random.default_rng(3)
    hidden = tf.constant(rng.normal(size=(24, 8)), tf.float32)
    table = tf.constant(rng.normal(size=(50, 8)), tf.float32)
    bias = tf.constant(rng.normal(size=50), tf.float32)
    ids = tf.constant(rng.integers(0, 50, size=(4, 6)), tf.int32)
    weights = tf.constant((rng.random((4, 6)) > 0.3).astype(np.float32))

    def ours(scale):
        with tf.GradientTape() as tape:
            tape.watch([hidden, table, bias])
            loss = masked_lm_loss(hidden, table, bias, ids, weights, gradient_scale=scale,
                                  block_rows=block_rows)
            scaled = loss * scale
        ce, predicted = losses.masked_lm_predictions(hidden, table, bias, ids, block_rows)
        return loss, tape.gradient(scaled, [hidden, table, bias]), ce, predicted

    if compile_mode != "eager":
        ours = tf.function(ours, jit_compile=compile_mode == "xla")
    with tf.GradientTape() as tape:
        tape.watch([hidden, table, bias])
        expected, log_probs = _one_hot_loss(hidden, table, bias, ids, weights)
    expected_grads = tape.gradient(expected, [hidden, table, bias])
    expected_ce = -tf.gather(log_probs, tf.reshape(ids, [-1, 1]), batch_dims=1)[:, 0]

    for scale in (1.0, 1024.0):
        loss, grads, ce, predicted = ours(tf.constant(scale))
        np.testing.assert_allclose(float(loss), float(expected), rtol=1e-6)
        for got, want in zip(grads, expected_grads):
            np.testing.assert_allclose(got.numpy() / scale, want.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(ce.numpy(), expected_ce.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(predicted.numpy(), tf.argmax(log_probs, -1).numpy())


def test_blocked_loss_is_differentiated_through_an_upstream_factor():
    """The loss is a scalar: an upstream gradient d gives d times the gradients."""
    hidden = tf.constant(np.random.default_rng(4).normal(size=(6, 3)), tf.float32)
    table, bias = tf.eye(3), tf.zeros([3])
    ids, weights = tf.constant([[0, 1, 2], [2, 1, 0]]), tf.ones([2, 3])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(hidden)
        loss = masked_lm_loss(hidden, table, bias, ids, weights)
        tripled = 3.0 * loss
    np.testing.assert_allclose(tape.gradient(tripled, hidden).numpy(),
                               3.0 * tape.gradient(loss, hidden).numpy(), rtol=1e-6)


def test_rows_of_unknown_number_are_one_block():
    hidden = tf.constant(np.random.default_rng(5).normal(size=(6, 4)), tf.float32)
    table, bias, ids = tf.eye(4), tf.zeros([4]), tf.constant([[0, 1, 2], [3, 2, 1]])
    predict = tf.function(lambda rows: losses.masked_lm_predictions(rows, table, bias, ids, 2),
                          input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    ce, predicted = predict(hidden)
    expected_ce, expected_predicted = losses.masked_lm_predictions(hidden, table, bias, ids)
    np.testing.assert_array_equal(predicted.numpy(), expected_predicted.numpy())
    np.testing.assert_allclose(ce.numpy(), expected_ce.numpy(), rtol=1e-6)


def test_bfloat16_table_gradient_is_summed_over_blocks_in_float32():
    """Sixteen blocks of bfloat16 products summed in float32 and rounded once: the table's
    gradient is as close to the float32 one as unblocked bfloat16 (measured: the same error;
    a bfloat16 running sum doubled it)."""
    rng = np.random.default_rng(6)
    hidden = rng.normal(size=(64, 16)).astype(np.float32)
    table = rng.normal(size=(40, 16)).astype(np.float32)
    ids = tf.constant(rng.integers(0, 40, size=(8, 8)), tf.int32)
    weights = tf.ones([8, 8])

    def table_gradient(dtype, block_rows):
        args = [tf.constant(hidden, dtype), tf.constant(table, dtype), tf.zeros([40], dtype)]
        with tf.GradientTape() as tape:
            tape.watch(args)
            loss = masked_lm_loss(*args, ids, weights, block_rows=block_rows)
        return tf.cast(tape.gradient(loss, args[1]), tf.float32).numpy()

    exact = table_gradient(tf.float32, 0)
    whole_error = np.max(np.abs(table_gradient(tf.bfloat16, 0) - exact))
    blocked_error = np.max(np.abs(table_gradient(tf.bfloat16, 4) - exact))
    assert blocked_error <= 1.25 * whole_error
