"""The MLPerf log keys a BERT run writes and the checker reads, with the hyperparameter table.

Key names come from `mlperf_logging.mllog.constants` where it defines them; `opt_epsilon` is the
one BERT key it lacks. The writer (`benchmark.mlperf_log`) and the rules (`benchmark.rules`)
both import this table, so a key is spelled once.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlperf_logging.mllog import constants as mlc

# Submission keys, logged once at the start of every run.
SUBMISSION_BENCHMARK = mlc.SUBMISSION_BENCHMARK
SUBMISSION_ORG = mlc.SUBMISSION_ORG
SUBMISSION_DIVISION = mlc.SUBMISSION_DIVISION
SUBMISSION_STATUS = mlc.SUBMISSION_STATUS
SUBMISSION_PLATFORM = mlc.SUBMISSION_PLATFORM

# Run structure.
CACHE_CLEAR = mlc.CACHE_CLEAR
WEIGHTS_INITIALIZATION = mlc.WEIGHTS_INITIALIZATION
INIT_START = mlc.INIT_START
INIT_STOP = mlc.INIT_STOP
RUN_START = mlc.RUN_START
RUN_STOP = mlc.RUN_STOP
BLOCK_START = mlc.BLOCK_START
BLOCK_STOP = mlc.BLOCK_STOP
EPOCH_START = mlc.EPOCH_START
EPOCH_STOP = mlc.EPOCH_STOP
EVAL_START = mlc.EVAL_START
EVAL_STOP = mlc.EVAL_STOP
EVAL_ACCURACY = mlc.EVAL_ACCURACY
SEED = mlc.SEED
TRAIN_SAMPLES = mlc.TRAIN_SAMPLES
EVAL_SAMPLES = mlc.EVAL_SAMPLES

# Our own events (not MLPerf keys; the checker reads them, the official checker ignores them).
# A process continued the run from a checkpoint (metadata: checkpoint, global_step, samples).
RESUME = "resume"
# The run was started with a setting the closed division does not allow (value: the reason).
NONCOMPLIANT = "noncompliant"
# The masked-LM accuracy the run stops at (value: a fraction; an open run's own target).
TARGET_ACCURACY = "target_accuracy"

# Run settings the trainer logs once besides the hyperparameters.
OPT_NAME = mlc.OPT_NAME
MAX_SEQUENCE_LENGTH = mlc.MAX_SEQUENCE_LENGTH
OPT_LAMB_LR_DECAY_POLY_POWER = mlc.OPT_LAMB_LR_DECAY_POLY_POWER
MAX_PREDICTIONS_PER_SEQ = "max_predictions_per_seq"  # not in mlperf_logging's constants
MIXED_PRECISION = "mixed_precision"  # ours: the --mixed_precision policy

# Metadata fields.
EPOCH_NUM = mlc.EPOCH_NUM            # on eval events: samples trained so far (BERT)
FIRST_EPOCH_NUM = mlc.FIRST_EPOCH_NUM  # on blocks: samples trained when the block starts
EPOCH_COUNT = mlc.EPOCH_COUNT        # on block_start: samples the block trains
STATUS = mlc.STATUS                  # on run_stop: "success" or "aborted"
SUCCESS = mlc.SUCCESS
ABORTED = mlc.ABORTED
RUN_STOP_STATUSES = (SUCCESS, ABORTED)

DIVISIONS = ("closed", "open")
BENCHMARK_NAME = mlc.BERT

# Keys that belong to the timed run: they must fall between run_start and run_stop.
TRAINING_KEYS = (BLOCK_START, BLOCK_STOP, EPOCH_START, EPOCH_STOP,
                 EVAL_START, EVAL_STOP, EVAL_ACCURACY)

# The event type mllog writes for each interval key (others are POINT_IN_TIME).
INTERVAL_EVENT_TYPES = {
    INIT_START: mlc.INTERVAL_START, INIT_STOP: mlc.INTERVAL_END,
    RUN_START: mlc.INTERVAL_START, RUN_STOP: mlc.INTERVAL_END,
    BLOCK_START: mlc.INTERVAL_START, BLOCK_STOP: mlc.INTERVAL_END,
    EPOCH_START: mlc.INTERVAL_START, EPOCH_STOP: mlc.INTERVAL_END,
    EVAL_START: mlc.INTERVAL_START, EVAL_STOP: mlc.INTERVAL_END,
}


@dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter the closed division requires, and the values it may take.

    kind: "int" (an integer; an integral float such as 13700.0 is accepted) or "float".
    minimum / maximum: bounds on the value (None: unbounded); *_open makes a bound strict.
    """
    key: str
    kind: str
    minimum: float | None = None
    maximum: float | None = None
    minimum_open: bool = False
    maximum_open: bool = False
    meaning: str = ""


# The LAMB epsilon key of rulesets 1.0.0-2.0.0; later ones name it opt_lamb_epsilon
# (benchmark.rulesets gives the key per ruleset).
OPT_EPSILON = "opt_epsilon"

# Larger is no batch size (and would overflow the floats of the eval_frequency formula).
MAX_GLOBAL_BATCH_SIZE = 1 << 40

# The hyperparameters of a closed-division BERT run (ruleset 1.0.0), in logging order.
HYPERPARAMETERS: tuple[Hyperparameter, ...] = (
    Hyperparameter(mlc.GLOBAL_BATCH_SIZE, "int", 1, MAX_GLOBAL_BATCH_SIZE,
                   meaning="sequences per optimizer step"),
    Hyperparameter(mlc.GRADIENT_ACCUMULATION_STEPS, "int", 1,
                   meaning="micro-batches accumulated per step"),
    Hyperparameter(mlc.OPT_BASE_LR, "float", 0, minimum_open=True, meaning="LAMB learning rate"),
    Hyperparameter(OPT_EPSILON, "float", 0, minimum_open=True, meaning="LAMB epsilon"),
    Hyperparameter(mlc.OPT_LR_TRAINING_STEPS, "int", 1,
                   meaning="steps of the polynomial decay"),
    Hyperparameter(mlc.OPT_LR_WARMUP_STEPS, "int", 0, meaning="warm-up steps"),
    Hyperparameter(mlc.NUM_WARMUP_STEPS, "int", 0, meaning="warm-up steps"),
    Hyperparameter(mlc.START_WARMUP_STEP, "int", meaning="first warm-up step (may be negative)"),
    Hyperparameter(mlc.OPT_LAMB_BETA_1, "float", 0, 1, True, True, meaning="LAMB beta1"),
    Hyperparameter(mlc.OPT_LAMB_BETA_2, "float", 0, 1, True, True, meaning="LAMB beta2"),
    Hyperparameter(mlc.OPT_LAMB_WEIGHT_DECAY, "float", 0, meaning="LAMB weight decay"),
)
HYPERPARAMETER_KEYS = tuple(h.key for h in HYPERPARAMETERS)
GLOBAL_BATCH_SIZE = mlc.GLOBAL_BATCH_SIZE
GRADIENT_ACCUMULATION_STEPS = mlc.GRADIENT_ACCUMULATION_STEPS
