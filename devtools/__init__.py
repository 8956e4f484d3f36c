"""Developer tooling: measuring the pipeline and the trainer, and checking the checker against
MLCommons' own, never part of a benchmark run.

Nothing in `benchmark`, `cleanup_scripts` or `reference` imports this package; its modules may
import theirs. `bench_data` (`make bench-data`) times the data pipeline against the reference's
scripts, `bench_train` (`make bench-train`) the trainer against the reference's TF1 graph.
`export_step` (`make export-step`) writes the trainer's compiled update as one XLA HLO module;
`time_step` (`make time-step`) times that module through jaxlib's XLA where TensorFlow is not
installed, and `step_profile` attributes its time to the model's parts. `agreement` counts how
often the checker agrees with the checker MLCommons ran each round, which `round_checker` runs
in a process of its own (`round_worker`).
"""
import benchmark  # noqa: F401  (TensorFlow's Keras, before anything imports it)
