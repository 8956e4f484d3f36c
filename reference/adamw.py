"""The MLCommons reference's `--optimizer=adamw`: Adam with decoupled weight decay and no bias
correction.

Per variable w with (clipped) gradient g:

    m = beta_1 * m + (1 - beta_1) * g            v = beta_2 * v + (1 - beta_2) * g * g
    u = m / (sqrt(v) + epsilon)                   (no bias correction, as in MLCommons')
    u = u + weight_decay_rate * w                 unless w's name matches an exclusion
    w = w - lr * u

The MLCommons reference fixes the hyper-parameters of this optimizer (weight decay 0.01, beta_1 0.9,
beta_2 0.999, epsilon 1e-6, LayerNorm/layer_norm/bias excluded from decay) and ignores the
`--lamb_*` flags for it; `DEFAULTS` holds those values. The benchmark itself uses LAMB
(`reference.lamb`); AdamW is here because the MLCommons reference offers it (and makes it its
default).

The interface is `reference.lamb.Lamb`'s: `build`, `slots`, `current_learning_rate`,
`apply_gradients`, and the per-variable `update_variable` + `finish_update` a distributed
trainer uses.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import tensorflow as tf

from reference.lamb import DEFAULT_EXCLUDE, MomentOptimizer, densify, variable_name

# The values the MLCommons reference hard-codes for AdamWeightDecayOptimizer in create_optimizer.
DEFAULTS = {"weight_decay_rate": 0.01, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-6}


class AdamWeightDecay(MomentOptimizer):
    """The MLCommons reference's AdamWeightDecayOptimizer (see the module docstring).

    Args:
      learning_rate: a float, or a callable step -> learning rate.
      weight_decay_rate, beta_1, beta_2, epsilon: as in the update above.
      exclude_from_weight_decay: regex patterns; matching variable names get no decay.
      name: module name.

    State: `iterations` (updates applied, int64), per-variable moments `m`/`v`.
    """

    slot_suffixes = ("adam_m", "adam_v")

    def __init__(self, learning_rate: float | Callable[[tf.Tensor], tf.Tensor],
                 weight_decay_rate: float = DEFAULTS["weight_decay_rate"],
                 beta_1: float = DEFAULTS["beta_1"], beta_2: float = DEFAULTS["beta_2"],
                 epsilon: float = DEFAULTS["epsilon"],
                 exclude_from_weight_decay: Sequence[str] | None = DEFAULT_EXCLUDE,
                 name: str = "AdamWeightDecay"):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay_rate,
                         exclude_from_weight_decay, name)

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
                        name: str | None = None, decisions: tuple[bool] | None = None) -> None:
        """The update of one variable and its moments (the beta powers are unused; `name` and
        `decisions` as in `Lamb.update_variable`)."""
        del beta_1_power, beta_2_power  # no bias correction in the MLCommons reference's AdamW
        if decisions is None:
            decisions = self.decisions(variable_name(var) if name is None else name)
        (decay,) = decisions
        m_t = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
        v_t = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
        update = m_t / (tf.sqrt(v_t) + self.epsilon)
        if decay:
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
