"""`devtools.step_profile`: TensorFlow op names to model parts, and compiled ops to parts through
what they fuse and what calls them."""
from __future__ import annotations

import pytest

from devtools.step_profile import OTHER, CompiledModule, format_profile, part_of, summarize

LAYER = "StatefulPartitionedCall/bert_pretraining/bert/encoder/layer_3"
GRADIENT = "StatefulPartitionedCall/gradient_tape/bert_pretraining/bert/encoder/layer_3"


@pytest.mark.parametrize("op_name, part", [
    (f"{LAYER}/qk_product/MatMul", "attention: QK product"),
    (f"{GRADIENT}/qk_product/MatMul/MatMul_1", "attention: QK product"),
    (f"{LAYER}/mask_softmax/Softmax", "attention: mask and softmax"),
    (f"{LAYER}/attention/self/dropout/StatelessRandomUniformFullIntV2",
     "attention: dropout"),
    (f"{LAYER}/attention/self/key/MatMul", "attention: Q, K, V projections"),
    (f"{LAYER}/attention/output/LayerNorm/batchnorm/mul", "layer norms"),
    (f"{LAYER}/add_1", "layer norms"),
    (f"{LAYER}/intermediate/dense/PartitionedCall_3/gradient_tape/TanhGrad",
     "feed-forward and GELU"),
    ("StatefulPartitionedCall/masked_lm_loss/while/logits_gradient/MatMul",
     "masked-LM head: vocabulary product"),
    ("StatefulPartitionedCall/masked_lm_loss/LogSoftmax", "masked-LM head: loss"),
    ("Sqrt_1;StatefulPartitionedCall_1/optimizer_update/Sqrt_1", "LAMB update"),
    ("clip_by_global_norm/mul_12", "gradient clipping"),
    ("StatefulPartitionedCall/AddN_17", OTHER),
    ("", OTHER),
])
def test_op_names_map_to_parts(op_name, part):
    assert part_of(op_name) == part


TEXT = """HloModule step, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_softmax (p0: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %exp = f32[4]{0} exponential(%p0), metadata={op_name="StatefulPartitionedCall/bert_pretraining/bert/encoder/layer_0/mask_softmax/Softmax"}
  ROOT %m = f32[4]{0} multiply(%exp, %exp), metadata={op_name="StatefulPartitionedCall/bert_pretraining/bert/encoder/layer_0/mask_softmax/Softmax"}
}

%bits (state: u64[3]) -> u32[4] {
  %state = u64[3]{0} parameter(0)
  ROOT %draw = u32[4]{0} fusion(%state), kind=kLoop, calls=%fused_bits
}

%fused_bits (q: u64[3]) -> u32[4] {
  %q = u64[3]{0} parameter(0)
  ROOT %x = u32[4]{0} xor(%q, %q)
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %softmax_fusion = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused_softmax
  %rng = u32[4]{0} call(%a), to_apply=%bits, metadata={op_name="StatefulPartitionedCall/bert_pretraining/bert/encoder/layer_0/attention/self/dropout/StatelessRandomUniformFullIntV2"}
  ROOT %out = f32[4]{0} add(%softmax_fusion, %a), metadata={op_name="AddN"}
}
"""


def test_compiled_ops_take_the_part_of_what_they_fuse_or_what_calls_them():
    module = CompiledModule(TEXT)
    assert module.parts["softmax_fusion"] == "attention: mask and softmax"  # by its insides
    assert module.parts["draw"] == "attention: dropout"  # named only by the call of `bits`
    assert module.parts["out"] == OTHER
    assert "a" not in module.parts and "rng" not in module.parts  # no code of their own
    assert module.kernels_per_part() == {"attention: mask and softmax": 1,
                                         "attention: dropout": 1, OTHER: 1}
    profile = summarize(module, {"softmax_fusion": 3_000_000, "draw": 1_000_000},
                        {"softmax_fusion": 2, "draw": 2}, 0, steps=2, top=5)
    parts = {p["part"]: p for p in profile["parts"]}
    assert parts["attention: mask and softmax"]["ms_per_step"] == 1.5
    assert parts["attention: mask and softmax"]["share"] == 0.75
    assert parts["attention: dropout"]["ops"] == 1 and parts[OTHER]["ms_per_step"] == 0
    assert profile["top_ops"][0]["op"] == "softmax_fusion"
    assert any("attention: dropout" in line for line in format_profile(profile, "test"))
