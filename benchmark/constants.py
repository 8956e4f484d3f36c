"""Every number the MLPerf Training v1.0 BERT benchmark fixes, in one place.

The data pipeline, the trainer and the checker import these; no benchmark number is typed
twice in the project.
"""

# Training target and evaluation.
TARGET_MLM_ACCURACY = 0.720
EVAL_SAMPLES = 10_000
INITIAL_CHECKPOINT_MLM_ACCURACY = 0.34085

# Data pipeline defaults (the reference's process_wiki.sh and create_pretraining_data flags).
NUM_TEST_ARTICLES = 10_000
SEPARATION_SEED = 12_345
SEPARATION_SEED_STRIDE = 13
GATHER_BLOCK_SIZE_MB = 26.92
GATHER_NUM_OUTPUTS = 500
PRETRAINING_RANDOM_SEED = 12_345
MAX_SEQ_LENGTH = 512
MAX_PREDICTIONS_PER_SEQ = 76
MASKED_LM_PROB = 0.15
SHORT_SEQ_PROB = 0.1
DUPE_FACTOR = 10
DUMP_DATE = "2020-01-01"

