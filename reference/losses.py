"""Pre-training losses and evaluation metrics, computed as the MLCommons reference computes them.

Training loss (per batch):
  masked_lm_loss     = sum(w * ce) / (sum(w) + 1e-5)   ce: cross-entropy of each prediction,
                                                        w: masked_lm_weights (0 for padding)
  next_sentence_loss = mean over examples of the 2-way cross-entropy
  total_loss         = masked_lm_loss + next_sentence_loss

Packed rows (features `next_sentence_weights` [B, K] and `sequence_ids`): the losses are
normalised over the sequences of the whole update, not the micro-batch, because rows hold
different numbers of sequences. The caller passes `totals` (the update's sum of
masked_lm_weights and number of sequences over every replica and micro-batch) and `share`
(replicas x micro-batches, by which it will average): each micro-batch's loss is then
share x [sum(w * ce) / (W + 1e-5) + sum over its sequences of next-sentence ce / N], whose
average is exactly the loss of one unpacked batch of the update's sequences.

Evaluation metrics (accumulated over all eval batches, then divided; `EvalMetrics`):
  masked_lm_accuracy     = sum(w * [argmax == label]) / sum(w)     (the benchmark's target)
  masked_lm_loss         = sum(w * ce) / sum(w)                    (no 1e-5 here)
  next_sentence_accuracy = mean([argmax == label]),  next_sentence_loss = mean(ce)

Cross-entropies are -sum(one_hot(label) * log_softmax(logits)) and predictions are the argmax of
the log-probabilities, the MLCommons reference's operations.

The masked-LM head's logits (hidden @ table^T + bias, one row of `vocab` floats per prediction:
32 x 76 x 30,522 floats are 297 MB) are never formed whole here. The losses and metrics take the
head's inputs (model outputs "masked_lm_hidden", "masked_lm_output_weights",
"masked_lm_output_bias") and form the logits a block of at most `MASKED_LM_BLOCK_ROWS` rows at a
time; the training loss computes its gradients in the same pass (`masked_lm_loss`).
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from reference.bert_config import MASKED_LM_BLOCK_ROWS
from reference.model import head_logits, in_forward_scope

# The MLCommons reference adds this to the masked-LM weight sum of the *training* loss's
# denominator.
MASKED_LM_DENOMINATOR_EPSILON = 1e-5


def block_count(rows: int, max_rows: int) -> int:
    """The fewest equal blocks of at most `max_rows` rows that `rows` splits into (a divisor of
    `rows`; `rows` itself when only single rows divide it that finely; 1 for no rows)."""
    for count in range(max(1, -(-rows // max_rows)), rows + 1):
        if rows % count == 0:
            return count
    return 1


def _map_row_blocks(fn: Callable, rows: Sequence[tf.Tensor], output_dtypes: Sequence[tf.DType],
                    sum_shapes: Sequence[Sequence[int]], block_rows: int):
    """Applies `fn` to equal row blocks of `rows`, one block at a time, and adds up its sums.

    Args:
      fn: row blocks -> (per-row outputs of the block, float32 sums over the block's rows).
      rows: tensors with the same number of leading rows (one block where it is not static).
      output_dtypes: the dtype of each per-row output of `fn`.
      sum_shapes: the shape of each sum of `fn` (may be empty).
      block_rows: the most rows in a block (`block_count`); 0: one block.

    Returns:
      (per-row outputs over all rows in order, the sums over all blocks: float32).
    """
    num_rows = rows[0].shape[0]
    count = 1 if num_rows is None or not block_rows else block_count(num_rows, block_rows)
    if count == 1:
        return fn(list(rows))
    size = num_rows // count

    def body(i, arrays, sums):
        block = [tf.slice(r, [i * size] + [0] * (r.shape.rank - 1),
                          [size] + r.shape.as_list()[1:]) for r in rows]
        outputs, block_sums = fn(block)
        return (i + 1, [a.write(i, o) for a, o in zip(arrays, outputs)],
                [total + part for total, part in zip(sums, block_sums)])

    arrays = [tf.TensorArray(dtype, size=count) for dtype in output_dtypes]
    sums = [tf.zeros(shape, tf.float32) for shape in sum_shapes]
    # One block at a time: overlapping iterations would each hold a block's logits.
    _, arrays, sums = tf.while_loop(lambda i, *_: i < count, body, (0, arrays, sums),
                                    parallel_iterations=1)
    outputs = [tf.reshape(a.stack(), [-1] + a.element_shape.as_list()[1:]) for a in arrays]
    return outputs, sums


def _float32_logits(hidden: tf.Tensor, table: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """`head_logits` of a block of rows, cast to float32."""
    return tf.cast(head_logits(hidden, table, bias), tf.float32)


def _label_cross_entropy(log_probs: tf.Tensor, label_ids: tf.Tensor) -> tf.Tensor:
    """-log_probs[i, label_i] for each row i of [N, vocab] log-probabilities and [N] int32 ids:
    the reference's -sum(one_hot(label) * log_probs) without the [N, vocab] one-hot and product
    (the other terms of that sum are exact zeros, so the values and gradients are the same)."""
    return -tf.gather(log_probs, label_ids[:, tf.newaxis], batch_dims=1)[:, 0]


def _flat(tensor: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    return tf.reshape(tf.cast(tensor, dtype), [-1])


def masked_lm_loss(hidden: tf.Tensor, table: tf.Tensor, bias: tf.Tensor, label_ids: tf.Tensor,
                   label_weights: tf.Tensor, gradient_scale: tf.Tensor | float = 1.0,
                   block_rows: int = MASKED_LM_BLOCK_ROWS,
                   denominator: tf.Tensor | None = None) -> tf.Tensor:
    """The training masked-LM loss sum(w * ce) / (sum(w) + 1e-5), a float32 scalar (nats), of the
    logits hidden @ table^T + bias.

    Args:
      hidden: [N, H] the head's rows, N = B * P (model output "masked_lm_hidden").
      table: [vocab, H] output weights (the word-embedding table); bias: [vocab]; both in
        hidden's dtype (outputs "masked_lm_output_weights", "masked_lm_output_bias").
      label_ids: [B, P] int (feature "masked_lm_ids"); label_weights: [B, P] float (1 real,
        0 padding).
      gradient_scale: what the caller multiplies the loss by before differentiating (the fp16
        loss scale; 1 otherwise). The gradients are formed at that scale in hidden's dtype, so
        float16 gradients do not underflow.
      block_rows: the most rows whose logits are formed at once (0: all).
      denominator: what sum(w * ce) is divided by instead of sum(w) + 1e-5 (packed rows: the
        update's, module docstring).

    The gradients for hidden, table and bias are computed with the loss, one block of rows at a
    time (the loss is a scalar: the gradient for an upstream value d is d / gradient_scale times
    them). They are TensorFlow's own gradients of the reference's one-hot cross-entropy: for
    d ce = g, LogSoftmax's gradient is g * softmax less g at the label, then BiasAdd's and
    MatMul's gradients. Only one block's [rows, vocab] tensors exist at a time.
    """
    ids = _flat(label_ids, tf.int32)
    weights = _flat(label_weights, tf.float32)
    if denominator is None:
        denominator = tf.reduce_sum(weights) + MASKED_LM_DENOMINATOR_EPSILON
    scale = tf.cast(gradient_scale, tf.float32)
    d_ce = (scale / denominator) * weights  # d (scale * loss) / d ce

    def block(rows):
        hidden_rows, ids_rows, d_ce_rows = rows
        with tf.name_scope("logits"):
            logits = _float32_logits(hidden_rows, table, bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        ce = _label_cross_entropy(log_probs, ids_rows)
        d_logits = tf.exp(log_probs) * d_ce_rows[:, tf.newaxis]
        at_label = tf.stack([tf.range(tf.shape(ids_rows)[0]), ids_rows], axis=1)
        d_logits = tf.cast(tf.tensor_scatter_nd_add(d_logits, at_label, -d_ce_rows),
                           hidden.dtype)
        with tf.name_scope("logits_gradient"):
            d_hidden = tf.matmul(d_logits, table)
            # Summed over blocks in float32 (a bfloat16 sum would round at every block).
            d_table = tf.cast(tf.matmul(d_logits, hidden_rows, transpose_a=True), tf.float32)
            d_bias = tf.cast(tf.raw_ops.BiasAddGrad(out_backprop=d_logits), tf.float32)
        return [ce, d_hidden], [d_table, d_bias]

    @tf.custom_gradient
    def loss_of(hidden, table, bias):
        (ce, d_hidden), (d_table, d_bias) = _map_row_blocks(
            block, [hidden, ids, d_ce], [tf.float32, hidden.dtype], [table.shape, bias.shape],
            block_rows)
        loss = tf.reduce_sum(weights * ce) / denominator

        def grad(d_loss):
            factor = d_loss / scale
            return (d_hidden * tf.cast(factor, hidden.dtype),
                    tf.cast(d_table * factor, table.dtype), tf.cast(d_bias * factor, bias.dtype))

        return loss, in_forward_scope(grad)

    return loss_of(hidden, table, bias)


def masked_lm_predictions(hidden: tf.Tensor, table: tf.Tensor, bias: tf.Tensor,
                          label_ids: tf.Tensor, block_rows: int = MASKED_LM_BLOCK_ROWS
                          ) -> tuple[tf.Tensor, tf.Tensor]:
    """Each masked-LM prediction's cross-entropy and predicted id, block by block.

    Args: hidden [N, H], table [vocab, H], bias [vocab], block_rows as for `masked_lm_loss`;
      label_ids [B, P] int with B * P = N.
    Returns: ([N] float32 cross-entropies in nats, [N] int32 argmax of the log-probabilities).
    """
    def block(rows):
        hidden_rows, ids_rows = rows
        log_probs = tf.nn.log_softmax(_float32_logits(hidden_rows, table, bias), axis=-1)
        predicted = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        return [_label_cross_entropy(log_probs, ids_rows), predicted], []

    (ce, predicted), _ = _map_row_blocks(block, [hidden, _flat(label_ids, tf.int32)],
                                         [tf.float32, tf.int32], [], block_rows)
    return ce, predicted


def next_sentence_example_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Cross-entropy of each next-sentence prediction.

    Args: logits [B, 2] float (cast to float32); labels [B, 1] or [B] int (0 = next sentence,
      1 = random). Packed rows: logits [B, K, 2] and labels [B, K], read as B * K predictions.
    Returns: [B] (packed: [B * K]) float32, in nats.
    """
    log_probs = tf.nn.log_softmax(tf.reshape(tf.cast(logits, tf.float32), [-1, 2]), axis=-1)
    one_hot = tf.one_hot(_flat(labels, tf.int32), depth=2, dtype=tf.float32)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1)


def next_sentence_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """The next-sentence loss: mean cross-entropy over the batch, float32 scalar (nats)."""
    return tf.reduce_mean(next_sentence_example_loss(logits, labels))


def _head(outputs: Mapping[str, tf.Tensor]) -> list[tf.Tensor]:
    return [outputs[key] for key in ("masked_lm_hidden", "masked_lm_output_weights",
                                     "masked_lm_output_bias")]


def pretraining_losses(outputs: Mapping[str, tf.Tensor], features: Mapping[str, tf.Tensor],
                       gradient_scale: tf.Tensor | float = 1.0,
                       block_rows: int = MASKED_LM_BLOCK_ROWS, totals: tf.Tensor | None = None,
                       share: int = 1) -> dict[str, tf.Tensor]:
    """The MLCommons reference's training losses for one batch (packed rows: this batch's part
    of the update's loss, module docstring).

    Args:
      outputs: the model's outputs ("masked_lm_hidden", "masked_lm_output_weights",
        "masked_lm_output_bias", "next_sentence_logits").
      features: the batch ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels").
      gradient_scale: the factor the caller scales total_loss by before differentiating (the
        fp16 loss scale), see `masked_lm_loss`.
      block_rows: the most masked-LM rows whose logits are formed at once (0: all).
      totals: packed rows: [2] float32, the update's sum of masked_lm_weights and its number of
        sequences (all replicas and micro-batches); share: replicas x micro-batches.

    Returns:
      {"total_loss", "masked_lm_loss", "next_sentence_loss"}: float32 scalars; the optimizer
      minimises total_loss. Their ops are named `masked_lm_loss/...` (the logits' products
      `.../logits/` and `.../logits_gradient/`) and `next_sentence_loss/...`.
    """
    if "next_sentence_weights" not in features:
        with tf.name_scope("masked_lm_loss"):
            mlm = masked_lm_loss(*_head(outputs), features["masked_lm_ids"],
                                 features["masked_lm_weights"], gradient_scale, block_rows)
        with tf.name_scope("next_sentence_loss"):
            nsp = next_sentence_loss(outputs["next_sentence_logits"],
                                     features["next_sentence_labels"])
        return {"total_loss": mlm + nsp, "masked_lm_loss": mlm, "next_sentence_loss": nsp}
    if totals is None:  # one batch is the whole update
        totals = tf.stack([tf.reduce_sum(tf.cast(features["masked_lm_weights"], tf.float32)),
                           tf.reduce_sum(tf.cast(features["next_sentence_weights"],
                                                 tf.float32))])
    share = float(share)
    with tf.name_scope("masked_lm_loss"):
        mlm = masked_lm_loss(*_head(outputs), features["masked_lm_ids"],
                             features["masked_lm_weights"], gradient_scale, block_rows,
                             denominator=(totals[0] + MASKED_LM_DENOMINATOR_EPSILON) / share)
    with tf.name_scope("next_sentence_loss"):
        nsp_ce = next_sentence_example_loss(outputs["next_sentence_logits"],
                                            features["next_sentence_labels"])
        nsp = tf.reduce_sum(nsp_ce * _flat(features["next_sentence_weights"], tf.float32)) * (
            share / tf.maximum(totals[1], 1.0))
    return {"total_loss": mlm + nsp, "masked_lm_loss": mlm, "next_sentence_loss": nsp}


def metric_sums(outputs: Mapping[str, tf.Tensor],
                features: Mapping[str, tf.Tensor],
                example_weights: tf.Tensor | None = None,
                block_rows: int = MASKED_LM_BLOCK_ROWS) -> dict[str, tf.Tensor]:
    """Per-batch sums from which the evaluation metrics are formed (see `EvalMetrics`).

    Args:
      outputs, features: as for `pretraining_losses`.
      example_weights: optional [B] (or [B, 1]) float, 1 for a real example and 0 for padding
        (a trainer pads the last eval batch to a fixed shape); None: every example counts.
      block_rows: the most masked-LM rows whose logits are formed at once (0: all).

    Returns float32 scalars: masked_lm_correct (sum of w over correct predictions),
    masked_lm_weight (sum of w), masked_lm_loss_sum (sum of w * ce), next_sentence_correct,
    next_sentence_count (examples), next_sentence_loss_sum (sum of ce).
    """
    mlm_ce, mlm_pred = masked_lm_predictions(*_head(outputs), features["masked_lm_ids"],
                                             block_rows)
    mlm_ids = _flat(features["masked_lm_ids"], tf.int32)
    weights = _flat(features["masked_lm_weights"], tf.float32)

    nsp_logits = tf.reshape(tf.cast(outputs["next_sentence_logits"], tf.float32), [-1, 2])
    nsp_pred = tf.argmax(tf.nn.log_softmax(nsp_logits, axis=-1), axis=-1, output_type=tf.int32)
    nsp_labels = _flat(features["next_sentence_labels"], tf.int32)
    nsp_ce = next_sentence_example_loss(nsp_logits, features["next_sentence_labels"])
    nsp_correct = tf.cast(tf.equal(nsp_pred, nsp_labels), tf.float32)
    # Each next-sentence prediction's weight: packed rows weigh their sequence slots.
    nsp_weights = _flat(features["next_sentence_weights"], tf.float32) \
        if "next_sentence_weights" in features else tf.ones_like(nsp_ce)
    if example_weights is not None:
        real = tf.reshape(tf.cast(example_weights, tf.float32), [-1])
        rows = tf.maximum(tf.shape(real)[0], 1)
        weights = weights * tf.repeat(real, tf.shape(weights)[0] // rows)
        nsp_weights = nsp_weights * tf.repeat(real, tf.shape(nsp_weights)[0] // rows)
    nsp_correct, nsp_ce = nsp_correct * nsp_weights, nsp_ce * nsp_weights
    nsp_count = tf.reduce_sum(nsp_weights)
    return {
        "masked_lm_correct": tf.reduce_sum(tf.cast(tf.equal(mlm_pred, mlm_ids), tf.float32)
                                           * weights),
        "masked_lm_weight": tf.reduce_sum(weights),
        "masked_lm_loss_sum": tf.reduce_sum(mlm_ce * weights),
        "next_sentence_correct": tf.reduce_sum(nsp_correct),
        "next_sentence_count": nsp_count,
        "next_sentence_loss_sum": tf.reduce_sum(nsp_ce),
    }


class EvalMetrics:
    """Accumulates `metric_sums` over eval batches (in float64) and forms the metrics.

    Usage: m = EvalMetrics(); for each batch: m.update(metric_sums(outputs, features));
    m.result() -> {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
    "next_sentence_loss"} as Python floats (accuracies in [0, 1], losses in nats).
    """

    KEYS = ("masked_lm_correct", "masked_lm_weight", "masked_lm_loss_sum",
            "next_sentence_correct", "next_sentence_count", "next_sentence_loss_sum")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Forget all batches."""
        self.sums = {key: 0.0 for key in self.KEYS}

    def update(self, batch_sums: Mapping[str, tf.Tensor | float]) -> None:
        """Add one batch's `metric_sums` (tensors or numbers)."""
        for key in self.KEYS:
            self.sums[key] += float(np.asarray(batch_sums[key], dtype=np.float64))

    def result(self) -> dict[str, float]:
        """The metrics so far; NaN for a metric whose denominator is still 0."""
        def ratio(num, den):
            return self.sums[num] / self.sums[den] if self.sums[den] else float("nan")

        return {
            "masked_lm_accuracy": ratio("masked_lm_correct", "masked_lm_weight"),
            "masked_lm_loss": ratio("masked_lm_loss_sum", "masked_lm_weight"),
            "next_sentence_accuracy": ratio("next_sentence_correct", "next_sentence_count"),
            "next_sentence_loss": ratio("next_sentence_loss_sum", "next_sentence_count"),
        }
