"""The stand-ins benchmark.adapters.mlperf_logging installs in the official tools change their
speed, not their results: the linear line strip equals their regex on any text, and the YAML
reader returns what yaml returns. Each patch point is still where the adapter puts it."""
from __future__ import annotations

import random
import re

import yaml

from benchmark.adapters import mlperf_logging
from benchmark.mllog_parse import TOKEN

PIECES = [TOKEN, ":::MLL", "MLLOG ", " ", "x", "{\"key\": 1}", "\n", "\r", ":", "é", "\t"]


def test_linear_strip_equals_the_regex_on_random_text():
    strip = mlperf_logging.LinearStrip(re)
    rng = random.Random(5)
    for _ in range(5000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 12)))
        assert strip.sub(".*" + TOKEN, TOKEN, text) == re.sub(".*" + TOKEN, TOKEN, text), text


def test_linear_strip_leaves_every_other_use_to_re():
    strip = mlperf_logging.LinearStrip(re)
    assert strip.sub("a+", "b", "caaat") == "cbt"
    assert strip.compile is re.compile


def test_package_yaml_returns_fresh_copies_of_what_yaml_parses():
    reader = mlperf_logging.PackageYaml(yaml)
    path = mlperf_logging.PACKAGE_DIR / "compliance_checker" / "training_1.0.0" / "common.yaml"
    with open(path) as stream:
        first = reader.load(stream, Loader=yaml.BaseLoader)
    with open(path) as stream:
        assert first == yaml.load(stream, Loader=yaml.BaseLoader)
    first.clear()
    with open(path) as stream:
        assert reader.load(stream, Loader=yaml.BaseLoader)  # the cache was not emptied


def test_guard_engine_replaces_the_globals_the_official_tools_use():
    from mlperf_logging.compliance_checker import mlp_compliance
    mlperf_logging.guard_engine()
    assert isinstance(mlp_compliance.yaml, mlperf_logging.PackageYaml)
    readers = mlperf_logging.reader_modules()
    assert readers and all(isinstance(m.re, mlperf_logging.LinearStrip) for m in readers)
    mlperf_logging.guard_engine()  # a second call wraps nothing twice
    assert isinstance(mlp_compliance.yaml._real, type(yaml))


def test_known_compliance_answers_for_known_logs_and_restores_the_engine(tmp_path):
    from mlperf_logging.compliance_checker import mlp_compliance
    real = mlp_compliance.main
    log = tmp_path / "result_0.txt"
    with mlperf_logging.known_compliance({str(log.resolve()): True}):
        assert mlp_compliance.main(str(log), "unused.yaml", None) == (True, None, None, None)
    assert mlp_compliance.main is real


def test_another_mlperf_logging_release_is_refused_in_one_line(monkeypatch):
    import importlib.metadata

    from benchmark.errors import UserError
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "4.2.0")
    try:
        mlperf_logging.guard_engine()
    except UserError as err:
        assert str(err).startswith("mlperf-logging 4.2.0 is installed; this harness reaches "
                                   "into 4.1.68 only")
    else:
        raise AssertionError("4.2.0 was accepted")
