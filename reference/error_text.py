"""OutputError, and the few words of a failed write that its messages quote."""
from __future__ import annotations

import contextlib

from benchmark.errors import UserError, one_line


class OutputError(UserError):
    """An output (checkpoint, summary, log, results file) that cannot be written; the message
    is one line naming the flag, the path and the reason."""


def write_failure(err: BaseException) -> str:
    """Why a write failed, in a few words (e.g. "Permission denied", "No space left on device").

    An OSError gives its errno text; a TensorFlow error its message without the op's
    `{{function_node ...}}` prefix and `[Op:...]` suffix, and without the path that the message
    usually puts before "; <errno text>" (the caller names the path).
    """
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    text = one_line(err)
    if text.startswith("{{"):
        text = text[text.find("}}") + 2:]
    text = text.split(" [Op:")[0].strip()
    return text.rsplit("; ", 1)[-1] or type(err).__name__


@contextlib.contextmanager
def writing(flag: str, path: str):
    """Turn a failed write to `path` (an OSError, or any TensorFlow error: the block only
    writes) into OutputError "<flag>: <path>: cannot write (<reason>)"."""
    import tensorflow as tf
    try:
        yield
    except (OSError, tf.errors.OpError) as err:
        raise OutputError(f"{flag}: {path}: cannot write ({write_failure(err)})") from err
