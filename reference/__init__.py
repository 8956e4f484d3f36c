"""Our own TF2 BERT trainer for MLPerf (the design's "TF2 trainer"): the model, LAMB, the input
pipeline and `run_pretraining`.

This package is not the MLCommons reference. "The MLCommons reference" in its docs is MLCommons'
TF1 BERT code (mlcommons/training, retired_benchmarks/bert), whose flags, arithmetic and
checkpoints this trainer reproduces; the package only keeps `reference` as its import name.
"""
import benchmark  # noqa: F401  (TensorFlow's Keras, before anything imports it)
