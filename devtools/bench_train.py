"""`make bench-train`: our trainer's speed, eval time, MFU and peak memory beside the MLCommons
reference's TF1 graph, on the same BERT config, synthetic batches and optimizer flags.

    python -m devtools.bench_train --reference_dir=PATH/retired_benchmarks/bert [--shapes=...]
        [--sides=...] [--repeats=N] [--output=build/bench/train.md]

Each side runs in its own process (TF1 graph mode and TF2 never share one): `reference` (its
`model_fn_builder` in a `tf.compat.v1` Session), `ours` (`Trainer.train_steps`, repeatable as
the trainer runs on a CPU by default: oneDNN off, one op at a time), `ours+nondeterministic`
(oneDNN on, ops side by side, as with --nodeterministic), `ours+xla`, `ours+bf16` (mixed precision: not the
reference's arithmetic), `ours+packed` (sequences of the same kind packed into rows,
`packed_batches`) and `matmuls` (the step's matrix products alone: the bound any float32
trainer on this TensorFlow can reach). MFU is `step_flops` per
second over the machine's dense matmul peak of the side's compute type, measured by `run_peak`
before and after the sides. Eval time is extrapolated to the benchmark's 10,000 samples. The
README's "Tests and benchmarks" section has the measured tables.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

from benchmark.constants import EVAL_SAMPLES
from benchmark.errors import UserError, exit_on_user_error
from reference.bert_config import ConfigError, config_from_dict
from reference.optimizer_settings import DEFAULT_OPTIMIZER
from reference.presets import PRESET_DIR

DEFAULT_CONFIG = PRESET_DIR / "demo_bert_config.json"
WARMUP_STEPS = 2
SEED = 12345
REFERENCE_MODULES = ("modeling.py", "optimization.py", "lamb_optimizer_v1.py",
                     "run_pretraining.py")
# The MLCommons reference's own flag defaults (its run_pretraining.py / optimization.py), which
# are OptimizerSettings' defaults.
REFERENCE_OPTIMIZER = DEFAULT_OPTIMIZER

# BERT-base (Devlin et al. 2018): 12 x 768, 12 heads, feed-forward 3072, the uncased vocabulary.
BERT_BASE_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
    "type_vocab_size": 2, "vocab_size": 30522}
SIZE_FLAGS = ("batch_size", "seq_length", "max_predictions", "steps", "eval_examples",
              "eval_batch_size")
DEMO_SIZES = {"batch_size": 8, "seq_length": 128, "max_predictions": 20, "steps": 20,
              "eval_examples": 512}
# name -> (BERT config: a path, or None for --bert_config_file, or a dict; sizes)
SHAPES = {
    "demo": (DEFAULT_CONFIG, DEMO_SIZES),
    # What `make train` runs: the demo model on 512-token records with 76 predictions, at the
    # demo preset's batch (a step's optimizer update is shared by as many sequences as there).
    "demo-512": (DEFAULT_CONFIG, {"batch_size": 32, "seq_length": 512, "max_predictions": 76,
                                  "steps": 6, "eval_examples": 64, "eval_batch_size": 8}),
    "bert-base": (BERT_BASE_CONFIG, {**DEMO_SIZES, "steps": 3, "eval_examples": 32}),
    "custom": (None, DEMO_SIZES),
}
DEFAULT_SHAPES = "demo,bert-base,demo-512"
# Each side's compute type: its MFU is against the matmul peak of that type.
SIDE_DTYPES = {"reference": "float32", "ours": "float32", "ours+nondeterministic": "float32",
               "ours+xla": "float32",
               "ours+bf16": "bfloat16", "ours+packed": "float32", "matmuls": "float32"}
# ours+packed packs this many training batches' sequences (a pool like the data set's mix).
PACK_POOL_BATCHES = 32
SIDE_NAMES = tuple(SIDE_DTYPES)
# Dense matmul peak: per backend and dtype, warm-up calls, then timed calls until at least
# PEAK_MIN_CALLS and PEAK_SECONDS have passed (at most PEAK_MAX_CALLS); the best call counts.
PEAK_WARMUP_CALLS = 2
PEAK_MIN_CALLS = 3
PEAK_MAX_CALLS = 10
PEAK_SECONDS = 3.0
PEAK_DTYPES = ("float32", "bfloat16")
PEAK_BACKENDS = ("tf.function", "XLA")


class BenchError(UserError):
    """A problem with the bench's inputs; the message is one line."""


# ---------------------------------------------------------------------- FLOP count
def forward_products(config: Mapping, seq_length: int, max_predictions: int,
                     batch_size: int) -> dict[str, list[tuple[int, int, int, int]]]:
    """The matrix products of one forward pass over `batch_size` sequences, by part.

    Each product is (b, m, k, n): b independent [m, k] x [k, n] products (b = 1: one 2-D
    product), 2 * b * m * k * n FLOPs. Parts: "projections" (per layer query, key, value and
    attention output [B*S, H] x [H, H], feed-forward [B*S, H] x [H, I] and [B*S, I] x [I, H]),
    "attention" (per layer scores [S, h] x [h, S] and the weighted values [S, S] x [S, h] for each
    of B * heads), "masked_lm" (transform [B*P, H] x [H, H], output [B*P, H] x [H, V]) and
    "pooler_next_sentence" ([B, H] x [H, H] and [B, H] x [H, 2]).
    """
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    vocab, seq, preds, batch = config["vocab_size"], seq_length, max_predictions, batch_size
    rows, head_size = batch * seq, hidden // heads
    layer = [(1, rows, hidden, hidden)] * 4 + [(1, rows, hidden, inner), (1, rows, inner, hidden)]
    scores = [(batch * heads, seq, head_size, seq), (batch * heads, seq, seq, head_size)]
    return {
        "projections": layer * layers,
        "attention": scores * layers,
        "masked_lm": [(1, batch * preds, hidden, hidden), (1, batch * preds, hidden, vocab)],
        "pooler_next_sentence": [(1, batch, hidden, hidden), (1, batch, hidden, 2)],
    }


def flop_terms(config: Mapping, seq_length: int, max_predictions: int) -> dict[str, int]:
    """The forward-pass FLOPs of one sequence, by part (`forward_products`; see `step_flops`)."""
    return {part: sum(2 * b * m * k * n for b, m, k, n in products)
            for part, products in forward_products(config, seq_length, max_predictions,
                                                   1).items()}


def step_flops(config: Mapping, seq_length: int, max_predictions: int, batch_size: int,
               training: bool = True) -> int:
    """Model FLOPs of one training step (training=False: one forward pass, an eval batch).

    The standard transformer count: a multiply-add is 2 FLOPs, only matrix products count, and
    training is 3 forward passes (the backward pass computes two products per forward one).
    Per sequence of S tokens, with L layers, hidden size H, intermediate size I, vocabulary V
    and P predicted (masked) positions, the forward pass is

        L * 2 * S * (4 H^2 + 2 H I)     query, key, value and output projections; feed-forward
      + L * 2 * 2 * S^2 * H             attention scores (Q K^T) and the weighted sum of values
      + 2 * P * (H^2 + H V)             masked-LM head on the P positions: transform dense and
                                        the product with the (tied) output embedding
      + 2 * (H^2 + 2 H)                 pooler and next-sentence classifier

    times the batch size; a training step is 3 times that. Embedding look-ups (gathers),
    biases, activations, LayerNorm, softmax, dropout, the losses and the optimizer update are
    not counted: they are not matrix products (which is what the matmul peak measures), and
    they are what an efficient implementation should hide.

    Args:
      config: the BERT config (dict with num_hidden_layers, hidden_size, intermediate_size,
        vocab_size).
      seq_length, max_predictions, batch_size: S, P and the sequences per step.
      training: the training step's FLOPs (3x forward) or the forward pass's only.

    Returns:
      FLOPs per step, an int.
    """
    forward = sum(flop_terms(config, seq_length, max_predictions).values()) * batch_size
    return 3 * forward if training else forward


# ---------------------------------------------------------------------- synthetic data
def official_lengths(rng, count: int, seq_length: int):
    """`count` sequence lengths (numpy ints in [4, seq_length]) with about the padding of the
    official training records, half of all tokens: 15% full pairs (the last 6% of the row),
    75% pairs cut short by a document's end (4-74% of the row), 10% short targets."""
    import numpy as np
    kind = rng.uniform(size=count)
    full = rng.uniform(0.94, 1.0, size=count)
    cut = rng.uniform(0.04, 0.74, size=count)
    short = rng.uniform(0.01, 1.0, size=count)
    fraction = np.where(kind < 0.15, full, np.where(kind < 0.9, cut, short))
    return np.clip(np.round(fraction * seq_length).astype(np.int64), min(4, seq_length),
                   seq_length)


def synthetic_batches(count: int, batch_size: int, seq_length: int, max_predictions: int,
                      vocab_size: int, seed: int = SEED) -> list[dict]:
    """`count` batches of pre-training features of real shape (numpy; ints int32): lengths of
    the official mix (`official_lengths`), and as many masked positions per sequence as
    create_pretraining_data gives it (15% of its tokens, at most `max_predictions`; the other
    slots weigh 0)."""
    import numpy as np
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(count):
        ids = rng.randint(0, vocab_size, size=(batch_size, seq_length)).astype(np.int32)
        lengths = official_lengths(rng, batch_size, seq_length)
        mask = (np.arange(seq_length)[None, :] < lengths[:, None]).astype(np.int32)
        split = lengths // 2
        segments = ((np.arange(seq_length)[None, :] >= split[:, None]) & (mask == 1)
                    ).astype(np.int32)
        counts = np.minimum(np.maximum(np.round(0.15 * lengths), 1), max_predictions
                            ).astype(np.int64)
        positions = np.zeros((batch_size, max_predictions), np.int32)
        for row, (length, predicted) in enumerate(zip(lengths, counts)):
            positions[row, :predicted] = np.sort(rng.choice(np.arange(1, length), predicted,
                                                            replace=False))
        weights = (np.arange(max_predictions)[None, :] < counts[:, None]).astype(np.float32)
        batches.append({
            "input_ids": ids * mask,
            "input_mask": mask,
            "segment_ids": segments,
            "masked_lm_positions": positions,
            "masked_lm_ids": (rng.randint(0, vocab_size, size=(batch_size, max_predictions))
                              * weights).astype(np.int32),
            "masked_lm_weights": weights,
            "next_sentence_labels": rng.randint(0, 2, size=(batch_size, 1)).astype(np.int32),
        })
    return batches


def packed_batches(batches: list[dict], batch_size: int, seq_length: int) -> tuple[dict, int]:
    """The sequences of `batches` packed into rows (`cleanup_scripts.pack_pretraining_data`,
    up to 3 a row): ({feature: [rows, ...] numpy}, rows per step), a step taking
    round(batch_size / mean sequences per row) rows."""
    import numpy as np

    from cleanup_scripts.pack_pretraining_data import (PackOptions, row_columns, row_order,
                                                       sequences_from_columns)
    from cleanup_scripts.packing.plan import most_per_row
    from cleanup_scripts.records.pretraining_features import RecordLayout
    columns = {key: np.concatenate([batch[key] for batch in batches]) for key in batches[0]}
    data = sequences_from_columns(columns)
    options = PackOptions(seq_length, batches[0]["masked_lm_positions"].shape[1], 3, SEED)
    order = row_order(data, options, SEED)
    layout = RecordLayout(True, seq_length, most_per_row(order, data.prediction_counts), 3)
    rows = row_columns(data, order, 0, order.count, layout)
    rows = {key: value.astype(np.float32 if value.dtype.kind == "f" else np.int32)
            for key, value in rows.items()}
    return rows, max(1, round(batch_size * order.count / data.lengths.size))


def real_flops_per_sequence(spec: Mapping) -> float:
    """Model FLOPs of one training step per sequence counted on its real tokens and
    predictions (`flop_terms` at each training sequence's own length), averaged over the
    bench's training sequences."""
    import numpy as np
    batches = synthetic_batches(PACK_POOL_BATCHES, spec["batch_size"], spec["seq_length"],
                                spec["max_predictions"], spec["bert_config"]["vocab_size"],
                                SEED)
    lengths = np.concatenate([b["input_mask"].sum(axis=1) for b in batches])
    predictions = np.concatenate([b["masked_lm_weights"].sum(axis=1) for b in batches])
    return 3 * float(np.mean([sum(flop_terms(spec["bert_config"], int(length),
                                             int(count)).values())
                              for length, count in zip(lengths, predictions)]))


def eval_batches(spec: Mapping) -> int:
    """Eval batches timed: enough full batches to hold --eval_examples records."""
    return -(-spec["eval_examples"] // spec["eval_batch_size"])


def eval_records(spec: Mapping) -> int:
    """Records in the timed eval batches (eval_examples rounded up to whole batches)."""
    return eval_batches(spec) * spec["eval_batch_size"]


def _data(spec: Mapping, vocab_size: int, pool: int = 4) -> tuple[list[dict], list[dict]]:
    """The training and eval batches every side uses (training cycles through `pool`
    batches)."""
    train = synthetic_batches(pool, spec["batch_size"], spec["seq_length"],
                              spec["max_predictions"], vocab_size, SEED)
    evals = synthetic_batches(eval_batches(spec), spec["eval_batch_size"], spec["seq_length"],
                              spec["max_predictions"], vocab_size, SEED + 1)
    return train, evals


def native_bf16() -> bool | None:
    """Whether the CPU has bfloat16 matrix instructions (x86 avx512_bf16 or amx_bf16, Arm
    bf16), from /proc/cpuinfo; None where that cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"}) if flags else None


def peak_rss_kib() -> int:
    """This process's peak resident set size so far, KiB (Linux `ru_maxrss`)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# ---------------------------------------------------------------------- the workers
def run_peak(spec: Mapping) -> dict:
    """Dense matmul GFLOP/s of square n x n products, per dtype and backend (in this process).

    Returns {"matmul_size", "gflops": {dtype: {backend: {"best", "median", "calls"}}},
    "bf16_native" (`native_bf16`), "peak_rss_kib", "tensorflow"}; GFLOP/s = 2 n^3 / seconds
    of one call / 1e9, each call's product copied back to the host (`.numpy()`).
    """
    import numpy as np
    import tensorflow as tf

    n = int(spec["matmul_size"])
    rng = np.random.RandomState(SEED)
    inputs = [rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32) for _ in range(2)]
    gflops = {}
    for dtype in PEAK_DTYPES:
        a, b = (tf.cast(tf.constant(x), dtype) for x in inputs)
        gflops[dtype] = {}
        for backend in PEAK_BACKENDS:
            matmul = tf.function(lambda x, y: tf.matmul(x, y),
                                 jit_compile=backend == "XLA")
            for _ in range(PEAK_WARMUP_CALLS):
                matmul(a, b).numpy()
            times = []
            started = time.perf_counter()
            while len(times) < PEAK_MAX_CALLS and (
                    len(times) < PEAK_MIN_CALLS or time.perf_counter() - started < PEAK_SECONDS):
                call = time.perf_counter()
                matmul(a, b).numpy()
                times.append(time.perf_counter() - call)
            gflops[dtype][backend] = {"best": 2 * n ** 3 / min(times) / 1e9,
                                      "median": 2 * n ** 3 / statistics.median(times) / 1e9,
                                      "calls": len(times)}
    return {"matmul_size": n, "gflops": gflops, "bf16_native": native_bf16(),
            "peak_rss_kib": peak_rss_kib(), "tensorflow": tf.__version__}


def _products_function(products: list[tuple[int, int, int, int]], backward: bool, seed: int):
    """A `tf.function` running `products` back to back (with `backward`, each product's two
    gradient products too: dA = dC B^T and dB = A^T dC) on float32 variables: every right-hand
    operand a variable of its own, as the model's weights are; the left-hand operands and the
    upstream gradients shared by shape. It returns one number per product, so none is pruned."""
    import tensorflow as tf

    rng = tf.random.Generator.from_seed(seed)
    shared = {}

    def variable(shape):
        return tf.Variable(rng.uniform(shape, -1.0, 1.0))

    def operand(shape):
        if shape not in shared:
            shared[shape] = variable(shape)
        return shared[shape]

    operands = []
    for b, m, k, n in products:
        lead = (b,) if b > 1 else ()  # b = 1: a 2-D product
        operands.append((operand(lead + (m, k)), variable(lead + (k, n)),
                         operand(lead + (m, n)) if backward else None))

    @tf.function
    def run():
        corners = []
        for a, w, upstream in operands:
            outputs = [tf.matmul(a, w)]
            if backward:
                outputs += [tf.matmul(upstream, w, transpose_b=True),
                            tf.matmul(a, upstream, transpose_a=True)]
            corners += [tf.reshape(output, [-1])[0] for output in outputs]
        return tf.add_n(corners)

    return run


def run_matmuls(spec: Mapping) -> dict:
    """The step's matrix products alone, timed as `run_ours` times the step: `WARMUP_STEPS`
    untimed calls, then `spec["steps"]` timed training steps (each forward product of
    `forward_products` and its two backward products) and the eval batches' forward products
    (after one warm-up batch). No implementation of the step computes fewer products, so these
    times bound every side's that uses the same matrix products on this machine."""
    import tensorflow as tf

    cfg, seq, preds = spec["bert_config"], spec["seq_length"], spec["max_predictions"]

    def products(batch_size):
        return [product for part in forward_products(cfg, seq, preds, batch_size).values()
                for product in part]

    train = _products_function(products(spec["batch_size"]), backward=True, seed=SEED)
    started = time.perf_counter()
    for _ in range(WARMUP_STEPS):
        train().numpy()
    warmup_s = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(spec["steps"]):
        train().numpy()
    train_s, train_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    evaluate = _products_function(products(spec["eval_batch_size"]), backward=False, seed=SEED)
    evaluate().numpy()
    started = time.perf_counter()
    for _ in range(eval_batches(spec)):
        evaluate().numpy()
    eval_s = time.perf_counter() - started
    return {"train_s": train_s, "eval_s": eval_s, "warmup_s": warmup_s,
            "train_cpu_s": train_cpu_s, "peak_rss_kib": peak_rss_kib(),
            "tensorflow": tf.__version__}


def run_ours(spec: Mapping) -> dict:
    """Our TF2 trainer (`spec["use_xla"]`: with XLA; `spec["mixed_precision"]`: "bf16" or
    "none"; `spec["packed"]`: on packed rows; `spec["deterministic"]`, default True: oneDNN
    off and one op at a time, as the trainer's --deterministic): timed train steps and eval,
    in this process."""
    from reference import repeatable
    if spec.get("deterministic", True):
        repeatable.without_onednn()  # before TensorFlow is imported (this side's process)
    import numpy as np
    import tensorflow as tf

    from reference.bert_config import load_bert_config
    from reference.input_pipeline import EXAMPLE_WEIGHT
    from reference.trainer import Trainer, set_mixed_precision

    if spec.get("deterministic", True):
        repeatable.one_op_at_a_time()
    config = load_bert_config(spec["bert_config_file"])
    packed = bool(spec.get("packed"))
    train, evals = _data(spec, config.vocab_size, PACK_POOL_BATCHES if packed else 4)
    tf.random.set_seed(SEED)
    mixed_precision = spec.get("mixed_precision", "none")
    set_mixed_precision(mixed_precision)
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(strategy, config, REFERENCE_OPTIMIZER, spec["batch_size"],
                      use_xla=bool(spec.get("use_xla")), mixed_precision=mixed_precision,
                      packed=packed)
    trainer.initialize_weights(SEED)

    if packed:  # the pool's sequences in rows, a step taking about batch_size sequences
        rows, per_step = packed_batches(train, spec["batch_size"], spec["seq_length"])
        dataset = tf.data.Dataset.from_tensor_slices(rows).repeat().batch(per_step)
    else:
        dataset = tf.data.Dataset.from_tensor_slices(
            {k: tf.constant([b[k] for b in train]) for k in train[0]}).repeat()
    iterator = iter(strategy.distribute_datasets_from_function(
        lambda _: dataset.prefetch(2)))
    started = time.perf_counter()
    trainer.train_steps(iterator, WARMUP_STEPS)
    warmup_s = time.perf_counter() - started
    started, cpu, samples = time.perf_counter(), time.process_time(), trainer.samples
    losses = trainer.train_steps(iterator, spec["steps"])
    train_s, train_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    train_sequences = trainer.samples - samples

    def eval_data(batches):
        if packed:  # the rows, padded with blank rows (weight 0) to whole batches
            rows, _ = packed_batches(batches, spec["eval_batch_size"], spec["seq_length"])
            count, size = len(rows["input_ids"]), spec["eval_batch_size"]
            steps = -(-count // size)
            stacked = {k: np.concatenate([v, np.zeros((steps * size - count,) + v.shape[1:],
                                                      v.dtype)]) for k, v in rows.items()}
            stacked[EXAMPLE_WEIGHT] = (np.arange(steps * size) < count).astype(np.float32)
            dataset = tf.data.Dataset.from_tensor_slices(stacked).batch(size)
        else:
            stacked = {k: tf.constant([b[k] for b in batches]) for k in batches[0]}
            stacked[EXAMPLE_WEIGHT] = tf.ones(stacked["input_ids"].shape[:2])
            dataset, steps = tf.data.Dataset.from_tensor_slices(stacked), len(batches)
        return strategy.distribute_datasets_from_function(
            lambda _: dataset.prefetch(2)), steps

    data, steps = eval_data(evals)
    trainer.evaluate(data, 1)  # warm-up: tracing
    started = time.perf_counter()
    metrics = trainer.evaluate(data, steps)
    eval_s = time.perf_counter() - started
    return {"train_s": train_s, "eval_s": eval_s, "warmup_s": warmup_s,
            "train_cpu_s": train_cpu_s, "loss": losses["total_loss"],
            "train_sequences": train_sequences,
            "masked_lm_accuracy": metrics["masked_lm_accuracy"],
            "peak_rss_kib": peak_rss_kib(), "tensorflow": tf.__version__}


def run_ours_nondeterministic(spec: Mapping) -> dict:
    """`run_ours` with oneDNN on and TensorFlow's ops side by side (--nodeterministic)."""
    return run_ours({**spec, "deterministic": False})


def run_ours_xla(spec: Mapping) -> dict:
    """`run_ours` with XLA."""
    return run_ours({**spec, "use_xla": True})


def run_ours_bf16(spec: Mapping) -> dict:
    """`run_ours` in bfloat16 mixed precision."""
    return run_ours({**spec, "mixed_precision": "bf16"})


def run_ours_packed(spec: Mapping) -> dict:
    """`run_ours` on packed rows of the same kind of sequences (`packed_batches`)."""
    return run_ours({**spec, "packed": True})


def run_reference(spec: Mapping) -> dict:
    """The reference TF1 graph in a compat.v1 Session (in this process; call it first)."""
    import types

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    sys.path.insert(0, spec["reference_dir"])
    import tensorflow.compat.v1 as tf  # the reference's modules import it so themselves
    # deferred_grad_optimizer imports an XLA sharding helper TF 2.20 no longer ships (it is
    # only used for TPU model parallelism): give it an empty module.
    parent = "tensorflow.compiler.xla.experimental"
    for name in (parent, parent + ".xla_sharding", parent + ".xla_sharding.xla_sharding"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[parent + ".xla_sharding"].xla_sharding = \
        sys.modules[parent + ".xla_sharding.xla_sharding"]
    import absl.flags
    import modeling  # noqa: F401  (the reference's, from reference_dir)
    import run_pretraining

    tf.disable_eager_execution()
    absl.flags.FLAGS(["reference"])  # the reference's flag defaults (LAMB betas, epsilon...)

    class ModeKeys:  # tf.estimator is gone; model_fn only needs these names
        TRAIN = "train"
        EVAL = "eval"

    tf.estimator = types.SimpleNamespace(ModeKeys=ModeKeys, EstimatorSpec=lambda **kw: kw)
    config = modeling.BertConfig.from_json_file(spec["bert_config_file"])
    train, evals = _data(spec, config.vocab_size)
    model_fn = run_pretraining.model_fn_builder(
        bert_config=config, init_checkpoint=None,
        learning_rate=REFERENCE_OPTIMIZER.learning_rate,
        num_train_steps=REFERENCE_OPTIMIZER.num_train_steps,
        num_warmup_steps=REFERENCE_OPTIMIZER.num_warmup_steps, use_tpu=False,
        use_one_hot_embeddings=False, optimizer=REFERENCE_OPTIMIZER.name,
        poly_power=REFERENCE_OPTIMIZER.poly_power,
        start_warmup_step=REFERENCE_OPTIMIZER.start_warmup_step)

    def placeholders(batch):
        return {k: tf.placeholder(tf.float32 if v.dtype.kind == "f" else tf.int32, v.shape,
                                  name=k) for k, v in batch.items()}

    with tf.Graph().as_default():
        tf.set_random_seed(SEED)
        features = placeholders(train[0])
        spec_out = model_fn(features, None, ModeKeys.TRAIN, {})
        fetches = [spec_out["loss"], spec_out["train_op"]]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            started = time.perf_counter()
            for step in range(WARMUP_STEPS):
                sess.run(fetches, {features[k]: v for k, v in train[step % 4].items()})
            warmup_s = time.perf_counter() - started
            started, cpu = time.perf_counter(), time.process_time()
            for step in range(WARMUP_STEPS, WARMUP_STEPS + spec["steps"]):
                loss, _ = sess.run(fetches, {features[k]: v for k, v in train[step % 4].items()})
            train_s, train_cpu_s = time.perf_counter() - started, time.process_time() - cpu

    with tf.Graph().as_default():
        tf.set_random_seed(SEED)
        features = placeholders(evals[0])
        metric_ops = model_fn(features, None, ModeKeys.EVAL, {})["eval_metric_ops"]
        updates = {k: v[1] for k, v in metric_ops.items()}
        values = {k: v[0] for k, v in metric_ops.items()}
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(tf.local_variables_initializer())
            sess.run(updates, {features[k]: v for k, v in evals[0].items()})  # warm-up
            sess.run(tf.local_variables_initializer())
            started = time.perf_counter()
            for batch in evals:
                sess.run(updates, {features[k]: v for k, v in batch.items()})
            metrics = sess.run(values)
            eval_s = time.perf_counter() - started
    return {"train_s": train_s, "eval_s": eval_s, "warmup_s": warmup_s,
            "train_cpu_s": train_cpu_s, "loss": float(loss),
            "masked_lm_accuracy": float(metrics["masked_lm_accuracy"]),
            "peak_rss_kib": peak_rss_kib(), "tensorflow": tf.VERSION}


WORKERS = {"peak": run_peak, "reference": run_reference, "ours": run_ours,
           "ours+nondeterministic": run_ours_nondeterministic, "ours+xla": run_ours_xla,
           "ours+bf16": run_ours_bf16, "ours+packed": run_ours_packed, "matmuls": run_matmuls}


def run_side(side: str, spec: Mapping) -> dict:
    """Run one worker ("peak" or a side) in a fresh Python process; its result dict (BenchError
    if it fails). A spec's "bert_config" is written to a file the worker reads."""
    with tempfile.TemporaryDirectory() as work:
        spec = dict(spec)
        if "bert_config" in spec:
            config_path = Path(work) / "bert_config.json"
            config_path.write_text(json.dumps(spec["bert_config"]))
            spec["bert_config_file"] = str(config_path)
        spec_path = Path(work) / "spec.json"
        result_path = Path(work) / "result.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        if side == "reference":
            env["TF_USE_LEGACY_KERAS"] = "1"
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        process = subprocess.run(
            [sys.executable, "-m", "devtools.bench_train", "--worker", side, "--spec",
             str(spec_path), "--result", str(result_path)], cwd=root, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if process.returncode != 0 or not result_path.exists():
            tail = process.stdout.strip().splitlines()[-1:] or ["(no output)"]
            raise BenchError(f"the {side} side failed (exit {process.returncode}): {tail[0]}")
        return json.loads(result_path.read_text())


# ---------------------------------------------------------------------- results
def machine() -> str:
    """CPU model and core count, e.g. 'Intel Xeon ... (2 cores)'."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores), {platform.system()} {platform.release()}"


def median_result(results: list[dict]) -> dict:
    """The first result with its times replaced by their medians over `results` and its peak
    RSS by the largest."""
    times = {key: statistics.median(r[key] for r in results)
             for key in ("train_s", "eval_s", "warmup_s", "train_cpu_s") if key in results[0]}
    rss = {"peak_rss_kib": max(r["peak_rss_kib"] for r in results)} \
        if "peak_rss_kib" in results[0] else {}
    return {**results[0], "runs": len(results), **times, **rss}


def best_peak(runs: list[dict]) -> dict:
    """The peak over several `run_peak` results: per dtype and backend the best call of any
    run; per dtype the best backend ("gflops", "backend")."""
    peak = {"matmul_size": runs[0]["matmul_size"], "runs": len(runs),
            "bf16_native": runs[0].get("bf16_native")}
    for dtype in PEAK_DTYPES:
        backends = {backend: max(r["gflops"][dtype][backend]["best"] for r in runs)
                    for backend in runs[0]["gflops"][dtype]}
        best = max(backends, key=backends.get)
        peak[dtype] = {"gflops": backends[best], "backend": best, "backends": backends}
    return peak


def summarize(result: Mapping, spec: Mapping, peak_gflops: float,
              real_flops: float | None = None) -> dict:
    """Steps/s, sequences/s and MFU of training (also on real tokens, given `real_flops`, the
    training FLOPs per sequence counted on its real tokens); seconds and MFU of the eval.
    A packed side's sequences are those it trained (`train_sequences`), not steps x batch."""
    cfg = spec["bert_config"]
    steps_per_s = spec["steps"] / result["train_s"]
    records = eval_records(spec)
    eval_flops = step_flops(cfg, spec["seq_length"], spec["max_predictions"],
                            records, training=False)
    seq_per_s = result.get("train_sequences", spec["steps"] * spec["batch_size"]) / \
        result["train_s"]
    return {
        "train_steps_per_s": steps_per_s,
        "train_seq_per_s": seq_per_s,
        "train_mfu": step_flops(cfg, spec["seq_length"], spec["max_predictions"],
                                1) * seq_per_s / (peak_gflops * 1e9),
        "train_real_mfu": (real_flops or 0.0) * seq_per_s / (peak_gflops * 1e9),
        "eval_s": result["eval_s"],
        "eval_10k_s": result["eval_s"] * EVAL_SAMPLES / records,
        "eval_mfu": eval_flops / result["eval_s"] / (peak_gflops * 1e9),
    }


# ---------------------------------------------------------------------- report
def _shown(path: str) -> str:
    """`path` relative to the working directory when it lies under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def format_memory(kib: float) -> str:
    """A KiB count as MiB (below 1 GiB) or GiB."""
    mib = kib / 1024
    return f"{mib:,.0f} MiB" if mib < 1024 else f"{mib / 1024:.2f} GiB"


def _speedup(ours: float, reference: float | None) -> str:
    return f"{ours / reference:.2f}x" if reference else "-"


def format_peak(peak: Mapping) -> list[str]:
    """The report's lines on the matmul peak."""
    fp32, bf16 = peak["float32"], peak["bfloat16"]
    notes = []
    if bf16["gflops"] < fp32["gflops"]:
        notes.append("slower than float32")
    if peak.get("bf16_native") is False:
        notes.append("this CPU has no bfloat16 matrix instructions (no avx512_bf16, amx_bf16 "
                     "or bf16 flag)")
    note = f" ({'; '.join(notes)})" if notes else ""

    def each(entry):
        return ", ".join(f"{backend} {value:.1f}" for backend, value in entry["backends"].items())

    return [
        f"- dense matmul peak, the MFU denominator: float32 {fp32['gflops']:.1f} GFLOP/s; "
        f"bfloat16 {bf16['gflops']:.1f} GFLOP/s{note}",
        f"  - {peak['matmul_size']} x {peak['matmul_size']} products (2 n^3 FLOPs each), the "
        f"best call of {peak['runs']} measurement(s) (before and after the sides) per backend: "
        f"float32 {each(fp32)}; bfloat16 {each(bf16)}. ours+bf16 computes in bfloat16 and is "
        "measured against the bfloat16 peak, the other sides against the float32 peak",
    ]


def format_shape(spec: Mapping, results: Mapping[str, dict], peak: Mapping) -> list[str]:
    """One shape's section: its sizes and FLOPs, then a row per side (`peak`: `best_peak`)."""
    cfg = spec["bert_config"]
    flops = step_flops(cfg, spec["seq_length"], spec["max_predictions"], spec["batch_size"])
    fwd = step_flops(cfg, spec["seq_length"], spec["max_predictions"], 1, training=False)
    runs = next(iter(results.values())).get("runs", 1)
    lines = [
        f"## {spec['name']}",
        "",
        f"- model: {spec['source']} (layers {cfg['num_hidden_layers']}, hidden "
        f"{cfg['hidden_size']}, heads {cfg['num_attention_heads']}, intermediate "
        f"{cfg['intermediate_size']}, vocab {cfg['vocab_size']}, dropout "
        f"{cfg['hidden_dropout_prob']:g}/{cfg['attention_probs_dropout_prob']:g})",
        f"- batch {spec['batch_size']}, sequence {spec['seq_length']}, "
        f"{spec['max_predictions']} predictions; {flops / 1e9:,.1f} GFLOP per training step, "
        f"{fwd / 1e9:,.2f} GFLOP per eval sequence (`step_flops`)",
        f"- training: {spec['steps']} timed steps after {WARMUP_STEPS} warm-up steps; eval: "
        f"{eval_records(spec)} records in batches of {spec['eval_batch_size']} after one warm-up "
        f"batch, extrapolated to {EVAL_SAMPLES:,} samples; {runs} run(s) per side, medians",
        "",
        "| side | train steps/s | train seq/s | train speed-up | train MFU | real-token MFU | "
        f"eval s per {EVAL_SAMPLES // 1000}k | eval speed-up | eval MFU | warm-up s | "
        "train cores | peak RSS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    real_flops = real_flops_per_sequence(spec)
    summaries = {side: summarize(result, spec, peak[SIDE_DTYPES[side]]["gflops"], real_flops)
                 for side, result in results.items()}
    ref = summaries.get("reference")
    for side, s in summaries.items():
        result = results[side]
        cores = (f"{result['train_cpu_s'] / result['train_s']:.2f}" if "train_cpu_s" in result
                 else "-")
        train_ratio = _speedup(s["train_seq_per_s"], ref and ref["train_seq_per_s"])
        eval_ratio = _speedup(1 / s["eval_10k_s"], ref and 1 / ref["eval_10k_s"])
        lines.append(
            f"| {side} | {s['train_steps_per_s']:.3g} | {s['train_seq_per_s']:.3g} | "
            f"{train_ratio} | {s['train_mfu']:.1%} | {s['train_real_mfu']:.1%} | "
            f"{s['eval_10k_s']:,.1f} | {eval_ratio} | "
            f"{s['eval_mfu']:.1%} | {result.get('warmup_s', float('nan')):.1f} | {cores} | "
            f"{format_memory(result['peak_rss_kib'])} |")
    lines.append("")
    return lines


def format_report(shapes: list[dict], results: Mapping[str, Mapping[str, dict]], peak: Mapping,
                  when: str, load: tuple[float, float] | None = None,
                  wall_s: float | None = None) -> str:
    """The markdown report: machine and peak, then one table per shape (rows: sides)."""
    tensorflow = next(iter(next(iter(results.values())).values()))["tensorflow"]
    lines = [
        "# Training bench: ours vs the reference TF1 graph",
        "",
        f"- date: {when}",
        f"- machine: {machine()}; TensorFlow {tensorflow}, Python "
        f"{platform.python_version()}",
    ]
    if load:
        lines.append(f"- load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}")
    if wall_s is not None:
        lines.append(f"- bench wall time: {wall_s / 60:.1f} min")
    lines += format_peak(peak)
    lines += [
        "- all sides: float32 (ours+bf16: bfloat16 mixed precision, not the reference's "
        "arithmetic), LAMB with the reference's default flags, synthetic batches "
        f"(seed {SEED}), each side in its own process; speed-ups are reference time / our time; "
        "MFU = `step_flops` per second / the peak of the side's compute type; matmuls: the "
        "step's matrix products alone, a bound on every side; warm-up s: the 2 untimed steps "
        "(tracing, compilation); train cores: CPU seconds per second of the side's process "
        f"during the timed steps (below {os.cpu_count()}: threads idle or, on a shared "
        "machine, CPU taken by other processes); peak RSS: the side's process",
        "",
    ]
    for spec in shapes:
        lines += format_shape(spec, results[spec["name"]], peak)
    return "\n".join(lines)


# ---------------------------------------------------------------------- command line
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Training speed, eval time, MFU and peak RSS: ours vs the reference TF1 "
                    "graph.")
    parser.add_argument("--reference_dir", default=None,
                        help="the reference's retired_benchmarks/bert folder")
    parser.add_argument("--shapes", default=None,
                        help=f"comma list of {', '.join(SHAPES)} (default: {DEFAULT_SHAPES}, or "
                             "custom when --bert_config_file is given)")
    parser.add_argument("--bert_config_file", default=None,
                        help="the BERT config of the custom shape")
    parser.add_argument("--sides", default=",".join(SIDE_NAMES),
                        help=f"comma list of {', '.join(SIDE_NAMES)}")
    for name in SIZE_FLAGS:
        parser.add_argument(f"--{name}", type=int, default=None,
                            help="replaces this size in every shape")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each side (alternating); medians are reported")
    parser.add_argument("--matmul_size", type=int, default=2048,
                        help="n of the n x n products that measure the matmul peak")
    parser.add_argument("--output", default="build/bench/train.md")
    parser.add_argument("--ours_only", action="store_true",
                        help="measure only our sides (no --reference_dir, no speed-ups)")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _comma_list(text: str, known, flag: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise BenchError(f"--{flag}={text}: expected a comma list of {', '.join(known)}")
    return list(dict.fromkeys(names))


def _read_config(path: str) -> dict:
    try:
        values = json.loads(Path(path).read_text())
        int(values["vocab_size"]), int(values["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BenchError(f"--bert_config_file={path}: cannot read a BERT config "
                         f"({type(err).__name__}: {err})".splitlines()[0]) from None
    return values


def make_plan(args: argparse.Namespace) -> dict:
    """Validate the arguments; {"shapes": [spec per shape], "sides": [...], "matmul_size"}
    (BenchError if invalid). A shape's spec is what its side workers read."""
    for name in SIZE_FLAGS:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise BenchError(f"--{name} must be at least 1")
    if args.repeats < 1:
        raise BenchError("--repeats must be at least 1")
    if args.matmul_size < 64:
        raise BenchError("--matmul_size must be at least 64")
    names = _comma_list(args.shapes or ("custom" if args.bert_config_file else DEFAULT_SHAPES),
                        SHAPES, "shapes")
    if "custom" in names and not args.bert_config_file:
        raise BenchError("--shapes=custom needs --bert_config_file")
    if args.bert_config_file and "custom" not in names:
        raise BenchError("--bert_config_file is the custom shape's config: add custom to "
                         "--shapes")
    sides = _comma_list(args.sides, SIDE_NAMES, "sides")
    if args.ours_only:
        sides = [side for side in sides if side != "reference"]
        if not sides:
            raise BenchError("--ours_only leaves no side to run (see --sides)")
    reference_dir = None
    if "reference" in sides:
        if not args.reference_dir:
            raise BenchError("--reference_dir is required: the reference's "
                             "retired_benchmarks/bert folder (or --ours_only)")
        folder = Path(args.reference_dir)
        missing = [name for name in REFERENCE_MODULES if not (folder / name).is_file()]
        if missing:
            raise BenchError(f"--reference_dir={args.reference_dir}: not the reference's "
                             f"BERT folder (no {', '.join(missing)})")
        reference_dir = str(folder.resolve())

    shapes = []
    for name in names:
        config, sizes = SHAPES[name]
        if isinstance(config, dict):
            values, source = dict(config), "built in"
        else:
            path = str(config or args.bert_config_file)
            values, source = _read_config(path), _shown(str(Path(path).resolve()))
        try:
            config_from_dict(values, source=source)
        except ConfigError as err:
            raise BenchError(f"{name} shape: {err}") from None
        spec = {"name": name, "source": source, "bert_config": values,
                "reference_dir": reference_dir, **sizes}
        for flag in SIZE_FLAGS:
            if getattr(args, flag) is not None:
                spec[flag] = getattr(args, flag)
        spec.setdefault("eval_batch_size", spec["batch_size"])
        if spec["seq_length"] > values["max_position_embeddings"]:
            raise BenchError(f"{name} shape: --seq_length={spec['seq_length']} exceeds "
                             f"max_position_embeddings {values['max_position_embeddings']}")
        if spec["max_predictions"] >= spec["seq_length"] // 2:
            raise BenchError(f"{name} shape: --max_predictions={spec['max_predictions']} must "
                             f"be below half of --seq_length={spec['seq_length']}")
        shapes.append(spec)
    return {"shapes": shapes, "sides": sides, "matmul_size": args.matmul_size}


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> str:
    """Run the bench; prints the markdown report, writes it to --output and returns it."""
    args = parse_args(argv)
    if args.worker:
        spec = json.loads(Path(args.spec).read_text())
        Path(args.result).write_text(json.dumps(WORKERS[args.worker](spec)))
        return ""
    plan = make_plan(args)
    started = time.perf_counter()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_before = os.getloadavg()[0]
    peak_spec = {"matmul_size": plan["matmul_size"]}
    _progress("measuring the matmul peak (1/2) ...")
    peaks = [run_side("peak", peak_spec)]
    results = {}
    for spec in plan["shapes"]:
        runs = {side: [] for side in plan["sides"]}
        for repeat in range(args.repeats):
            for side in plan["sides"]:  # alternating, so a change of load hits every side
                _progress(f"timing {spec['name']}: {side} ({repeat + 1}/{args.repeats}) ...")
                runs[side].append(run_side(side, spec))
        results[spec["name"]] = {side: median_result(r) for side, r in runs.items()}
    _progress("measuring the matmul peak (2/2) ...")
    peaks.append(run_side("peak", peak_spec))
    report = format_report(plan["shapes"], results, best_peak(peaks), when,
                           (load_before, os.getloadavg()[0]), time.perf_counter() - started)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(report)
    return report


if __name__ == "__main__":
    exit_on_user_error(main)
