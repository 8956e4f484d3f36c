"""BERT-large as users load it: our model at the benchmark's bert_config.json against the exact
variables the MLCommons TF1 graph creates there (tests/fixtures/reference_model/
bert-large-tf1-variables.tsv: names, shapes, LAMB slots), so that a TF1 checkpoint of that
graph (model.ckpt-28252) holds every tensor our loader needs, with the shape it needs, and
nothing it would not recognise; and the same for the layout of the official TF2 checkpoint
(tf2_ckpt/model.ckpt-28252), whose entries are those of a tf.train.Checkpoint of the MLCommons
TF2 port's BertPretrainer at BERT-large (bert-large-tf2-variables.tsv)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import cleanup_scripts
from reference import checkpoint
from reference.bert_config import load_bert_config
from reference.model import BertPretrainingModel, dummy_features

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reference_model"
VARIABLES = FIXTURES / "bert-large-tf1-variables.tsv"
TF2_VARIABLES = FIXTURES / "bert-large-tf2-variables.tsv"


def variable_rows(path: Path) -> list[tuple[str, list[int], str]]:
    """(name, shape, dtype) of each row of a variable-list fixture (header skipped)."""
    rows = [line.split("\t") for line in path.read_text().splitlines()[1:]]
    return [(name, [int(d) for d in shape.split(",")] if shape else [], dtype)
            for name, shape, dtype in rows]


def tf1_variables() -> dict[str, list[int]]:
    """{name: shape} of the MLCommons TF1 graph at BERT-large, from the fixture."""
    return {name: shape for name, shape, _ in variable_rows(VARIABLES)}


def tf2_variables() -> dict[str, list[int]]:
    """{key: shape} of every entry of a tf.train.Checkpoint(model=BertPretrainer) of the
    MLCommons TF2 port at BERT-large, from the fixture."""
    return {name: shape for name, shape, _ in variable_rows(TF2_VARIABLES)}


def needed_shapes(model, table) -> dict[str, list[int]]:
    """{checkpoint name: shape} that restoring `model` through `table` reads, as the loader
    checks it (the table's transform applied to the shape of the variable each row fills)."""
    model_vars = checkpoint.model_variables_by_name(model)
    config = model.config
    needed = {}
    for ckpt_name, var_name, transform in checkpoint.expand_table(table,
                                                                  config.num_hidden_layers):
        var = model_vars[var_name]  # the model has the variable the row restores
        assert ckpt_name not in needed, f"two rows read {ckpt_name}"
        needed[ckpt_name] = checkpoint._expected_shape(transform, var.shape.as_list(),
                                                       config.num_attention_heads)
    return needed


def built_bert_large(draw_weights: bool) -> BertPretrainingModel:
    """BERT-large at the benchmark's bert_config.json, every weight built."""
    config = load_bert_config(cleanup_scripts.BERT_CONFIG_FILE)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == \
        (24, 1024, 16)
    model = BertPretrainingModel(config, name="bert_large", draw_weights=draw_weights)
    model(dummy_features(1, 8, 2), training=False)  # builds every weight
    return model


@pytest.fixture(scope="module")
def bert_large() -> BertPretrainingModel:
    """BERT-large with its weights drawn as the model draws them, for tests that compute."""
    return built_bert_large(draw_weights=True)


@pytest.fixture(scope="module")
def bert_large_zeros() -> BertPretrainingModel:
    """BERT-large with its weights zero as the Trainer builds it (drawing 336 M values takes
    about 11 s on one thread), for tests of names, shapes and what a checkpoint restores."""
    return built_bert_large(draw_weights=False)


def test_fixture_is_the_tf1_graph_of_bert_large_with_lamb():
    variables = tf1_variables()
    assert len(variables) == 1197
    weights = [n for n in variables if not checkpoint._is_skipped(n)]
    assert len(weights) == 398
    assert sum(n.endswith("/LAMB") for n in variables) == 398
    assert variables["bert/embeddings/word_embeddings"] == [30522, 1024]
    assert variables["bert/encoder/layer_23/intermediate/dense/kernel"] == [1024, 4096]


@pytest.mark.parametrize("layout", ["tf1", "tf2"])
def test_loader_needs_exactly_the_checkpoints_weights_at_their_shapes(bert_large_zeros, layout):
    """TF1: the MLCommons graph's variables; TF2: the entries of the TF2 port's checkpoint.
    Every other entry (LAMB moments, beta powers, global_step; the object graph and save
    counter) is skipped by name, so a checkpoint in either layout warns about nothing."""
    variables, table = ((tf1_variables(), checkpoint.TF1_TABLE) if layout == "tf1"
                        else (tf2_variables(), checkpoint.TF2_TABLE))
    needed = needed_shapes(bert_large_zeros, table)
    assert len(needed) == len(bert_large_zeros.trainable_variables) == 398
    assert needed == {n: s for n, s in variables.items() if not checkpoint._is_skipped(n)}
    assert all(checkpoint._is_skipped(n) for n in set(variables) - set(needed))
    params = sum(v.shape.num_elements() for v in bert_large_zeros.trainable_variables)
    assert params == sum(math.prod(variables[n]) for n in needed) == 336_226_108


def test_fixture_is_the_tf2_ports_pretrainer_at_bert_large():
    rows = variable_rows(TF2_VARIABLES)
    assert [name for name, _, _ in rows] == sorted(name for name, _, _ in rows)
    variables = tf2_variables()
    assert len(rows) == len(variables) == 400
    weights = {n: s for n, s in variables.items() if not checkpoint._is_skipped(n)}
    assert len(weights) == 398
    # Besides the weights, only what any tf.train.Checkpoint writes; no optimizer state.
    assert set(variables) - set(weights) == {"_CHECKPOINTABLE_OBJECT_GRAPH",
                                             "save_counter/.ATTRIBUTES/VARIABLE_VALUE"}
    assert {dtype for name, _, dtype in rows if name in weights} == {"float32"}
    # The port's layouts that differ from TF1: per-head attention projections, and the
    # next-sentence kernel stored [hidden, 2].
    layer_0 = "model/layer_with_weights-0/layer_with_weights-4/"
    attr = "/.ATTRIBUTES/VARIABLE_VALUE"
    assert variables[layer_0 + "_attention_layer/_query_dense/kernel" + attr] == [1024, 16, 64]
    assert variables[layer_0 + "_attention_output_dense/kernel" + attr] == [16, 64, 1024]
    assert variables["model/layer_with_weights-2/layer_with_weights-0/kernel" + attr] == \
        [1024, 2]
    # The same weights, counted element by element, as the TF1 graph's: encoder plus both heads.
    tf1_weights = {n: s for n, s in tf1_variables().items() if not checkpoint._is_skipped(n)}
    assert sum(math.prod(s) for s in weights.values()) == \
        sum(math.prod(s) for s in tf1_weights.values()) == 336_226_108


def test_a_tf2_checkpoint_in_the_ports_layout_initialises_bert_large(bert_large_zeros,
                                                                      tmp_path, caplog):
    """A real object-based checkpoint with exactly the fixture's entries (each weight filled
    with its own constant) is taken for TF2 and restores every weight of BERT-large (writes
    1.3 GB under tmp_path, deleted afterwards; 10 to 15 s on 2 cores, and this file's run
    peaks at about 4.5 GB RSS). The model's own weights are put back afterwards for the other
    tests."""
    import logging

    import tensorflow as tf

    variables = tf2_variables()
    root = tf.Module()
    value_of = {}
    for name, shape in variables.items():
        if checkpoint._is_skipped(name):
            continue  # tf.train.Checkpoint writes the object graph and save counter itself
        *path, leaf, _, _ = name.split("/")  # .../<leaf>/.ATTRIBUTES/VARIABLE_VALUE
        parent = root
        for part in path:
            if not hasattr(parent, part):
                setattr(parent, part, tf.Module())
            parent = getattr(parent, part)
        value_of[name] = float(len(value_of) + 1)  # none 0, the model's own value
        setattr(parent, leaf, tf.Variable(tf.fill(shape, value_of[name])))
    try:
        prefix = tf.train.Checkpoint(model=root.model).save(str(tmp_path / "model.ckpt"))
        del root
        written = {n: list(s) for n, s in tf.train.list_variables(prefix)}
        assert written == variables  # the layout, entry for entry
        assert checkpoint.checkpoint_format(prefix) == checkpoint.TF2_FORMAT
        original = [v.numpy() for v in bert_large_zeros.trainable_variables]
        try:
            with caplog.at_level(logging.WARNING):
                restored = checkpoint.load_initial_checkpoint(bert_large_zeros, prefix)
            assert sorted(restored) == sorted(value_of)
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
            # Every weight now holds the constant of a different checkpoint entry.
            got = []
            for var in bert_large_zeros.trainable_variables:
                value = var.numpy()
                assert value.min() == value.max(), var.name
                got.append(float(value.flat[0]))
            assert sorted(got) == sorted(value_of.values())
        finally:
            for var, value in zip(bert_large_zeros.trainable_variables, original):
                var.assign(value)
    finally:
        for path in tmp_path.glob("model.ckpt*"):
            path.unlink()


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
