"""`python -m devtools.export_step`: the trainer's update as one HLO module and its manifest."""
from __future__ import annotations

import json
import lzma

import numpy as np
import pytest


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_export_writes_the_update_with_every_variable_it_moves(exported_step, packed):
    from tensorflow.compiler.xla.service import hlo_pb2

    out = exported_step(packed)
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


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_export_keeps_op_names_and_writes_the_batch_it_traced(exported_step, packed):
    from tensorflow.compiler.xla.service import hlo_pb2

    out = exported_step(packed)
    meta = json.loads((out / "step.json").read_text())
    module = hlo_pb2.HloModuleProto.FromString(lzma.decompress(
        (out / "step.hlo.pb.xz").read_bytes()))
    metadata = [i.metadata for c in module.computations for i in c.instructions]
    names = [m.op_name for m in metadata]
    for scope in ("/encoder/layer_1/qk_product/", "/attention/self/dropout/",
                  "masked_lm_loss/logits/", "optimizer_update/", "clip_by_global_norm/"):
        assert any(scope in name for name in names), scope
    assert any(m.op_type == "BatchMatMulV2" for m in metadata)
    assert not any(m.source_file or m.source_line for m in metadata)  # no path of this checkout
    features = {p["name"]: p for p in meta["params"] if p["role"] == "feature"}
    with np.load(out / "batch.npz", allow_pickle=False) as batch:
        assert sorted(batch.files) == sorted(features)
        for name, param in features.items():
            assert list(batch[name].shape) == param["shape"]
            assert str(batch[name].dtype) == param["dtype"]
        if packed:  # the official length mix packs more than one sequence into a row
            assert batch["next_sentence_weights"].sum() > meta["rows_per_step"]
