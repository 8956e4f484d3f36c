"""The MLPerf BERT benchmark's rules: constants, eval cadence, logging and checks.

Importing it (as `cleanup_scripts` and `reference` do first) tells TensorFlow, unless the
environment already says, to use Keras 2 (`tf_keras`, the Keras of this project and of
tf-models-official) as `tf.keras`: TensorFlow 2.20 otherwise imports Keras 3, and scikit-learn
with it, each time it is imported, 1.8 s of every program's start on a 2-core machine.
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
