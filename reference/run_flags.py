"""The command line of `python -m reference.run_pretraining`: the flag schema (`FLAG_TABLE`) and
the flags' values with --preset's filled in (`read_flags`). Every check of those values is the
options builder's (reference/run_options.py).

TensorFlow-free, so that `--help` and flag errors are fast.
"""
from __future__ import annotations

from typing import Any

from absl import flags, logging

from benchmark import constants
from cleanup_scripts.records.pretraining_instances import MAX_SEQ_LENGTH
from reference.bert_config import MASKED_LM_BLOCK_ROWS
from reference.optimizer_settings import DEFAULT_OPTIMIZER as OPT

FLAGS = flags.FLAGS
# Records per micro-step (or eval step), all replicas together: 128 times the batch of the
# reference's TPU v3-128 run (8,192). What a step needs must also fit in memory
# (reference/run_options.py's check_memory holds a lower bound to the machine's).
MAX_BATCH_SIZE = 1 << 20

# The command line: (kind, name, default, help[, choices]). The MLCommons reference's flags come
# first, with its names and meanings; then those of the MLPerf run. The optimizer's defaults are
# OptimizerSettings'.
FLAG_TABLE = (
    ("string", "bert_config_file", None, "bert_config.json of the model to train."),
    ("string", "input_file", None, "Training TFRecords: comma-separated files or globs (local "
     "or gs://). With --nodo_train, the eval records if no --eval_file."),
    ("string", "output_dir", None, "Checkpoints, eval_results.txt, summaries, the MLPerf log."),
    ("string", "init_checkpoint", None, "Initial weights: the official TF1 or TF2 "
     "model.ckpt-28252 (or, with --nodo_train, a checkpoint of ours)."),
    ("integer", "max_seq_length", constants.MAX_SEQ_LENGTH, "Tokens per record (at most "
     f"{MAX_SEQ_LENGTH}, the longest create_pretraining_data writes)."),
    ("integer", "max_predictions_per_seq", constants.MAX_PREDICTIONS_PER_SEQ,
     "Masked positions per record (at most --max_seq_length)."),
    ("bool", "do_train", False, "Train (with evals at the MLPerf cadence if --do_eval)."),
    ("bool", "do_eval", False, "Evaluate (alone, with --nodo_train: once)."),
    ("integer", "train_batch_size", 32, "Records per micro-step, all replicas together (at "
     f"most {MAX_BATCH_SIZE:,}, and what a step needs must fit in this machine's memory)."),
    ("integer", "eval_batch_size", 8, "Records per eval step, all replicas together (at most "
     f"{MAX_BATCH_SIZE:,}, and what a step needs must fit in this machine's memory)."),
    ("enum", "optimizer", OPT.name, "The optimizer: lamb (the benchmark's) or adamw (the "
     "MLCommons reference's AdamWeightDecayOptimizer).", ["lamb", "adamw"]),
    ("float", "learning_rate", OPT.learning_rate, "Peak learning rate."),
    ("float", "poly_power", OPT.poly_power, "Power of the polynomial decay."),
    ("integer", "num_train_steps", OPT.num_train_steps, "Micro-steps over which the rate decays "
     "to 0; the step budget."),
    ("integer", "num_warmup_steps", OPT.num_warmup_steps, "Warm-up micro-steps."),
    ("integer", "start_warmup_step", OPT.start_warmup_step, "Micro-step at which warm-up counts 0 "
     "(may be < 0)."),
    ("integer", "stop_steps", None, "Stop after this many micro-steps (the schedule still spans "
     "--num_train_steps)."),
    ("integer", "save_checkpoints_steps", 1000, "Save a checkpoint every this many micro-steps "
     "(and always at the end)."),
    ("integer", "iterations_per_loop", 1000, "Micro-steps per compiled host call."),
    ("integer", "max_eval_steps", 100, "Eval batches: the first max_eval_steps * "
     "eval_batch_size records are evaluated."),
    ("bool", "use_tpu", False, "Run on a Cloud TPU (TPUStrategy)."),
    ("string", "tpu_name", None, "TPU name or grpc:// address."),
    ("string", "tpu_zone", None, "GCE zone of the TPU."),
    ("string", "gcp_project", None, "GCP project of the TPU."),
    ("string", "master", None, "Accepted for the MLCommons reference's command lines; unused."),
    ("integer", "num_tpu_cores", 8, "TPU cores (checked against the TPU found)."),
    ("integer", "num_gpus", 0, "GPUs to mirror over (> 1: MirroredStrategy)."),
    ("integer", "steps_per_update", 1, "Micro-batches accumulated per optimizer update."),
    ("integer", "keep_checkpoint_max", 5, "Checkpoints kept (0: all)."),
    ("float", "lamb_weight_decay_rate", OPT.weight_decay_rate, "LAMB weight decay."),
    ("float", "lamb_beta_1", OPT.beta_1, "LAMB beta_1."),
    ("float", "lamb_beta_2", OPT.beta_2, "LAMB beta_2."),
    ("float", "log_epsilon", OPT.log_epsilon, "LAMB epsilon is 10 ** log_epsilon."),
    ("bool", "clip_by_global_norm_after_gradient_allreduce", OPT.clip_after_allreduce,
     "Clip the averaged gradient once instead of each replica's micro-batch gradient (the "
     "MLCommons reference's default)."),
    # The MLPerf run.
    ("string", "eval_file", None, "Eval TFRecords (eval_10k) for --do_train --do_eval."),
    ("float", "target_mlm_accuracy", constants.TARGET_MLM_ACCURACY, "Stop at the first eval "
     "with masked-LM accuracy >= this (another value: open division)."),
    ("integer", "eval_frequency_samples", 0, "Samples between evals; 0: the benchmark's "
     "eval_frequency(global batch). Another value needs --noncompliant_eval_frequency."),
    ("bool", "noncompliant_eval_frequency", False, "Allow --eval_frequency_samples to differ "
     "from the benchmark's cadence (the run is then logged as open division)."),
    ("bool", "eval_at_start", False, "Also evaluate before training, at 0 samples (the official "
     "checkpoint scores about 0.34085)."),
    ("string", "mlperf_log", None, "MLPerf log file (local); default OUTPUT_DIR/mlperf.log "
     "(./mlperf.log when OUTPUT_DIR is remote)."),
    ("string", "submission_org", "reference", "submission_org of the MLPerf log."),
    ("string", "submission_platform", None, "submission_platform; default e.g. 8xGPU."),
    ("enum", "submission_division", "closed", "submission_division.", ["closed", "open"]),
    ("enum", "submission_status", "onprem", "submission_status.",
     ["onprem", "cloud", "preview", "research"]),
    ("integer", "seed", None, "Random seed (weights, dropout, data order); default: drawn at "
     "start and logged."),
    ("enum", "mixed_precision", "none", "Compute type; fp16 adds dynamic loss scaling.",
     ["none", "bf16", "fp16"]),
    ("bool", "use_xla", False, "Compile the training and eval steps with XLA (jit_compile; the "
     "optimizer update is compiled either way); TPUs compile them anyway."),
    ("bool", "recompute_layers", False, "Recompute each transformer layer in the backward pass "
     "instead of keeping its activations: less memory, about a third more encoder compute."),
    ("bool", "deterministic", True, "Turn TensorFlow's oneDNN kernels off and, on a CPU (no "
     "--use_tpu, --num_gpus=0), run its ops one at a time, so that the same command on the "
     "same data and machine gives the same checkpoints and evals, bit for bit; "
     "--nodeterministic keeps oneDNN and lets ops run side by side (faster, but the weights "
     "vary in their last bits from run to run)."),
    ("integer", "masked_lm_block_rows", MASKED_LM_BLOCK_ROWS, "Most masked-LM predictions whose "
     "logits (one row of vocab_size floats each) are formed at once; 0: all of a batch."),
    ("float", "dropout_override", None, "Set both dropout probabilities of the BERT config."),
    ("string", "preset", None, "A preset of reference/presets/ (v3-128, gpu-1, gpu-2, gpu-4, "
     "gpu-8, demo, smoke); flags given on the command line win."),
    ("string", "data_dir", None, "For --preset: the folder with part-* and eval_10k."),
    ("bool", "packed", False, "For --preset without --data_dir: read the packed TFRecords "
     "(tfrecords_packed/ of make preprocess PACK=1) of its default dataset (the gpu-N presets "
     "do unless --nopacked). Packed or not, the trainer reads what the records hold."),
    ("integer", "cpu_devices", 0, "Split the CPU into this many devices and mirror over them "
     "(tests and demos of the multi-replica path)."),
    # The console.
    ("float", "progress_seconds", 5.0, "Seconds between progress lines: a host call runs at "
     "most --iterations_per_loop micro-steps, fewer when that would take longer."),
    ("bool", "mlperf_log_to_console", False, "Also print the MLPerf log's records on stdout "
     "(they always go to --mlperf_log)."),
    ("bool", "tensorflow_log_to_console", False, "Let TensorFlow's own start-up messages (CUDA, "
     "oneDNN, XLA) reach the console; by default they go to OUTPUT_DIR/tensorflow.log."),
)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> flags.FlagValues:
    """Define FLAG_TABLE on `flag_values` (the script uses the global FLAGS; tests their own)."""
    for kind, name, default, help_text, *choices in FLAG_TABLE:
        if kind == "enum":
            flags.DEFINE_enum(name, default, choices[0], help_text, flag_values=flag_values)
        else:
            getattr(flags, f"DEFINE_{kind}")(name, default, help_text, flag_values=flag_values)
    return flag_values


def read_flags(flag_values: flags.FlagValues) -> dict[str, Any]:
    """The value of every flag of FLAG_TABLE: given on the command line, else --preset's (the
    preset's placeholders filled in), else its default. `flag_values` is left as parsed.

    Raises PresetError for an unknown or malformed preset, or one that names an unknown flag.
    """
    from reference import presets
    values = {name: flag_values[name].value for _, name, *_ in FLAG_TABLE}
    name = values["preset"]
    if not name:
        return values
    applied = []
    packed = values["packed"] if flag_values["packed"].present else None  # None: the preset's
    for flag, value in presets.resolve(name, values["data_dir"], packed).items():
        if flag not in values:
            raise presets.PresetError(f"--preset={name}: unknown flag {flag!r}")
        if not flag_values[flag].present:
            values[flag] = value
            applied.append(flag)
    logging.info("preset %s: %d flags (the training data: %s)", name, len(applied),
                 values["input_file"])
    logging.debug("preset %s: %s", name, ", ".join(f"--{flag}={values[flag]}"
                                                   for flag in applied))
    return values
