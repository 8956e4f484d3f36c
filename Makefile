# MLPerf BERT harness. `make help` lists the targets; set-up: `make install`, then `make smoke`.
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

# make preprocess: inputs default to the embedded Wikipedia slice and the vendored vocab.
# RESULTS: the official results/ text (make download ARTIFACTS=results) instead of a dump.
DUMP     ?=
RESULTS  ?=
OUT      ?= build/dataset
NWORKER  ?= 0
# PACK=1: also pack the TFRecords into OUT/tfrecords_packed (the same as PREPROCESS_ARGS=--pack).
PACK     ?=
PREPROCESS_ARGS ?=
# make verify: a directory holding official artifacts (or a preprocess output).
DIR      ?= $(OUT)
# make upload / make verify: a bucket copy of the dataset (gs://bucket/prefix).
BUCKET   ?=
# make download: official artifacts (config, vocab, tf1_ckpt, tf2_ckpt, dump, results; or all),
# from SOURCE (r2, the MLCommons bucket, by default; url) or from FROM_DIR, a folder
# mlc-r2-downloader.sh filled. DOWNLOAD_ARGS: more flags (--r2_downloader=PATH, --decompress).
ARTIFACTS ?= config,vocab
SOURCE    ?= r2
FROM_DIR  ?=
DOWNLOAD_ARGS ?=
# make bench: the reference's cleanup_scripts folder (a checkout of mlcommons/training).
REFERENCE_DIR ?=
BENCH_ARGS    ?=
# make bench also times training against the reference graph in REFERENCE_DIR/.. (its bert/).
REFERENCE_BERT   ?= $(if $(REFERENCE_DIR),$(REFERENCE_DIR)/..)
BENCH_TRAIN_ARGS ?=
# make train: run_pretraining with a preset from reference/presets/ (default: the CPU demo).
TPU ?=
GPU ?=
PRESET ?= $(or $(TPU),$(GPU),demo)
DATA ?=
INIT_CHECKPOINT ?=
TRAIN_OUT ?= build/train/$(PRESET)$(if $(PACKED),-packed)
TPU_NAME ?=
TPU_ZONE ?=
GCP_PROJECT ?=
TRAIN_ARGS ?=
# PACKED=1: the default dataset's packed TFRecords (make preprocess PACK=1); with DATA, point
# DATA at a packed folder instead (the trainer reads what the records hold).
PACKED ?=
# make check: a log, a results folder, or a submission tree.
LOG        ?=
SUBMISSION ?=
CHECK_ARGS ?=

# make test / test-all: pytest processes (pytest-xdist; each test file runs whole in one of
# them, so its fixtures are built once). Three on the two cores the suite is sized for: while
# one waits (on a command it started, a child, a file), the others keep both cores busy.
# TEST_WORKERS=0 runs the suite in this process. Both end with the 20 slowest tests (pytest
# --durations), so a regression in time shows.
TEST_WORKERS ?= 3
PYTEST_ARGS  ?=

# $(call q,VALUE): VALUE as one shell word, single-quoted (a ' in it becomes '\''), so that
# paths with spaces or shell characters reach the scripts whole: make preprocess DUMP="a b".
q = '$(subst ','\'',$(1))'

.PHONY: help install test test-all smoke preprocess download upload verify train check example-submission bench bench-data bench-train export-step time-step clean-build

# One line per target: what it does, then the variables it reads.
help:
	@echo 'make TARGET [VARIABLE=value ...]   (the default goal is this list)'
	@echo '  install             venv in .venv, the package and its test extras  PYTHON'
	@echo '  smoke               preprocess the slice, train a tiny BERT, check its log  SMOKE_OUT'
	@echo '  preprocess          the dataset: text, TFRecords, eval set  OUT DUMP RESULTS NWORKER PACK PREPROCESS_ARGS'
	@echo '  download            official artifacts  DIR ARTIFACTS SOURCE FROM_DIR DOWNLOAD_ARGS'
	@echo '  upload              copy a dataset to a bucket  OUT BUCKET NWORKER'
	@echo '  verify              check files against official md5s / a manifest  DIR (or BUCKET)'
	@echo '  train               run_pretraining with a preset  PRESET TPU GPU DATA PACKED INIT_CHECKPOINT TRAIN_OUT TPU_NAME TPU_ZONE GCP_PROJECT TRAIN_ARGS'
	@echo '  check               check logs or a submission tree  LOG SUBMISSION CHECK_ARGS'
	@echo '  example-submission  ten demo runs laid out as a submission, checked  EXAMPLE_ARGS'
	@echo '  bench               bench-data and bench-train against the reference  REFERENCE_DIR OUT BENCH_ARGS BENCH_TRAIN_ARGS'
	@echo '  bench-data          time preprocessing against the reference  REFERENCE_DIR OUT BENCH_ARGS'
	@echo '  bench-train         time training against the reference  REFERENCE_BERT BENCH_TRAIN_ARGS'
	@echo '  export-step         the update as one XLA HLO module, for timing on a GPU  STEP_OUT EXPORT_ARGS'
	@echo '  time-step           time (and profile) an exported update with jax, no TensorFlow  STEP_OUT TIME_ARGS'
	@echo '  test                the tests but the slow ones  TEST_WORKERS PYTEST_ARGS'
	@echo '  test-all            every test  TEST_WORKERS PYTEST_ARGS'
	@echo '  clean-build         remove build/'
	@echo 'Failing targets end with make'"'"'s own "Error" line and exit status 2.'

# For errors: the flag each make variable fills, so that a message names the variable a user
# typed ("DATA (--data_dir) is required"); see benchmark.errors.name_make_variables.
preprocess: export MAKE_VARIABLES = --output_dir=OUT --nworker=NWORKER --dump=DUMP \
	--results_text=RESULTS
download: export MAKE_VARIABLES = --output_dir=DIR --artifacts=ARTIFACTS --source=SOURCE \
	--from_dir=FROM_DIR
upload: export MAKE_VARIABLES = --bucket=BUCKET --source_dir=OUT --nworker=NWORKER
train: export MAKE_VARIABLES = --preset=PRESET --output_dir=TRAIN_OUT --data_dir=DATA \
	--init_checkpoint=INIT_CHECKPOINT --tpu_name=TPU_NAME --tpu_zone=TPU_ZONE \
	--gcp_project=GCP_PROJECT --packed=PACKED

install:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip "setuptools>=77"
	$(PY) -m pip install -e '.[test]'
	$(PY) -m pip check

# The suite writes bytecode (__pycache__, git-ignored) even where the shell says not to
# (PYTHONDONTWRITEBYTECODE): without it each pytest worker compiles and rewrites the asserts of
# every test module again (collecting took 12 CPU-s a worker instead of 7), and every command a
# test starts compiles the project's modules it imports.
test:
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder --durations=20 $(PYTEST_ARGS)

test-all:
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile \
		--no-loadscope-reorder --durations=20 $(PYTEST_ARGS)

# The flags of preprocess and train, built in variables so that make echoes one command line.
PREPROCESS_FLAGS = --output_dir=$(call q,$(OUT)) --nworker=$(call q,$(NWORKER)) \
	$(if $(DUMP),--dump=$(call q,$(DUMP))) $(if $(RESULTS),--results_text=$(call q,$(RESULTS))) \
	$(if $(PACK),--pack)
TRAIN_FLAGS = --preset=$(call q,$(PRESET)) --output_dir=$(call q,$(TRAIN_OUT)) \
	$(if $(DATA),--data_dir=$(call q,$(DATA))) \
	$(if $(INIT_CHECKPOINT),--init_checkpoint=$(call q,$(INIT_CHECKPOINT))) \
	$(if $(TPU_NAME),--tpu_name=$(call q,$(TPU_NAME))) $(if $(TPU_ZONE),--tpu_zone=$(call q,$(TPU_ZONE))) \
	$(if $(GCP_PROJECT),--gcp_project=$(call q,$(GCP_PROJECT))) $(if $(PACKED),--packed)

preprocess:
	$(PY) -m cleanup_scripts.preprocess $(PREPROCESS_FLAGS) $(PREPROCESS_ARGS)

download:
	$(PY) -m cleanup_scripts.artifacts.download --output_dir=$(call q,$(DIR)) --artifacts=$(call q,$(ARTIFACTS)) \
		--source=$(call q,$(SOURCE)) $(if $(FROM_DIR),--from_dir=$(call q,$(FROM_DIR))) $(DOWNLOAD_ARGS)

upload:
	$(if $(BUCKET),,$(error give BUCKET=gs://bucket/prefix))
	$(PY) -m cleanup_scripts.artifacts.upload --bucket=$(call q,$(BUCKET)) --source_dir=$(call q,$(OUT)) \
		--nworker=$(call q,$(NWORKER))

verify:
	$(PY) -m cleanup_scripts.artifacts.verify $(call q,$(or $(BUCKET),$(DIR)))

train:
	$(PY) -m reference.run_pretraining $(TRAIN_FLAGS) $(TRAIN_ARGS)

# The whole path in about a minute: the slice's dataset, a few training steps of a tiny BERT
# (reference/presets/smoke.json), one eval, and the check of the log it wrote.
SMOKE_OUT ?= build/smoke
smoke:
	@$(MAKE) --no-print-directory preprocess OUT=$(call q,$(SMOKE_OUT)/dataset)
	@rm -rf $(call q,$(SMOKE_OUT)/train)
	@$(MAKE) --no-print-directory train PRESET=smoke DATA=$(call q,$(SMOKE_OUT)/dataset/tfrecords) \
		TRAIN_OUT=$(call q,$(SMOKE_OUT)/train)
	@$(MAKE) --no-print-directory check LOG=$(call q,$(SMOKE_OUT)/train/mlperf.log)

# Ten real demo runs laid out as an (open division) submission, then checked.
EXAMPLE_ARGS ?=
example-submission:
	$(PY) -m reference.example_submission $(EXAMPLE_ARGS)

bench: bench-data bench-train

bench-data:
	$(PY) -m devtools.bench_data --reference_dir=$(call q,$(REFERENCE_DIR)) \
		--text_dir=$(call q,$(OUT)/text) --part=$(call q,$(OUT)/results/part-00000-of-00500) $(BENCH_ARGS)

bench-train:
	$(PY) -m devtools.bench_train --reference_dir=$(call q,$(REFERENCE_BERT)) $(BENCH_TRAIN_ARGS)

# The trainer's update as one XLA HLO module (BERT-large, 96 packed sequences, bf16), and its
# timer: jaxlib's XLA on the device jax finds, where TensorFlow need not be installed (a GPU
# machine without the venv: PY=python3). TIME_ARGS: --steps, --warmup, --peak_tflops, --profile.
STEP_OUT ?= build/step
EXPORT_ARGS ?=
TIME_ARGS ?=
export-step:
	$(PY) -m devtools.export_step --output_dir=$(call q,$(STEP_OUT)) $(EXPORT_ARGS)

time-step:
	$(PY) -m devtools.time_step $(call q,$(STEP_OUT)) $(TIME_ARGS)

# `@`: make does not echo the command, so `CHECK_ARGS="--format json"` prints only JSON.
check:
	@$(PY) -m benchmark.check $(if $(LOG),$(call q,$(LOG))) \
		$(if $(SUBMISSION),--submission $(call q,$(SUBMISSION))) $(CHECK_ARGS)

clean-build:
	rm -rf build
