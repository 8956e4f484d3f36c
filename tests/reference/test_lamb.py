"""LAMB and the learning-rate schedule against the reference's optimization.create_optimizer.

The reference took three LAMB steps (dropout 0) on a fixed batch from the fixture checkpoint,
with a warm-up that starts at a negative step and ends inside the three steps; its learning
rates, losses, eval metrics after each step and some final variables/moments are recorded.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from reference import checkpoint
from reference.lamb import Lamb, clip_gradients, epsilon_from_log, variable_name
from reference.learning_rate import WarmupPolynomialDecay
from reference.losses import EvalMetrics, metric_sums, pretraining_losses
from reference.model import BertPretrainingModel

LOSS_TOL = 2e-5
VARIABLE_TOL = 1e-6  # measured <= 7.5e-8 (float32 rounding of differently ordered sums)


def make_optimizer(settings: dict) -> Lamb:
    schedule = WarmupPolynomialDecay(settings["learning_rate"], settings["num_train_steps"],
                                     settings["num_warmup_steps"], settings["start_warmup_step"],
                                     settings["poly_power"])
    return Lamb(schedule, beta_1=settings["beta_1"], beta_2=settings["beta_2"],
                epsilon=epsilon_from_log(settings["log_epsilon"]),
                weight_decay_rate=settings["weight_decay_rate"])


def train_step(model, optimizer, batch, step=None):
    with tf.GradientTape() as tape:
        losses = pretraining_losses(model(batch, training=True), batch)
    variables = model.trainable_variables
    grads, _ = clip_gradients(tape.gradient(losses["total_loss"], variables))
    lr = optimizer.apply_gradients(zip(grads, variables), step=step)
    return losses, lr


@pytest.fixture(scope="module")
def lamb_run(tiny_config_no_dropout, tf1_checkpoint, ref_results, train_batch, eval_batch):
    model = BertPretrainingModel(tiny_config_no_dropout, name="lamb_run")
    checkpoint.load_tf1_checkpoint(model, tf1_checkpoint)
    optimizer = make_optimizer(ref_results["lamb"])
    records = []
    for _ in ref_results["lamb_steps"]:
        losses, lr = train_step(model, optimizer, train_batch)
        metrics = EvalMetrics()
        metrics.update(metric_sums(model(eval_batch, training=False), eval_batch))
        records.append({"learning_rate": float(lr),
                        **{k: float(v) for k, v in losses.items()},
                        "eval_after_step": metrics.result()})
    return model, optimizer, records


def test_learning_rates_match_reference_exactly(lamb_run, ref_results):
    _, _, records = lamb_run
    for ours, ref in zip(records, ref_results["lamb_steps"]):
        assert np.float32(ours["learning_rate"]) == np.float32(ref["learning_rate"])


def test_losses_before_each_step_match_reference(lamb_run, ref_results):
    _, _, records = lamb_run
    for ours, ref in zip(records, ref_results["lamb_steps"]):
        for key in ("total_loss", "masked_lm_loss", "next_sentence_loss"):
            assert ours[key] == pytest.approx(ref[key], abs=LOSS_TOL), key


def test_eval_metrics_after_each_step_match_reference(lamb_run, ref_results):
    _, _, records = lamb_run
    start = ref_results["eval_metrics"]["masked_lm_loss"]
    for ours, ref in zip(records, ref_results["lamb_steps"]):
        for key, value in ref["eval_after_step"].items():
            tol = 1e-6 if "accuracy" in key else LOSS_TOL
            assert ours["eval_after_step"][key] == pytest.approx(value, abs=tol), key
    # The steps move the model by much more than the tolerance.
    assert abs(ref_results["lamb_steps"][-1]["eval_after_step"]["masked_lm_loss"] - start) > 1e-3


def test_variables_and_moments_after_three_steps_match_reference(lamb_run, ref_arrays,
                                                                 tf1_checkpoint):
    model, optimizer, _ = lamb_run
    variables = checkpoint.model_variables_by_name(model)
    ours_for_tf1 = {tf1: (ours, transform) for tf1, ours, transform in
                    checkpoint.expand_table(checkpoint.TF1_TABLE, model.config.num_hidden_layers)}
    reader = tf.train.load_checkpoint(tf1_checkpoint)
    prefix = "after_3_lamb_steps/"
    checked = 0
    for key, expected in ref_arrays.items():
        if not key.startswith(prefix) or key.startswith(prefix + "slot_"):
            continue
        tf1_name = key[len(prefix):]
        name, transform = ours_for_tf1[tf1_name]
        value = variables[name].numpy()
        if transform == "transpose":
            value = value.T
        np.testing.assert_allclose(value, expected, rtol=0, atol=VARIABLE_TOL, err_msg=tf1_name)
        moved = np.abs(expected - reader.get_tensor(tf1_name)).max()
        assert moved > 20 * VARIABLE_TOL, tf1_name  # the comparison is meaningful
        checked += 1
    assert checked >= 6
    query = variables["bert/encoder/layer_0/attention/self/query/kernel"]
    m, v = optimizer.slots(query)
    np.testing.assert_allclose(m.numpy(), ref_arrays[prefix + "slot_m/bert/encoder/layer_0/"
                                                      "attention/self/query/kernel"],
                               rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(v.numpy(), ref_arrays[prefix + "slot_v/bert/encoder/layer_0/"
                                                      "attention/self/query/kernel"],
                               rtol=1e-4, atol=1e-10)
    assert int(optimizer.iterations) == 3
    beta = np.float32(0.88)
    assert optimizer.beta_1_power.numpy() == beta * beta * beta * beta  # running float32 product


def test_schedule_matches_reference_learning_rates(ref_results):
    for sched in ref_results["lr_schedules"]:
        schedule = WarmupPolynomialDecay(sched["init_lr"], sched["num_train_steps"],
                                         sched["num_warmup_steps"], sched["start_warmup_step"],
                                         sched["poly_power"])
        ours = np.array([schedule(step).numpy() for step in range(len(sched["learning_rates"]))])
        np.testing.assert_array_equal(ours, np.array(sched["learning_rates"], np.float32),
                                      err_msg=str(sched))


def test_schedule_shape():
    schedule = WarmupPolynomialDecay(1.0, num_train_steps=10, num_warmup_steps=4,
                                     start_warmup_step=-2)
    # warm-up counts from -2, so step 0 is already half-way; decay counts from step 0.
    assert float(schedule(0)) == pytest.approx(0.5)
    assert float(schedule(1)) == pytest.approx(0.75)
    assert float(schedule(2)) == pytest.approx(0.8)
    assert float(schedule(10)) == 0.0 and float(schedule(15)) == 0.0


def test_exclusions_agree_with_reference_names(lamb_run):
    """Decay/adaptation decisions on our names equal the reference's on the TF1 names."""
    model, optimizer, _ = lamb_run
    names = {variable_name(v): v for v in model.trainable_variables}
    table = checkpoint.expand_table(checkpoint.TF1_TABLE, model.config.num_hidden_layers)
    by_ours = {ours: tf1 for tf1, ours, _ in table}
    excluded = set()
    for full_name in names:
        tf1 = by_ours[checkpoint.model_variable_name(model, names[full_name])]
        assert optimizer.uses_weight_decay(full_name) == optimizer.uses_weight_decay(tf1)
        assert optimizer.uses_layer_adaptation(full_name) == \
            optimizer.uses_layer_adaptation(tf1)
        if not optimizer.uses_weight_decay(tf1):
            excluded.add(tf1)
    assert "cls/predictions/output_bias" in excluded
    assert "bert/encoder/layer_1/output/LayerNorm/gamma" in excluded
    assert "cls/seq_relationship/output_weights" not in excluded
    assert "bert/embeddings/word_embeddings" not in excluded
    # 2 LayerNorm vars x (1 + 2 per layer + 1 head) + biases: 6 per layer, pooler, head dense,
    # output bias, seq_relationship bias.
    layers = model.config.num_hidden_layers
    assert len(excluded) == 2 * (2 + 2 * layers) + 6 * layers + 4


def test_trust_ratio_and_zero_norms():
    var_zero = tf.Variable(tf.zeros([3]), name="w_zero/kernel")
    var_still = tf.Variable(tf.ones([2]), name="w_still/kernel")
    var_bias = tf.Variable(tf.constant([1.0, -2.0]), name="layer/bias")
    var_kernel = tf.Variable(tf.constant([3.0, 4.0]), name="layer/kernel")
    opt = Lamb(0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.0)
    grads = [tf.constant([1.0, -1.0, 2.0]), tf.zeros([2]), tf.constant([0.5, 0.5]),
             tf.constant([1.0, 1.0])]
    opt.apply_gradients(zip(grads, [var_zero, var_still, var_bias, var_kernel]))
    # First step: m_hat = g, v_hat = g*g, so update = g / (|g| + 1e-6), about sign(g).
    np.testing.assert_allclose(var_zero.numpy(), [-0.1, 0.1, -0.1], rtol=1e-5)  # ||w|| = 0
    np.testing.assert_array_equal(var_still.numpy(), [1.0, 1.0])  # update 0 -> ratio 1, no move
    np.testing.assert_allclose(var_bias.numpy(), [0.9, -2.1], rtol=1e-5)  # excluded: ratio 1
    # ||w|| = 5, ||update|| = sqrt(2): step = 0.1 * 5 / sqrt(2) per unit of update.
    step = 0.1 * 5 / np.sqrt(2)
    np.testing.assert_allclose(var_kernel.numpy(), [3 - step, 4 - step], rtol=1e-5)


def test_weight_decay_skips_excluded_names():
    kernel = tf.Variable(tf.constant([2.0]), name="k/kernel")
    gamma = tf.Variable(tf.constant([2.0]), name="x/LayerNorm/gamma")
    opt = Lamb(0.1, epsilon=1e-6, weight_decay_rate=0.5, exclude_from_layer_adaptation=[".*"])
    opt.apply_gradients([(tf.zeros([1]), kernel), (tf.zeros([1]), gamma)])
    np.testing.assert_allclose(kernel.numpy(), [2.0 - 0.1 * 0.5 * 2.0], rtol=1e-6)
    np.testing.assert_array_equal(gamma.numpy(), [2.0])


def test_explicit_step_for_accumulated_gradients():
    """With accumulation the loop passes its micro-step; one call is one LAMB update."""
    var = tf.Variable(tf.constant([1.0, 2.0]), name="acc/kernel")
    opt = Lamb(WarmupPolynomialDecay(1e-2, num_train_steps=40, num_warmup_steps=8), beta_1=0.5,
               beta_2=0.5)
    lr = opt.apply_gradients([(tf.constant([0.1, 0.2]), var)], step=7)
    assert float(lr) == pytest.approx(1e-2 * 7 / 8)
    assert int(opt.iterations) == 1
    assert float(opt.beta_1_power) == pytest.approx(0.25)
    assert float(opt.current_learning_rate()) == pytest.approx(1e-2 * 1 / 8)


def test_clip_gradients_uses_dense_norm_for_repeated_rows():
    sparse = tf.IndexedSlices(values=tf.constant([[3.0], [4.0]]), indices=tf.constant([1, 1]),
                              dense_shape=tf.constant([3, 1]))
    clipped, norm = clip_gradients([sparse, None, tf.constant([0.0])], clip_norm=1.0)
    assert float(norm) == pytest.approx(7.0)  # the row sum, not sqrt(3^2 + 4^2)
    np.testing.assert_allclose(clipped[0].numpy(), [[0.0], [1.0], [0.0]], rtol=1e-6)
    assert clipped[1] is None
