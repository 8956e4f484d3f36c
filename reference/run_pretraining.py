"""`python -m reference.run_pretraining`: MLPerf BERT pre-training and evaluation in TF2, with
the MLCommons reference's flags plus --eval_file, --preset and --data_dir.

    python -m reference.run_pretraining --bert_config_file=bert_config.json \\
        --init_checkpoint=tf1_ckpt/model.ckpt-28252 --input_file='gs://b/tfrecord/part-*' \\
        --eval_file=gs://b/tfrecord/eval_10k --output_dir=gs://b/run0 --do_train --do_eval \\
        --train_batch_size=8192 ... --use_tpu --tpu_name=NAME   (the reference's command line)
    python -m reference.run_pretraining --preset=v3-128 --data_dir=gs://b/tfrecord \\
        --init_checkpoint=... --output_dir=...                   (the same, from presets/)
    python -m reference.run_pretraining --nodo_train --do_eval --eval_file=eval_10k \\
        --init_checkpoint=CKPT --bert_config_file=... --output_dir=DIR   (one eval)

Training evaluates every eval_frequency(global batch) samples and stops at the first masked-LM
accuracy >= --target_mlm_accuracy (success) or after --num_train_steps (aborted); the MLPerf log
is --mlperf_log (default OUTPUT_DIR/mlperf.log). The same command again resumes a killed or
interrupted run from its newest complete checkpoint, bit for bit, and refuses other run
settings; a run stopped before its first checkpoint starts over, its log and evals renamed
*.interrupted-N first. On a CPU the same command on the same data gives the same bytes every
time (--deterministic, the default). Step counts are micro-steps of --train_batch_size records
(x --steps_per_update per optimizer update). TensorBoard summaries go to OUTPUT_DIR/train and
OUTPUT_DIR/eval. More: docs/training.md.

Exit status: 0 the target reached (or not sought: eval only, --nodo_eval, --stop_steps);
1 a problem with the flags, the inputs or an output, in one line "error: ..."; 4 the step
budget (--num_train_steps) ran out before the target; 130 interrupted (Ctrl-C).
"""
# For maintainers (absl prints the docstring above as --help): `main` wires the layers, flags
# and preset -> RunOptions (reference/run_options.py) -> the strategy -> preflight's
# CheckedInputs (reference/preflight.py) -> the run (reference/run_loop.py).
from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import tempfile
from typing import NoReturn

from absl import app, flags

from benchmark.errors import UserError, name_make_variables, printable
from reference import console, repeatable, run_flags
from reference.run_flags import FLAGS, define_flags
from reference.run_options import options_from_flags
from reference.run_outputs import SET_ASIDE

EXIT_TARGET_NOT_REACHED = 4  # the run used --num_train_steps without reaching the target
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process ended by SIGINT


def main(argv: list[str]) -> None:
    """Entry point for `python -m reference.run_pretraining`.

    A bad command line or input, or an output that cannot be written (a
    benchmark.errors.UserError), ends the process with one line "error: <what>: <problem>" on
    stderr and exit status 1; an InternalError with "error: internal error: <what>". A damaged
    record or an id out of range met during the run (TensorFlow's DataLossError or
    InvalidArgumentError, or the UnicodeDecodeError that stands for it when the record is
    random bytes) is located by a scan of the data and reported the same way; any
    TensorFlow error while the run is set up (the model built, the first compiled training
    call: e.g. a batch too large for the machine) is one line "error: setting up the run
    failed: ..." too; any other failure keeps its traceback.
    """
    if len(argv) > 1:
        raise SystemExit(f"error: unexpected arguments {printable(' '.join(argv[1:]))} "
                         "(flags are --name=value)")
    console.plain_console_logging()
    native_log = None if FLAGS.tensorflow_log_to_console else console.divert_native_stderr(
        os.path.join(tempfile.gettempdir(), f"run_pretraining-{os.getpid()}-tensorflow.log"))
    try:
        _run()
    except KeyboardInterrupt:  # outside the training loop: set-up, an eval-only run, the end
        print("interrupted; run the same command to go on (it resumes from the newest "
              "checkpoint in the output folder, if there is one)", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        if native_log:
            _keep_native_log(native_log)


def _keep_native_log(path: str) -> None:
    """Move TensorFlow's own messages (a temporary file while the run did not know its output
    folder for sure) to OUTPUT_DIR/tensorflow.log when that folder is local and this process
    held it (a run refused before, e.g. because another holds it, writes nothing there); a
    failed run that did not keeps them where they are and says so."""
    from reference.run_outputs import TENSORFLOW_LOG, held_by_this_process, open_append
    output_dir = FLAGS.output_dir
    if output_dir and "://" not in output_dir and held_by_this_process(output_dir):
        with contextlib.suppress(OSError, UserError), open(path, "rb") as src, \
                open_append(os.path.join(output_dir, TENSORFLOW_LOG), "ab") as dest:
            shutil.copyfileobj(src, dest)
        with contextlib.suppress(OSError):
            os.unlink(path)
    elif sys.exc_info()[0] is not None and os.path.getsize(path):
        print(f"TensorFlow's own messages: {path}", file=sys.stderr)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _run() -> None:
    """Read the options, check the inputs and run; a failure the user can act on is one line
    "error: ..." (see `main`)."""
    try:  # the flags' own checks come before TensorFlow's import (5 s of a 2-core machine)
        options = options_from_flags(FLAGS)
    except UserError as err:
        _fail(str(err))
    if options.compute.deterministic:
        repeatable.without_onednn()  # TensorFlow reads the switch once, when imported: next
    import tensorflow as tf
    tf.get_logger().setLevel("WARNING")  # its INFO lines (checkpoint sharding times) are noise
    from reference.input_pipeline import DATA_ERRORS
    from reference.placement import strategy_for
    from reference.preflight import preflight
    from reference.run_loop import InternalError, Interrupted, evaluate_only, train
    inputs = None
    try:
        # The strategy comes before the files are read: TensorFlow's threads, multi-worker
        # collectives and TPUs must be set up before it runs anything (preflight reads files
        # with tf.data).
        strategy = strategy_for(options.distribution, options.compute.deterministic)
        inputs = preflight(options)
        result = (train if options.do_train else evaluate_only)(options, inputs, strategy)
    except Interrupted as err:
        gc.collect()
        then = f"to resume from {printable(err.checkpoint)}" if err.checkpoint else \
            ("to start over (no checkpoint was saved yet; this run's log and evals are then "
             f"renamed to *.{SET_ASIDE}-N)")
        print(f"interrupted at step {err.step}; run the same command {then}", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except (UserError, InternalError, *DATA_ERRORS) as err:
        failure = _failure(err, options, inputs)
        if not failure:
            raise
    else:
        if not _print_outcome(result, options):
            raise SystemExit(EXIT_TARGET_NOT_REACHED)
        return
    # Free the failed run's objects first: TensorFlow's warnings about them (e.g. a checkpoint
    # deleted half-restored) then come before the error, which stays the last line on stderr
    # (benchmark.errors.exit_on_user_error would print while the error still holds them).
    gc.collect()
    _fail(failure)


def _fail(failure: str) -> NoReturn:
    """End the process with status 1 and one line "error: <failure>", whatever the input held;
    through make, naming the make variable of a flag."""
    raise SystemExit(f"error: {printable(name_make_variables(failure))}")


def _failure(err: Exception, options, inputs) -> str | None:
    """The one-line error for `err` (raised with `options` and `inputs` once known), or None
    when it is a TensorFlow data error that no bad record explains (a bug: keep the traceback).

    Damaged data fails the first compiled call too (a SetupError caused by it): the bad record
    is located by a scan of the files."""
    from reference.checkpoint import CheckpointError
    from reference.error_text import SetupError
    from reference.input_pipeline import DATA_ERRORS
    from reference.preflight import locate_bad_record
    from reference.run_loop import InternalError
    if isinstance(err, InternalError):
        return f"internal error: {err}"
    if isinstance(err, DATA_ERRORS):
        return inputs and locate_bad_record(options, inputs)
    failure = str(err)
    if isinstance(err, SetupError) and inputs and isinstance(err.__cause__, DATA_ERRORS):
        return locate_bad_record(options, inputs) or failure
    if isinstance(err, CheckpointError) and inputs:
        # Raised while restoring weights into the model that the config describes.
        failure += f" (model of --bert_config_file={options.model.bert_config_file})"
    return failure


def _print_outcome(result, options) -> bool:
    """The last line on stdout: the status, where the run ended and its last accuracy, and
    why an aborted run stopped. Returns False when a training run with evals used its whole
    step budget (--num_train_steps) without reaching the target."""
    last = result.evals[-1][1] if result.evals else {}
    status = "already finished" if result.status == "already-finished" else result.status
    line = (f"run_pretraining: {status} at step {result.step}, {result.samples} samples"
            + (f", masked_lm_accuracy {last['masked_lm_accuracy']:.5f}" if last else ""))
    missed = result.status == "aborted" and options.do_eval
    if missed and result.step < options.optimizer.num_train_steps:
        line += (f": stopped at --stop_steps={options.schedule.stop_steps}; run it again with "
                 "a later --stop_steps, or without it, to continue")
        missed = False
    elif missed:
        line += (f": the step budget (--num_train_steps={options.optimizer.num_train_steps}) "
                 f"ran out before the target {options.eval.target_accuracy:g} "
                 f"(exit status {EXIT_TARGET_NOT_REACHED})")
    print(line, flush=True)
    return not missed


if __name__ == "__main__":
    define_flags()
    flags.adopt_module_key_flags(run_flags)  # --help lists them as this script's flags
    app.run(main)
