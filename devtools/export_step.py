"""`make export-step`: the trainer's update (`Trainer.update_step`) as one XLA HLO module, for
timing on a machine that has an accelerator and XLA (jaxlib) but no TensorFlow.

    python -m devtools.export_step --output_dir=DIR [--bert_config_file=F]
        [--batch_size=96 --packed] [--mixed_precision=bf16] [--steps_per_update=1]

Writes DIR/step.hlo.pb.xz (the serialized HloModuleProto, xz), DIR/batch.npz (the features
traced with: `devtools.bench_train`'s synthetic batches with the official length mix, packed or
not) and DIR/step.json: the BERT config and shapes, every HLO parameter (a feature, with its
valid range, or a trainer variable, with its initialisation) and output (a result, or the new
value of a parameter it aliases), and the step's matrix-product FLOPs
(`devtools.bench_train.step_flops` at the padded or packed shapes computed). Each HLO instruction
keeps TensorFlow's op name and type (its metadata, less the source file and line), which
`python -m devtools.time_step DIR --profile N` maps to parts of the model. `time_step`
compiles and times the module where jaxlib is installed, TensorFlow or not.
"""
from __future__ import annotations

import json
import lzma
import zipfile

from absl import app, flags

from benchmark.errors import UserError, exit_on_user_error
from benchmark.files import atomic_output, ensure_dir
from cleanup_scripts import BERT_CONFIG_FILE
from devtools.time_step import BATCH_FILE, STEP_HLO, STEP_JSON

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Folder for step.hlo.pb.xz and step.json.")
flags.DEFINE_string("bert_config_file", str(BERT_CONFIG_FILE),
                    "BERT config (default: the benchmark's BERT-large).")
flags.DEFINE_integer("batch_size", 96, "Sequences per update on the replica (packed: about "
                     "this many, in as many rows as the official length mix packs them into).")
flags.DEFINE_integer("max_seq_length", 512, "Tokens per row.")
flags.DEFINE_integer("max_predictions_per_seq", 76, "Masked-LM predictions per sequence.")
flags.DEFINE_bool("packed", True, "Packed rows (up to 3 sequences a row) instead of one "
                  "padded sequence a row.")
flags.DEFINE_enum("mixed_precision", "bf16", ["none", "bf16", "fp16"], "Compute precision.")
flags.DEFINE_integer("steps_per_update", 1, "Micro-batches accumulated per update.")
flags.DEFINE_integer("seed", 12345, "Seed of the synthetic batch.")

# Element types of xla_data.proto's PrimitiveType, as run_step.py names them.
XLA_TYPES = {1: "pred", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
             8: "uint32", 9: "uint64", 10: "float16", 11: "float32", 12: "float64",
             16: "bfloat16"}
XLA_TUPLE = 13
RESULT_NAMES = ("losses[total_loss,masked_lm_loss,next_sentence_loss]", "gradient_norm",
                "learning_rate", "update_applied")
# The zip entries' time stamp: the same features give the same bytes.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def synthetic_update(config, batch_size: int, seq_length: int, max_predictions: int,
                     packed: bool, steps_per_update: int, seed: int) -> tuple[dict, int]:
    """One update's features (numpy, a leading micro-batch axis when steps_per_update > 1)
    from `devtools.bench_train`'s synthetic batches, and the rows of one micro-batch."""
    import numpy as np

    from devtools import bench_train
    n = steps_per_update
    if packed:
        pool = bench_train.synthetic_batches(bench_train.PACK_POOL_BATCHES, batch_size,
                                             seq_length, max_predictions, config.vocab_size, seed)
        rows, per_step = bench_train.packed_batches(pool, batch_size, seq_length)
        if per_step * n > len(rows["input_ids"]):
            raise UserError(f"--batch_size={batch_size} x --steps_per_update={n}: more rows "
                            f"than the synthetic pool packs into ({len(rows['input_ids'])})")
        micro = [{k: v[i * per_step:(i + 1) * per_step] for k, v in rows.items()}
                 for i in range(n)]
    else:
        micro = bench_train.synthetic_batches(n, batch_size, seq_length, max_predictions,
                                              config.vocab_size, seed)
        per_step = batch_size
    if n == 1:
        return micro[0], per_step
    return {k: np.stack([m[k] for m in micro]) for k in micro[0]}, per_step


def write_batch(path, features: dict) -> None:
    """`features` (numpy arrays by name) as an .npz archive that `numpy.load` reads: one
    `NAME.npy` entry each, in name order, deflated, with fixed time stamps."""
    import numpy as np
    with atomic_output(path, "wb") as handle, zipfile.ZipFile(handle, "w") as archive:
        for name in sorted(features):
            entry = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(entry, "w") as member:
                np.lib.format.write_array(member, np.ascontiguousarray(features[name]),
                                          allow_pickle=False)


def keep_op_names(module) -> None:
    """Strip from each instruction of an HloModuleProto what jaxlib cannot read or what
    names this checkout: the metadata's source file and line go (op name and type stay), and
    `copy` becomes a reshape to the same shape (jaxlib keeps `copy` as mhlo.copy, which GPU
    plugins cannot legalise; the value is the same)."""
    for computation in module.computations:
        for instruction in computation.instructions:
            for field in ("source_file", "source_line", "stack_frame_id"):
                instruction.metadata.ClearField(field)
            if instruction.opcode == "copy":
                instruction.opcode = "reshape"


def variable_roles(trainer) -> dict[int, tuple]:
    """{id of a variable's handle: (variable, role, initialisation)} for every variable the
    update reads: weights, LAMB moments and powers, counters."""
    config, optimizer = trainer.config, trainer.optimizer

    def weight_init(name):
        if name.endswith("gamma"):
            return {"init": "ones"}
        if name.endswith(("beta", "bias")):
            return {"init": "zeros"}
        return {"init": "truncated_normal", "stddev": config.initializer_range}

    from reference.lamb import variable_name
    roles = {id(v.handle): (v, "weight", weight_init(variable_name(v)))
             for v in trainer.model.variables}
    for var in trainer.model.trainable_variables:
        for slot, role in zip(optimizer.slots(var), ("lamb_m", "lamb_v")):
            roles[id(slot.handle)] = (slot, role, {"init": "zeros"})
    constants = [(optimizer.beta_1_power, "lamb_beta_1_power", optimizer.beta_1),
                 (optimizer.beta_2_power, "lamb_beta_2_power", optimizer.beta_2),
                 (optimizer.iterations, "counter", 0), (trainer.global_step, "counter", 0),
                 (trainer.trained_samples, "counter", 0), (trainer.target_reached, "counter", 0),
                 (trainer.good_updates, "counter", 0), (trainer.run_seed, "dropout_seed", 1),
                 (trainer.loss_scale, "loss_scale", float(trainer.loss_scale.numpy()))]
    for var, role, value in constants:
        roles[id(var.handle)] = (var, role, {"init": "constant", "value": value})
    return roles


def feature_range(name: str, config, seq_length: int) -> list | None:
    """[low, high] of an integer feature's valid values (None: no range)."""
    return {"input_ids": [0, config.vocab_size - 1], "masked_lm_ids": [0, config.vocab_size - 1],
            "input_mask": [0, 1], "segment_ids": [0, config.type_vocab_size - 1],
            "masked_lm_positions": [0, seq_length - 1],
            "next_sentence_positions": [0, seq_length - 1],
            "position_ids": [0, seq_length - 1], "sequence_ids": [0, 3],
            "next_sentence_labels": [0, 1]}.get(name)


def describe_module(module, features: dict, captures: list, roles: dict, config,
                    seq_length: int) -> tuple[list, list]:
    """(parameters, outputs) of the HLO module as step.json lists them."""
    from reference.lamb import variable_name
    program = module.host_program_shape
    names = sorted(features)  # tf.nest flattens a dict by sorted key
    if len(program.parameters) != len(names) + len(captures):
        raise RuntimeError(f"{len(program.parameters)} HLO parameters for {len(names)} "
                           f"features and {len(captures)} captured variables")
    params = []
    for index, shape in enumerate(program.parameters):
        entry = {"index": index, "shape": [int(d) for d in shape.dimensions],
                 "dtype": XLA_TYPES[shape.element_type]}
        if index < len(names):
            valid = feature_range(names[index], config, seq_length)
            entry.update({"name": names[index], "role": "feature"},
                         **({"range": valid} if valid else {}))
        else:
            var, role, init = roles[id(captures[index - len(names)])]
            entry.update({"name": variable_name(var), "role": role, **init})
        params.append(entry)
    aliases = {int(a.output_shape_index[0]): int(a.parameter_number)
               for a in module.input_output_alias.entries}
    result = program.result
    shapes = list(result.tuple_shapes) if result.element_type == XLA_TUPLE else [result]
    outputs, results = [], iter(RESULT_NAMES)
    for index, shape in enumerate(shapes):
        entry = {"index": index, "shape": [int(d) for d in shape.dimensions],
                 "dtype": XLA_TYPES[shape.element_type]}
        if index in aliases:
            entry.update({"role": "new_value", "updates_param": aliases[index]})
        else:
            entry.update({"role": "result", "name": next(results)})
        outputs.append(entry)
    return params, outputs


def export(output_dir: str) -> dict:
    """Build the trainer on the default strategy, trace `update_step` under
    `tf.function(jit_compile=True)` and write step.hlo.pb.xz, batch.npz and step.json (last)
    into `output_dir`; returns step.json's summary fields."""
    import tensorflow as tf
    from tensorflow.compiler.xla.service import hlo_pb2

    from devtools import bench_train
    from reference.bert_config import load_bert_config
    from reference.trainer import Trainer, set_mixed_precision

    config = load_bert_config(FLAGS.bert_config_file)
    seq, preds, n = FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.steps_per_update
    features, rows = synthetic_update(config, FLAGS.batch_size, seq, preds, FLAGS.packed, n,
                                      FLAGS.seed)
    set_mixed_precision(FLAGS.mixed_precision)
    trainer = Trainer(tf.distribute.get_strategy(), config, bench_train.REFERENCE_OPTIMIZER,
                      FLAGS.batch_size, steps_per_update=n,
                      mixed_precision=FLAGS.mixed_precision, use_xla=True, packed=FLAGS.packed)
    batch = {k: tf.constant(v) for k, v in features.items()}
    step = tf.function(lambda b: trainer.update_step(b, tf.convert_to_tensor(
        trainer.global_step)), jit_compile=True)
    captures = list(step.get_concrete_function(batch).captured_inputs)
    module = hlo_pb2.HloModuleProto.FromString(
        step.experimental_get_compiler_ir(batch)(stage="hlo_serialized"))
    keep_op_names(module)
    params, outputs = describe_module(module, features, captures, variable_roles(trainer),
                                      config, seq)
    slots = features["masked_lm_positions"].shape[-1]
    summary = {
        "what": "one update of reference.trainer.Trainer.update_step as one XLA HLO module",
        "tensorflow": tf.__version__, "bert_config": config.to_dict(),
        "precision": {"none": "fp32"}.get(FLAGS.mixed_precision, FLAGS.mixed_precision),
        "packed": FLAGS.packed, "seq_length": seq, "max_predictions_per_seq": preds,
        "steps_per_update": n, "batch_sequences_nominal": FLAGS.batch_size,
        "rows_per_step": rows * n, "tokens_per_step": rows * n * seq,
        "flops_per_step": bench_train.step_flops(config.to_dict(), seq, slots, rows * n),
        "num_hlo_parameters": len(params), "num_hlo_outputs": len(outputs),
        "batch_file": BATCH_FILE}
    folder = ensure_dir(output_dir)
    with atomic_output(folder / STEP_HLO, "wb") as f:
        f.write(lzma.compress(module.SerializeToString(deterministic=True), preset=9))
    write_batch(folder / BATCH_FILE, features)
    with atomic_output(folder / STEP_JSON) as f:
        json.dump({**summary, "params": params, "outputs": outputs}, f, indent=0)
    return summary


def main(argv):
    del argv
    if not FLAGS.output_dir:
        raise UserError("--output_dir is required")
    summary = export(FLAGS.output_dir)
    print(f"exported {summary['num_hlo_parameters']} parameters, {summary['rows_per_step']} "
          f"rows, {summary['flops_per_step'] / 1e12:.2f} TFLOP per update to "
          f"{FLAGS.output_dir}")


if __name__ == "__main__":
    exit_on_user_error(lambda: app.run(main))
