"""Checkpoint loading by table, skipped training state, errors, and our own round trip."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from reference import checkpoint
from reference.checkpoint import CheckpointError
from reference.lamb import Lamb, clip_gradients
from reference.losses import pretraining_losses
from reference.model import BertPretrainingModel


@pytest.fixture(scope="module")
def loaded(tiny_config, tf1_checkpoint):
    model = BertPretrainingModel(tiny_config, name="ckpt_test")
    return model, checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)


def test_every_model_tensor_is_restored_once(loaded, tf1_checkpoint):
    model, restored = loaded
    assert len(restored) == len(set(restored)) == len(model.trainable_variables) == 46
    assert restored[0] == "bert/embeddings/word_embeddings"
    assert "bert/encoder/layer_1/attention/self/query/kernel" in restored
    assert "cls/seq_relationship/output_weights" in restored
    reader = tf.train.load_checkpoint(tf1_checkpoint)
    kernel = checkpoint.model_variables_by_name(model)["cls/seq_relationship/kernel"]
    np.testing.assert_array_equal(kernel.numpy(),
                                  reader.get_tensor("cls/seq_relationship/output_weights").T)


def test_optimizer_slots_and_step_are_skipped(loaded, tf1_checkpoint):
    _, restored = loaded
    names = [name for name, _ in tf.train.list_variables(tf1_checkpoint)]
    not_restored = sorted(set(names) - set(restored))
    # The fixture holds Adam and LAMB moments, the global step and LAMB's beta powers.
    for suffix in ("/adam_m", "/adam_v", "/LAMB", "/LAMB_1"):
        assert any(name.endswith(suffix) for name in not_restored), suffix
    assert "global_step" in not_restored
    assert not any(name.endswith(("/adam_m", "/adam_v", "/LAMB", "/LAMB_1")) for name in restored)
    assert all(checkpoint._is_skipped(name) for name in not_restored)
    assert len(not_restored) == 4 * 46 + len([n for n in names if "power" in n]) + 1


def test_config_checkpoint_mismatch_names_the_variable(tiny_config, tf1_checkpoint):
    model = BertPretrainingModel(dataclasses.replace(tiny_config, intermediate_size=96),
                                 name="mismatch")
    with pytest.raises(CheckpointError) as err:
        checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)
    message = str(err.value)
    assert "bert/encoder/layer_0/intermediate/dense/kernel" in message
    assert "[64, 128]" in message and "[64, 96]" in message and "\n" not in message


def test_extra_layer_is_reported_missing(tiny_config, tf1_checkpoint):
    model = BertPretrainingModel(dataclasses.replace(tiny_config, num_hidden_layers=3),
                                 name="three_layers")
    with pytest.raises(CheckpointError, match="missing bert/encoder/layer_2/attention/self/query"):
        checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)


@pytest.mark.parametrize("layout", ["tf1", "tf2"])
def test_checkpoint_of_a_deeper_model_is_refused(tiny_config, tf1_checkpoint, tf2_checkpoint,
                                                 layout):
    model = BertPretrainingModel(dataclasses.replace(tiny_config, num_hidden_layers=1),
                                 name=f"one_layer_{layout}")
    path = tf1_checkpoint if layout == "tf1" else tf2_checkpoint
    with pytest.raises(CheckpointError, match="holds encoder layer 1 .* bert_config has only 1 "
                                              "layers"):
        checkpoint.load_initial_checkpoint(model, path)


def test_heads_mismatch_in_tf2_layout(tiny_config, tf2_checkpoint):
    model = BertPretrainingModel(dataclasses.replace(tiny_config, num_attention_heads=2),
                                 name="two_heads")
    with pytest.raises(CheckpointError, match=r"_query_dense/kernel.* \[64, 4, 16\] .* "
                                              r"\[64, 2, 32\]"):
        checkpoint.load_tf2_checkpoint(model, tf2_checkpoint)


def test_unreadable_checkpoint(tiny_config, tmp_path, loaded):
    model, _ = loaded
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        checkpoint.load_tf1_checkpoint(model, str(tmp_path / "nothing"))
    with pytest.raises(CheckpointError, match="no checkpoint in this directory"):
        checkpoint.load_tf1_checkpoint(model, str(tmp_path))


def test_format_detection_and_tf2_restore(tiny_config, tf1_checkpoint, tf2_checkpoint, loaded):
    assert checkpoint.checkpoint_format(tf1_checkpoint) == checkpoint.TF1_FORMAT
    assert checkpoint.checkpoint_format(tf2_checkpoint) == checkpoint.TF2_FORMAT
    tf1_model, _ = loaded
    model = BertPretrainingModel(tiny_config, name="tf2_load")
    restored = checkpoint.load_initial_checkpoint(model, tf2_checkpoint)
    assert len(restored) == 46
    assert checkpoint.restored_tensor_names(restored)[0] == \
        "model/layer_with_weights-0/layer_with_weights-0/embeddings"
    ours = checkpoint.model_variables_by_name(model)
    for name, var in checkpoint.model_variables_by_name(tf1_model).items():
        np.testing.assert_array_equal(ours[name].numpy(), var.numpy(), err_msg=name)


def one_step(model, optimizer, batch, global_step):
    with tf.GradientTape() as tape:
        loss = pretraining_losses(model(batch, training=False), batch)["total_loss"]
    grads, _ = clip_gradients(tape.gradient(loss, model.trainable_variables))
    optimizer.apply_gradients(zip(grads, model.trainable_variables), step=global_step)
    global_step.assign_add(1)


def test_training_checkpoint_round_trip(tiny_config_no_dropout, tf1_checkpoint, train_batch,
                                       tmp_path):
    config = tiny_config_no_dropout
    model = BertPretrainingModel(config, name="saved")
    checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)
    optimizer = Lamb(1e-3, beta_1=0.9, beta_2=0.99, weight_decay_rate=0.01)
    step = tf.Variable(0, dtype=tf.int64)
    one_step(model, optimizer, train_batch, step)
    path = checkpoint.training_checkpoint(model, optimizer, step).write(str(tmp_path / "ckpt-1"))

    restored_model = BertPretrainingModel(config, name="restored")
    restored_opt = Lamb(1e-3, beta_1=0.9, beta_2=0.99, weight_decay_rate=0.01)
    restored_step = tf.Variable(0, dtype=tf.int64)
    restored_opt.build(restored_model.trainable_variables)
    checkpoint.read_training_checkpoint(
        path, checkpoint.training_checkpoint(restored_model, restored_opt, restored_step))
    assert int(restored_step) == 1 and int(restored_opt.iterations) == 1
    assert float(restored_opt.beta_1_power) == float(optimizer.beta_1_power)
    for a, b in zip(model.variables, restored_model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(optimizer.m + optimizer.v, restored_opt.m + restored_opt.v):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    # Training continues identically from the restored state.
    one_step(model, optimizer, train_batch, step)
    one_step(restored_model, restored_opt, train_batch, restored_step)
    for a, b in zip(model.variables, restored_model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    # A model-only restore from the same checkpoint also works.
    model_only = BertPretrainingModel(config, name="model_only")
    checkpoint.read_training_checkpoint(path, checkpoint.training_checkpoint(model_only))


def test_training_checkpoint_mismatch_is_an_error(tiny_config, tmp_path):
    model = BertPretrainingModel(tiny_config, name="small")
    path = checkpoint.training_checkpoint(model).write(str(tmp_path / "ckpt"))
    other = BertPretrainingModel(dataclasses.replace(tiny_config, hidden_size=32), name="other")
    with pytest.raises(CheckpointError):
        checkpoint.read_training_checkpoint(path, checkpoint.training_checkpoint(other))
