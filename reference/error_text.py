"""The one line of an exception that our one-line error messages quote."""
from __future__ import annotations


def one_line(err: BaseException) -> str:
    """The first non-blank line of `err`'s message (TensorFlow errors: their `.message`), or the
    exception's type name when the message is empty."""
    text = str(getattr(err, "message", err)).strip()
    return text.splitlines()[0] if text else type(err).__name__
