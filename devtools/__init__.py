"""Developer tooling: measuring and inspecting the trainer, never part of a benchmark run.

Nothing in `benchmark`, `cleanup_scripts` or `reference` imports this package; its modules may
import theirs. `export_step` writes the trainer's compiled update as one XLA HLO module;
`time_step` times that module through jaxlib's XLA where TensorFlow is not installed.
"""
