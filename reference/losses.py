"""Pre-training losses and evaluation metrics, computed as the MLCommons reference computes them.

Training loss (per batch):
  masked_lm_loss     = sum(w * ce) / (sum(w) + 1e-5)   ce: cross-entropy of each prediction,
                                                        w: masked_lm_weights (0 for padding)
  next_sentence_loss = mean over examples of the 2-way cross-entropy
  total_loss         = masked_lm_loss + next_sentence_loss

Evaluation metrics (accumulated over all eval batches, then divided; `EvalMetrics`):
  masked_lm_accuracy     = sum(w * [argmax == label]) / sum(w)     (the benchmark's target)
  masked_lm_loss         = sum(w * ce) / sum(w)                    (no 1e-5 here)
  next_sentence_accuracy = mean([argmax == label]),  next_sentence_loss = mean(ce)

Cross-entropies are -sum(one_hot(label) * log_softmax(logits)) and predictions are the argmax of
the log-probabilities, the MLCommons reference's operations.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import tensorflow as tf

# The MLCommons reference adds this to the masked-LM weight sum of the *training* loss's
# denominator.
MASKED_LM_DENOMINATOR_EPSILON = 1e-5


def _masked_lm_log_probs(logits: tf.Tensor) -> tf.Tensor:
    vocab_size = logits.shape[-1]
    return tf.nn.log_softmax(tf.reshape(logits, [-1, vocab_size]), axis=-1)


def masked_lm_example_loss(logits: tf.Tensor, label_ids: tf.Tensor) -> tf.Tensor:
    """Cross-entropy of each masked-LM prediction.

    Args:
      logits: [B, P, vocab] float32 (model output "masked_lm_logits").
      label_ids: [B, P] int (feature "masked_lm_ids").

    Returns:
      [B * P] float32, in nats.
    """
    return _label_cross_entropy(_masked_lm_log_probs(logits), label_ids)


def _label_cross_entropy(log_probs: tf.Tensor, label_ids: tf.Tensor) -> tf.Tensor:
    """-log_probs[i, label_i] for each row i of [N, vocab] log-probabilities: the reference's
    -sum(one_hot(label) * log_probs) without the [N, vocab] one-hot and product (the other
    terms of that sum are exact zeros, so the values and gradients are the same)."""
    ids = tf.reshape(tf.cast(label_ids, tf.int32), [-1, 1])
    return -tf.gather(log_probs, ids, batch_dims=1)[:, 0]


@tf.custom_gradient
def _lean_cross_entropy(logits: tf.Tensor, label_ids: tf.Tensor):
    """`_label_cross_entropy(log_softmax(logits), label_ids)` for [N, vocab] logits and [N]
    int32 ids, with a gradient that keeps one [N, vocab] tensor (the log-probabilities) and
    writes d logits into one more, bit for bit what TensorFlow's own gradients of the
    reference's one-hot cross-entropy give: for d log_probs = g at the label and 0 elsewhere,
    LogSoftmax's gradient d log_probs - sum(d log_probs) * exp(log_probs) is
    -(g * softmax) everywhere plus g at the label."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    ce = _label_cross_entropy(log_probs, label_ids)

    def grad(d_ce):
        g = -d_ce  # d loss / d log_probs at each row's label
        d_logits = tf.exp(log_probs) * (-g)[:, tf.newaxis]
        rows = tf.range(tf.shape(label_ids)[0], dtype=label_ids.dtype)
        return tf.tensor_scatter_nd_add(d_logits, tf.stack([rows, label_ids], axis=1), g), None

    return ce, grad


def masked_lm_loss(logits: tf.Tensor, label_ids: tf.Tensor, label_weights: tf.Tensor) -> tf.Tensor:
    """The training masked-LM loss: sum(w * ce) / (sum(w) + 1e-5), a float32 scalar (nats).

    Args: logits [B, P, vocab]; label_ids [B, P] int; label_weights [B, P] float (1 real, 0 pad).
    """
    weights = tf.reshape(tf.cast(label_weights, tf.float32), [-1])
    per_example = _lean_cross_entropy(tf.reshape(logits, [-1, logits.shape[-1]]),
                                      tf.reshape(tf.cast(label_ids, tf.int32), [-1]))
    numerator = tf.reduce_sum(weights * per_example)
    denominator = tf.reduce_sum(weights) + MASKED_LM_DENOMINATOR_EPSILON
    return numerator / denominator


def next_sentence_example_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Cross-entropy of each next-sentence prediction.

    Args: logits [B, 2] float32; labels [B, 1] or [B] int (0 = next sentence, 1 = random).
    Returns: [B] float32, in nats.
    """
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(tf.reshape(tf.cast(labels, tf.int32), [-1]), depth=2, dtype=tf.float32)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1)


def next_sentence_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """The next-sentence loss: mean cross-entropy over the batch, float32 scalar (nats)."""
    return tf.reduce_mean(next_sentence_example_loss(logits, labels))


def pretraining_losses(outputs: Mapping[str, tf.Tensor],
                       features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The MLCommons reference's training losses for one batch.

    Args:
      outputs: the model's outputs ("masked_lm_logits", "next_sentence_logits").
      features: the batch ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels").

    Returns:
      {"total_loss", "masked_lm_loss", "next_sentence_loss"}: float32 scalars; the optimizer
      minimises total_loss.
    """
    mlm = masked_lm_loss(outputs["masked_lm_logits"], features["masked_lm_ids"],
                         features["masked_lm_weights"])
    nsp = next_sentence_loss(outputs["next_sentence_logits"], features["next_sentence_labels"])
    return {"total_loss": mlm + nsp, "masked_lm_loss": mlm, "next_sentence_loss": nsp}


def metric_sums(outputs: Mapping[str, tf.Tensor],
                features: Mapping[str, tf.Tensor],
                example_weights: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """Per-batch sums from which the evaluation metrics are formed (see `EvalMetrics`).

    Args:
      outputs, features: as for `pretraining_losses`.
      example_weights: optional [B] (or [B, 1]) float, 1 for a real example and 0 for padding
        (a trainer pads the last eval batch to a fixed shape); None: every example counts.

    Returns float32 scalars: masked_lm_correct (sum of w over correct predictions),
    masked_lm_weight (sum of w), masked_lm_loss_sum (sum of w * ce), next_sentence_correct,
    next_sentence_count (examples), next_sentence_loss_sum (sum of ce).
    """
    mlm_log_probs = _masked_lm_log_probs(outputs["masked_lm_logits"])
    mlm_pred = tf.argmax(mlm_log_probs, axis=-1, output_type=tf.int32)
    mlm_ids = tf.reshape(tf.cast(features["masked_lm_ids"], tf.int32), [-1])
    weights = tf.reshape(tf.cast(features["masked_lm_weights"], tf.float32), [-1])
    mlm_ce = _label_cross_entropy(mlm_log_probs, features["masked_lm_ids"])

    nsp_logits = outputs["next_sentence_logits"]
    nsp_pred = tf.argmax(tf.nn.log_softmax(nsp_logits, axis=-1), axis=-1, output_type=tf.int32)
    nsp_labels = tf.reshape(tf.cast(features["next_sentence_labels"], tf.int32), [-1])
    nsp_ce = next_sentence_example_loss(nsp_logits, features["next_sentence_labels"])
    nsp_correct = tf.cast(tf.equal(nsp_pred, nsp_labels), tf.float32)
    if example_weights is None:
        nsp_count = tf.cast(tf.size(nsp_labels), tf.float32)
    else:
        real = tf.reshape(tf.cast(example_weights, tf.float32), [-1])
        predictions = tf.shape(weights)[0] // tf.maximum(tf.shape(real)[0], 1)
        weights = weights * tf.repeat(real, predictions)
        nsp_correct, nsp_ce = nsp_correct * real, nsp_ce * real
        nsp_count = tf.reduce_sum(real)
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
