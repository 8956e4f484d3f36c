"""bert_config.json loading: the official file, and one-line errors naming file and key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from reference.bert_config import BertConfig, ConfigError, load_bert_config

OFFICIAL_CONFIG = Path(__file__).resolve().parents[2] / "cleanup_scripts" / "data" / "bert" / \
    "bert_config.json"


def write(tmp_path: Path, values) -> Path:
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    return path


def official_values() -> dict:
    return json.loads(OFFICIAL_CONFIG.read_text())


def test_official_config_is_bert_large():
    config = load_bert_config(OFFICIAL_CONFIG)
    assert config == BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                                num_attention_heads=16, intermediate_size=4096, hidden_act="gelu",
                                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                max_position_embeddings=512, type_vocab_size=2,
                                initializer_range=0.02)
    assert config.attention_head_size == 64
    assert config.to_dict() == official_values()


def test_missing_key_names_file_and_key(tmp_path):
    values = official_values()
    del values["intermediate_size"]
    path = write(tmp_path, values)
    with pytest.raises(ConfigError) as err:
        load_bert_config(path)
    message = str(err.value)
    assert str(path) in message and "intermediate_size" in message and "\n" not in message


@pytest.mark.parametrize("key, value, words", [
    ("hidden_size", 1000, "not a multiple of num_attention_heads"),
    ("num_hidden_layers", 0, "positive integer"),
    ("vocab_size", "30522", "positive integer"),
    ("type_vocab_size", True, "positive integer"),
    ("hidden_dropout_prob", 1.0, "[0, 1)"),
    ("attention_probs_dropout_prob", -0.1, "[0, 1)"),
    ("initializer_range", 0, "positive number"),
    ("hidden_act", "swish", "hidden_act must be one of"),
])
def test_bad_value_is_a_one_line_error(tmp_path, key, value, words):
    values = official_values()
    values[key] = value
    path = write(tmp_path, values)
    with pytest.raises(ConfigError) as err:
        load_bert_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and words in message and "\n" not in message
    assert key in message or key == "hidden_size"


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read BERT config"):
        load_bert_config(tmp_path / "absent.json")
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_bert_config(path)
    with pytest.raises(ConfigError, match="expected a JSON object"):
        load_bert_config(write(tmp_path, [1, 2]))


def test_unknown_keys_are_ignored(tmp_path):
    values = dict(official_values(), note="extra")
    assert load_bert_config(write(tmp_path, values)).vocab_size == 30522
