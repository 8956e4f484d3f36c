"""The line of an exception quoted in one-line error messages."""
from __future__ import annotations

import errno

import tensorflow as tf

from benchmark.errors import one_line
from reference.error_text import write_failure


def test_first_non_blank_line_of_the_message():
    assert one_line(ValueError("\n  shape [2] vs [3]\nmore detail")) == "shape [2] vs [3]"


def test_tensorflow_errors_quote_their_message_not_the_node():
    err = tf.errors.DataLossError(None, None, "corrupted record at 12")
    assert one_line(err) == "corrupted record at 12"


def test_empty_message_gives_the_type_name():
    assert one_line(AssertionError()) == "AssertionError"


def test_a_failed_write_gives_the_errno_text_without_the_path_or_the_op():
    err = OSError(errno.ENOSPC, "No space left on device", "/out/mlperf.log")
    assert write_failure(err) == "No space left on device"
    saved = tf.errors.OutOfRangeError(None, None, "{{function_node __wrapped__SaveV2_dtypes_4_"
                                      "device_/job:localhost/replica:0/task:0/device:CPU:0}} "
                                      "/out/model.ckpt-20_temp/part-00000-of-00001.data-00000-of"
                                      "-00001.tempstate1; File too large [Op:SaveV2]")
    assert write_failure(saved) == "File too large"
    made = tf.errors.FailedPreconditionError(None, None, "/out/file is not a directory")
    assert write_failure(made) == "/out/file is not a directory"
