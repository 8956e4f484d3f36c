"""`make bench-train`: training speed and eval time, ours against the MLCommons reference's TF1
graph.

    python -m reference.bench --reference_dir=PATH/retired_benchmarks/bert \\
        [--bert_config_file=reference/presets/demo_bert_config.json] [--batch_size=8] \\
        [--seq_length=128] [--max_predictions=20] [--steps=20] [--eval_examples=512] \\
        [--eval_batch_size=8] [--repeats=1] [--output=build/bench/train.md]

Both sides get the same BERT config, the same synthetic batches (random ids within the
vocabulary from a fixed seed, real shapes) and the MLCommons reference's default optimizer
flags, which are `OptimizerSettings()` (LAMB, learning rate 5e-5, 100,000 steps, 10,000 warm-up
steps, beta 0.9/0.999, weight decay 0.01, log epsilon -6, one micro-batch per update). Each
side runs in its own process, so TF1 graph mode and TF2 never share one:

- reference (the MLCommons reference): `modeling.BertModel` with the heads of its
  `run_pretraining.py` (`get_masked_lm_output`, `get_next_sentence_output`) and
  `optimization.create_optimizer`, built by its own `model_fn_builder` in a `tf.compat.v1`
  Session; the eval runs the update ops of its `metric_fn` (loss and accuracy metrics) batch by
  batch, then reads them.
- ours: `reference.trainer.Trainer` (the compiled `train_steps` and `evaluate` that
  `run_pretraining` uses), on the default strategy.

Training: 2 warm-up steps (graph building / tracing), then `--steps` timed steps; reported as
sequences per second. The reference runs one `session.run` per step, the batch fed through
placeholders; ours runs them in one `train_steps` call (the trainer's iterations_per_loop
loop) from a tf.data pipeline over the same batches.

Eval: one warm-up batch, then `--eval_examples` records timed; the time is extrapolated
linearly to the benchmark's 10,000 eval samples. Ratios are ours/reference (above 1 for
sequences/s, below 1 for seconds, means ours is faster). With `--repeats=N` the sides alternate
N times and the median times are reported, which steadies figures taken on a loaded machine.

The MLCommons reference is not part of this project: pass the folder of a checkout of the MLCommons
training repository (`retired_benchmarks/bert`). Its modules are imported from there at run
time (they use `tensorflow.compat.v1`), with `TF_USE_LEGACY_KERAS=1`.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmark.constants import EVAL_SAMPLES
from benchmark.errors import UserError, exit_on_user_error
from reference.optimizer_settings import DEFAULT_OPTIMIZER

DEFAULT_CONFIG = Path(__file__).resolve().parent / "presets" / "demo_bert_config.json"
WARMUP_STEPS = 2
SEED = 12345
REFERENCE_MODULES = ("modeling.py", "optimization.py", "lamb_optimizer_v1.py",
                     "run_pretraining.py")
# The MLCommons reference's own flag defaults (its run_pretraining.py / optimization.py), which
# are OptimizerSettings' defaults.
REFERENCE_OPTIMIZER = DEFAULT_OPTIMIZER


class BenchError(UserError):
    """A problem with the bench's inputs; the message is one line."""


# ---------------------------------------------------------------------- synthetic data
def synthetic_batches(count: int, batch_size: int, seq_length: int, max_predictions: int,
                      vocab_size: int, seed: int = SEED) -> list[dict]:
    """`count` batches of pre-training features of real shape (numpy; ints int32)."""
    import numpy as np
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(count):
        ids = rng.randint(0, vocab_size, size=(batch_size, seq_length)).astype(np.int32)
        lengths = rng.randint(seq_length // 2, seq_length + 1, size=batch_size)
        mask = (np.arange(seq_length)[None, :] < lengths[:, None]).astype(np.int32)
        split = lengths // 2
        segments = ((np.arange(seq_length)[None, :] >= split[:, None]) & (mask == 1)
                    ).astype(np.int32)
        positions = np.stack([np.sort(rng.choice(np.arange(1, n), max_predictions,
                                                 replace=False)) for n in lengths])
        batches.append({
            "input_ids": ids * mask,
            "input_mask": mask,
            "segment_ids": segments,
            "masked_lm_positions": positions.astype(np.int32),
            "masked_lm_ids": rng.randint(0, vocab_size, size=(batch_size, max_predictions)
                                         ).astype(np.int32),
            "masked_lm_weights": np.ones((batch_size, max_predictions), np.float32),
            "next_sentence_labels": rng.randint(0, 2, size=(batch_size, 1)).astype(np.int32),
        })
    return batches


def _batch_counts(spec: dict) -> tuple[int, int]:
    eval_batches = -(-spec["eval_examples"] // spec["eval_batch_size"])
    return WARMUP_STEPS + spec["steps"], eval_batches


def _data(spec: dict, vocab_size: int) -> tuple[list[dict], list[dict]]:
    """The training and eval batches both sides use (training cycles through 4 batches)."""
    _, eval_batches = _batch_counts(spec)
    train = synthetic_batches(4, spec["batch_size"], spec["seq_length"],
                              spec["max_predictions"], vocab_size, SEED)
    evals = synthetic_batches(eval_batches, spec["eval_batch_size"], spec["seq_length"],
                              spec["max_predictions"], vocab_size, SEED + 1)
    return train, evals


# ---------------------------------------------------------------------- the two sides
def run_ours(spec: dict) -> dict:
    """Our TF2 trainer: timed train steps and eval (in this process)."""
    import tensorflow as tf

    from reference.bert_config import load_bert_config
    from reference.input_pipeline import EXAMPLE_WEIGHT
    from reference.trainer import Trainer

    config = load_bert_config(spec["bert_config_file"])
    train, evals = _data(spec, config.vocab_size)
    tf.random.set_seed(SEED)
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(strategy, config, REFERENCE_OPTIMIZER, spec["batch_size"])
    trainer.initialize_weights(SEED)

    stacked = {k: tf.constant([b[k] for b in train]) for k in train[0]}
    train_data = strategy.distribute_datasets_from_function(
        lambda _: tf.data.Dataset.from_tensor_slices(stacked).repeat().prefetch(2))
    iterator = iter(train_data)
    trainer.train_steps(iterator, WARMUP_STEPS)
    started = time.perf_counter()
    losses = trainer.train_steps(iterator, spec["steps"])
    train_s = time.perf_counter() - started

    def eval_data(batches):
        stacked = {k: tf.constant([b[k] for b in batches]) for k in batches[0]}
        stacked[EXAMPLE_WEIGHT] = tf.ones(stacked["input_ids"].shape[:2])
        return strategy.distribute_datasets_from_function(
            lambda _: tf.data.Dataset.from_tensor_slices(stacked).prefetch(2))

    trainer.evaluate(eval_data(evals[:1]), 1)  # warm-up: tracing
    data = eval_data(evals)
    started = time.perf_counter()
    metrics = trainer.evaluate(data, len(evals))
    eval_s = time.perf_counter() - started
    return {"train_s": train_s, "eval_s": eval_s, "loss": losses["total_loss"],
            "masked_lm_accuracy": metrics["masked_lm_accuracy"], "tensorflow": tf.__version__}


def run_reference(spec: dict) -> dict:
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
            for step in range(WARMUP_STEPS):
                sess.run(fetches, {features[k]: v for k, v in train[step % 4].items()})
            started = time.perf_counter()
            for step in range(WARMUP_STEPS, WARMUP_STEPS + spec["steps"]):
                loss, _ = sess.run(fetches, {features[k]: v for k, v in train[step % 4].items()})
            train_s = time.perf_counter() - started

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
    return {"train_s": train_s, "eval_s": eval_s, "loss": float(loss),
            "masked_lm_accuracy": float(metrics["masked_lm_accuracy"]),
            "tensorflow": tf.VERSION}


SIDES = {"ours": run_ours, "reference": run_reference}


def run_side(side: str, spec: dict) -> dict:
    """Run one side in a fresh Python process; its result dict (BenchError if it fails)."""
    with tempfile.TemporaryDirectory() as work:
        spec_path = Path(work) / "spec.json"
        result_path = Path(work) / "result.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        if side == "reference":
            env["TF_USE_LEGACY_KERAS"] = "1"
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        process = subprocess.run(
            [sys.executable, "-m", "reference.bench", "--worker", side, "--spec", str(spec_path),
             "--result", str(result_path)], cwd=root, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        if process.returncode != 0 or not result_path.exists():
            tail = process.stdout.strip().splitlines()[-1:] or ["(no output)"]
            raise BenchError(f"the {side} side failed (exit {process.returncode}): {tail[0]}")
        return json.loads(result_path.read_text())


# ---------------------------------------------------------------------- report
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
    """The first result with train_s and eval_s replaced by their medians over `results`."""
    return {**results[0], "runs": len(results),
            **{key: statistics.median(r[key] for r in results) for key in ("train_s", "eval_s")}}


def _shown(path: str) -> str:
    """`path` relative to the working directory when it lies under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def summarize(result: dict, spec: dict) -> dict:
    """Sequences/s for training and seconds for eval (measured and per 10,000 samples)."""
    return {"train_seq_per_s": spec["batch_size"] * spec["steps"] / result["train_s"],
            "eval_s": result["eval_s"],
            "eval_10k_s": result["eval_s"] * EVAL_SAMPLES / spec["eval_examples"]}


def format_report(spec: dict, ours: dict, reference: dict | None, when: str,
                  load: tuple[float, float] | None = None) -> str:
    """The markdown report: configuration, then one row per measure with the ratio."""
    cfg = json.loads(Path(spec["bert_config_file"]).read_text())
    ours_s = summarize(ours, spec)
    ref_s = summarize(reference, spec) if reference else None
    lines = [
        "# Training bench: ours vs the reference TF1 graph",
        "",
        f"- date: {when}",
        f"- machine: {machine()}; TensorFlow {ours['tensorflow']}, Python "
        f"{platform.python_version()}",
    ]
    if load:
        lines.append(f"- load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}")
    lines += [
        f"- model: {_shown(spec['bert_config_file'])} (layers {cfg['num_hidden_layers']}, hidden "
        f"{cfg['hidden_size']}, heads {cfg['num_attention_heads']}, intermediate "
        f"{cfg['intermediate_size']}, vocab {cfg['vocab_size']})",
        f"- batch {spec['batch_size']}, sequence {spec['seq_length']}, "
        f"{spec['max_predictions']} predictions; LAMB with the reference's default flags; "
        f"synthetic batches (seed {SEED})",
        f"- training: {spec['steps']} timed steps after {WARMUP_STEPS} warm-up steps; eval: "
        f"{spec['eval_examples']} records in batches of {spec['eval_batch_size']} after one "
        f"warm-up batch, time extrapolated linearly to {EVAL_SAMPLES:,} samples",
        f"- each side in its own process, {ours.get('runs', 1)} run(s) each, alternating; "
        f"the median time is reported",
        "",
        "| measure | reference | ours | ours / reference |",
        "|---|---:|---:|---:|",
    ]
    rows = [("training sequences/s", "train_seq_per_s", "{:.2f}"),
            (f"eval of {spec['eval_examples']} records, s", "eval_s", "{:.3g}"),
            (f"eval of {EVAL_SAMPLES:,} samples, s (extrapolated)", "eval_10k_s", "{:.1f}")]
    for label, key, fmt in rows:
        ref = fmt.format(ref_s[key]) if ref_s else "-"
        ratio = f"{ours_s[key] / ref_s[key]:.2f}" if ref_s else "-"
        lines.append(f"| {label} | {ref} | {fmt.format(ours_s[key])} | {ratio} |")
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------- command line
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Training sequences/s and eval time, ours vs the reference TF1 graph.")
    parser.add_argument("--reference_dir", default=None,
                        help="the reference's retired_benchmarks/bert folder")
    parser.add_argument("--bert_config_file", default=str(DEFAULT_CONFIG))
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--max_predictions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--eval_examples", type=int, default=512)
    parser.add_argument("--eval_batch_size", type=int, default=None,
                        help="records per eval batch (default: --batch_size)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each side (alternating); medians are reported")
    parser.add_argument("--output", default="build/bench/train.md")
    parser.add_argument("--ours_only", action="store_true",
                        help="measure only our side (no --reference_dir, no ratios)")
    parser.add_argument("--worker", choices=sorted(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def make_spec(args: argparse.Namespace) -> dict:
    """Validate the arguments; the spec both workers read (BenchError if invalid)."""
    for name in ("batch_size", "seq_length", "max_predictions", "steps", "eval_examples",
                 "repeats"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name} must be at least 1")
    config_path = Path(args.bert_config_file)
    try:
        cfg = json.loads(config_path.read_text())
        vocab, positions = int(cfg["vocab_size"]), int(cfg["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BenchError(f"--bert_config_file={args.bert_config_file}: cannot read a BERT "
                         f"config ({type(err).__name__}: {err})".splitlines()[0]) from None
    if args.seq_length > positions:
        raise BenchError(f"--seq_length={args.seq_length} exceeds max_position_embeddings "
                         f"{positions} of {args.bert_config_file}")
    if args.max_predictions >= args.seq_length // 2:
        raise BenchError(f"--max_predictions={args.max_predictions} must be below half of "
                         f"--seq_length={args.seq_length}")
    del vocab
    reference_dir = None
    if not args.ours_only:
        if not args.reference_dir:
            raise BenchError("--reference_dir is required: the reference's "
                             "retired_benchmarks/bert folder (or --ours_only)")
        folder = Path(args.reference_dir)
        missing = [name for name in REFERENCE_MODULES if not (folder / name).is_file()]
        if missing:
            raise BenchError(f"--reference_dir={args.reference_dir}: not the reference's "
                             f"BERT folder (no {', '.join(missing)})")
        reference_dir = str(folder.resolve())
    return {"reference_dir": reference_dir, "bert_config_file": str(config_path.resolve()),
            "batch_size": args.batch_size, "seq_length": args.seq_length,
            "max_predictions": args.max_predictions, "steps": args.steps,
            "eval_examples": args.eval_examples,
            "eval_batch_size": args.eval_batch_size or args.batch_size}


def main(argv: list[str] | None = None) -> str:
    """Run the bench; prints the markdown report, writes it to --output and returns it."""
    args = parse_args(argv)
    if args.worker:
        spec = json.loads(Path(args.spec).read_text())
        Path(args.result).write_text(json.dumps(SIDES[args.worker](spec)))
        return ""
    spec = make_spec(args)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load_before = os.getloadavg()[0]
    sides = (["reference"] if spec["reference_dir"] else []) + ["ours"]
    runs = {side: [] for side in sides}
    for repeat in range(args.repeats):
        for side in sides:  # alternating, so a change of load hits both sides alike
            print(f"timing {side} ({repeat + 1}/{args.repeats}) ...", file=sys.stderr,
                  flush=True)
            runs[side].append(run_side(side, spec))
    ours = median_result(runs["ours"])
    reference = median_result(runs["reference"]) if spec["reference_dir"] else None
    report = format_report(spec, ours, reference, when, (load_before, os.getloadavg()[0]))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(report)
    return report


if __name__ == "__main__":
    exit_on_user_error(main)
