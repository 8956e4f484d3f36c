"""OutputError and SetupError, the few words of a failure that their messages quote, and the
flag that the command line's edge puts before a failed write (`writing`)."""
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


class SetupError(UserError):
    """TensorFlow failed while the run was being set up (the model built, weights restored,
    the datasets made, the step functions compiled and first run): most often a batch,
    sequence length or model too large for the machine. One line; the TensorFlow error is its
    __cause__."""


# Lines of a TensorFlow error message that say nothing of the failure itself.
_TF_BOILERPLATE = ("Graph execution error:", "Detected at node", "<stack traces unavailable>",
                   "Stack trace", "File ", "[[", "{{")
_SUMMARY_CHARS = 400


def tensorflow_failure(err: BaseException) -> str:
    """What a TensorFlow error (or a MemoryError) says, in one escaped line: "TensorFlow
    <class>: <its first informative line>" (cut to 400 characters), with a hint when it ran
    out of memory."""
    from benchmark.errors import printable
    import tensorflow as tf
    text = str(getattr(err, "message", err))
    lines = [line.strip() for line in text.splitlines()]
    summary = next((line for line in lines if line and not line.startswith(_TF_BOILERPLATE)),
                   "") or type(err).__name__
    summary = printable(summary.split(" [Op:")[0])
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[:_SUMMARY_CHARS] + "..."
    line = f"TensorFlow {type(err).__name__}: {summary}"
    if isinstance(err, (tf.errors.ResourceExhaustedError, MemoryError)):
        line += (" (out of memory: a smaller --train_batch_size or --eval_batch_size, or "
                 "--recompute_layers, needs less)")
    return line


@contextlib.contextmanager
def writing(flag: str, path: str):
    """Turn a failed write to `path` (an OSError, or any TensorFlow error: the block only
    writes) into OutputError "<flag>: <path>: cannot write (<reason>)"."""
    import tensorflow as tf
    try:
        yield
    except (OSError, tf.errors.OpError) as err:
        raise OutputError(f"{flag}: {path}: cannot write ({write_failure(err)})") from err
