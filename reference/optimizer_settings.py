"""The optimizer, its learning-rate schedule and where the gradient is clipped, as settings: the
one place their defaults are written (the flags', the trainer's and `devtools.bench_train`'s).

TensorFlow-free, so that `--help` stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer and its schedule (step counts in micro-steps, as the MLCommons reference's
    flags); the defaults are the MLCommons reference's flag defaults."""
    name: str = "lamb"  # "lamb" or "adamw"
    learning_rate: float = 5e-5  # the peak
    num_train_steps: int = 100_000  # the rate decays to 0 over these
    num_warmup_steps: int = 10_000
    start_warmup_step: int = 0
    poly_power: float = 1.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    weight_decay_rate: float = 0.01
    log_epsilon: float = -6.0
    # Clip the all-reduced gradient once instead of each replica's micro-batch gradient
    # (--clip_by_global_norm_after_gradient_allreduce).
    clip_after_allreduce: bool = False

    @property
    def epsilon(self) -> float:
        """LAMB epsilon, 10 ** log_epsilon (AdamW: the MLCommons reference's fixed 1e-6)."""
        from reference.lamb import epsilon_from_log
        return epsilon_from_log(self.log_epsilon)


DEFAULT_OPTIMIZER = OptimizerSettings()
