"""What a run writes in --output_dir besides the MLPerf log: checkpoints, eval_results.txt (the
last eval), eval_history.csv (every eval) and TensorBoard scalars. A write that fails is an
OutputError naming the file. A training run holds the folder's lock (`output_dir_lock`); one
that starts over sets aside what an earlier run left there (`set_aside_earlier_run`). A link
planted where a run writes is refused before anything is written (`check_outputs`), and local
files are appended to without following links (`open_append`).
"""
from __future__ import annotations

import contextlib
import os
from typing import IO

from absl import logging

from benchmark.files import check_output, check_output_tree, exclusive_lock, open_output
from reference import interrupts
from reference.error_text import writing

EVAL_RESULTS = "eval_results.txt"
LOCK_NAME = ".lock"  # the chief's lock file; other workers' add -worker-<task>
EVAL_HISTORY = "eval_history.csv"
TENSORFLOW_LOG = "tensorflow.log"  # TensorFlow's own messages, moved there when a run ends
SUMMARY_FOLDERS = ("train", "eval")  # TensorBoard's
# What a training run writes besides checkpoints and the MLPerf log, files and TensorBoard
# folders: a run that starts over renames these, as the log, to "<name>.interrupted-<n>".
RUN_FILES = (EVAL_RESULTS, EVAL_HISTORY, TENSORFLOW_LOG)
SET_ASIDE = "interrupted"


def check_outputs(output_dir: str, mlperf_log: str | None) -> None:
    """RefusedOutput, one line naming it, for a link or a file of the wrong kind where a run
    writes, locks, appends or deletes in the local folder `output_dir`: the locks, the logs,
    the eval files, TensorBoard's folders, the checkpoints and their save folders
    (`benchmark.files.check_output_tree`); and for an `mlperf_log` (local) that is a link, a
    FIFO or a folder (a character device such as /dev/null will do: it is appended to).
    `output_dir` itself may be a link; a remote one (gs://) is not checked.
    Only lstat() and scandir: run before anything is written."""
    from reference.trainer import CHECKPOINT_NAME
    if mlperf_log:
        check_output(mlperf_log, appended=True)
    if "://" in output_dir:
        return
    check_output_tree(output_dir, files=(LOCK_NAME, EVAL_RESULTS, EVAL_HISTORY, TENSORFLOW_LOG,
                                         "checkpoint"),
                      folders=SUMMARY_FOLDERS,
                      links=(f"{LOCK_NAME}*", f"{CHECKPOINT_NAME}-*", ".worker-*"))


def open_append(path: str, mode: str = "a") -> IO:
    """`path` opened to append (`mode` "a" or "ab"; text is UTF-8): a local file created if
    absent and never through a link nor on a FIFO or device (`benchmark.files.open_output`:
    RefusedOutput), a remote one (gs://) through tf.io.gfile. Raises OSError (or TensorFlow's
    error) when it cannot be opened."""
    if "://" in path:
        import tensorflow as tf
        return tf.io.gfile.GFile(path, mode)
    return os.fdopen(open_output(path, append=True), mode,
                     **({} if "b" in mode else {"encoding": "utf-8"}))


def output_dir_lock(output_dir: str, task: int):
    """The context in which this worker (`task`: its index) of a run holds the lock of the
    local folder `output_dir` (preprocess's `exclusive_lock`: released by the OS when the
    process ends, kill -9 included), so that a second trainer or eval-only run started into
    the same folder is refused in one line (InputError naming its holder) before it writes
    anything. A remote folder (gs://...) cannot be locked: no lock."""
    if "://" in output_dir:
        return contextlib.nullcontext()
    name = LOCK_NAME if task == 0 else f"{LOCK_NAME}-worker-{task}"
    return exclusive_lock(os.path.join(output_dir, name), f"--output_dir={output_dir}",
                          "trainer")


def held_by_this_process(output_dir: str) -> bool:
    """Whether this process holds or held a lock of the local folder `output_dir` (a lock
    file there names it as its last holder): the folder is this run's to write in."""
    try:
        names = [name for name in os.listdir(output_dir) if name.startswith(LOCK_NAME)]
    except OSError:
        return False
    for name in names:
        with contextlib.suppress(OSError), open(os.path.join(output_dir, name), "rb") as handle:
            if handle.read(4096).startswith(f"pid {os.getpid()} on ".encode()):
                return True
    return False


def set_aside_earlier_run(output_dir: str, mlperf_log: str) -> list[tuple[str, str]]:
    """Before a training run starts from step 0: rename what an earlier run that stopped before
    its first checkpoint (Ctrl-C, a kill, a failure) left, so that the new run's MLPerf log,
    evals and TensorBoard scalars are its own: a non-empty `mlperf_log`, and the files
    eval_results.txt, eval_history.csv and tensorflow.log and the folders train/ and eval/ of
    `output_dir`, each to "<name>.interrupted-<n>" beside it, n the lowest number free for all
    of them.
    Anything else at those names (a folder for a file, a file for a folder) stays, for the
    run's own writes to report.

    Returns (old path, new path) of each renamed file or folder (none: nothing was there). A
    rename that fails is an OSError or a TensorFlow error (callers wrap it in `writing`).
    """
    import tensorflow as tf

    def is_file(path: str) -> bool:
        return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)

    files = [os.path.join(output_dir, name) for name in RUN_FILES]
    folders = [os.path.join(output_dir, name) for name in SUMMARY_FOLDERS]
    paths = [mlperf_log, *files, *folders]
    found = [path for path in files if is_file(path)] + \
        [path for path in folders if tf.io.gfile.isdir(path)]
    if is_file(mlperf_log) and tf.io.gfile.stat(mlperf_log).length:
        found.insert(0, mlperf_log)
    if not found:
        return []
    number = 1
    while any(tf.io.gfile.exists(f"{path}.{SET_ASIDE}-{number}") for path in paths):
        number += 1
    moved = [(path, f"{path}.{SET_ASIDE}-{number}") for path in found]
    for old, new in moved:
        tf.io.gfile.rename(old, new)
    return moved


def save_checkpoint(manager, step: int) -> None:
    """Save checkpoint `<name>-<step>` with the tf.train.CheckpointManager `manager`. Ctrl-C
    waits for the save to end (the checkpoint is then the one to resume from); a save that
    fails leaves an incomplete checkpoint, skipped when the run is started again."""
    from reference.trainer import CHECKPOINT_NAME
    with writing("--output_dir", os.path.join(manager.directory, f"{CHECKPOINT_NAME}-{step}")), \
            interrupts.held():
        manager.save(checkpoint_number=step)


def summary_writer(output_dir: str, folder: str, chief: bool):
    """The TensorBoard writer of OUTPUT_DIR/<folder> (the chief's; other workers write none)."""
    import tensorflow as tf
    if not chief:
        return tf.summary.create_noop_writer()
    path = os.path.join(output_dir, folder)
    if os.path.islink(path):  # refused, never written through (a file there: OutputError)
        check_output(path, folder=True)
    with writing("--output_dir", path):
        return tf.summary.create_file_writer(path)


def write_scalars(writer, folder: str, step: int, values: dict[str, float]) -> None:
    """TensorBoard scalars at global step `step` as Summary simple_values (what TensorBoard's
    scalar readers and EventAccumulator.Scalars list; tf.summary.scalar writes tensors);
    `folder` names the writer's folder in an error."""
    import tensorflow as tf
    summary = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag=tag,
                                                                     simple_value=float(value))
                                          for tag, value in values.items()])
    with writing("--output_dir", folder), writer.as_default(step=step):
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)


def write_eval(output_dir: str, step: int, samples: int, metrics: dict[str, float],
               writer) -> None:
    """An eval's outputs at global step `step` after `samples` samples: eval_results.txt, a row
    of eval_history.csv and the scalars of `writer` (OUTPUT_DIR/eval), flushed."""
    _write_eval_results(output_dir, step, samples, metrics)
    write_scalars(writer, os.path.join(output_dir, "eval"), step, metrics)
    with writing("--output_dir", os.path.join(output_dir, "eval")):
        writer.flush()


def _write_eval_results(output_dir: str, step: int, samples: int,
                        metrics: dict[str, float]) -> None:
    """eval_results.txt (the last eval, written whole) and one row of eval_history.csv
    (global_step, samples, then the metrics in name order; the header with the first row)."""
    import tensorflow as tf
    path = os.path.join(output_dir, EVAL_RESULTS)
    lines = [f"global_step = {step}"] + [f"{key} = {metrics[key]}" for key in sorted(metrics)]
    partial = f"{path}.partial-{os.getpid()}"  # written whole, then renamed over the old one
    history = os.path.join(output_dir, EVAL_HISTORY)
    with writing("--output_dir", path):
        with tf.io.gfile.GFile(partial, "w") as out:
            out.write("\n".join(lines) + "\n")
        tf.io.gfile.rename(partial, path, overwrite=True)
        new = not tf.io.gfile.exists(history)
        with open_append(history) as out:
            if new:
                out.write(",".join(["global_step", "samples", *sorted(metrics)]) + "\n")
            out.write(",".join([str(step), str(samples)] +
                               [repr(float(metrics[key])) for key in sorted(metrics)]) + "\n")
    logging.debug("eval results (%s): %s", path, ", ".join(lines))
