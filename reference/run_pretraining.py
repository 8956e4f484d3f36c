"""`python -m reference.run_pretraining`: MLPerf BERT pre-training and evaluation in TF2.

The MLCommons reference's (TF1) command lines work unchanged (same flag names and meanings),
e.g. the TPU v3-128 run of the benchmark README, plus `--eval_file` for the evaluation set that
training evaluates on as it goes (the MLCommons reference evaluates offline, on saved
checkpoints, in a second job):

    python -m reference.run_pretraining --bert_config_file=bert_config.json \
        --init_checkpoint=tf1_ckpt/model.ckpt-28252 --input_file='gs://b/tfrecord/part-*' \
        --eval_file=gs://b/tfrecord/eval_10k --output_dir=gs://b/run0 --do_train --do_eval \
        --train_batch_size=8192 --learning_rate=0.00288293 --lamb_beta_1=0.88 \
        --lamb_beta_2=0.88 --lamb_weight_decay_rate=0.0166629 --log_epsilon=-6 \
        --num_train_steps=600 --num_warmup_steps=287 --start_warmup_step=-76 \
        --eval_batch_size=640 --max_eval_steps=125 --use_tpu --tpu_name=...
    python -m reference.run_pretraining --preset=v3-128 --data_dir=gs://b/tfrecord \
        --init_checkpoint=... --output_dir=...          # the same, from reference/presets/

Training (`--do_train --do_eval`): an MLPerf run. Every eval_frequency(global batch) samples
(benchmark.constants) the model is evaluated on the first eval_batch_size * max_eval_steps
records of --eval_file (all 10,000 of eval_10k when that product is >= 10,000); the run stops
with status success at the first masked-LM accuracy >= --target_mlm_accuracy (0.720), or
aborted when --num_train_steps (or --stop_steps) micro-steps are done. The MLPerf log
(--mlperf_log, default OUTPUT_DIR/mlperf.log) is written through benchmark.mlperf_log;
OUTPUT_DIR gets eval_results.txt (after every eval), checkpoints model.ckpt-<step>, and
TensorBoard summaries under train/ and eval/.

Evaluation only (`--do_eval --nodo_train`): one pass over max_eval_steps * eval_batch_size
records of --eval_file (or --input_file, as in the MLCommons reference) with --init_checkpoint (an
official TF1/TF2 checkpoint or one of ours) or else the latest checkpoint in OUTPUT_DIR;
writes eval_results.txt.

Resuming: when OUTPUT_DIR holds a checkpoint of ours, training continues from it (weights,
optimizer state, global step and samples trained; --init_checkpoint is then ignored), so the
same command restarts a killed run. The newest checkpoint whose files all read back is used
(a damaged or half-deleted newer one is skipped with a warning); the data stream, the dropout
masks and the seed (stored in the checkpoint) continue exactly, so the run ends as an
uninterrupted one would, bit for bit. The new process appends a complete section to the
MLPerf log (init_start ... run_stop) preceded by a `resume` record, with sample counts
continuing from the checkpoint. A resumed run is therefore never a valid MLPerf result: its log
holds two run_start records, the official checker rejects it and `benchmark.check` reports it
(bert/single-run), which is the honest outcome (the time of the lost segment is not in either).
A run whose checkpoint already reached the target, or its step budget, is not restarted.

A resumed run must be the run that wrote the checkpoint: every checkpoint stores the settings
that define the run (`run_settings`: global batch, accumulation, the learning-rate schedule and
optimizer constants, seed, record shapes, the training files' names, precision, clipping,
dropout, eval cadence and target, the BERT config), and a run that finds one with other values
stops before init_start with one line naming the first flag that differs, the checkpoint's value
and its own. Without --seed the checkpoint's seed is taken, as before. Checkpoints written
before the settings were stored are refused the same way (there is no telling which flags wrote
them; a different batch size used to be trained on silently, or to spin for ever on counters
that no longer agreed with the eval schedule): finish such a run with the version that wrote
it, or start a new --output_dir. The number of replicas may change (--train_batch_size counts
all of them); the data's location too (the files are compared by name).

Step counts (--num_train_steps, --num_warmup_steps, --start_warmup_step, --stop_steps,
--save_checkpoints_steps, --iterations_per_loop) are micro-steps of --train_batch_size records,
as in the MLCommons reference; with --steps_per_update=n they are the counts for batch bs*n
scaled up n times and must be multiples of n. The MLPerf log states the optimizer's view:
global_batch_size = train_batch_size * n, and step counts divided by n.

Untrusted inputs end the run with one line "error: ..." and exit status 1: a token, type or
position id out of range of the BERT config (checked in the first record of every training file
and every eval record before init_start, and asserted in the training stream, since a GPU gather
out of range returns zeros instead of failing), an output (--output_dir, checked by writing a
file in it before anything is logged; --mlperf_log; checkpoints, summaries, eval_results.txt)
that cannot be written, e.g. a read-only folder or a full disk. A run that fails after run_start
ends its MLPerf log with run_stop status "aborted". A checkpoint whose save failed is left
incomplete and is skipped when the run is started again.

Settings that the closed division does not allow (another eval cadence, a target below 0.720,
an eval over fewer than 10,000 samples, no eval at all) are accepted, each logged with a warning
and a `noncompliant` record, and the run is logged as open division.

The layers, as in tensorflow/models official/nlp/train.py: reference/run_flags.py (the flag
schema, range checks, --preset) -> reference/run_options.py (the flags read once into RunOptions;
no file I/O) -> reference/preflight.py (the files: TFRecords, BERT config, checkpoints, the output
folder) -> reference/run_loop.py (the training and eval run); `main` below wires them up.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shutil
import sys
import tempfile

from absl import app, flags

from benchmark.errors import UserError
from cleanup_scripts.fileio import printable
from reference import console, run_flags
from reference.run_flags import FLAGS, apply_preset, define_flags
from reference.run_options import options_from_flags


def main(argv: list[str]) -> None:
    """Entry point for `python -m reference.run_pretraining`.

    A bad command line or input, or an output that cannot be written (a
    benchmark.errors.UserError), ends the process with one line "error: <what>: <problem>" on
    stderr and exit status 1; an InternalError with "error: internal error: <what>". A damaged
    record or an id out of range met during the run (TensorFlow's DataLossError or
    InvalidArgumentError) is located by a scan of the data and reported the same way; any
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
    finally:
        if native_log:
            _keep_native_log(native_log)


def _keep_native_log(path: str) -> None:
    """Move TensorFlow's own messages (a temporary file while the run did not know its output
    folder for sure) to OUTPUT_DIR/tensorflow.log when that folder is local and exists; a
    failed run whose folder is not there keeps them where they are and says so."""
    output_dir = FLAGS.output_dir
    if output_dir and "://" not in output_dir and os.path.isdir(output_dir):
        with contextlib.suppress(OSError), open(path, "rb") as src, \
                open(os.path.join(output_dir, "tensorflow.log"), "ab") as dest:
            shutil.copyfileobj(src, dest)
        with contextlib.suppress(OSError):
            os.unlink(path)
    elif sys.exc_info()[0] is not None and os.path.getsize(path):
        print(f"TensorFlow's own messages: {path}", file=sys.stderr)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _run() -> None:
    """Parse the run, set it up and run it; see `main`."""
    import tensorflow as tf
    tf.get_logger().setLevel("WARNING")  # its INFO lines (checkpoint sharding times) are noise
    from reference import distribution
    from reference.checkpoint import CheckpointError
    from reference.error_text import SetupError
    from reference.preflight import locate_bad_record, preflight
    from reference.run_loop import InternalError, evaluate_only, train
    options = None  # once preflight has checked the files
    try:
        # The strategy comes before the files are read: multi-worker collectives and TPUs must
        # be set up before TensorFlow runs anything (preflight reads files with tf.data).
        devices = tuple(distribution.logical_cpu_devices(FLAGS.cpu_devices)) \
            if FLAGS.cpu_devices > 1 else ()
        apply_preset()
        requested = options_from_flags(FLAGS)
        strategy = distribution.make_strategy(
            dataclasses.replace(requested.strategy, devices=devices))
        options = preflight(requested)
        result = (train if options.do_train else evaluate_only)(options, strategy)
    except SetupError as err:
        # Damaged data fails the first compiled call too: locate the record if it is one.
        failure = str(err)
        if options is not None and isinstance(
                err.__cause__, (tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
            failure = locate_bad_record(options) or failure
    except UserError as err:
        failure = str(err)
        if isinstance(err, CheckpointError) and options is not None:
            # Raised while restoring weights into the model that the config describes.
            failure += f" (model of --bert_config_file={options.bert_config_file})"
    except InternalError as err:
        failure = f"internal error: {err}"
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
        failure = options and locate_bad_record(options)
        if not failure:
            raise
    else:
        last = result.evals[-1][1] if result.evals else {}
        status = "already finished" if result.status == "already-finished" else result.status
        print(f"run_pretraining: {status} at step {result.step}, {result.samples} "
              "samples" + (f", masked_lm_accuracy {last['masked_lm_accuracy']:.5f}"
                           if last else ""), flush=True)
        return
    # Free the failed run's objects first: TensorFlow's warnings about them (e.g. a checkpoint
    # deleted half-restored) then come before the error, which stays the last line on stderr
    # (benchmark.errors.exit_on_user_error would print while the error still holds them).
    gc.collect()
    raise SystemExit(f"error: {printable(failure)}")  # one line, whatever the input held


if __name__ == "__main__":
    define_flags()
    flags.adopt_module_key_flags(run_flags)  # --help lists them as this script's flags
    app.run(main)
