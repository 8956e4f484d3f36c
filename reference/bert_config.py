"""The BERT model configuration: read and check `bert_config.json`.

The benchmark's file (BERT-large) looks like::

    {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
     "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096,
     "max_position_embeddings": 512, "num_attention_heads": 16, "num_hidden_layers": 24,
     "type_vocab_size": 2, "vocab_size": 30522}

Every one of those eleven keys is required; a missing key, a value of the wrong type or out of
range raises `ConfigError` with a one-line message naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import json
import os
import stat
from typing import Any, Mapping

from absl import logging

from benchmark.errors import UserError, printable
from benchmark.files import file_kind

# Activation names the model implements (the MLCommons reference's `get_activation` set).
ACTIVATIONS = ("gelu", "relu", "tanh", "linear")

# Not a bert_config.json key but how the masked-LM head is computed: the most prediction rows
# whose [rows, vocab] logits the losses and metrics form at once (--masked_lm_block_rows; the
# demo's 2,432 rows become 8 blocks of 304, 37 MB per float32 tensor). 0: all rows at once.
MASKED_LM_BLOCK_ROWS = 512
CONFIG_LIMIT = 1 << 20  # characters: a bert_config.json is a few hundred


class ConfigError(UserError, ValueError):
    """A bad or incomplete BERT configuration; the message is one line naming the source."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of the BERT encoder and its pre-training heads.

    Sizes are counts (tokens, units, layers); probabilities are in [0, 1).
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    max_position_embeddings: int
    type_vocab_size: int
    initializer_range: float

    @property
    def attention_head_size(self) -> int:
        """Width of one attention head: hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        """The configuration as the plain dict that `bert_config.json` holds."""
        return dataclasses.asdict(self)


_INT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size", "max_position_embeddings", "type_vocab_size")
_PROB_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


def _field_names() -> list[str]:
    return [field.name for field in dataclasses.fields(BertConfig)]


def config_from_dict(values: Mapping[str, Any], source: str = "<dict>") -> BertConfig:
    """Validate `values` (the parsed JSON object) and build a BertConfig.

    Args:
      values: key -> value, as in `bert_config.json`.
      source: what to name in error messages (normally the file's path).

    Returns:
      The BertConfig.

    Raises:
      ConfigError: a key is missing, or a value has the wrong type or is out of range.
    """
    if not isinstance(values, Mapping):
        raise ConfigError(f"{source}: expected a JSON object, got {type(values).__name__}")
    missing = [name for name in _field_names() if name not in values]
    if missing:
        raise ConfigError(f"{source}: missing key(s) {', '.join(missing)}")
    unknown = sorted(set(values) - set(_field_names()))
    if unknown:
        logging.warning("%s: ignoring unknown key(s) %s", printable(source),
                        printable(", ".join(map(str, unknown))))

    for key in _INT_KEYS:
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{source}: {key} must be a positive integer, got {value!r}")
    for key in _PROB_KEYS:
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ConfigError(f"{source}: {key} must be a number in [0, 1), got {value!r}")
    init = values["initializer_range"]
    if isinstance(init, bool) or not isinstance(init, (int, float)) or not init > 0:
        raise ConfigError(f"{source}: initializer_range must be a positive number, got {init!r}")
    act = values["hidden_act"]
    if not isinstance(act, str) or act.lower() not in ACTIVATIONS:
        raise ConfigError(f"{source}: hidden_act must be one of {', '.join(ACTIVATIONS)}, "
                          f"got {act!r}")
    if values["hidden_size"] % values["num_attention_heads"]:
        raise ConfigError(f"{source}: hidden_size {values['hidden_size']} is not a multiple of "
                          f"num_attention_heads {values['num_attention_heads']}")

    return BertConfig(
        vocab_size=values["vocab_size"],
        hidden_size=values["hidden_size"],
        num_hidden_layers=values["num_hidden_layers"],
        num_attention_heads=values["num_attention_heads"],
        intermediate_size=values["intermediate_size"],
        hidden_act=act.lower(),
        hidden_dropout_prob=float(values["hidden_dropout_prob"]),
        attention_probs_dropout_prob=float(values["attention_probs_dropout_prob"]),
        max_position_embeddings=values["max_position_embeddings"],
        type_vocab_size=values["type_vocab_size"],
        initializer_range=float(init),
    )


def load_bert_config(path: str | os.PathLike) -> BertConfig:
    """Read and validate a `bert_config.json` file.

    Args:
      path: the JSON file: a local path, or a URL such as gs://... (read with tf.io.gfile).

    Returns:
      The BertConfig.

    Raises:
      ConfigError: the file cannot be read, is not JSON (or nests too deep to read), or
        fails validation.
    """
    path = os.fspath(path)
    if "://" in path:
        import tensorflow as tf  # only remote paths need TensorFlow's file systems

        try:
            with tf.io.gfile.GFile(path, "r") as f:
                text = f.read()
        except tf.errors.OpError as err:
            raise ConfigError(f"{path}: cannot read BERT config ({err.message})") from err
    else:
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):  # a FIFO would block the read, /dev/zero never end it
                raise ConfigError(f"{path}: is not a regular file ({file_kind(mode)})")
            with open(path, encoding="utf-8") as f:
                text = f.read(CONFIG_LIMIT + 1)
        except OSError as err:
            raise ConfigError(f"{path}: cannot read BERT config ({err.strerror})") from err
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: not UTF-8 text, not a BERT config") from err
        if len(text) > CONFIG_LIMIT:
            raise ConfigError(f"{path}: longer than {CONFIG_LIMIT >> 10} KiB, not a BERT "
                              f"config")
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from err
    except RecursionError as err:
        raise ConfigError(f"{path}: lists or objects nested too deep to read, not a BERT "
                          "config") from err
    config = config_from_dict(values, source=path)
    logging.info("BERT config %s: %d layers, hidden %d, %d heads, vocab %d", path,
                 config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
                 config.vocab_size)
    return config
