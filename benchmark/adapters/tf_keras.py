"""Where the harness reaches into tf_keras (pinned: 2.20.1): the random generator of each
Dropout layer. `Dropout.call` draws its mask through `self._random_generator.dropout(inputs,
rate, noise_shape)`; `replace_dropout_generators` puts a `DropoutGenerator` of the caller's in
that place, so the masks come from the caller's keys (the trainer's repeatable, resumable
dropout) rather than from tf_keras's own generator."""
from __future__ import annotations

from typing import Callable

from benchmark.adapters import require_version

SUPPORTED = ("2.20.1",)


class DropoutGenerator:
    """What `Dropout.call` needs of a layer's `_random_generator`; a subclass defines
    `dropout(inputs, rate, noise_shape=None)` -> inputs with a fraction `rate` zeroed and the
    rest scaled by 1 / (1 - rate)."""

    # Read by tf_keras's BaseRandomLayer.get_config and build.
    _rng_type = "stateless"

    def _maybe_init(self) -> None:
        """Nothing to initialise (tf_keras calls this when the layer is built)."""

    def dropout(self, inputs, rate: float, noise_shape=None):
        raise NotImplementedError


def replace_dropout_generators(model, make: Callable[[int], DropoutGenerator]) -> int:
    """Give every tf_keras Dropout layer of `model` the generator `make(index)` (index: the
    layer's position in `model.submodules`, the same in every process); returns how many.
    Raises UserError for a tf_keras release other than SUPPORTED."""
    require_version("tf-keras", SUPPORTED)
    import tf_keras
    layers = [m for m in model.submodules if isinstance(m, tf_keras.layers.Dropout)]
    for index, layer in enumerate(layers):
        layer._random_generator = make(index)  # pylint: disable=protected-access
    return len(layers)
