"""The compiled pre-training and evaluation steps under any tf.distribute strategy (`Trainer`),
and the keyed dropout that makes a resumed or XLA-compiled run draw the same masks.

An update (`Trainer.update_step`) is `steps_per_update` micro-batches on every replica: their
gradients are clipped (per micro-batch, as the MLCommons reference does, or once after the
all-reduce), averaged, all-reduced and applied once in cross-replica context. With XLA the
micro-batch passes are one compiled computation per replica and the optimizer update of every
variable one more per device (or one per kind of variable, `update_compilation`); on one
device with the update compiled per device, the whole update is one. Step counters are
micro-steps, as in the MLCommons reference.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from typing import Iterator

import numpy as np
import tensorflow as tf
import tf_keras
from absl import logging

from benchmark.adapters.tf_keras import DropoutGenerator, replace_dropout_generators
from reference import checkpoint as ckpt
from reference.adamw import AdamWeightDecay
from reference.bert_config import MASKED_LM_BLOCK_ROWS, BertConfig
from reference.input_pipeline import EXAMPLE_WEIGHT
from reference.lamb import Lamb, clip_gradients, densify, variable_name
from reference.learning_rate import WarmupPolynomialDecay
from reference.losses import EvalMetrics, metric_sums, pretraining_losses
from reference.model import BertPretrainingModel, in_forward_scope
from reference.optimizer_settings import OptimizerSettings

MIXED_PRECISION = {"none": None, "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
INITIAL_LOSS_SCALE = 2.0 ** 15
LOSS_SCALE_GROWTH_INTERVAL = 2000
CHECKPOINT_NAME = "model.ckpt"  # files model.ckpt-<global step>, as the MLCommons reference's


def make_optimizer(settings: OptimizerSettings):
    """Lamb or AdamWeightDecay with the MLCommons reference's warm-up + polynomial-decay
    schedule."""
    schedule = WarmupPolynomialDecay(settings.learning_rate, settings.num_train_steps,
                                     settings.num_warmup_steps, settings.start_warmup_step,
                                     settings.poly_power)
    if settings.name == "lamb":
        return Lamb(schedule, beta_1=settings.beta_1, beta_2=settings.beta_2,
                    epsilon=settings.epsilon, weight_decay_rate=settings.weight_decay_rate)
    if settings.name == "adamw":
        return AdamWeightDecay(schedule)
    raise ValueError(f"unknown optimizer {settings.name!r} (lamb or adamw)")


def set_mixed_precision(mode: str) -> None:
    """Set the Keras policy for "none", "bf16" or "fp16" (before the model is built)."""
    if mode not in MIXED_PRECISION:
        raise ValueError(f"mixed precision must be one of {', '.join(MIXED_PRECISION)}")
    tf_keras.mixed_precision.set_global_policy(MIXED_PRECISION[mode] or "float32")


class DropoutKeys:
    """The stateless seed ([2] int64) for the dropout masks of the forward pass being traced.

    The trainer sets it (`using`) around each training forward pass; every dropout layer of the
    model (`KeyedDropout`) folds in its own index. Thread-local, because MirroredStrategy
    traces each replica's step in a thread of its own.
    """

    def __init__(self):
        self._local = threading.local()

    @contextlib.contextmanager
    def using(self, key: tf.Tensor) -> Iterator[None]:
        """Within the block, dropout masks derive from `key`."""
        self._local.key = key
        try:
            yield
        finally:
            self._local.key = None

    def current(self) -> tf.Tensor:
        """The key set by the enclosing `using` block; RuntimeError outside one."""
        key = getattr(self._local, "key", None)
        if key is None:
            raise RuntimeError("the trainer's model ran with training=True outside a training "
                               "step: its dropout needs the step's key")
        return key


def _philox_bits(seed: tf.Tensor, shape) -> tf.Tensor:
    """uint32 Philox draws of `shape` for a [2] int64 seed whose entries are in [0, 2**32).

    XLA and TensorFlow's kernels draw the same bits for such seeds (not so their uniform
    floats, nor the key derived from a seed entry of 2**32 or more, which
    tf.random.experimental.stateless_fold_in makes)."""
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    return tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=shape, key=key, counter=counter, alg=tf.random.Algorithm.PHILOX.value,
        dtype=tf.uint32)


def fold_in(seed: tf.Tensor, data) -> tf.Tensor:
    """A new [2] int64 seed from `seed` and the integer `data` (both in [0, 2**32)): two uint32
    draws from `seed`, the second XOR `data`, so that distinct data give distinct seeds."""
    drawn = _philox_bits(seed, [2])
    mixed = tf.stack([drawn[0], tf.bitwise.bitwise_xor(drawn[1], tf.cast(data, tf.uint32))])
    return tf.cast(mixed, tf.int64)


# Random bits per dropout mask entry: each 32-bit Philox draw gives the keep decisions of two
# entries, from its low and its high 16 bits.
DROPOUT_MASK_BITS = 16


def keep_threshold(rate: float) -> int:
    """The 16-bit draw at or above which a mask entry is kept: round(rate * 2**16), so an entry
    is kept with probability (2**16 - threshold) / 2**16 (rate 0.1: 58982 / 65536 =
    0.899993896484375, 6.1e-6 below 0.9)."""
    return min(int(round(rate * 2.0 ** DROPOUT_MASK_BITS)), 2 ** DROPOUT_MASK_BITS - 1)


def dropout_keep_mask(seed: tf.Tensor, shape, rate: float) -> tf.Tensor:
    """Boolean keep mask of `shape` (a list or int32 shape tensor) for a [2] int64 seed: entry
    k (row-major) is decided by 16 bits of the Philox stream's uint32 draw k // 2 (low half for
    even k, high half for odd), kept when they are at least `keep_threshold(rate)`."""
    shape = tf.convert_to_tensor(shape, tf.int32)
    count = tf.reduce_prod(shape)
    bits = _philox_bits(seed, tf.reshape((count + 1) // 2, [1]))
    halves = tf.stack([tf.bitwise.bitwise_and(bits, tf.constant(0xFFFF, tf.uint32)),
                       tf.bitwise.right_shift(bits, tf.constant(16, tf.uint32))], axis=-1)
    keep = tf.reshape(halves, [-1])[:count] >= tf.constant(keep_threshold(rate), tf.uint32)
    return tf.reshape(keep, shape)


def keyed_dropout(inputs: tf.Tensor, rate: float, seed: tf.Tensor,
                  noise_shape=None) -> tf.Tensor:
    """`inputs` with a fraction `rate` of entries zeroed and the rest scaled by 1 / (1 - rate).

    The mask (`dropout_keep_mask`, seeded by `seed`, [2] int64) comes from raw Philox bits,
    which, unlike the uniform floats made from them, are the same under XLA and TensorFlow's
    kernels. The backward pass multiplies by the forward pass's mask (kept as booleans), never
    a new draw. `noise_shape` broadcasts one draw over axes as in tf.nn.dropout.
    """
    if not rate:
        return inputs
    keep = dropout_keep_mask(seed, tf.shape(inputs) if noise_shape is None else noise_shape,
                             rate)
    return _scaled_where(inputs, keep, 1.0 / (1.0 - rate))


def _scaled_where(inputs: tf.Tensor, keep: tf.Tensor, scale: float) -> tf.Tensor:
    """inputs * scale where `keep` (broadcast), else 0; the gradient is the upstream gradient
    masked and scaled the same way, from the same boolean mask."""
    factor = tf.where(keep, tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype))

    @tf.custom_gradient
    def masked(values):
        return values * factor, in_forward_scope(lambda upstream: upstream * factor)

    return masked(inputs)


class KeyedDropout(DropoutGenerator):
    """The random generator of one Dropout layer: masks from `keyed_dropout`, seeded by the
    current `DropoutKeys` key folded with this layer's index."""

    def __init__(self, keys: DropoutKeys, index: int):
        self._keys = keys
        self._index = index

    def dropout(self, inputs: tf.Tensor, rate: float, noise_shape=None) -> tf.Tensor:
        """`inputs` with a fraction `rate` zeroed and the rest scaled by 1 / (1 - rate)."""
        return keyed_dropout(inputs, rate, fold_in(self._keys.current(), self._index),
                             noise_shape)


def use_keyed_dropout(model: tf_keras.Model, keys: DropoutKeys) -> int:
    """Give every Dropout layer of `model` a `KeyedDropout` generator (index: the layer's
    position in `model.submodules`, the same in every process); returns how many."""
    return replace_dropout_generators(model, lambda index: KeyedDropout(keys, index))


def _update_compilation(asked: str | None, variable) -> str:
    """The Trainer's `update_compilation`: `asked`, or by the device of `variable` (a model
    weight) when None: per_device on a GPU, else per_kind."""
    if asked is None:
        on_gpu = tf.DeviceSpec.from_string(variable.device).device_type == "GPU"
        return "per_device" if on_gpu else "per_kind"
    if asked not in ("per_device", "per_kind"):
        raise ValueError(f"update_compilation={asked!r}: per_device or per_kind")
    return asked


def _stored_variable(variable):
    """The variable that stores `variable`'s value: under a Keras mixed-precision policy the
    model's weights are AutoCastVariables (read in the compute type inside layers) wrapping a
    float32 variable, which a tf.function can take as an argument (an AutoCastVariable it
    captures, tracing again for each); any other variable is itself."""
    return getattr(variable, "_variable", variable) \
        if type(variable).__name__ == "AutoCastVariable" else variable


class Trainer:
    """Model, optimizer, step counters and the compiled steps for one strategy.

    Args:
      strategy: the tf.distribute strategy (variables are created in its scope).
      config: the BERT configuration.
      optimizer: OptimizerSettings (with where the gradient is clipped).
      train_batch_size: global records per micro-step (all replicas).
      steps_per_update: micro-batches accumulated per optimizer update.
      mixed_precision: "none", "bf16" or "fp16" (set the Keras policy first:
        `set_mixed_precision`). fp16 scales the loss by `loss_scale` (2**15 at first): an
        update with non-finite gradients is skipped and halves it, and
        LOSS_SCALE_GROWTH_INTERVAL good updates in a row double it.
      use_xla: compile each replica's forward and backward passes (with the micro-batch loop,
        accumulation and clipping) and the eval step with XLA; the loop over updates, the
        iterator and the all-reduce stay outside. On one device with the optimizer update
        compiled per device, the whole update is one computation. TPUs compile everything
        anyway.
      recompute_layers: recompute each transformer layer in the backward pass instead of
        keeping its activations (`BertPretrainingModel`; less memory, more compute).
      masked_lm_block_rows: the most masked-LM rows whose [rows, vocab] logits are formed at
        once in the losses and metrics (`reference.losses`; 0: all rows of a batch).
      update_compilation: how the optimizer update is XLA-compiled off TPUs: "per_device" (the
        update of every variable one computation per device: one launch per device and update,
        as GPUs want) or "per_kind" (one computation per kind of variable, shape, dtype and
        optimizer decisions alike, called for each variable: each kind compiled once, where
        one computation compiles every variable's update apart; BERT-large has 398 variables
        of 11 kinds). None: per_device on GPUs, per_kind elsewhere (on a CPU a
        launch costs microseconds and compiling dominates a short run's start).
      packed: the training batches are packed rows. Each update first all-reduces its
        masked-LM weight and sequence count and normalises every micro-batch's loss by them,
        so the gradient is that of an unpacked batch of the same sequences, clipped once after
        the all-reduce. train_batch_size still counts sequences (the nominal global batch);
        trained_samples counts the sequences trained.

    Counters (checkpointed with the model and optimizer): `global_step` (micro-steps),
    `trained_samples`, `target_reached` (1 once an eval reached the target), `run_seed` (data
    order and dropout, see `set_seed`), `loss_scale` and `good_updates` (fp16); and
    `run_settings`, a string for the caller (`set_run_settings`): the settings that define the
    run, which a resumed run compares with its own.
    """

    def __init__(self, strategy: tf.distribute.Strategy, config: BertConfig,
                 optimizer: OptimizerSettings, train_batch_size: int, steps_per_update: int = 1,
                 mixed_precision: str = "none",
                 use_xla: bool = False, recompute_layers: bool = False,
                 masked_lm_block_rows: int = MASKED_LM_BLOCK_ROWS, packed: bool = False,
                 update_compilation: str | None = None):
        self.strategy = strategy
        self.config = config
        self.settings = optimizer
        self.train_batch_size = int(train_batch_size)
        self.steps_per_update = int(steps_per_update)
        self.packed = bool(packed)
        # A packed micro-batch's share of the gradient is no gradient of its own: clip the sum.
        self.clip_after_allreduce = optimizer.clip_after_allreduce or self.packed
        # Replicas x micro-batches: what the update averages each micro-batch's gradient over.
        self._share = strategy.num_replicas_in_sync * self.steps_per_update
        self.mixed_precision = mixed_precision
        # TPUStrategy compiles the whole step with XLA whatever is asked.
        on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
        self.use_xla = bool(use_xla) and not on_tpu
        self.masked_lm_block_rows = masked_lm_block_rows
        with strategy.scope():
            # Every weight is set next (initialize_weights or a checkpoint): none is drawn here.
            self.model = BertPretrainingModel(config, recompute_layers=recompute_layers,
                                              draw_weights=False)
            self.optimizer = make_optimizer(optimizer)
            self.optimizer.build(self.model.trainable_variables)

            def counter(name, value=0, dtype=tf.int64):
                return tf.Variable(value, dtype=dtype, trainable=False, name=name)

            self.global_step = counter("global_step")
            self.trained_samples = counter("trained_samples")
            self.target_reached = counter("target_reached")
            self.run_seed = counter("run_seed")
            self.loss_scale = counter("loss_scale", INITIAL_LOSS_SCALE, tf.float32)
            self.good_updates = counter("good_updates")
        # A string has no accelerator kernels: one host copy, outside the strategy's scope.
        with tf.device("CPU:0"):
            self.run_settings = tf.Variable("", dtype=tf.string, trainable=False,
                                            name="run_settings")
        self.checkpoint = ckpt.training_checkpoint(
            self.model, self.optimizer, self.global_step, trained_samples=self.trained_samples,
            target_reached=self.target_reached, run_seed=self.run_seed,
            loss_scale=self.loss_scale, good_updates=self.good_updates,
            run_settings=self.run_settings)
        self._dropout_keys = DropoutKeys()
        use_keyed_dropout(self.model, self._dropout_keys)
        self._variables = list(self.model.trainable_variables)
        self._decisions = [self.optimizer.decisions(variable_name(v)) for v in self._variables]
        # Everything is traced as written: the step loops are tf.while_loops and what runs in
        # them uses TensorFlow's control flow, so autograph converts nothing (its conversion
        # of each function it reaches costs seconds of every run's start).
        self._train_steps = tf.function(self._train_steps_fn, autograph=False)
        self._eval_steps = tf.function(self._eval_steps_fn, autograph=False)
        compiled = functools.partial(tf.function, jit_compile=True, autograph=False)
        # The optimizer update is elementwise work over each weight and its two moments: XLA
        # fuses it into a few passes where TensorFlow's kernels make about seventeen (BERT-base
        # on 2 CPU cores: 0.5 s per step down to 0.3 s); update_compilation says in how many
        # computations (docs/performance.md measures both on BERT-large).
        per_kind = _update_compilation(update_compilation, self._variables[0]) == "per_kind" \
            and not on_tpu
        self.update_kinds = len({(tuple(v.shape), v.dtype, d)
                                 for v, d in zip(self._variables, self._decisions)})
        self._update_variable = (compiled(self._update_variable_fn) if per_kind
                                 else self._update_variable_fn)
        self._update_variables = (self._update_variables_fn if on_tpu or per_kind
                                  else compiled(self._update_variables_fn))
        self._gradients = compiled(self._gradients_fn) if self.use_xla else self._gradients_fn
        self._eval_sums = compiled(self._eval_sums_fn) if self.use_xla else self._eval_sums_fn
        # MirroredStrategy's replicas meet in merge_call from threads of their own, which no
        # compiled function may hold; elsewhere (one device) the whole update is one function,
        # unless its optimizer update is compiled per kind (one computation of it all would
        # compile each variable's update apart again: BERT-large's first XLA steps took 62 s
        # longer so, docs/performance.md).
        threaded = isinstance(strategy, (tf.distribute.MirroredStrategy,
                                         tf.distribute.MultiWorkerMirroredStrategy))
        self._update = (compiled(self.update_step) if self.use_xla and not threaded
                        and not per_kind else self.update_step)

    # ------------------------------------------------------------------ state
    @property
    def step(self) -> int:
        """Micro-steps trained (the MLCommons reference's global step)."""
        return int(self.global_step.numpy())

    @property
    def samples(self) -> int:
        """Records trained."""
        return int(self.trained_samples.numpy())

    def set_seed(self, seed: int) -> None:
        """Set the run's seed, which keys the dropout masks (and which the caller uses for
        the data order); a run starting from scratch sets it, a resumed run restores it."""
        self.run_seed.assign(int(seed))

    def set_run_settings(self, text: str) -> None:
        """Set the string saved with every checkpoint as `run_settings` (the caller's record
        of the settings that define the run; a restore brings back the checkpoint's)."""
        self.run_settings.assign(text)

    def initialize_weights(self, seed: int) -> None:
        """Draw fresh weights that depend only on `seed` (not on the strategy or device count).

        The model's own initializers are stateful and draw different values under different
        strategies; here each variable, in name order, gets the MLCommons reference's initialisation
        from a stateless generator keyed by (seed, index): truncated normal with stddev
        initializer_range for kernels and embeddings, ones for LayerNorm gamma, zeros for
        LayerNorm beta and biases.
        """
        stddev = self.config.initializer_range
        named = sorted((ckpt.model_variable_name(self.model, v), v) for v in self.model.variables)
        for index, (name, var) in enumerate(named):
            if name.endswith("gamma"):
                value = tf.ones(var.shape, var.dtype)
            elif name.endswith(("beta", "bias")):
                value = tf.zeros(var.shape, var.dtype)
            else:
                value = tf.random.stateless_truncated_normal(
                    var.shape, seed=tf.constant([seed, index], tf.int64), stddev=stddev,
                    dtype=var.dtype)
            var.assign(value)

    def load_initial_checkpoint(self, path: str) -> list[str]:
        """Initialise the weights from an official TF1/TF2 checkpoint; returns the names read."""
        with self.strategy.scope():
            return ckpt.load_initial_checkpoint(self.model, path)

    def checkpoint_manager(self, directory: str, max_to_keep: int | None
                           ) -> tf.train.CheckpointManager:
        """A CheckpointManager writing `model.ckpt-<global step>` files into `directory`."""
        return tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=max_to_keep,
                                          checkpoint_name=CHECKPOINT_NAME)

    def restore(self, path: str, model_only: bool = False) -> None:
        """Restore a training checkpoint written by `checkpoint_manager(...).save()`.

        model_only: restore the weights and step counters but not the optimizer state (for
        evaluation, whatever optimizer the checkpoint was trained with).
        """
        checkpoint = self.checkpoint if not model_only else tf.train.Checkpoint(
            model=self.model, global_step=self.global_step,
            trained_samples=self.trained_samples)
        ckpt.read_training_checkpoint(path, checkpoint)
        logging.info("resumed from %s: global step %d, %d samples", path, self.step,
                     self.samples)

    # ------------------------------------------------------------------ training
    def _dropout_key(self, micro_step: tf.Tensor, replica) -> tf.Tensor:
        """The dropout key of one micro-step on one replica (global replica id)."""
        base = tf.stack([tf.convert_to_tensor(self.run_seed), micro_step])
        return fold_in(base, replica)

    def _micro_gradients(self, features, dropout_key, totals):
        with tf.GradientTape() as tape, self._dropout_keys.using(dropout_key):
            scale = self.loss_scale if self.mixed_precision == "fp16" else 1.0
            losses = pretraining_losses(self.model(features, training=True), features, scale,
                                        self.masked_lm_block_rows, totals, self._share)
            loss = losses["total_loss"] * scale
        with self._dropout_keys.using(dropout_key):  # recompute_layers: layers run again here
            grads = tape.gradient(loss, self._variables)
        grads = [tf.zeros_like(v) if g is None else densify(g)
                 for g, v in zip(grads, self._variables)]
        if self.mixed_precision == "fp16":
            grads = [g / self.loss_scale for g in grads]
        norm = tf.constant(0.0)
        if not self.clip_after_allreduce:
            grads, norm = clip_gradients(grads)
        loss_vector = tf.stack([losses["total_loss"], losses["masked_lm_loss"],
                                losses["next_sentence_loss"], norm])
        return grads, loss_vector

    def trace_counts(self) -> dict[str, int]:
        """How often each step function was traced so far: the training loop, the eval loop,
        the compiled optimizer update (of all variables, or `update_variable`: of one variable,
        traced once for each of `update_kinds`) and, with XLA, the compiled update, gradient
        and eval functions. Each is 1 once a step and an eval ran; more means a retrace (with
        XLA, a recompilation)."""
        functions = {"train_steps": self._train_steps, "eval_steps": self._eval_steps,
                     "update": self._update, "gradients": self._gradients,
                     "update_variables": self._update_variables,
                     "update_variable": self._update_variable, "eval_sums": self._eval_sums}
        return {name: f.experimental_get_tracing_count() for name, f in functions.items()
                if isinstance(f, tf.types.experimental.PolymorphicFunction)}

    def retraced(self) -> dict[str, int]:
        """The step functions of `trace_counts` traced more often than once per copy: the
        compiled gradient, optimizer and eval functions run once for each of this worker's
        replicas, and MirroredStrategy traces one copy per device."""
        try:
            local_replicas = len(self.strategy.extended.worker_devices)
        except RuntimeError:  # the default strategy has one device and no such list
            local_replicas = 1
        expected = {"gradients": local_replicas, "eval_sums": local_replicas,
                    "update_variables": local_replicas,
                    "update_variable": local_replicas * self.update_kinds}
        return {name: count for name, count in self.trace_counts().items()
                if count > expected.get(name, 1)}

    def _gradients_fn(self, batch, first_step, replica, totals):
        """The averaged (and, unless clip_after_allreduce, clipped) gradients of one update's
        micro-batches on this replica, and their mean [total, masked-LM, next-sentence] loss
        and gradient norm before clipping (0 when clipping waits for the all-reduce).
        totals: packed rows, the update's masked-LM weight and sequences (else None)."""
        n = self.steps_per_update
        if n == 1:
            grads, losses = self._micro_gradients(batch, self._dropout_key(first_step, replica),
                                                  totals)
        else:
            def body(i, accumulated, loss_sum):
                micro = tf.nest.map_structure(lambda t: t[i], batch)
                key = self._dropout_key(first_step + tf.cast(i, tf.int64), replica)
                grads, losses = self._micro_gradients(micro, key, totals)
                accumulated = [a + g / n for a, g in zip(accumulated, grads)]
                return i + 1, accumulated, loss_sum + losses

            zeros = [tf.zeros_like(v) for v in self._variables]
            _, grads, loss_sum = tf.while_loop(
                lambda i, *_: i < n, body, (tf.constant(0), zeros, tf.zeros([4])))
            losses = loss_sum / n
        return grads, losses

    def update_step(self, batch, first_step):
        """One optimizer update, in a replica context (inside `strategy.run`; the default
        strategy's outside one): the forward and backward passes of the update's micro-batches
        on this replica, the all-reduce, clipping, and the LAMB/AdamW update of every variable
        with the step counters. `train_steps` runs it once per update, `devtools.bench_train` times
        it that way, and it is the function to export as one XLA computation (wrapped in
        `tf.function(jit_compile=True)` under the default strategy).

        Args:
          batch: one update's features on this replica (a dict of tensors; with
            steps_per_update > 1 each has a leading micro-batch axis).
          first_step: int64 scalar, the global step (micro-steps) before the update;
            micro-batch i is micro-step first_step + i (it keys the dropout masks).

        Returns:
          (losses: float32 [3], the update's mean total, masked-LM and next-sentence loss on
          this replica; gradient norm: float32, the global norm before clipping (the mean over
          micro-batches when each is clipped); learning rate: float32 scalar; applied: bool
          scalar, False when fp16 loss scaling skipped the update).
        """
        context = tf.distribute.get_replica_context()
        replica = tf.cast(context.replica_id_in_sync_group, tf.int64)
        totals = None
        if self.packed:  # the update's masked-LM weight and sequences, over every replica
            totals = tf.stack([tf.reduce_sum(batch["masked_lm_weights"]),
                               tf.reduce_sum(batch["next_sentence_weights"])])
            if context.num_replicas_in_sync > 1:
                totals = context.all_reduce(tf.distribute.ReduceOp.SUM, totals)
        grads, losses = self._gradients(batch, first_step, replica, totals)
        losses, norm = losses[:3], losses[3]
        if context.num_replicas_in_sync > 1:
            grads = context.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
        if self.clip_after_allreduce:
            grads, norm = clip_gradients(grads)
        finite = None
        if self.mixed_precision == "fp16":
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        lr, applied = context.merge_call(self._apply_update, args=(grads, finite, totals))
        return losses, norm, lr, applied

    def _apply_update(self, strategy, grads, finite, totals):
        """Cross-replica: one optimizer update from the all-reduced gradients; returns the
        learning rate and whether the update was applied (False: skipped by fp16 scaling).
        totals: packed rows, the update's [masked-LM weight, sequences] (else None)."""
        n = self.steps_per_update
        optimizer = self.optimizer
        # The rate at the update's last micro-step, where the MLCommons reference's
        # accumulating optimizer applies the update.
        lr = optimizer.current_learning_rate(self.global_step + (n - 1))

        def apply():
            beta_1_power = optimizer.beta_1_power
            beta_2_power = optimizer.beta_2_power
            if beta_1_power is not None:
                beta_1_power = tf.identity(beta_1_power)
                beta_2_power = tf.identity(beta_2_power)
            self._apply_on_each_device(strategy, grads, lr, beta_1_power, beta_2_power)
            optimizer.finish_update(beta_1_power, beta_2_power)

        if finite is None:
            apply()
            applied = tf.constant(True)
        else:
            finite = strategy.experimental_local_results(finite)[0]

            def good():
                apply()
                grow = self.good_updates + 1 >= LOSS_SCALE_GROWTH_INTERVAL
                self.loss_scale.assign(tf.where(grow, self.loss_scale * 2.0, self.loss_scale))
                self.good_updates.assign(tf.where(grow, tf.constant(0, tf.int64),
                                                  self.good_updates + 1))
                return tf.constant(True)

            def bad():
                self.loss_scale.assign(tf.maximum(self.loss_scale / 2.0, 1.0))
                self.good_updates.assign(0)
                return tf.constant(False)

            applied = tf.cond(finite, good, bad)
        self.global_step.assign_add(n)  # a skipped fp16 update still counts its micro-steps
        if totals is None:
            self.trained_samples.assign_add(n * self.train_batch_size)
        else:
            sequences = strategy.experimental_local_results(totals)[0][1]
            self.trained_samples.assign_add(tf.cast(tf.round(sequences), tf.int64))
        return lr, applied

    def _apply_on_each_device(self, strategy, grads, lr, beta_1_power, beta_2_power):
        """Cross-replica: the optimizer update of every variable from the all-reduced `grads`,
        one `_update_variables` call for each local copy of the variables (TPUs: each
        variable through the strategy, inside the TPU's one compiled program)."""
        slots = [self.optimizer.slots(var) for var in self._variables]
        m_slots, v_slots = [m for m, _ in slots], [v for _, v in slots]
        if isinstance(strategy, tf.distribute.TPUStrategy):
            for grad, var, m, v, decisions in zip(grads, self._variables, m_slots, v_slots,
                                                  self._decisions):
                strategy.extended.update(
                    var, lambda copy, *args, decisions=decisions: self._update_variables(
                        [copy], *args, [decisions]),
                    args=([grad], [m], [v], lr, beta_1_power, beta_2_power), group=False)
            return
        local = strategy.experimental_local_results
        weights = [_stored_variable(var) for var in self._variables]

        def on(device, values):
            return [local(value)[device] for value in values]

        for device in range(len(local(weights[0]))):
            variables = on(device, weights)
            with tf.device(variables[0].device):
                self._update_variables(variables, on(device, grads), on(device, m_slots),
                                       on(device, v_slots), lr, beta_1_power, beta_2_power,
                                       self._decisions)

    def _update_variables_fn(self, variables, grads, m_slots, v_slots, lr, beta_1_power,
                             beta_2_power, decisions):
        """The optimizer's update of each of `variables` (one device's copies) from its
        gradient and moments; `decisions`: the optimizer's decisions for each (weight decay,
        layer adaptation), made on the model variables' names."""
        for var, grad, m, v, decided in zip(variables, grads, m_slots, v_slots, decisions):
            self._update_variable(var, grad, m, v, lr, beta_1_power, beta_2_power, decided)

    def _update_variable_fn(self, var, grad, m, v, lr, beta_1_power, beta_2_power, decisions):
        """The optimizer's update of one variable (a device's copy) and its moments; its ops
        are named `optimizer_update/...` (a compiled update per kind traces its own graph, so
        the scope is set here, once for every form)."""
        with tf.name_scope("optimizer_update"):
            self.optimizer.update_variable(var, grad, m, v, lr, beta_1_power, beta_2_power,
                                           decisions=decisions)

    def _train_steps_fn(self, iterator, num_updates, first_step, stop_samples):
        strategy = self.strategy
        n = self.steps_per_update

        def more(done, stopped, *_):
            return tf.logical_and(done < num_updates, tf.logical_not(stopped))

        def update(done, stopped, loss_sum, norm_sum, lr, skipped):
            step = first_step + tf.cast(done, tf.int64) * n
            losses, norm, lr, applied = strategy.run(self._update, args=(next(iterator), step))
            loss_sum += strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
            norm_sum += strategy.reduce(tf.distribute.ReduceOp.MEAN, norm, axis=None)
            lr = strategy.experimental_local_results(lr)[0]
            applied = strategy.experimental_local_results(applied)[0]
            skipped += tf.cast(tf.logical_not(applied), tf.int32)
            return (done + 1, self.trained_samples >= stop_samples, loss_sum, norm_sum, lr,
                    skipped)

        done, _, loss_sum, norm_sum, lr, skipped = tf.while_loop(
            more, update, (tf.constant(0), tf.constant(False), tf.zeros([3]), tf.constant(0.0),
                           tf.constant(0.0), tf.constant(0)),
            maximum_iterations=num_updates)
        updates = tf.cast(tf.maximum(done, 1), tf.float32)
        return loss_sum / updates, norm_sum / updates, lr, skipped, done

    def train_steps(self, iterator, num_updates: int,
                    stop_samples: int | None = None) -> dict[str, float]:
        """Run up to `num_updates` optimizer updates, ending after the first one at whose end
        `stop_samples` samples (if given) are trained; returns the mean losses, the mean
        `gradient_norm` before clipping (non-finite when any update's was), the last learning
        rate, `updates` (how many ran), `skipped_updates` (updates fp16 loss scaling skipped,
        of these) and the `loss_scale` after them (fp16; 1.0 otherwise).

        `iterator` iterates a distributed dataset whose elements hold one update's micro-batches
        (see reference.input_pipeline.train_dataset).
        """
        stop = (1 << 62) if stop_samples is None else stop_samples
        losses, norm, lr, skipped, done = self._train_steps(
            iterator, tf.constant(num_updates, tf.int32), tf.constant(self.step, tf.int64),
            tf.constant(stop, tf.int64))
        losses = losses.numpy()
        scale = float(self.loss_scale.numpy()) if self.mixed_precision == "fp16" else 1.0
        return {"total_loss": float(losses[0]), "masked_lm_loss": float(losses[1]),
                "next_sentence_loss": float(losses[2]), "gradient_norm": float(norm),
                "learning_rate": float(lr),
                "updates": int(done), "skipped_updates": int(skipped), "loss_scale": scale}

    # ------------------------------------------------------------------ evaluation
    def _eval_sums_fn(self, batch):
        """The metric sums (EvalMetrics.KEYS order) of one eval batch on this replica."""
        sums = metric_sums(self.model(batch, training=False), batch,
                           example_weights=batch[EXAMPLE_WEIGHT],
                           block_rows=self.masked_lm_block_rows)
        return tf.stack([sums[key] for key in EvalMetrics.KEYS])

    def _eval_steps_fn(self, iterator, num_steps):
        strategy = self.strategy

        def add_batch(index, total):
            # A Python function, not the compiled one, runs in each replica's device scope.
            sums = strategy.run(lambda batch: self._eval_sums(batch), args=(next(iterator),))
            return index + 1, total + tf.cast(
                strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None), tf.float64)

        # One batch at a time: overlapping iterations would each hold their own blocks of
        # masked-LM logits.
        _, total = tf.while_loop(lambda index, _: index < num_steps, add_batch,
                                 (tf.constant(0), tf.zeros([len(EvalMetrics.KEYS)], tf.float64)),
                                 parallel_iterations=1, maximum_iterations=num_steps)
        return total

    def evaluate(self, dataset, num_steps: int) -> dict[str, float]:
        """Metrics over `num_steps` global batches of a distributed eval dataset."""
        totals = self._eval_steps(iter(dataset), tf.constant(num_steps, tf.int32)).numpy()
        metrics = EvalMetrics()
        metrics.update(dict(zip(EvalMetrics.KEYS, np.asarray(totals, np.float64))))
        return metrics.result()


def worker_checkpoint_dir(output_dir: str, chief: bool, task: int) -> str:
    """Where this worker's CheckpointManager writes: output_dir for the chief, else a
    per-worker scratch folder (multi-worker saving needs every worker to write)."""
    return output_dir if chief else os.path.join(output_dir, f".worker-{task}")
