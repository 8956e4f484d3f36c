"""`python -m devtools.bench_train`: the FLOP count, the report, the argument errors and our side on
a tiny config.

The reference side needs a checkout of the reference (not part of this project), so only our
sides run here.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from devtools import bench_train as bench
from tests import forked

ROOT = Path(__file__).resolve().parents[2]
TINY = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
        "max_position_embeddings": 64, "num_attention_heads": 2, "num_hidden_layers": 1,
        "type_vocab_size": 2, "vocab_size": 100}
# L=1, H=4, I=8, V=10: small enough to count the FLOPs by hand.
HAND = {**TINY, "hidden_size": 4, "intermediate_size": 8, "vocab_size": 10,
        "num_attention_heads": 1}
BERT_LARGE = {**bench.BERT_BASE_CONFIG, "hidden_size": 1024, "intermediate_size": 4096,
              "num_attention_heads": 16, "num_hidden_layers": 24}


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(TINY))
    return path


@pytest.fixture
def forked_sides(monkeypatch):
    """`bench.run_side`'s worker processes forked from the process that imported TensorFlow
    (tests/forked.py) rather than started as new interpreters: the same command, environment
    and folder, the bench's own code; the worker's output, stdout then stderr, as the one
    stream run_side reads. Any other subprocess.run is left as it was."""
    started = subprocess.run

    def run(command, *args, **kwargs):
        if command[1:4] != ["-m", "devtools.bench_train", "--worker"]:
            return started(command, *args, **kwargs)
        result = forked.run(command, env=kwargs["env"], cwd=kwargs["cwd"])
        return subprocess.CompletedProcess(command, result.returncode,
                                           result.stdout + result.stderr)

    monkeypatch.setattr(subprocess, "run", run)


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.bench_train", *args], cwd=ROOT,
                          capture_output=True, text=True)


def _table(report: str, shape: str) -> dict[str, list[str]]:
    """The rows of one shape's table: side -> cells (header row under "side")."""
    section = report.split(f"## {shape}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return {cells[0]: cells[1:] for cells in
            ([cell.strip() for cell in row.strip("|").split("|")] for row in rows)}


# ---------------------------------------------------------------------- FLOP count
def test_step_flops_of_a_tiny_config_by_hand():
    # One sequence, S=3, P=2, forward: projections 2*3*(4*16 + 2*4*8) = 768; attention
    # 2*2*9*4 = 144; masked LM 2*2*(16 + 4*10) = 224; pooler + NSP 2*(16 + 8) = 48.
    assert bench.flop_terms(HAND, 3, 2) == {"projections": 768, "attention": 144,
                                            "masked_lm": 224, "pooler_next_sentence": 48}
    assert bench.step_flops(HAND, 3, 2, 1, training=False) == 1184
    assert bench.step_flops(HAND, 3, 2, 2, training=False) == 2368
    assert bench.step_flops(HAND, 3, 2, 2) == 3 * 2368
    two_layers = bench.flop_terms({**HAND, "num_hidden_layers": 2}, 3, 2)
    assert two_layers["projections"] == 2 * 768 and two_layers["attention"] == 2 * 144


@pytest.mark.parametrize("config", [HAND, TINY, bench.BERT_BASE_CONFIG, BERT_LARGE])
def test_forward_products_are_the_counted_flops_at_any_batch(config):
    for batch in (1, 3):
        products = bench.forward_products(config, 16, 2, batch)
        flops = sum(2 * b * m * k * n for part in products.values() for b, m, k, n in part)
        assert flops == bench.step_flops(config, 16, 2, batch, training=False)
    layers = config["num_hidden_layers"]
    assert len(products["projections"]) == 6 * layers
    assert len(products["attention"]) == 2 * layers
    # The scores of each (sequence, head): [S, head size] x [head size, S].
    heads = config["num_attention_heads"]
    assert products["attention"][0] == (3 * heads, 16, config["hidden_size"] // heads, 16)


@pytest.mark.parametrize("config, encoder_params", [
    # Weights, biases and LayerNorms of the transformer layers: BERT-base's "85M" (of 110M),
    # BERT-large's "302M" (of 340M).
    (bench.BERT_BASE_CONFIG, 12 * (4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768
                                   + 4 * 768)),
    (BERT_LARGE, 24 * (4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024)),
])
def test_encoder_flops_match_six_n_tokens(config, encoder_params):
    assert encoder_params in (85_054_464, 302_309_376)
    seq = 128
    terms = bench.flop_terms(config, seq, 20)
    encoder_training = 3 * (terms["projections"] + terms["attention"])
    ratio = encoder_training / (6 * encoder_params * seq)
    # Above 1 by the attention products (2-3% at sequence 128), less the few biases.
    assert 1.01 < ratio < 1.04


def test_bert_base_step_flops():
    # Masked LM on 20 positions: 2*20*(768^2 + 768*30522); pooler + NSP: 2*(768^2 + 2*768).
    terms = bench.flop_terms(bench.BERT_BASE_CONFIG, 128, 20)
    assert terms["masked_lm"] == 961_228_800
    assert terms["pooler_next_sentence"] == 1_182_720
    flops = bench.step_flops(bench.BERT_BASE_CONFIG, 128, 20, 8)
    assert flops == 3 * 8 * sum(terms.values())
    assert 5.5e11 < flops < 5.7e11  # ~560 GFLOP per step of 8 sequences


# ---------------------------------------------------------------------- report
def _spec(**sizes) -> dict:
    return {"name": "hand", "source": "built in", "bert_config": HAND, "batch_size": 2,
            "seq_length": 3, "max_predictions": 2, "steps": 10, "eval_examples": 100,
            "eval_batch_size": 10, "reference_dir": None, **sizes}


def _peak(fp32: float, bf16: float, bf16_native: bool | None = False) -> dict:
    runs = [{"matmul_size": 64, "bf16_native": bf16_native, "gflops": {
        "float32": {"tf.function": {"best": fp32}, "XLA": {"best": fp32 / 2}},
        "bfloat16": {"tf.function": {"best": bf16 / 2}, "XLA": {"best": bf16}}}}]
    return bench.best_peak(runs)


def _side(train_s, eval_s, rss_kib, warmup_s=1.5, cores=2.0) -> dict:
    return {"train_s": train_s, "eval_s": eval_s, "warmup_s": warmup_s,
            "train_cpu_s": cores * train_s, "peak_rss_kib": rss_kib, "tensorflow": "2.x",
            "runs": 1}


def test_report_has_every_column_and_the_right_ratios():
    # 10 steps of 7104 FLOPs in 1 s against a peak of 142,080 FLOP/s: 50% MFU.
    peak = _peak(142_080e-9, 71_040e-9)
    results = {"hand": {"reference": _side(2.0, 4.0, 2_621_440),
                        "ours": _side(1.0, 2.0, 1536),
                        "ours+xla": _side(0.5, 1.0, 1_048_576, warmup_s=30.0, cores=1.25),
                        "ours+bf16": _side(0.5, 1.0, 1024)}}
    report = bench.format_report([_spec()], results, peak, "today", (0.5, 1.5), 90.0)
    assert "load average (1 min) before / after: 0.50 / 1.50" in report
    assert "bench wall time: 1.5 min" in report
    assert "bfloat16 0.0 GFLOP/s (slower than float32; this CPU has no bfloat16 matrix " \
        "instructions" in report
    table = _table(report, "hand")
    assert table["side"] == ["train steps/s", "train seq/s", "train speed-up", "train MFU",
                             "real-token MFU", "eval s per 10k", "eval speed-up", "eval MFU",
                             "warm-up s", "train cores", "peak RSS"]
    # Real tokens: each training sequence's own length and predictions (here 3 tokens, 1 of
    # the 2 prediction slots used: fewer FLOPs than the padded count).
    real = bench.real_flops_per_sequence(_spec()) / (7104 / 2)  # 7104 per step of 2
    assert 0 < real < 1

    def mfu(fraction):
        return f"{fraction:.1%}"

    assert table["reference"] == ["5", "10", "1.00x", "25.0%", mfu(0.25 * real), "400.0",
                                  "1.00x", "20.8%", "1.5", "2.00", "2.50 GiB"]
    assert table["ours"] == ["10", "20", "2.00x", "50.0%", mfu(0.5 * real), "200.0", "2.00x",
                             "41.7%", "1.5", "2.00", "2 MiB"]
    assert table["ours+xla"] == ["20", "40", "4.00x", "100.0%", mfu(real), "100.0", "4.00x",
                                 "83.3%", "30.0", "1.25", "1.00 GiB"]
    # bfloat16 compute: MFU against the bfloat16 peak (half the float32 one here).
    assert table["ours+bf16"] == ["20", "40", "4.00x", "200.0%", mfu(2 * real), "100.0",
                                  "4.00x", "166.7%", "1.5", "2.00", "1 MiB"]


def test_a_packed_side_counts_the_sequences_it_trained():
    # 10 steps in 1 s that trained 35 sequences (not 10 x 2): 35 seq/s, 1.75x the reference.
    results = {"hand": {"reference": _side(1.0, 4.0, 1024),
                        "ours+packed": {**_side(1.0, 2.0, 1024), "train_sequences": 35}}}
    table = _table(bench.format_report([_spec()], results, _peak(1.0, 1.0), "today"), "hand")
    assert table["ours+packed"][:3] == ["10", "35", "1.75x"]


def test_report_without_the_reference_has_no_speed_ups():
    results = {"hand": {"ours": _side(1.0, 2.0, 1536)}}
    report = bench.format_report([_spec()], results, _peak(1.0, 2.0, True), "today")
    assert "float32 1.0 GFLOP/s; bfloat16 2.0 GFLOP/s\n" in report  # no note: native, faster
    assert list(_table(report, "hand")) == ["side", "ours"]
    cells = _table(report, "hand")["ours"]
    assert cells[2] == "-" and cells[6] == "-"


def test_eval_time_is_extrapolated_from_whole_batches():
    # 95 records in batches of 10: 10 batches, 100 records timed.
    spec = _spec(eval_examples=95)
    assert bench.eval_batches(spec) == 10 and bench.eval_records(spec) == 100
    summary = bench.summarize(_side(1.0, 2.0, 1), spec, 1.0)
    assert summary["eval_10k_s"] == pytest.approx(200.0)
    assert summary["train_seq_per_s"] == pytest.approx(20.0)


def test_best_peak_takes_the_best_run_and_backend():
    runs = [{"matmul_size": 64, "bf16_native": None, "gflops": {
        dtype: {"tf.function": {"best": a}, "XLA": {"best": b}} for dtype in bench.PEAK_DTYPES}}
        for a, b in [(10.0, 30.0), (20.0, 25.0)]]
    peak = bench.best_peak(runs)
    assert peak["float32"] == {"gflops": 30.0, "backend": "XLA",
                               "backends": {"tf.function": 20.0, "XLA": 30.0}}
    assert peak["runs"] == 2


def test_median_of_repeats():
    runs = [{"train_s": t, "eval_s": e, "warmup_s": w, "train_cpu_s": c, "peak_rss_kib": m,
             "tensorflow": "2.x"}
            for t, e, w, c, m in [(3.0, 1.0, 9.0, 4.0, 10), (1.0, 5.0, 8.0, 2.0, 30),
                                  (2.0, 2.0, 7.0, 3.0, 20)]]
    assert bench.median_result(runs) == {"train_s": 2.0, "eval_s": 2.0, "warmup_s": 8.0,
                                         "train_cpu_s": 3.0, "peak_rss_kib": 30,
                                         "tensorflow": "2.x", "runs": 3}


def test_format_memory():
    assert bench.format_memory(512 * 1024) == "512 MiB"
    assert bench.format_memory(3 * 1024 * 1024 + 512 * 1024) == "3.50 GiB"


def test_synthetic_batches_are_seeded_and_in_range():
    first = bench.synthetic_batches(2, 3, 16, 4, 50, seed=7)
    second = bench.synthetic_batches(2, 3, 16, 4, 50, seed=7)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] == b[key]).all()
    batch = first[0]
    assert batch["input_ids"].shape == (3, 16) and batch["masked_lm_ids"].shape == (3, 4)
    assert batch["input_ids"].max() < 50 and batch["masked_lm_ids"].max() < 50
    assert (batch["masked_lm_positions"] < batch["input_mask"].sum(axis=1)[:, None]).all()


def test_synthetic_sequences_have_the_official_padding_and_prediction_counts():
    batches = bench.synthetic_batches(16, 32, 512, 76, 30522)
    lengths = np.concatenate([b["input_mask"].sum(axis=1) for b in batches])
    predictions = np.concatenate([b["masked_lm_weights"].sum(axis=1) for b in batches])
    assert 0.45 < 1 - lengths.mean() / 512 < 0.55  # the official records: 50.4% padding
    np.testing.assert_array_equal(predictions, np.minimum(np.round(0.15 * lengths), 76))
    rows, per_step = bench.packed_batches(batches[:4], 32, 512)
    assert rows["next_sentence_weights"].sum() == 128 and 14 <= per_step <= 19


# ---------------------------------------------------------------------- arguments
def _plan(*args: str) -> dict:
    return bench.make_plan(bench.parse_args(list(args)))


def test_default_plan_is_demo_bert_base_and_demo_512_on_every_side(tmp_path):
    plan = _plan(f"--reference_dir={_fake_reference(tmp_path)}")
    assert plan["sides"] == ["reference", "ours", "ours+nondeterministic", "ours+xla",
                             "ours+bf16", "ours+packed", "matmuls"]
    demo, base, long = plan["shapes"]
    assert (demo["name"], base["name"], long["name"]) == ("demo", "bert-base", "demo-512")
    assert (long["batch_size"], long["seq_length"], long["max_predictions"]) == (32, 512, 76)
    assert demo["bert_config"] == json.loads(bench.DEFAULT_CONFIG.read_text())
    for spec in (demo, base):
        assert (spec["batch_size"], spec["seq_length"], spec["max_predictions"],
                spec["eval_batch_size"]) == (8, 128, 20, 8)
        assert spec["reference_dir"] == str(tmp_path.resolve())
    assert (demo["steps"], demo["eval_examples"]) == (20, 512)
    assert base["bert_config"]["num_hidden_layers"] == 12
    assert base["bert_config"]["hidden_size"] == 768 and base["steps"] < demo["steps"]


def test_size_flags_replace_every_shape_and_a_config_file_is_the_custom_shape(tiny_config):
    plan = _plan("--ours_only", "--shapes=demo,bert-base", "--steps=3", "--batch_size=4")
    assert [(s["steps"], s["batch_size"], s["eval_batch_size"]) for s in plan["shapes"]] == \
        [(3, 4, 4), (3, 4, 4)]
    assert plan["sides"] == ["ours", "ours+nondeterministic", "ours+xla", "ours+bf16",
                             "ours+packed", "matmuls"]
    plan = _plan("--ours_only", f"--bert_config_file={tiny_config}", "--seq_length=32",
                 "--max_predictions=5", "--eval_batch_size=2", "--sides=ours")
    (spec,) = plan["shapes"]
    assert spec["name"] == "custom" and spec["bert_config"] == TINY
    assert (spec["seq_length"], spec["eval_batch_size"], spec["batch_size"]) == (32, 2, 8)
    assert plan["sides"] == ["ours"]


def _fake_reference(folder: Path) -> Path:
    for name in bench.REFERENCE_MODULES:
        (folder / name).write_text("")
    return folder


@pytest.mark.parametrize("args, message", [
    (["--ours_only", "--shapes=demo,large"], "--shapes=demo,large: expected a comma list"),
    (["--ours_only", "--shapes=custom"], "--shapes=custom needs --bert_config_file"),
    (["--ours_only", "--shapes=demo", f"--bert_config_file={bench.DEFAULT_CONFIG}"],
     "add custom to --shapes"),
    (["--ours_only", "--sides=ours,theirs"], "--sides=ours,theirs: expected a comma list"),
    (["--ours_only", "--sides=reference"], "--ours_only leaves no side"),
    (["--ours_only", "--steps=0"], "--steps must be at least 1"),
    (["--ours_only", "--repeats=0"], "--repeats must be at least 1"),
    (["--ours_only", "--seq_length=1024"], "demo shape: --seq_length=1024 exceeds"),
    (["--ours_only", "--max_predictions=64"], "must be below half of --seq_length=128"),
    (["--ours_only", "--matmul_size=8"], "--matmul_size must be at least 64"),
])
def test_argument_errors(args, message):
    with pytest.raises(bench.BenchError, match=re.escape(message)):
        _plan(*args)


def test_an_invalid_config_names_the_shape(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "num_attention_heads": 3}))
    with pytest.raises(bench.BenchError, match="custom shape: .*not a multiple of"):
        _plan("--ours_only", f"--bert_config_file={path}")


@pytest.mark.parametrize("args, message", [
    ([], "--reference_dir is required"),
    (["--reference_dir=/nonexistent/bert"], "not the reference's BERT folder"),
])
def test_missing_reference_dir_is_a_one_line_error(args, message):
    result = _bench(*args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert result.stdout == ""


def test_bad_config_is_a_one_line_error(tmp_path):
    result = _bench("--ours_only", f"--bert_config_file={tmp_path / 'missing.json'}")
    assert result.returncode == 1
    assert re.fullmatch(r"error: --bert_config_file=\S+: cannot read a BERT config .*",
                        result.stderr.strip())


# ---------------------------------------------------------------------- real runs
def _check_our_rows(report: str, shape: str, sides: list[str]) -> None:
    table = _table(report, shape)
    assert list(table) == ["side", *sides]
    for side in sides:
        cells = table[side]
        assert float(cells[0]) > 0 and float(cells[1]) > 0 and float(cells[5]) > 0
        assert cells[2] == "-" and cells[6] == "-"  # no reference side, no speed-ups
        assert all(re.fullmatch(r"\d+\.\d%", cells[i]) for i in (3, 4, 7))
        assert float(cells[5]) > 0 and float(cells[8]) > 0 and float(cells[9]) > 0
        # A TensorFlow process holds a few hundred MiB at least.
        assert re.fullmatch(r"[\d,]+ MiB|\d+\.\d\d GiB", cells[10])
        assert "GiB" in cells[10] or int(cells[10].split()[0].replace(",", "")) > 100


def test_peak_worker_times_both_dtypes_and_backends():
    result = bench.run_peak({"matmul_size": 64})
    assert result["matmul_size"] == 64 and result["peak_rss_kib"] > 0
    assert result["bf16_native"] in (True, False, None)
    assert list(result["gflops"]) == list(bench.PEAK_DTYPES)
    for backends in result["gflops"].values():
        assert list(backends) == list(bench.PEAK_BACKENDS)
        for timing in backends.values():
            assert bench.PEAK_MIN_CALLS <= timing["calls"] <= bench.PEAK_MAX_CALLS
            assert timing["best"] >= timing["median"] > 0


@pytest.mark.parametrize("side", ["ours", "ours+bf16", "ours+packed"])
def test_our_side_on_a_tiny_config(tiny_config, forked_sides, side):
    plan = _plan(f"--bert_config_file={tiny_config}", "--ours_only", f"--sides={side}",
                 "--batch_size=4", "--seq_length=32", "--max_predictions=5", "--steps=2",
                 "--eval_examples=10")
    (spec,) = plan["shapes"]
    result = bench.run_side(side, spec)  # a process of its own, as in the bench
    assert result["train_s"] > 0 and result["eval_s"] > 0 and result["warmup_s"] > 0
    assert result["train_cpu_s"] > 0
    assert result["loss"] > 0 and 0 <= result["masked_lm_accuracy"] <= 1
    if side == "ours+packed":
        assert result["train_sequences"] >= 2 * 4 / 3  # rows of up to 3 sequences, 4 a step
    report = bench.format_report(plan["shapes"], {"custom": {side: result}},
                                 _peak(50.0, 10.0), "today")
    assert "batch 4, sequence 32, 5 predictions" in report
    assert "eval: 12 records in batches of 4" in report
    _check_our_rows(report, "custom", [side])


@pytest.mark.parametrize("backward, per_product", [(False, 1), (True, 3)])
def test_products_function_runs_every_product_and_its_gradients(backward, per_product):
    products = [(1, 8, 4, 6), (3, 5, 2, 5), (1, 8, 4, 6)]
    run = bench._products_function(products, backward=backward, seed=1)
    graph = run.get_concrete_function().graph
    matmuls = [op for op in graph.get_operations()
               if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3")]
    assert len(matmuls) == per_product * len(products)
    shapes = sorted(tuple(op.outputs[0].shape) for op in matmuls)
    expected = [(8, 6), (3, 5, 5)] + ([(8, 4), (4, 6), (3, 5, 2), (3, 2, 5)] if backward else [])
    assert set(shapes) == set(expected)
    assert float(run().numpy()) == float(run().numpy())  # fixed operands: the same sum again


def test_matmuls_side_on_a_tiny_config(tiny_config, forked_sides):
    plan = _plan(f"--bert_config_file={tiny_config}", "--ours_only", "--sides=matmuls",
                 "--batch_size=4", "--seq_length=32", "--max_predictions=5", "--steps=2",
                 "--eval_examples=10")
    (spec,) = plan["shapes"]
    result = bench.run_side("matmuls", spec)
    assert result["train_s"] > 0 and result["eval_s"] > 0 and result["warmup_s"] > 0
    report = bench.format_report(plan["shapes"], {"custom": {"matmuls": result}},
                                 _peak(50.0, 10.0), "today")
    assert "matmuls: the step's matrix products alone" in report
    _check_our_rows(report, "custom", ["matmuls"])


@pytest.mark.slow
def test_the_bench_on_the_demo_shape(tmp_path):
    output = tmp_path / "out" / "train.md"
    report = bench.main(["--ours_only", "--shapes=demo", "--steps=1", "--eval_examples=8",
                         f"--output={output}"])
    assert output.read_text() == report
    assert "reference/presets/demo_bert_config.json (layers 2, hidden 128" in report
    peak = re.search(r"float32 ([\d.]+) GFLOP/s; bfloat16 ([\d.]+) GFLOP/s", report)
    assert peak and float(peak[1]) > 1 and float(peak[2]) > 0
    _check_our_rows(report, "demo", ["ours", "ours+nondeterministic", "ours+xla", "ours+bf16",
                                     "ours+packed", "matmuls"])
