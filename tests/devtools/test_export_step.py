"""`python -m devtools.export_step`: the trainer's update as one HLO module and its manifest."""
from __future__ import annotations

import json
import lzma

import pytest

from tests.conftest import REPO, run_module

TINY_CONFIG = REPO / "tests" / "fixtures" / "reference_model" / "bert_config.json"


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_export_writes_the_update_with_every_variable_it_moves(tmp_path, packed):
    from tensorflow.compiler.xla.service import hlo_pb2

    out = tmp_path / "step"
    run_module("devtools.export_step", f"--output_dir={out}",
               f"--bert_config_file={TINY_CONFIG}",
               "--batch_size=6", "--max_seq_length=64", "--max_predictions_per_seq=10",
               f"--packed={str(packed).lower()}", "--mixed_precision=bf16")
    meta = json.loads((out / "step.json").read_text())
    module = hlo_pb2.HloModuleProto.FromString(lzma.decompress(
        (out / "step.hlo.pb.xz").read_bytes()))
    params, outputs = meta["params"], meta["outputs"]
    assert len(module.host_program_shape.parameters) == len(params)
    features = {p["name"]: p for p in params if p["role"] == "feature"}
    assert ("sequence_ids" in features) == packed and "input_ids" in features
    assert features["input_ids"]["shape"] == [meta["rows_per_step"], 64]
    results = [o["name"] for o in outputs if o["role"] == "result"]
    assert results == ["losses[total_loss,masked_lm_loss,next_sentence_loss]",
                       "gradient_norm", "learning_rate", "update_applied"]
    moved = {params[o["updates_param"]]["role"] for o in outputs if o["role"] == "new_value"}
    assert {"weight", "lamb_m", "lamb_v", "lamb_beta_1_power", "counter"} <= moved
    weights = [p for p in params if p["role"] == "weight"]
    updated = {o["updates_param"] for o in outputs if o["role"] == "new_value"}
    assert weights and all(p["index"] in updated for p in weights)
    assert meta["flops_per_step"] > 0 and meta["precision"] == "bf16"
