"""The stand-ins benchmark.official installs in the official tools change their speed, not
their results: the linear line strip equals their regex on any text, and the YAML reader
returns what yaml returns."""
from __future__ import annotations

import random
import re
from pathlib import Path

import yaml

from benchmark import official
from benchmark.mllog_parse import TOKEN

PIECES = [TOKEN, ":::MLL", "MLLOG ", " ", "x", "{\"key\": 1}", "\n", "\r", ":", "é", "\t"]


def test_linear_strip_equals_the_regex_on_random_text():
    strip = official._LinearStrip(re)
    rng = random.Random(5)
    for _ in range(5000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 12)))
        assert strip.sub(".*" + TOKEN, TOKEN, text) == re.sub(".*" + TOKEN, TOKEN, text), text


def test_linear_strip_leaves_every_other_use_to_re():
    strip = official._LinearStrip(re)
    assert strip.sub("a+", "b", "caaat") == "cbt"
    assert strip.compile is re.compile


def test_package_yaml_returns_fresh_copies_of_what_yaml_parses():
    reader = official._PackageYaml(yaml)
    path = Path(official._PACKAGE_DIR) / "compliance_checker" / "training_1.0.0" / "common.yaml"
    with open(path) as stream:
        first = reader.load(stream, Loader=yaml.BaseLoader)
    with open(path) as stream:
        assert first == yaml.load(stream, Loader=yaml.BaseLoader)
    first.clear()
    with open(path) as stream:
        assert reader.load(stream, Loader=yaml.BaseLoader)  # the cache was not emptied
