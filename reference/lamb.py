"""LAMB as the MLPerf BERT reference applies it, for TF2 eager / tf.function training.

Per variable w with (clipped) gradient g, at the k-th update (k = 1, 2, ...):

    m = beta_1 * m + (1 - beta_1) * g            v = beta_2 * v + (1 - beta_2) * g * g
    u = (m / (1 - beta_1^k)) / (sqrt(v / (1 - beta_2^k)) + epsilon)
    u = u + weight_decay_rate * w                 unless w's name matches an exclusion
    r = ||w|| / ||u|| if both norms > 0, else 1   (trust ratio; 1 for excluded names)
    w = w - r * lr * u

Reference details kept: bias correction uses float32 running products beta^k (kept in two
variables, advanced after all variables are updated) rather than pow(); `epsilon` is used as
given (the MLCommons reference passes 10**log_epsilon, see `epsilon_from_log`); the exclusion
patterns are regular expressions searched in the variable name (default LayerNorm, layer_norm,
bias), and the layer-adaptation exclusions default to the weight-decay ones; the norms are Euclidean
norms over the whole tensor.

Gradient clipping (global norm 1.0) happens *before* the optimizer in the MLCommons reference: call
`clip_gradients` on the gradients, then `apply_gradients`. Gradient accumulation: sum the
clipped micro-batch gradients divided by the number of micro-batches (the MLCommons reference clips
each micro-batch and averages), then apply once; pass the step whose learning rate applies (the
MLCommons reference evaluates the schedule at its micro-step counter, n*k + n - 1 for the k-th
update with n micro-batches per update, 0-based).
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

import tensorflow as tf
from absl import logging

DEFAULT_EXCLUDE = ("LayerNorm", "layer_norm", "bias")
GRADIENT_CLIP_NORM = 1.0


def epsilon_from_log(log_epsilon: float) -> float:
    """The LAMB epsilon for the MLCommons reference's `--log_epsilon` flag: 10 ** log_epsilon."""
    return 10 ** log_epsilon


def densify(grad):
    """A dense tensor for a gradient that may be tf.IndexedSlices (duplicate rows summed)."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def clip_gradients(grads: Sequence, clip_norm: float = GRADIENT_CLIP_NORM):
    """Scale gradients so that their global norm is at most `clip_norm` (reference: 1.0).

    Sparse gradients are made dense first: the MLCommons reference's graph differentiates the word
    embedding densely (the table is also the masked-LM output layer), and a global norm taken
    over IndexedSlices values with repeated rows would differ from the dense norm.

    Args:
      grads: gradients (tensors, IndexedSlices or None), in variable order.
      clip_norm: the maximum global norm.

    Returns:
      (clipped gradients as a list (None kept), global norm before clipping: float32 scalar).
    """
    dense = [None if g is None else densify(g) for g in grads]
    clipped, norm = tf.clip_by_global_norm(dense, clip_norm=clip_norm)
    return list(clipped), norm


def _matches_any(patterns: Iterable[str], name: str) -> bool:
    return any(re.search(pattern, name) is not None for pattern in patterns)


def variable_name(var: tf.Variable) -> str:
    """A variable's name without the ':0' output suffix (the name the exclusions are tested on)."""
    name = var.name
    return name[:-2] if name.endswith(":0") else name


class MomentOptimizer(tf.Module):
    """State and bookkeeping shared by the MLCommons reference's LAMB and AdamW optimizers.

    Holds the learning rate (a float, or a callable step -> rate), the moment rates, epsilon,
    the weight-decay rate and its exclusions, `iterations` (updates applied, int64) and the
    per-variable first/second moments `m`/`v` (lists in the order variables are first seen;
    the slot variables are named `<variable>.<suffix>` with `slot_suffixes`).
    """

    slot_suffixes = ("m", "v")

    def __init__(self, learning_rate: float | Callable[[tf.Tensor], tf.Tensor],
                 beta_1: float, beta_2: float, epsilon: float, weight_decay_rate: float,
                 exclude_from_weight_decay: Sequence[str] | None, name: str):
        super().__init__(name=name)
        self.learning_rate = learning_rate
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.m: list[tf.Variable] = []
        self.v: list[tf.Variable] = []
        self._slot_index: dict = {}

    def uses_weight_decay(self, name: str) -> bool:
        """Whether a variable of this name is decayed (rate non-zero and name not excluded)."""
        return bool(self.weight_decay_rate) and not _matches_any(self.exclude_from_weight_decay,
                                                                 name)

    def decisions(self, name: str) -> tuple[bool, ...]:
        """What the update does to a variable of this name beyond its moments: (weight decay,).
        Variables with the same decisions, shape and dtype take the same update function, so
        a trainer may trace and compile it once for all of them."""
        return (self.uses_weight_decay(name),)

    def build(self, var_list: Sequence[tf.Variable]) -> None:
        """Create the m/v slots (zeros) for variables that have none yet.

        Call this before restoring a checkpoint that holds optimizer state; `apply_gradients`
        calls it too.
        """
        new = [var for var in var_list if var.ref() not in self._slot_index]
        if not new:
            return
        m_suffix, v_suffix = self.slot_suffixes
        with tf.init_scope():
            for var in new:
                self._slot_index[var.ref()] = len(self.m)
                base = variable_name(var).replace("/", ".")
                self.m.append(tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                          name=f"{base}.{m_suffix}"))
                self.v.append(tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                          name=f"{base}.{v_suffix}"))
        logging.debug("%s: created slots for %d variables", self.name, len(new))

    def slots(self, var: tf.Variable) -> tuple[tf.Variable, tf.Variable]:
        """The (m, v) moment variables of `var` (built earlier)."""
        index = self._slot_index[var.ref()]
        return self.m[index], self.v[index]

    def current_learning_rate(self, step=None) -> tf.Tensor:
        """The learning rate at `step` (default: `iterations`), float32 scalar."""
        if callable(self.learning_rate):
            step = self.iterations if step is None else step
            return tf.cast(self.learning_rate(step), tf.float32)
        return tf.constant(self.learning_rate, tf.float32)


class Lamb(MomentOptimizer):
    """The MLCommons reference's LAMB optimizer (see the module docstring for the update).

    Args:
      learning_rate: a float, or a callable step -> learning rate (e.g.
        `reference.learning_rate.WarmupPolynomialDecay`).
      beta_1, beta_2: moment decay rates (`--lamb_beta_1`, `--lamb_beta_2`).
      epsilon: added to sqrt(v_hat); the MLCommons reference uses 10 ** log_epsilon.
      weight_decay_rate: decoupled weight decay (`--lamb_weight_decay_rate`).
      exclude_from_weight_decay: regex patterns; variables whose name matches get no decay.
      exclude_from_layer_adaptation: regex patterns for trust ratio 1; None (or empty) means the
        weight-decay exclusions, as in the MLCommons reference.
      name: module name.

    State (checkpointed with tf.train.Checkpoint): `iterations` (updates applied, int64), the
    running products `beta_1_power`/`beta_2_power` (start at beta_1 and beta_2), and per-variable
    first/second moments `m`/`v` (lists in the order of the variables first passed in).
    """

    def __init__(self, learning_rate: float | Callable[[tf.Tensor], tf.Tensor],
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 weight_decay_rate: float = 0.0,
                 exclude_from_weight_decay: Sequence[str] | None = DEFAULT_EXCLUDE,
                 exclude_from_layer_adaptation: Sequence[str] | None = None,
                 name: str = "LAMB"):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay_rate,
                         exclude_from_weight_decay, name)
        self.exclude_from_layer_adaptation = tuple(exclude_from_layer_adaptation or ()) or \
            self.exclude_from_weight_decay
        self.beta_1_power = tf.Variable(self.beta_1, dtype=tf.float32, trainable=False,
                                        name="beta_1_power")
        self.beta_2_power = tf.Variable(self.beta_2, dtype=tf.float32, trainable=False,
                                        name="beta_2_power")

    # ------------------------------------------------------------------ decisions
    def uses_layer_adaptation(self, name: str) -> bool:
        """Whether a variable of this name gets the trust ratio ||w|| / ||update||."""
        return not _matches_any(self.exclude_from_layer_adaptation, name)

    def decisions(self, name: str) -> tuple[bool, ...]:
        """(weight decay, layer adaptation) for a variable of this name (see the base class)."""
        return self.uses_weight_decay(name), self.uses_layer_adaptation(name)

    # ------------------------------------------------------------------ update
    def apply_gradients(self, grads_and_vars: Iterable, step=None) -> tf.Tensor:
        """Apply one LAMB update.

        Args:
          grads_and_vars: (gradient, variable) pairs; pairs whose gradient is None are skipped.
            Gradients should already be clipped (`clip_gradients`).
          step: the step at which the learning-rate schedule is evaluated (int or int tensor);
            default `iterations`, the number of updates applied so far. The MLCommons reference
            evaluates it at its global step before incrementing it.

        Returns:
          The learning rate used (float32 scalar tensor).
        """
        pairs = [(densify(g), v) for g, v in grads_and_vars if g is not None]
        self.build([v for _, v in pairs])
        lr = self.current_learning_rate(step)
        beta_1_power = tf.identity(self.beta_1_power)
        beta_2_power = tf.identity(self.beta_2_power)
        for grad, var in pairs:
            m, v = self.slots(var)
            self.update_variable(var, grad, m, v, lr, beta_1_power, beta_2_power,
                                 name=variable_name(var))
        self.finish_update(beta_1_power, beta_2_power)
        return lr

    def update_variable(self, var, grad, m, v, lr, beta_1_power, beta_2_power,
                        name: str | None = None,
                        decisions: tuple[bool, bool] | None = None) -> None:
        """The LAMB update of one variable (and its moments), without the step bookkeeping.

        `apply_gradients` calls this for each variable and then `finish_update`. A distributed
        trainer calls it once per device copy (e.g. through `strategy.extended.update`), passing
        the copy's moments; `name` is then the distributed variable's name (the exclusions are
        decided on it), and `beta_*_power` the values read before the update. `decisions`, when
        given, is `self.decisions(name)` decided beforehand (then `name` is unused).
        """
        if decisions is None:
            decisions = self.decisions(variable_name(var) if name is None else name)
        decay, adapt = decisions
        beta_1 = tf.constant(self.beta_1, tf.float32)
        beta_2 = tf.constant(self.beta_2, tf.float32)
        epsilon = tf.constant(self.epsilon, tf.float32)
        decay_rate = tf.constant(self.weight_decay_rate, tf.float32)
        m_t = m * beta_1 + grad * (1 - beta_1)
        v_t = v * beta_2 + (grad * grad) * (1 - beta_2)
        m.assign(m_t)
        v.assign(v_t)
        m_hat = m_t / (1.0 - beta_1_power)
        v_hat = v_t / (1.0 - beta_2_power)
        update = m_hat / (tf.sqrt(v_hat) + epsilon)
        if decay:
            update += decay_rate * var
        ratio = 1.0
        if adapt:
            w_norm = tf.norm(var, ord=2)
            u_norm = tf.norm(update, ord=2)
            ratio = tf.where(w_norm > 0, tf.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
        var.assign(var - ratio * lr * update)

    def finish_update(self, beta_1_power, beta_2_power) -> None:
        """Advance the bias-correction products and `iterations` after all variables moved."""
        self.beta_1_power.assign(beta_1_power * tf.constant(self.beta_1, tf.float32))
        self.beta_2_power.assign(beta_2_power * tf.constant(self.beta_2, tf.float32))
        self.iterations.assign_add(1)
