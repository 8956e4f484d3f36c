"""The compiled training and eval steps (reference.trainer) against the reference's numbers.

The fixture's three LAMB steps were taken by the reference's TF1 graph; here the same steps go
through the trainer's tf.function loop (distributed dataset, merge_call update), which must
give the same learning rates, losses, eval metrics and weights.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from reference import checkpoint
from reference.adamw import AdamWeightDecay
from reference.input_pipeline import EXAMPLE_WEIGHT
from reference.lamb import Lamb, clip_gradients, epsilon_from_log
from reference.learning_rate import WarmupPolynomialDecay
from reference.losses import EvalMetrics, metric_sums, pretraining_losses
from reference.trainer import (LOSS_SCALE_GROWTH_INTERVAL, OptimizerSettings, Trainer,
                               fold_in, keyed_dropout)

VARIABLE_TOL = 1e-6


def settings_from(ref: dict) -> OptimizerSettings:
    return OptimizerSettings(name="lamb", learning_rate=ref["learning_rate"],
                             num_train_steps=ref["num_train_steps"],
                             num_warmup_steps=ref["num_warmup_steps"],
                             start_warmup_step=ref["start_warmup_step"],
                             poly_power=ref["poly_power"], beta_1=ref["beta_1"],
                             beta_2=ref["beta_2"], weight_decay_rate=ref["weight_decay_rate"],
                             log_epsilon=ref["log_epsilon"])


def repeated(strategy, element):
    """A distributed dataset yielding `element` forever."""
    return strategy.distribute_datasets_from_function(
        lambda _: tf.data.Dataset.from_tensors(element).repeat())


def with_weights(batch):
    return {**batch, EXAMPLE_WEIGHT: tf.ones([batch["input_ids"].shape[0]])}


@pytest.fixture(scope="module", params=[False, True], ids=["tf_function", "xla"])
def trainer_run(request, tiny_config_no_dropout, tf1_checkpoint, ref_results, train_batch,
                eval_batch):
    """The reference's three LAMB steps through the trainer, compiled with XLA (the whole
    update one computation, as on one GPU) or not (the optimizer update compiled per kind of
    variable, as on a CPU)."""
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(strategy, tiny_config_no_dropout, settings_from(ref_results["lamb"]),
                      train_batch_size=int(train_batch["input_ids"].shape[0]),
                      use_xla=request.param,
                      update_compilation="per_device" if request.param else "per_kind")
    trainer.load_initial_checkpoint(tf1_checkpoint)
    iterator = iter(repeated(strategy, train_batch))
    eval_data = strategy.distribute_datasets_from_function(
        lambda _: tf.data.Dataset.from_tensors(with_weights(eval_batch)))
    records = []
    for _ in ref_results["lamb_steps"]:
        losses = trainer.train_steps(iterator, 1)
        records.append((losses, trainer.evaluate(eval_data, 1)))
    return trainer, records


def test_compiled_steps_reproduce_reference_lamb_steps(trainer_run, ref_results):
    trainer, records = trainer_run
    if trainer.use_xla:
        assert xla_compiled(trainer._update)  # the whole update: one computation
    for (losses, metrics), ref in zip(records, ref_results["lamb_steps"]):
        assert np.float32(losses["learning_rate"]) == np.float32(ref["learning_rate"])
        for key in ("total_loss", "masked_lm_loss", "next_sentence_loss"):
            assert losses[key] == pytest.approx(ref[key], abs=2e-5), key
        for key, value in ref["eval_after_step"].items():
            tol = 1e-6 if "accuracy" in key else 2e-5
            assert metrics[key] == pytest.approx(value, abs=tol), key
    assert trainer.step == len(ref_results["lamb_steps"])
    assert trainer.samples == trainer.step * trainer.train_batch_size


def test_compiled_steps_reach_reference_weights(trainer_run, ref_arrays):
    trainer, _ = trainer_run
    variables = checkpoint.model_variables_by_name(trainer.model)
    table = checkpoint.expand_table(checkpoint.TF1_TABLE, trainer.config.num_hidden_layers)
    prefix = "after_3_lamb_steps/"
    checked = 0
    for tf1_name, name, transform in table:
        key = prefix + tf1_name
        if key not in ref_arrays:
            continue
        value = variables[name].numpy()
        value = value.T if transform == "transpose" else value
        np.testing.assert_allclose(value, ref_arrays[key], rtol=0, atol=VARIABLE_TOL,
                                   err_msg=tf1_name)
        checked += 1
    assert checked >= 6


def test_accumulation_clips_each_micro_batch_then_averages(tiny_config_no_dropout, tf1_checkpoint,
                                                           ref_results, train_batch):
    """n=2: clip(g_a)/2 + clip(g_b)/2 applied once, lr read at micro-step 1 (the reference)."""
    settings = settings_from(ref_results["lamb"])
    halves = [{k: v[:4] for k, v in train_batch.items()},
              {k: v[4:] for k, v in train_batch.items()}]
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(strategy, tiny_config_no_dropout, settings, train_batch_size=4,
                      steps_per_update=2)
    trainer.load_initial_checkpoint(tf1_checkpoint)
    stacked = {k: tf.stack([halves[0][k], halves[1][k]]) for k in train_batch}
    losses = trainer.train_steps(iter(repeated(strategy, stacked)), 1)

    from reference.model import BertPretrainingModel
    model = BertPretrainingModel(tiny_config_no_dropout, name="manual")
    checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)
    schedule = WarmupPolynomialDecay(settings.learning_rate, settings.num_train_steps,
                                     settings.num_warmup_steps, settings.start_warmup_step)
    optimizer = Lamb(schedule, beta_1=settings.beta_1, beta_2=settings.beta_2,
                     epsilon=epsilon_from_log(settings.log_epsilon),
                     weight_decay_rate=settings.weight_decay_rate)
    total = None
    for half in halves:
        with tf.GradientTape() as tape:
            loss = pretraining_losses(model(half, training=True), half)["total_loss"]
        grads, _ = clip_gradients(tape.gradient(loss, model.trainable_variables))
        total = [g / 2 for g in grads] if total is None else \
            [t + g / 2 for t, g in zip(total, grads)]
    lr = optimizer.apply_gradients(zip(total, model.trainable_variables), step=1)
    assert np.float32(losses["learning_rate"]) == np.float32(lr)
    assert trainer.step == 2 and trainer.samples == 8 and int(trainer.optimizer.iterations) == 1
    ours = checkpoint.model_variables_by_name(trainer.model)
    for name, var in checkpoint.model_variables_by_name(model).items():
        if name.endswith("key/bias"):
            continue  # its gradient is 0 up to rounding (softmax ignores it); LAMB scales noise
        np.testing.assert_allclose(ours[name].numpy(), var.numpy(), rtol=1e-5, atol=VARIABLE_TOL,
                                   err_msg=name)


def xla_compiled(function) -> bool:
    """Whether every trace of a tf.function is marked for XLA compilation."""
    traces = function._list_all_concrete_functions()  # pylint: disable=protected-access
    return bool(traces) and all(t.function_def.attr["_XlaMustCompile"].b for t in traces)


@pytest.fixture(scope="module")
def dropout_run(tiny_config, tf1_checkpoint, ref_results, train_batch, eval_batch):
    """run(steps_per_update, use_xla, recompute_layers, update_compilation) -> (trainer,
    losses, metrics, variables by name): with dropout 0.1 and seed 7, 3 host calls of 2
    updates of the 8 fixture records (n micro-batches each), then 2 evals; each run made once
    per module."""
    assert tiny_config.hidden_dropout_prob > 0
    strategy = tf.distribute.get_strategy()
    eval_data = strategy.distribute_datasets_from_function(
        lambda _: tf.data.Dataset.from_tensors(with_weights(eval_batch)))
    runs = {}

    def run(n: int, use_xla: bool, recompute: bool = False, update_compilation=None):
        key = (n, use_xla, recompute, update_compilation)
        if key not in runs:
            micro = {k: tf.reshape(v, [n, 8 // n, *v.shape[1:]]) if n > 1 else v
                     for k, v in train_batch.items()}
            trainer = Trainer(strategy, tiny_config, settings_from(ref_results["lamb"]),
                              train_batch_size=8 // n, steps_per_update=n, use_xla=use_xla,
                              recompute_layers=recompute, update_compilation=update_compilation)
            assert trainer.model.recompute_layers is recompute
            trainer.load_initial_checkpoint(tf1_checkpoint)
            trainer.set_seed(7)
            iterator = iter(repeated(strategy, micro))
            losses = [trainer.train_steps(iterator, 2) for _ in range(3)]
            metrics = [trainer.evaluate(eval_data, 1) for _ in range(2)]
            runs[key] = (trainer, losses, metrics,
                         checkpoint.model_variables_by_name(trainer.model))
        return runs[key]
    return run


@pytest.mark.parametrize("steps_per_update", [1, 2])
def test_xla_trains_like_tf_function_without_retracing(dropout_run, steps_per_update):
    """With dropout 0.1 and accumulation: the same dropout masks, losses, weights and metrics
    with and without XLA, and each step function traced (compiled) once over 3 host calls of
    2 updates and 2 evals."""
    runs = {use_xla: dropout_run(steps_per_update, use_xla) for use_xla in (False, True)}
    for use_xla, (trainer, *_) in runs.items():
        counts = trainer.trace_counts()
        assert counts.pop("update_variable") == trainer.update_kinds  # compiled once per kind
        assert set(counts.values()) == {1} and not trainer.retraced(), counts
        assert xla_compiled(trainer._update_variable)  # with and without use_xla
        if use_xla:  # the micro-batch passes and evals; the optimizer update per kind (a CPU)
            assert xla_compiled(trainer._gradients) and xla_compiled(trainer._eval_sums)
            assert trainer._update == trainer.update_step and len(counts) == 4
    (_, plain_losses, plain_metrics, plain_vars), (_, xla_losses, xla_metrics, xla_vars) = \
        runs[False], runs[True]
    for plain, xla in zip(plain_losses, xla_losses):
        assert xla == pytest.approx(plain, abs=2e-5)
    assert plain_losses[0]["total_loss"] != plain_losses[1]["total_loss"]
    for plain, xla in zip(plain_metrics, xla_metrics):
        assert xla == pytest.approx(plain, abs=2e-5)
    for name, var in plain_vars.items():
        if not name.endswith("key/bias"):  # zero gradient up to rounding; LAMB scales noise
            np.testing.assert_allclose(xla_vars[name].numpy(), var.numpy(), rtol=0, atol=1e-5,
                                       err_msg=name)


@pytest.mark.parametrize("use_xla", [False, True], ids=["tf_function", "xla"])
def test_recomputed_layers_train_like_stored_activations(dropout_run, use_xla):
    """recompute_layers (gradient checkpointing) with dropout 0.1: the backward pass redraws
    the same masks, so losses and weights equal those of a run keeping the activations."""
    _, stored, _, stored_vars = dropout_run(1, use_xla)
    _, recomputed, _, recomputed_vars = dropout_run(1, use_xla, recompute=True)
    for stored_losses, recomputed_losses in zip(stored, recomputed):
        assert recomputed_losses == pytest.approx(stored_losses, abs=1e-5)
    for name, var in stored_vars.items():
        if not name.endswith("key/bias"):  # zero gradient up to rounding; LAMB scales noise
            np.testing.assert_allclose(recomputed_vars[name].numpy(), var.numpy(), rtol=0,
                                       atol=1e-5, err_msg=name)


def test_the_update_compiled_once_per_kind_moves_weights_as_one_computation_per_device(
        dropout_run):
    """The optimizer update compiled once per kind of variable (a CPU's default; the tiny
    model's variables fall into far fewer kinds) gives the same bits as one computation of
    every variable per device (GPUs' default): losses, metrics and weights."""
    per_kind = dropout_run(1, False)
    per_device = dropout_run(1, False, update_compilation="per_device")
    trainer = per_device[0]
    assert xla_compiled(trainer._update_variables)
    assert trainer.trace_counts()["update_variables"] == 1 and not trainer.retraced()
    assert per_kind[0].trace_counts()["update_variable"] == per_kind[0].update_kinds < \
        len(per_kind[0].model.trainable_variables)
    assert per_device[1] == per_kind[1] and per_device[2] == per_kind[2]
    for name, var in per_kind[3].items():
        np.testing.assert_array_equal(per_device[3][name].numpy(), var.numpy(), err_msg=name)


def test_keyed_dropout_masks_are_the_same_under_xla():
    inputs = tf.ones([4, 64, 96])
    seed = tf.constant([3, 7], tf.int64)
    plain = tf.function(lambda x, s: keyed_dropout(x, 0.1, fold_in(s, 2)))(inputs, seed)
    xla = tf.function(lambda x, s: keyed_dropout(x, 0.1, fold_in(s, 2)),
                      jit_compile=True)(inputs, seed)
    np.testing.assert_array_equal(plain.numpy(), xla.numpy())
    fold = tf.function(lambda s: fold_in(s, 5))
    np.testing.assert_array_equal(fold(seed), tf.function(lambda s: fold_in(s, 5),
                                                          jit_compile=True)(seed))
    assert fold(seed)[0] != fold(tf.constant([3, 8], tf.int64))[0]
    assert fold(seed)[1] != fold_in(seed, 6)[1] and 0 <= min(fold(seed)) <= max(fold(seed)) < 2**32
    assert np.mean(plain.numpy() == 0) == pytest.approx(0.1, abs=0.01)
    assert set(np.unique(plain.numpy())) == {0.0, np.float32(1 / 0.9)}
    other = keyed_dropout(inputs, 0.1, fold_in(seed, 3))
    assert not np.array_equal(plain.numpy(), other.numpy())
    shared = keyed_dropout(inputs, 0.5, seed, noise_shape=[4, 1, 96]).numpy()
    assert (shared == shared[:, :1, :]).all() and 0 < np.mean(shared == 0) < 1


@pytest.mark.parametrize("use_xla", [False, True], ids=["tf_function", "xla"])
def test_fp16_loss_scaling_skips_non_finite_updates(tiny_config_no_dropout, train_batch, use_xla):
    # Two of the fixture's records: float16 arithmetic is emulated on a CPU, and the scaling
    # logic does not depend on the batch.
    batch = {name: values[:2] for name, values in train_batch.items()}
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        strategy = tf.distribute.get_strategy()
        trainer = Trainer(strategy, tiny_config_no_dropout,
                          OptimizerSettings(learning_rate=1e-3, num_train_steps=10,
                                            num_warmup_steps=0),
                          train_batch_size=2, mixed_precision="fp16", use_xla=use_xla)
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    trainer.initialize_weights(seed=3)
    iterator = iter(repeated(strategy, batch))
    before = [v.numpy() for v in trainer.model.trainable_variables]
    trainer.loss_scale.assign(3e38)  # the scaled loss overflows: the update must be skipped
    skipped = trainer.train_steps(iterator, 1)
    assert skipped["skipped_updates"] == 1 and skipped["loss_scale"] == pytest.approx(1.5e38)
    assert float(trainer.loss_scale) == pytest.approx(1.5e38)
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before,
                                                            trainer.model.trainable_variables))
    assert trainer.step == 1 and int(trainer.optimizer.iterations) == 0
    trainer.loss_scale.assign(1024.0)
    losses = trainer.train_steps(iterator, 1)
    assert np.isfinite(losses["total_loss"]) and int(trainer.optimizer.iterations) == 1
    assert int(trainer.good_updates) == 1 and float(trainer.loss_scale) == 1024.0
    assert losses["skipped_updates"] == 0 and losses["loss_scale"] == 1024.0
    # Growth: the LOSS_SCALE_GROWTH_INTERVAL-th good update in a row doubles the scale.
    trainer.good_updates.assign(LOSS_SCALE_GROWTH_INTERVAL - 2)
    trainer.train_steps(iterator, 1)
    assert float(trainer.loss_scale) == 1024.0
    trainer.train_steps(iterator, 1)
    assert float(trainer.loss_scale) == 2048.0 and int(trainer.good_updates) == 0
    assert any(not np.array_equal(b, v.numpy()) for b, v in zip(
        before, trainer.model.trainable_variables))


def test_initial_weights_depend_only_on_the_seed(tiny_config):
    strategy = tf.distribute.get_strategy()
    settings = OptimizerSettings(num_train_steps=10, num_warmup_steps=0)
    first, second = (Trainer(strategy, tiny_config, settings, 8) for _ in range(2))
    # Nothing drawn before initialize_weights sets every weight (BERT-large: 11 s saved).
    assert not np.any(checkpoint.model_variables_by_name(first.model)[
        "bert/encoder/layer_0/attention/self/query/kernel"].numpy())
    tf.random.uniform([3])  # stateful random ops in between change nothing
    first.initialize_weights(5)
    second.initialize_weights(5)
    for a, b in zip(first.model.variables, second.model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    names = checkpoint.model_variables_by_name(first.model)
    assert np.all(names["bert/embeddings/LayerNorm/gamma"].numpy() == 1)
    assert np.all(names["cls/predictions/output_bias/bias"].numpy() == 0)
    kernel = names["bert/encoder/layer_0/attention/self/query/kernel"].numpy()
    assert 0.01 < kernel.std() < 0.03 and np.abs(kernel).max() <= 2 * 0.02 + 1e-6


def test_metric_sums_ignore_padded_examples(eval_batch, tiny_config):
    from reference.model import BertPretrainingModel
    model = BertPretrainingModel(tiny_config, name="padding")
    real = model(eval_batch, training=False)
    padded_batch = {k: tf.concat([v, tf.zeros_like(v[:3])], 0) for k, v in eval_batch.items()}
    weights = tf.concat([tf.ones([eval_batch["input_ids"].shape[0]]), tf.zeros([3])], 0)
    plain, padded = EvalMetrics(), EvalMetrics()
    plain.update(metric_sums(real, eval_batch))
    padded.update(metric_sums(model(padded_batch, training=False), padded_batch, weights))
    for key, value in plain.result().items():
        assert padded.result()[key] == pytest.approx(value, rel=1e-6), key


def test_adamw_follows_the_reference_update():
    kernel = tf.Variable([1.0, -2.0], name="dense/kernel")
    bias = tf.Variable([0.5], name="dense/bias")
    opt = AdamWeightDecay(0.1)
    grads = [np.array([0.3, -0.1], np.float32), np.array([0.2], np.float32)]
    m = [np.zeros(2), np.zeros(1)]
    v = [np.zeros(2), np.zeros(1)]
    w = [np.array([1.0, -2.0]), np.array([0.5])]
    for _ in range(2):
        opt.apply_gradients(zip([tf.constant(g) for g in grads], [kernel, bias]))
        for i, g in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            update = m[i] / (np.sqrt(v[i]) + 1e-6)  # no bias correction
            if i == 0:
                update = update + 0.01 * w[i]  # bias excluded from decay
            w[i] = w[i] - 0.1 * update
    np.testing.assert_allclose(kernel.numpy(), w[0], rtol=1e-5)
    np.testing.assert_allclose(bias.numpy(), w[1], rtol=1e-5)
    assert int(opt.iterations) == 2


def random_bits_drawn(hlo_text: str) -> int:
    """Random bits the HLO module draws: the sum over its rng-bit-generator outputs of
    elements x element width."""
    widths = {"u32": 32, "u64": 64, "s32": 32, "s64": 64}
    total = 0
    for match in re.finditer(r"\(u64\[\d+\]\{0\}, (\w+)\[([\d,]*)\][^)]*\) rng-bit-generator",
                             hlo_text):
        dims = [int(d) for d in match.group(2).split(",") if d]
        total += widths[match.group(1)] * int(np.prod(dims))
    return total


def test_compiled_update_draws_sixteen_random_bits_per_dropout_entry(tiny_config, ref_results,
                                                                     train_batch):
    """The whole update compiled as one function draws 16 random bits for each entry a dropout
    mask covers (embeddings, attention probabilities, both hidden outputs of every layer): the
    backward pass reuses the forward pass's masks instead of drawing them again."""
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(strategy, tiny_config, settings_from(ref_results["lamb"]),
                      train_batch_size=8, use_xla=True, update_compilation="per_device")
    hlo = trainer._update.experimental_get_compiler_ir(
        train_batch, tf.constant(0, tf.int64))(stage="hlo")
    batch, seq = train_batch["input_ids"].shape
    hidden, layers = tiny_config.hidden_size, tiny_config.num_hidden_layers
    masked = batch * seq * hidden * (1 + 2 * layers) + \
        layers * batch * tiny_config.num_attention_heads * seq * seq
    # The keys: 2 x uint32 folding the replica into the micro-step's, and as much per layer.
    keys = 2 * 32 * (1 + 1 + 3 * layers)
    assert random_bits_drawn(hlo) - keys == 16 * masked
