"""Our TF2 model, loaded with the reference-made TF1 checkpoint, reproduces the reference's numbers.

The reference numbers come from the reference's own TF1 graph (modeling.BertModel and the heads
and metric_fn of run_pretraining.py) on the same checkpoint and batch; see the fixture README.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from reference import checkpoint
from reference.losses import EvalMetrics, masked_lm_predictions, metric_sums, pretraining_losses
from reference.model import BertPretrainingModel, gelu

# Measured agreement is ~1e-7 (losses) and exact (accuracies); these bounds are far tighter
# than the benchmark needs (1e-4 accuracy, 1e-3 loss) while leaving room for other CPUs.
ACCURACY_TOL = 1e-6
LOSS_TOL = 2e-5


def evaluate(model, batch):
    outputs = model(batch, training=False)
    metrics = EvalMetrics()
    metrics.update(metric_sums(outputs, batch))
    return metrics.result(), outputs


@pytest.fixture(scope="module")
def tf1_model(tiny_config, tf1_checkpoint):
    model = BertPretrainingModel(tiny_config)
    checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)
    return model


def test_eval_metrics_match_reference(tf1_model, eval_batch, ref_results):
    result, _ = evaluate(tf1_model, eval_batch)
    expected = ref_results["eval_metrics"]
    assert result["masked_lm_accuracy"] == pytest.approx(expected["masked_lm_accuracy"],
                                                         abs=ACCURACY_TOL)
    assert result["next_sentence_accuracy"] == pytest.approx(expected["next_sentence_accuracy"],
                                                             abs=ACCURACY_TOL)
    assert result["masked_lm_loss"] == pytest.approx(expected["masked_lm_loss"], abs=LOSS_TOL)
    assert result["next_sentence_loss"] == pytest.approx(expected["next_sentence_loss"],
                                                         abs=LOSS_TOL)
    # The fixture is a partly trained model, so accuracy is a meaningful check.
    assert 0.2 < expected["masked_lm_accuracy"] < 0.95


def test_per_prediction_outputs_match_reference(tf1_model, eval_batch, ref_arrays, tiny_config):
    _, outputs = evaluate(tf1_model, eval_batch)
    losses, predictions = masked_lm_predictions(
        outputs["masked_lm_hidden"], outputs["masked_lm_output_weights"],
        outputs["masked_lm_output_bias"], eval_batch["masked_lm_ids"])
    np.testing.assert_allclose(losses.numpy(), ref_arrays["eval/masked_lm_example_loss"],
                               rtol=0, atol=LOSS_TOL)
    real = tf.reshape(eval_batch["masked_lm_weights"], [-1]).numpy() > 0
    expected_predictions = ref_arrays["eval/masked_lm_predictions"][real]
    np.testing.assert_array_equal(predictions.numpy()[real], expected_predictions)
    logits = tf.reshape(outputs["masked_lm_logits"], [-1, tiny_config.vocab_size])
    np.testing.assert_array_equal(tf.argmax(logits, -1).numpy()[real], expected_predictions)
    nsp_log_probs = tf.nn.log_softmax(outputs["next_sentence_logits"]).numpy()
    np.testing.assert_allclose(nsp_log_probs, ref_arrays["eval/next_sentence_log_probs"],
                               rtol=0, atol=LOSS_TOL)


def test_training_loss_matches_reference(tf1_model, eval_batch, ref_results):
    outputs = tf1_model(eval_batch, training=False)
    total = pretraining_losses(outputs, eval_batch)["total_loss"]
    assert float(total) == pytest.approx(ref_results["eval_total_loss"], abs=LOSS_TOL)


def test_tf2_layout_checkpoint_gives_identical_outputs(tiny_config, tf1_model, tf2_checkpoint,
                                                       eval_batch):
    model = BertPretrainingModel(tiny_config, name="from_tf2")
    checkpoint.load_tf2_checkpoint(model, tf2_checkpoint)
    for name in ("masked_lm_logits", "next_sentence_logits"):
        np.testing.assert_array_equal(model(eval_batch, training=False)[name].numpy(),
                                      tf1_model(eval_batch, training=False)[name].numpy())


def test_padded_positions_do_not_change_real_outputs(tf1_model, eval_batch):
    """Only key positions are masked: tokens under input_mask == 0 cannot be attended to."""
    mask = eval_batch["input_mask"].numpy()
    changed = dict(eval_batch)
    ids = eval_batch["input_ids"].numpy().copy()
    ids[mask == 0] = 7
    changed["input_ids"] = tf.constant(ids)
    before = tf1_model(eval_batch, training=False)
    after = tf1_model(changed, training=False)
    real = mask.astype(bool)
    np.testing.assert_allclose(after["sequence_output"].numpy()[real],
                               before["sequence_output"].numpy()[real], rtol=0, atol=1e-6)
    np.testing.assert_allclose(after["pooled_output"].numpy(), before["pooled_output"].numpy(),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("draw_weights", [True, False])
def test_kernels_and_tables_are_drawn_unless_the_caller_sets_them(tiny_config, draw_weights):
    """By default every kernel and embedding table is drawn (truncated normal, stddev
    initializer_range); with draw_weights=False (the Trainer, which sets every weight next)
    they are zero. Biases and LayerNorm betas are zero and gammas one either way."""
    model = BertPretrainingModel(tiny_config, name=f"drawn_{draw_weights}",
                                 draw_weights=draw_weights)
    for name, var in checkpoint.model_variables_by_name(model).items():
        value = var.numpy()
        if name.endswith("gamma"):
            assert np.all(value == 1), name
        elif name.endswith(("beta", "bias")):
            assert np.all(value == 0), name
        elif draw_weights:
            assert 0 < np.abs(value).max() <= 2 * tiny_config.initializer_range, name
        else:
            assert np.all(value == 0), name


def test_dropout_only_when_training(tiny_config, eval_batch):
    model = BertPretrainingModel(tiny_config, name="dropout_check")
    first = model(eval_batch, training=False)["masked_lm_logits"].numpy()
    np.testing.assert_array_equal(first, model(eval_batch, training=False)["masked_lm_logits"])
    assert not np.array_equal(first, model(eval_batch, training=True)["masked_lm_logits"])


def test_output_shapes_and_tied_embeddings(tf1_model, eval_batch, tiny_config):
    outputs = tf1_model(eval_batch, training=False)
    assert outputs["masked_lm_logits"].shape == (16, 10, tiny_config.vocab_size)
    assert outputs["next_sentence_logits"].shape == (16, 2)
    assert outputs["sequence_output"].shape == (16, 64, tiny_config.hidden_size)
    table = tf1_model.bert.embeddings.word_embeddings.embeddings
    assert tf1_model.masked_lm.embedding_table is table
    assert sum(v is table for v in tf1_model.trainable_variables) == 1


def test_gelu_is_the_tanh_approximation():
    x = np.linspace(-6, 6, 101, dtype=np.float32)
    expected = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.astype(
        np.float64) ** 3)))
    np.testing.assert_allclose(gelu(tf.constant(x)).numpy(), expected, rtol=1e-6, atol=1e-6)


def test_sequence_longer_than_position_table_is_rejected(tf1_model, tiny_config):
    from reference.model import dummy_features
    with pytest.raises(ValueError, match="max_position_embeddings"):
        tf1_model(dummy_features(seq_length=tiny_config.max_position_embeddings + 1),
                  training=False)
