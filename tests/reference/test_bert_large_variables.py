"""BERT-large as users load it: our model at the benchmark's bert_config.json against the exact
variables the MLCommons TF1 graph creates there (tests/fixtures/reference_model/
bert-large-tf1-variables.tsv: names, shapes, LAMB slots), so that a TF1 checkpoint of that
graph (model.ckpt-28252) holds every tensor our loader needs, with the shape it needs, and
nothing it would not recognise."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import cleanup_scripts
from reference import checkpoint
from reference.bert_config import load_bert_config
from reference.model import BertPretrainingModel, dummy_features

VARIABLES = (Path(__file__).resolve().parents[1] / "fixtures" / "reference_model" /
             "bert-large-tf1-variables.tsv")


def tf1_variables() -> dict[str, list[int]]:
    """{name: shape} of the MLCommons TF1 graph at BERT-large, from the fixture."""
    rows = [line.split("\t") for line in VARIABLES.read_text().splitlines()[1:]]
    return {name: [int(d) for d in shape.split(",")] if shape else [] for name, shape, _ in rows}


@pytest.fixture(scope="module")
def bert_large():
    config = load_bert_config(cleanup_scripts.BERT_CONFIG_FILE)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == \
        (24, 1024, 16)
    model = BertPretrainingModel(config, name="bert_large")
    model(dummy_features(1, 8, 2), training=False)  # builds every weight
    return model


def test_fixture_is_the_tf1_graph_of_bert_large_with_lamb():
    variables = tf1_variables()
    assert len(variables) == 1197
    weights = [n for n in variables if not checkpoint._is_skipped(n)]
    assert len(weights) == 398
    assert sum(n.endswith("/LAMB") for n in variables) == 398
    assert variables["bert/embeddings/word_embeddings"] == [30522, 1024]
    assert variables["bert/encoder/layer_23/intermediate/dense/kernel"] == [1024, 4096]


def test_tf1_loader_needs_exactly_the_graphs_weights_at_their_shapes(bert_large):
    variables = tf1_variables()
    model_vars = checkpoint.model_variables_by_name(bert_large)
    rows = checkpoint.expand_table(checkpoint.TF1_TABLE, 24)
    needed = {}
    for ckpt_name, var_name, transform in rows:
        var = model_vars[var_name]  # the model has the variable the row restores
        needed[ckpt_name] = checkpoint._expected_shape(transform, var.shape.as_list(), 16)
    assert len(rows) == len(bert_large.trainable_variables) == 398
    assert needed == {n: s for n, s in variables.items() if not checkpoint._is_skipped(n)}
    # Every other entry (LAMB moments, beta powers, global_step) is skipped by name, so a
    # checkpoint of that graph warns about nothing.
    assert all(checkpoint._is_skipped(n) for n in set(variables) - set(needed))
    params = sum(v.shape.num_elements() for v in bert_large.trainable_variables)
    graph_params = sum(math.prod(shape) for name, shape in variables.items() if name in needed)
    assert params == graph_params == 336_226_108


@pytest.mark.slow
def test_one_lamb_step_of_bert_large_at_batch_1_and_sequence_512(bert_large):
    """The benchmark's shapes end to end on CPU: forward, loss, gradients and a LAMB update of
    every one of the 398 weights (peak RSS about 10 GB, about a minute on 2 cores)."""
    import numpy as np
    import tensorflow as tf

    from reference.lamb import Lamb, clip_gradients
    from reference.losses import pretraining_losses

    rng = np.random.default_rng(0)
    batch = dummy_features(1, 512, 76)
    batch["input_ids"] = tf.constant(rng.integers(0, 30522, (1, 512)), tf.int32)
    batch["masked_lm_positions"] = tf.constant(np.sort(rng.choice(512, (1, 76), False)), tf.int32)
    batch["masked_lm_ids"] = tf.constant(rng.integers(0, 30522, (1, 76)), tf.int32)
    batch["masked_lm_weights"] = tf.ones([1, 76], tf.float32)
    before = [v.numpy() for v in bert_large.trainable_variables]
    optimizer = Lamb(4e-4, beta_1=0.9, beta_2=0.999, weight_decay_rate=0.01)
    with tf.GradientTape() as tape:
        loss = pretraining_losses(bert_large(batch, training=True), batch)["total_loss"]
    grads, _ = clip_gradients(tape.gradient(loss, bert_large.trainable_variables))
    optimizer.apply_gradients(zip(grads, bert_large.trainable_variables))
    assert np.isfinite(float(loss)) and float(loss) > 5.0  # ~ln(30522) for random weights
    assert int(optimizer.iterations) == 1 and len(optimizer.m) == len(optimizer.v) == 398
    changed = [not np.array_equal(a, v.numpy())
               for a, v in zip(before, bert_large.trainable_variables)]
    assert sum(changed) >= 396  # all but possibly the unused token-type row / padding
