"""The line of an exception quoted in one-line error messages."""
from __future__ import annotations

import tensorflow as tf

from reference.error_text import one_line


def test_first_non_blank_line_of_the_message():
    assert one_line(ValueError("\n  shape [2] vs [3]\nmore detail")) == "shape [2] vs [3]"


def test_tensorflow_errors_quote_their_message_not_the_node():
    err = tf.errors.DataLossError(None, None, "corrupted record at 12")
    assert one_line(err) == "corrupted record at 12"


def test_empty_message_gives_the_type_name():
    assert one_line(AssertionError()) == "AssertionError"
