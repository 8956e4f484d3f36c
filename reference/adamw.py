"""The reference's `--optimizer=adamw`: Adam with decoupled weight decay and no bias correction.

Per variable w with (clipped) gradient g:

    m = beta_1 * m + (1 - beta_1) * g            v = beta_2 * v + (1 - beta_2) * g * g
    u = m / (sqrt(v) + epsilon)                   (no bias correction, as in the reference)
    u = u + weight_decay_rate * w                 unless w's name matches an exclusion
    w = w - lr * u

The reference fixes the hyper-parameters of this optimizer (weight decay 0.01, beta_1 0.9,
beta_2 0.999, epsilon 1e-6, LayerNorm/layer_norm/bias excluded from decay) and ignores the
`--lamb_*` flags for it; `DEFAULTS` holds those values. The benchmark itself uses LAMB
(`reference.lamb`); AdamW is here because the reference offers it (and makes it its default).

The interface is `reference.lamb.Lamb`'s: `build`, `slots`, `current_learning_rate`,
`apply_gradients`, and the per-variable `update_variable` + `finish_update` a distributed
trainer uses.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import tensorflow as tf
from absl import logging

from reference.lamb import DEFAULT_EXCLUDE, _matches_any, densify, variable_name

# The values the reference hard-codes for AdamWeightDecayOptimizer in create_optimizer.
DEFAULTS = {"weight_decay_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-6}


class AdamWeightDecay(tf.Module):
    """The reference's AdamWeightDecayOptimizer (see the module docstring).

    Args:
      learning_rate: a float, or a callable step -> learning rate.
      weight_decay_rate, beta_1, beta_2, epsilon: as in the update above.
      exclude_from_weight_decay: regex patterns; matching variable names get no decay.
      name: module name.

    State: `iterations` (updates applied, int64), per-variable moments `m`/`v`.
    """

    def __init__(self, learning_rate: float | Callable[[tf.Tensor], tf.Tensor],
                 weight_decay_rate: float = DEFAULTS["weight_decay_rate"],
                 beta_1: float = DEFAULTS["beta_1"], beta_2: float = DEFAULTS["beta_2"],
                 epsilon: float = DEFAULTS["epsilon"],
                 exclude_from_weight_decay: Sequence[str] | None = DEFAULT_EXCLUDE,
                 name: str = "AdamWeightDecay"):
        super().__init__(name=name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.m: list[tf.Variable] = []
        self.v: list[tf.Variable] = []
        self._slot_index: dict = {}

    def uses_weight_decay(self, name: str) -> bool:
        """Whether a variable of this name is decayed."""
        return bool(self.weight_decay_rate) and not _matches_any(self.exclude_from_weight_decay,
                                                                 name)

    def build(self, var_list: Sequence[tf.Variable]) -> None:
        """Create the m/v slots (zeros) for variables that have none yet."""
        new = [var for var in var_list if var.ref() not in self._slot_index]
        if not new:
            return
        with tf.init_scope():
            for var in new:
                self._slot_index[var.ref()] = len(self.m)
                base = variable_name(var).replace("/", ".")
                self.m.append(tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                          name=f"{base}.adam_m"))
                self.v.append(tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                          name=f"{base}.adam_v"))
        logging.info("AdamW: created slots for %d variables", len(new))

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

    def apply_gradients(self, grads_and_vars: Iterable, step=None) -> tf.Tensor:
        """Apply one update; `step` is where the schedule is read. Returns the learning rate."""
        pairs = [(densify(g), v) for g, v in grads_and_vars if g is not None]
        self.build([v for _, v in pairs])
        lr = self.current_learning_rate(step)
        for grad, var in pairs:
            m, v = self.slots(var)
            self.update_variable(var, grad, m, v, lr, None, None, name=variable_name(var))
        self.finish_update(None, None)
        return lr

    def update_variable(self, var, grad, m, v, lr, beta_1_power=None, beta_2_power=None,
                        name: str | None = None) -> None:
        """The update of one variable and its moments (the beta powers are unused)."""
        del beta_1_power, beta_2_power  # no bias correction in the reference's AdamW
        name = variable_name(var) if name is None else name
        m_t = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
        v_t = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
        update = m_t / (tf.sqrt(v_t) + self.epsilon)
        if self.uses_weight_decay(name):
            update += self.weight_decay_rate * var
        var.assign(var - lr * update)
        m.assign(m_t)
        v.assign(v_t)

    def finish_update(self, beta_1_power=None, beta_2_power=None) -> None:
        """Count the update."""
        del beta_1_power, beta_2_power
        self.iterations.assign_add(1)

    # Read by the trainer like Lamb's (AdamW has no bias-correction products).
    @property
    def beta_1_power(self):
        return None

    @property
    def beta_2_power(self):
        return None
