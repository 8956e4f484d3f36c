"""Repeatable CPU training: the two TensorFlow settings under which the same command on the same
data and machine gives the same bytes (checkpoints, evals) every time it runs.

Measured with TensorFlow 2.20 on three processes of the smoke preset started together
(tests/reference/test_repeatable_runs.py): with either setting left at TensorFlow's default,
some processes ended with other last bits in most checkpoint variables and in the evals, and
TensorFlow's op determinism (`tf.config.experimental.enable_op_determinism`) fixed neither:
- oneDNN's kernels (`TF_ENABLE_ONEDNN_OPTS`; TensorFlow reads it once, when it is imported);
- ops run side by side on several inter-op threads.
With both off (`without_onednn` before TensorFlow is imported, `one_op_at_a_time` before it
runs an op), every process gave the same bytes; each op still uses every core.
"""
from __future__ import annotations

import os
import sys

from absl import logging

ONEDNN_SWITCH = "TF_ENABLE_ONEDNN_OPTS"


class TooLate(RuntimeError):
    """A setting asked for after TensorFlow read it; the message is one line."""


def without_onednn() -> None:
    """Turn oneDNN's kernels off in this process (and the processes it starts) by setting
    TF_ENABLE_ONEDNN_OPTS=0. When a program that runs the trainer imported TensorFlow first,
    with them on, it is too late for this process: a warning says its bytes may vary."""
    os.environ[ONEDNN_SWITCH] = "0"
    if "tensorflow" in sys.modules:
        from tensorflow.python.util import _pywrap_util_port
        if _pywrap_util_port.IsMklEnabled():
            logging.warning("TensorFlow was imported with oneDNN on, before --deterministic "
                            "could turn it off (%s=0): this run's last bits may differ from "
                            "another's", ONEDNN_SWITCH)


def one_op_at_a_time() -> None:
    """Give TensorFlow one inter-op thread: it then runs one op at a time (each op still on
    every core). TooLate if TensorFlow has already run an op."""
    import tensorflow as tf
    try:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError as err:
        raise TooLate(f"cannot set TensorFlow's threads after it started ({err})") from err
