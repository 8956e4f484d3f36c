"""Checkpoints: the official TF1 and TF2 initial checkpoints, and our own training checkpoints.

Initial checkpoints are read by name through explicit tables (`TF1_TABLE`, `TF2_TABLE`): each
row maps a checkpoint name to a model variable and says how the stored array becomes the
variable's value. Variables are named relative to the model, as `BertPretrainingModel` names
them (e.g. `bert/encoder/layer_0/attention/self/query/kernel`). Optimizer state, the global step
and other training-only entries (`SKIPPED_PATTERNS`) are never restored, as in the MLCommons
reference, which initialises only the trainable variables. Restoring returns the checkpoint names
restored, one per model tensor (the trainer logs an MLPerf `weights_initialization` event for each).

Row placeholders: `{layer}` is the transformer layer index 0..L-1; in TF2 keys `{layer4}` is
layer + 4 and `{pooler}` is L + 4 (the position of that layer among the encoder's layers with
weights).

Transforms (checkpoint array -> variable value):
  copy         same shape;
  transpose    the checkpoint stores the transpose (TF1 `cls/seq_relationship/output_weights` is
               [2, hidden] and used transposed; our dense kernel is [hidden, 2]);
  split_heads  the checkpoint's last axis is [heads, head_size] where ours is heads*head_size
               (TF2 query/key/value kernels [hidden, heads, head_size], biases [heads, head_size]);
  merge_heads  the checkpoint's first axis is [heads, head_size] (TF2 attention output kernel
               [heads, head_size, hidden]).

The official TF2 checkpoint (`tf2_ckpt/model.ckpt-28252`) is the object-based checkpoint that the
MLCommons reference's TF2 port restores with `tf.train.Checkpoint(model=BertPretrainer)`: the
encoder, the masked-LM head and the next-sentence head, no optimizer state. Its keys were determined
by building that port's model (mlcommons/training f4da94be, language_model/tensorflow2/bert) and
saving it; the sizes agree with the official file's (tensor bytes = encoder + both heads). See
tests/fixtures/reference_model/README.md.

Our own training checkpoints are object-based tf.train.Checkpoints (`training_checkpoint`) of the
model, the optimizer, the global step and the trainer's counters: `reference.trainer.Trainer`
saves them through a tf.train.CheckpointManager and restores them with
`read_training_checkpoint`, the one restore path.

Crash safety of training checkpoints: tf.train.CheckpointManager writes the data and index
files into a temporary folder, renames them into place, and only then rewrites the `checkpoint`
state file (itself written to a temporary file and renamed), so a process killed mid-save
leaves at worst orphan or partial files of a checkpoint that the state file does not name; on
gs:// each object appears whole or not at all. A checkpoint can still be unusable (a kill while
old checkpoints are being deleted, a file damaged or truncated on disk, a state file lost), so a
resumed run does not trust the state file: `latest_complete_checkpoint` takes the newest
checkpoint whose every tensor reads back (TensorFlow verifies each tensor's CRC32C) and names,
in an absl warning, each newer one it skips; `remove_orphan_save_folders` deletes the temporary
folders of saves that never finished.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from benchmark.errors import UserError, one_line

# ----------------------------------------------------------------------------------- tables
# (checkpoint name, model variable name, transform)
TF1_TABLE: tuple[tuple[str, str, str], ...] = (
    ("bert/embeddings/word_embeddings", "bert/embeddings/word_embeddings/embeddings", "copy"),
    ("bert/embeddings/token_type_embeddings",
     "bert/embeddings/token_type_embeddings/embeddings", "copy"),
    ("bert/embeddings/position_embeddings",
     "bert/embeddings/position_embeddings/embeddings", "copy"),
    ("bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/gamma", "copy"),
    ("bert/embeddings/LayerNorm/beta", "bert/embeddings/LayerNorm/beta", "copy"),
    ("bert/encoder/layer_{layer}/attention/self/query/kernel",
     "bert/encoder/layer_{layer}/attention/self/query/kernel", "copy"),
    ("bert/encoder/layer_{layer}/attention/self/query/bias",
     "bert/encoder/layer_{layer}/attention/self/query/bias", "copy"),
    ("bert/encoder/layer_{layer}/attention/self/key/kernel",
     "bert/encoder/layer_{layer}/attention/self/key/kernel", "copy"),
    ("bert/encoder/layer_{layer}/attention/self/key/bias",
     "bert/encoder/layer_{layer}/attention/self/key/bias", "copy"),
    ("bert/encoder/layer_{layer}/attention/self/value/kernel",
     "bert/encoder/layer_{layer}/attention/self/value/kernel", "copy"),
    ("bert/encoder/layer_{layer}/attention/self/value/bias",
     "bert/encoder/layer_{layer}/attention/self/value/bias", "copy"),
    ("bert/encoder/layer_{layer}/attention/output/dense/kernel",
     "bert/encoder/layer_{layer}/attention/output/dense/kernel", "copy"),
    ("bert/encoder/layer_{layer}/attention/output/dense/bias",
     "bert/encoder/layer_{layer}/attention/output/dense/bias", "copy"),
    ("bert/encoder/layer_{layer}/attention/output/LayerNorm/gamma",
     "bert/encoder/layer_{layer}/attention/output/LayerNorm/gamma", "copy"),
    ("bert/encoder/layer_{layer}/attention/output/LayerNorm/beta",
     "bert/encoder/layer_{layer}/attention/output/LayerNorm/beta", "copy"),
    ("bert/encoder/layer_{layer}/intermediate/dense/kernel",
     "bert/encoder/layer_{layer}/intermediate/dense/kernel", "copy"),
    ("bert/encoder/layer_{layer}/intermediate/dense/bias",
     "bert/encoder/layer_{layer}/intermediate/dense/bias", "copy"),
    ("bert/encoder/layer_{layer}/output/dense/kernel",
     "bert/encoder/layer_{layer}/output/dense/kernel", "copy"),
    ("bert/encoder/layer_{layer}/output/dense/bias",
     "bert/encoder/layer_{layer}/output/dense/bias", "copy"),
    ("bert/encoder/layer_{layer}/output/LayerNorm/gamma",
     "bert/encoder/layer_{layer}/output/LayerNorm/gamma", "copy"),
    ("bert/encoder/layer_{layer}/output/LayerNorm/beta",
     "bert/encoder/layer_{layer}/output/LayerNorm/beta", "copy"),
    ("bert/pooler/dense/kernel", "bert/pooler/dense/kernel", "copy"),
    ("bert/pooler/dense/bias", "bert/pooler/dense/bias", "copy"),
    ("cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/kernel", "copy"),
    ("cls/predictions/transform/dense/bias", "cls/predictions/transform/dense/bias", "copy"),
    ("cls/predictions/transform/LayerNorm/gamma",
     "cls/predictions/transform/LayerNorm/gamma", "copy"),
    ("cls/predictions/transform/LayerNorm/beta",
     "cls/predictions/transform/LayerNorm/beta", "copy"),
    ("cls/predictions/output_bias", "cls/predictions/output_bias/bias", "copy"),
    ("cls/seq_relationship/output_weights", "cls/seq_relationship/kernel", "transpose"),
    ("cls/seq_relationship/output_bias", "cls/seq_relationship/bias", "copy"),
)

_ENC = "model/layer_with_weights-0/"  # the encoder inside the TF2 port's BertPretrainer
_TF2_LAYER = _ENC + "layer_with_weights-{layer4}/"
_ATTR = "/.ATTRIBUTES/VARIABLE_VALUE"
TF2_TABLE: tuple[tuple[str, str, str], ...] = (
    (_ENC + "layer_with_weights-0/embeddings" + _ATTR,
     "bert/embeddings/word_embeddings/embeddings", "copy"),
    (_ENC + "layer_with_weights-1/embeddings" + _ATTR,
     "bert/embeddings/position_embeddings/embeddings", "copy"),
    (_ENC + "layer_with_weights-2/embeddings" + _ATTR,
     "bert/embeddings/token_type_embeddings/embeddings", "copy"),
    (_ENC + "layer_with_weights-3/gamma" + _ATTR, "bert/embeddings/LayerNorm/gamma", "copy"),
    (_ENC + "layer_with_weights-3/beta" + _ATTR, "bert/embeddings/LayerNorm/beta", "copy"),
    (_TF2_LAYER + "_attention_layer/_query_dense/kernel" + _ATTR,
     "bert/encoder/layer_{layer}/attention/self/query/kernel", "split_heads"),
    (_TF2_LAYER + "_attention_layer/_query_dense/bias" + _ATTR,
     "bert/encoder/layer_{layer}/attention/self/query/bias", "split_heads"),
    (_TF2_LAYER + "_attention_layer/_key_dense/kernel" + _ATTR,
     "bert/encoder/layer_{layer}/attention/self/key/kernel", "split_heads"),
    (_TF2_LAYER + "_attention_layer/_key_dense/bias" + _ATTR,
     "bert/encoder/layer_{layer}/attention/self/key/bias", "split_heads"),
    (_TF2_LAYER + "_attention_layer/_value_dense/kernel" + _ATTR,
     "bert/encoder/layer_{layer}/attention/self/value/kernel", "split_heads"),
    (_TF2_LAYER + "_attention_layer/_value_dense/bias" + _ATTR,
     "bert/encoder/layer_{layer}/attention/self/value/bias", "split_heads"),
    (_TF2_LAYER + "_attention_output_dense/kernel" + _ATTR,
     "bert/encoder/layer_{layer}/attention/output/dense/kernel", "merge_heads"),
    (_TF2_LAYER + "_attention_output_dense/bias" + _ATTR,
     "bert/encoder/layer_{layer}/attention/output/dense/bias", "copy"),
    (_TF2_LAYER + "_attention_layer_norm/gamma" + _ATTR,
     "bert/encoder/layer_{layer}/attention/output/LayerNorm/gamma", "copy"),
    (_TF2_LAYER + "_attention_layer_norm/beta" + _ATTR,
     "bert/encoder/layer_{layer}/attention/output/LayerNorm/beta", "copy"),
    (_TF2_LAYER + "_intermediate_dense/kernel" + _ATTR,
     "bert/encoder/layer_{layer}/intermediate/dense/kernel", "copy"),
    (_TF2_LAYER + "_intermediate_dense/bias" + _ATTR,
     "bert/encoder/layer_{layer}/intermediate/dense/bias", "copy"),
    (_TF2_LAYER + "_output_dense/kernel" + _ATTR,
     "bert/encoder/layer_{layer}/output/dense/kernel", "copy"),
    (_TF2_LAYER + "_output_dense/bias" + _ATTR,
     "bert/encoder/layer_{layer}/output/dense/bias", "copy"),
    (_TF2_LAYER + "_output_layer_norm/gamma" + _ATTR,
     "bert/encoder/layer_{layer}/output/LayerNorm/gamma", "copy"),
    (_TF2_LAYER + "_output_layer_norm/beta" + _ATTR,
     "bert/encoder/layer_{layer}/output/LayerNorm/beta", "copy"),
    (_ENC + "layer_with_weights-{pooler}/kernel" + _ATTR, "bert/pooler/dense/kernel", "copy"),
    (_ENC + "layer_with_weights-{pooler}/bias" + _ATTR, "bert/pooler/dense/bias", "copy"),
    ("model/layer_with_weights-1/layer_with_weights-0/kernel" + _ATTR,
     "cls/predictions/transform/dense/kernel", "copy"),
    ("model/layer_with_weights-1/layer_with_weights-0/bias" + _ATTR,
     "cls/predictions/transform/dense/bias", "copy"),
    ("model/layer_with_weights-1/layer_with_weights-1/gamma" + _ATTR,
     "cls/predictions/transform/LayerNorm/gamma", "copy"),
    ("model/layer_with_weights-1/layer_with_weights-1/beta" + _ATTR,
     "cls/predictions/transform/LayerNorm/beta", "copy"),
    ("model/layer_with_weights-1/layer_with_weights-2/bias" + _ATTR,
     "cls/predictions/output_bias/bias", "copy"),
    ("model/layer_with_weights-2/layer_with_weights-0/kernel" + _ATTR,
     "cls/seq_relationship/kernel", "copy"),
    ("model/layer_with_weights-2/layer_with_weights-0/bias" + _ATTR,
     "cls/seq_relationship/bias", "copy"),
)

# Checkpoint entries that are training state, not weights: never restored.
SKIPPED_PATTERNS: tuple[str, ...] = (
    r"/adam_[mv]$",  # AdamWeightDecayOptimizer moments
    r"/LAMB(_\d+)?$",  # LAMBOptimizer moments (m: LAMB, v: LAMB_1)
    r"/GradientAccumulator$",  # gradient-accumulation buffers (checkpoint_add_gradacc.py)
    r"^global_step$",
    r"^beta[12]_power(_\d+)?$",  # LAMB/Adam bias-correction accumulators
    r"^update_count$",  # gradient-aggregation counter
    r"^_CHECKPOINTABLE_OBJECT_GRAPH$",  # object-based checkpoints' own structure
    r"^save_counter/",
    r"^optimizer/",
)

TF1_FORMAT = "tf1"
TF2_FORMAT = "tf2"
# A name that only the respective format holds (used to tell them apart).
_FORMAT_MARKERS = ((TF1_FORMAT, "bert/embeddings/word_embeddings"),
                   (TF2_FORMAT, _ENC + "layer_with_weights-0/embeddings" + _ATTR))


# What reading a damaged checkpoint raises: OpErrors, or, from the C++ reader's status codes,
# ValueError (invalid argument), IndexError (out of range: a truncated file), RuntimeError.
READ_ERRORS = (tf.errors.OpError, ValueError, IndexError, RuntimeError)


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot initialise the model; the message is one line."""


# ----------------------------------------------------------------------------- helpers
def model_variable_name(model: tf.Module, var: tf.Variable) -> str:
    """`var`'s name relative to `model` (no ':0', no leading '<model name>/' scope)."""
    name = var.name[:-2] if var.name.endswith(":0") else var.name
    marker = f"{model.name}/"
    index = name.find(marker)
    return name[index + len(marker):] if index >= 0 else name


def model_variables_by_name(model: tf.Module) -> dict[str, tf.Variable]:
    """The model's variables keyed by `model_variable_name`."""
    table = {}
    for var in model.variables:
        table.setdefault(model_variable_name(model, var), var)
    return table


def expand_table(table: Sequence[tuple[str, str, str]],
                 num_layers: int) -> list[tuple[str, str, str]]:
    """The table's rows with the placeholders filled in, per-layer rows once per layer."""
    rows = []
    for ckpt_name, var_name, transform in table:
        if "{layer" in ckpt_name or "{layer" in var_name:
            indices = range(num_layers)
        else:
            indices = [None]
        for layer in indices:
            fields = {"pooler": num_layers + 4}
            if layer is not None:
                fields.update(layer=layer, layer4=layer + 4)
            rows.append((ckpt_name.format(**fields), var_name.format(**fields), transform))
    return rows


def _deeper_layer_entries(table: Sequence[tuple[str, str, str]], num_layers: int,
                          shapes: dict) -> list[str]:
    """Checkpoint entries that belong to an encoder layer after the model's last one (the
    checkpoint is of a deeper model)."""
    have = {row[0] for row in expand_table(table, num_layers)}
    return [row[0] for row in expand_table(table, num_layers + 1)
            if row[0] not in have and row[0] in shapes]


def _expected_shape(transform: str, var_shape: list[int], heads: int) -> list[int]:
    if transform == "copy":
        return list(var_shape)
    if transform == "transpose":
        return list(reversed(var_shape))
    if transform == "split_heads":
        return list(var_shape[:-1]) + [heads, var_shape[-1] // heads]
    if transform == "merge_heads":
        return [heads, var_shape[0] // heads] + list(var_shape[1:])
    raise ValueError(f"unknown transform {transform!r}")


def _to_variable_value(transform: str, array: np.ndarray, var_shape: list[int]) -> np.ndarray:
    if transform == "transpose":
        return np.transpose(array)
    return np.reshape(array, var_shape)


def _is_skipped(name: str) -> bool:
    return any(re.search(pattern, name) for pattern in SKIPPED_PATTERNS)


def _open_reader(path: str):
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"{path}: no checkpoint in this directory")
        path = latest
    try:
        return path, tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read checkpoint ({one_line(err)})") from err


def checkpoint_format(path: str | os.PathLike) -> str:
    """`TF1_FORMAT` or `TF2_FORMAT` for an initial checkpoint (prefix or directory).

    Raises CheckpointError if it is neither (or cannot be read).
    """
    path, reader = _open_reader(os.fspath(path))
    names = reader.get_variable_to_shape_map()
    for fmt, marker in _FORMAT_MARKERS:
        if marker in names:
            return fmt
    raise CheckpointError(f"{path}: neither a TF1 BERT checkpoint nor the reference TF2 layout "
                          f"(no {_FORMAT_MARKERS[0][1]!r} or {_FORMAT_MARKERS[1][1]!r})")


# ----------------------------------------------------------------------------- restoring
def restore_with_table(model, path: str | os.PathLike,
                       table: Sequence[tuple[str, str, str]]) -> list[str]:
    """Assign the model's variables from a checkpoint through a name table.

    Args:
      model: a built `BertPretrainingModel` (it must have `.config`, a BertConfig).
      path: checkpoint prefix (e.g. .../model.ckpt-28252) or a directory holding one.
      table: `TF1_TABLE`, `TF2_TABLE` or a table of the same form.

    Returns:
      The checkpoint names restored, in table order (one per model tensor).

    Raises:
      CheckpointError: (one line) the checkpoint is unreadable, lacks a tensor the model needs,
      or a tensor's shape does not match the model built from bert_config.
    """
    path, reader = _open_reader(os.fspath(path))
    shapes = reader.get_variable_to_shape_map()
    config = model.config
    variables = model_variables_by_name(model)
    rows = expand_table(table, config.num_hidden_layers)

    # Check everything before assigning anything.
    deeper = _deeper_layer_entries(table, config.num_hidden_layers, shapes)
    if deeper:
        raise CheckpointError(f"{path}: holds encoder layer {config.num_hidden_layers} "
                              f"({deeper[0]}) but bert_config has only "
                              f"{config.num_hidden_layers} layers")
    plan = []
    for ckpt_name, var_name, transform in rows:
        if var_name not in variables:
            raise CheckpointError(f"model has no variable {var_name!r} (table row for "
                                  f"{ckpt_name!r})")
        var = variables[var_name]
        if ckpt_name not in shapes:
            raise CheckpointError(f"{path}: missing {ckpt_name} (needed for {var_name})")
        want = _expected_shape(transform, var.shape.as_list(), config.num_attention_heads)
        have = list(shapes[ckpt_name])
        if have != want:
            raise CheckpointError(f"{path}: {ckpt_name} has shape {have} but the model from "
                                  f"bert_config needs {want}")
        plan.append((ckpt_name, var, transform))
    unmapped = [v for n, v in variables.items() if n not in {r[1] for r in rows}]
    if unmapped:
        raise CheckpointError(f"table maps no checkpoint tensor to {unmapped[0].name}")

    for ckpt_name, var, transform in plan:
        value = _to_variable_value(transform, reader.get_tensor(ckpt_name), var.shape.as_list())
        var.assign(value.astype(var.dtype.as_numpy_dtype, copy=False))

    used = {row[0] for row in rows}
    skipped = [n for n in shapes if n not in used and _is_skipped(n)]
    unknown = sorted(n for n in shapes if n not in used and not _is_skipped(n))
    logging.info("%s: restored %d tensors; skipped %d optimizer/step entries", path, len(plan),
                 len(skipped))
    if unknown:
        logging.warning("%s: %d checkpoint entries not used by the model, e.g. %s", path,
                        len(unknown), ", ".join(unknown[:5]))
    return [row[0] for row in plan]


def load_tf1_checkpoint(model, path: str | os.PathLike) -> list[str]:
    """Initialise `model` from an official TF1 checkpoint (e.g. tf1_ckpt/model.ckpt-28252).

    Returns the TF1 variable names restored (e.g. 'bert/embeddings/word_embeddings').
    Raises CheckpointError (one line) on a missing tensor or a shape mismatch.
    """
    return restore_with_table(model, path, TF1_TABLE)


def load_tf2_checkpoint(model, path: str | os.PathLike) -> list[str]:
    """Initialise `model` from a reference-TF2-port checkpoint (e.g. tf2_ckpt/model.ckpt-28252).

    Returns the checkpoint keys restored. Raises CheckpointError as `load_tf1_checkpoint`.
    """
    return restore_with_table(model, path, TF2_TABLE)


def load_initial_checkpoint(model, path: str | os.PathLike) -> list[str]:
    """Initialise `model` from a TF1 or reference-TF2 checkpoint, whichever `path` holds."""
    fmt = checkpoint_format(path)
    logging.info("%s: %s initial checkpoint", path, fmt.upper())
    return load_tf1_checkpoint(model, path) if fmt == TF1_FORMAT else \
        load_tf2_checkpoint(model, path)


# ------------------------------------------------------------------ our training checkpoints
def training_checkpoint(model, optimizer=None, global_step: tf.Variable | None = None,
                        **extra) -> tf.train.Checkpoint:
    """The tf.train.Checkpoint of a training run: model, optimizer (if any), global step."""
    objects = {"model": model}
    if optimizer is not None:
        objects["optimizer"] = optimizer
    if global_step is not None:
        objects["global_step"] = global_step
    objects.update(extra)
    return tf.train.Checkpoint(**objects)


def read_training_checkpoint(path: str, checkpoint: tf.train.Checkpoint) -> None:
    """Read the training checkpoint at prefix `path` into the objects of `checkpoint`.

    Every object of `checkpoint` must be found in the file (a model-only read of a checkpoint
    that also holds optimizer state is fine). Raises CheckpointError (one line) when the file
    cannot be read or does not fit. The one way a training checkpoint is restored
    (`reference.trainer.Trainer.restore`).
    """
    try:
        status = checkpoint.read(path)
    except READ_ERRORS as err:
        raise CheckpointError(f"{path}: cannot read checkpoint ({one_line(err)})") from err
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        raise CheckpointError(f"{path}: does not fit this model/optimizer "
                              f"({one_line(err)})") from err
    status.expect_partial()


def checkpoint_problem(path: str) -> str | None:
    """Why the checkpoint at prefix `path` cannot be restored; None if it can.

    Reads every tensor back (one full read of the checkpoint), so a missing or damaged index
    file and a missing, truncated or corrupted data file (TensorFlow checks each tensor's
    CRC32C) are all found. Returns a one-line reason.
    """
    try:
        reader = tf.train.load_checkpoint(path)
        for name in sorted(reader.get_variable_to_shape_map()):
            reader.get_tensor(name)
    except READ_ERRORS as err:
        return one_line(err)
    return None


def checkpoint_candidates(directory: str, name: str) -> list[str]:
    """Prefixes `directory/name-<step>` of the checkpoints in `directory`, highest step first.

    Both those the `checkpoint` state file lists and those with an index file are included, so
    a lost or unreadable state file, or one not yet updated after a complete save, hides
    nothing. Paths go through tf.io.gfile (local or gs://).
    """
    pattern = re.compile(rf"^{re.escape(name)}-(\d+)$")
    names = [os.path.basename(p)[:-len(".index")]
             for p in tf.io.gfile.glob(os.path.join(directory, f"{name}-*.index"))]
    state = tf.train.get_checkpoint_state(directory)
    if state is not None:
        names += [os.path.basename(p) for p in state.all_model_checkpoint_paths]
        names.append(os.path.basename(state.model_checkpoint_path))
    steps = {int(m.group(1)) for m in map(pattern.match, names) if m}
    return [os.path.join(directory, f"{name}-{step}") for step in sorted(steps, reverse=True)]


def latest_complete_checkpoint(directory: str, name: str) -> tuple[str | None, list[str]]:
    """The newest checkpoint in `directory` that can be restored (`checkpoint_problem`).

    Args:
      directory: the training output folder (local or gs://).
      name: the checkpoints' base name (files `name-<step>.index`, `.data-*`).

    Returns:
      (its prefix or None if there is none, the newer prefixes skipped as unreadable). Each
      skipped checkpoint is named in an absl warning with the reason.
    """
    skipped = []
    for path in checkpoint_candidates(directory, name):
        problem = checkpoint_problem(path)
        if problem is None:
            return path, skipped
        logging.warning("skipping checkpoint %s: incomplete or damaged (%s); trying the "
                        "previous one", path, problem)
        skipped.append(path)
    return None, skipped


def remove_orphan_save_folders(directory: str, name: str) -> list[str]:
    """Delete the `name-<step>_temp` folders in `directory` that saves killed before their
    merge left behind (TensorFlow writes a checkpoint's shards there, then moves them into
    place; nothing ever reads them, and for BERT-large each holds gigabytes).

    Returns the folders removed (each named in an absl info line).
    """
    removed = []
    for path in tf.io.gfile.glob(os.path.join(directory, f"{name}-*_temp")):
        if tf.io.gfile.isdir(path) and not os.path.islink(path):  # never through a link
            tf.io.gfile.rmtree(path)
            logging.info("removed %s, left by a checkpoint save that did not finish", path)
            removed.append(path)
    return removed


def restored_tensor_names(names: Iterable[str]) -> list[str]:
    """Checkpoint names with the TF2 attribute suffix removed (for logging)."""
    return [n[:-len(_ATTR)] if n.endswith(_ATTR) else n for n in names]
