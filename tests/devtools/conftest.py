"""Exports of a tiny update (`devtools.export_step`), made once per test run and shared."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import forked
from tests.conftest import REPO, built_once, run_module

TINY_CONFIG = REPO / "tests" / "fixtures" / "reference_model" / "bert_config.json"
# The fixture's 2-layer BERT (hidden 64, dropout 0.1): 6 sequences of 64 tokens a step.
EXPORT_ARGS = (f"--bert_config_file={TINY_CONFIG}", "--batch_size=6", "--max_seq_length=64",
               "--max_predictions_per_seq=10", "--mixed_precision=bf16")


@pytest.fixture(scope="session")
def exported_step(tmp_path_factory):
    """packed (bool) -> the folder `python -m devtools.export_step` wrote for the tiny update,
    packed rows or one padded sequence a row (each exported once)."""
    def export(packed: bool) -> Path:
        kind = "packed" if packed else "padded"
        folder = built_once(tmp_path_factory, f"step-{kind}", lambda built: run_module(
            "devtools.export_step", f"--output_dir={built / kind}", *EXPORT_ARGS,
            f"--packed={str(packed).lower()}", tf_log_level=forked.SERVER_LOG_LEVEL))
        return folder / kind

    return export
