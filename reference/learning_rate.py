"""The MLCommons reference's learning-rate schedule: linear warm-up, then polynomial decay to 0.

For a step s (the global step *before* the update it is used for):

    decayed(s) = base * (1 - min(s, num_train_steps) / num_train_steps) ** poly_power
    w          = s - start_warmup_step
    lr(s)      = base * w / num_warmup_steps   if w < num_warmup_steps
                 decayed(s)                     otherwise

Two details of the MLCommons reference are kept on purpose: the decay counts from step 0, not from
the end of warm-up, and from `start_warmup_step` only the warm-up is shifted (a negative value, as
in the benchmark's `--start_warmup_step=-76`, makes warm-up begin part-way). With
`num_warmup_steps == 0` there is no warm-up.

The arithmetic is float32 in the MLCommons reference's operation order, in the form the MLCommons
reference's graph actually computes after TensorFlow's graph optimizer (Grappler) rewrote it:
division by a constant becomes multiplication by its reciprocal, constant factors are folded
together (base * (s / warmup) becomes s * (base / warmup)), and pow() with exponent 1, 2 or 0.5
becomes identity, square or sqrt. Written that way, the values agree bit for bit with the MLCommons
reference's session, in eager mode and inside tf.function alike.
"""
from __future__ import annotations

import tensorflow as tf
import tf_keras


def _power(x: tf.Tensor, exponent: float) -> tf.Tensor:
    # The forms TensorFlow's graph optimizer gives pow() with these constant exponents.
    special = {1.0: tf.identity, 2.0: tf.square, 0.5: tf.sqrt}
    return special[exponent](x) if exponent in special else tf.pow(x, tf.constant(exponent))


class WarmupPolynomialDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
    """Callable schedule: step (int or int tensor) -> learning rate (float32 scalar tensor).

    Args:
      base_learning_rate: the peak rate (`--learning_rate`), e.g. 0.00288293.
      num_train_steps: steps over which the rate decays to 0 (`--num_train_steps`), > 0.
      num_warmup_steps: length of the warm-up in steps (`--num_warmup_steps`), >= 0.
      start_warmup_step: the step at which warm-up counts 0 (`--start_warmup_step`), may be < 0.
      poly_power: exponent of the decay (`--poly_power`), 1.0 for linear.
    """

    def __init__(self, base_learning_rate: float, num_train_steps: int, num_warmup_steps: int,
                 start_warmup_step: int = 0, poly_power: float = 1.0):
        super().__init__()
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        self.base_learning_rate = float(base_learning_rate)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.start_warmup_step = int(start_warmup_step)
        self.poly_power = float(poly_power)

    def __call__(self, step) -> tf.Tensor:
        base = tf.constant(self.base_learning_rate, tf.float32)
        total = tf.cast(self.num_train_steps, tf.float32)
        progress = tf.minimum(tf.cast(step, tf.float32), total) * tf.math.reciprocal(total)
        end = tf.constant(0.0, tf.float32)
        decayed = (base - end) * _power(1 - progress, self.poly_power) + end
        if not self.num_warmup_steps:
            return decayed
        since_start = tf.cast(step, tf.int32) - tf.constant(self.start_warmup_step, tf.int32)
        warmup_steps = tf.constant(self.num_warmup_steps, tf.int32)
        # base * (since_start / warmup_steps), with the constants folded: (base / warmup) * s.
        warmup = tf.cast(since_start, tf.float32) * (base / tf.cast(warmup_steps, tf.float32))
        in_warmup = tf.cast(since_start < warmup_steps, tf.float32)
        return (1.0 - in_warmup) * decayed + in_warmup * warmup

    def get_config(self) -> dict:
        return {"base_learning_rate": self.base_learning_rate,
                "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps,
                "start_warmup_step": self.start_warmup_step,
                "poly_power": self.poly_power}
