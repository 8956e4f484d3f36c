"""Hardware presets: the flag values of a named set-up, each a JSON file here,
`{"description": ..., "notes": [...], "flags": {"train_batch_size": 8192, ...}}`.

Flag values may hold placeholders, filled in by `resolve`: {data} (--data_dir, the folder of
part-* and eval_10k; a preset with "default_dataset", a folder relative to the working
directory as `make preprocess` names it, falls back to its TFRecord folder, or with `packed` its
packed one; a preset whose flags set "packed": true reads the packed one unless --nopacked is
given), {bert_config} (the benchmark's
bert_config.json in cleanup_scripts/data/bert/) and {presets} (this folder).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmark.errors import UserError
from cleanup_scripts import BERT_CONFIG_FILE
from cleanup_scripts.pipeline.layout import DatasetLayout

PRESET_DIR = Path(__file__).resolve().parent


class PresetError(UserError, ValueError):
    """An unknown or malformed preset; the message is one line."""


def available() -> list[str]:
    """Names of the presets (file names without .json)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json") if not p.stem.endswith("_config"))


def load(name: str) -> dict[str, Any]:
    """The parsed preset `name` ({"description", "notes", "flags"})."""
    path = PRESET_DIR / f"{name}.json"
    if name not in available():
        raise PresetError(f"--preset={name}: unknown preset (available: {', '.join(available())})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise PresetError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from err
    if not isinstance(data, dict) or not isinstance(data.get("flags"), dict):
        raise PresetError(f"{path}: expected an object with a 'flags' object")
    return data


def resolve(name: str, data_dir: str | None = None,
            packed: bool | None = None) -> dict[str, Any]:
    """The preset's flags with placeholders filled in; without `data_dir`, a preset's default
    dataset's TFRecord folder, or its packed folder when `packed` (None: the preset's own
    "packed" flag, default False).

    Raises PresetError when a value needs {data} and no data_dir was given.
    """
    preset = load(name)
    if packed is None:
        packed = bool(preset["flags"].get("packed", False))
    if not data_dir and preset.get("default_dataset"):
        layout = DatasetLayout(Path.cwd() / preset["default_dataset"])
        data_dir = str(layout.packed_dir if packed else layout.tfrecord_dir)
    fields = {"bert_config": str(BERT_CONFIG_FILE), "presets": str(PRESET_DIR),
              "data": (data_dir or "").rstrip("/")}
    flags = {}
    for key, value in preset["flags"].items():
        if isinstance(value, str):
            if "{data}" in value and not data_dir:
                raise PresetError(f"--preset={name}: --data_dir is required ({key} is {value})")
            value = value.format(**fields)
        flags[key] = value
    return flags
