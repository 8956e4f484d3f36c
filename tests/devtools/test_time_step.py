"""`python -m devtools.time_step`: a tiny exported update compiled by jaxlib's XLA on the CPU,
run with its state fed back, timed and profiled by model part, in a process where TensorFlow
cannot be imported (as on a GPU machine that has only jax and numpy)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO

# Runs the timer as `python -m` would, with TensorFlow, Keras, absl and tqdm unimportable.
WITHOUT_TENSORFLOW = """
import importlib.abc, runpy, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"tensorflow", "tf_keras", "keras", "absl", "tqdm"}:
            raise ImportError(f"{name}: not installed where the step is timed")
sys.meta_path.insert(0, Absent())
runpy.run_module("devtools.time_step", run_name="__main__", alter_sys=True)
"""
# The parts the tiny export has (it has every part).
PARTS = ("embeddings", "attention: Q, K, V projections", "attention: QK product",
         "attention: mask and softmax", "attention: dropout", "attention: PV product",
         "attention: output projection", "feed-forward and GELU", "layer norms",
         "masked-LM head: gather", "masked-LM head: transform",
         "masked-LM head: vocabulary product", "masked-LM head: loss", "next-sentence head",
         "gradient clipping", "LAMB update")


def time_step(*args: str) -> subprocess.CompletedProcess:
    """The timer's process, without TensorFlow; XLA's CPU back end compiles at its lowest
    optimisation level (the tiny step compiles in half the time)."""
    env = dict(os.environ, PYTHONPATH=str(REPO),
               XLA_FLAGS="--xla_backend_optimization_level=0")
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def packed_report(exported_step):
    """The timer's run on the packed export (2 timed steps each way, 1 warm-up, 1 profiled)
    and its report."""
    result = time_step(exported_step(True), "--steps=2", "--warmup=1", "--profile=1",
                       "--peak_tflops=0.5")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout[-2000:]
    return result, json.loads(lines[0])


def test_the_step_runs_timed_without_tensorflow_with_its_state_fed_back(packed_report,
                                                                        exported_step):
    _, report = packed_report
    assert report["backend"] == "cpu" and report["packed"] and report["bert"] == "2x64"
    for key in ("sec_per_step_median", "sec_per_step_back_to_back", "sequences_per_s",
                "tflops", "compile_s", "compiled_temp_gib"):
        assert report[key] > 0, key
    with np.load(exported_step(True) / "batch.npz") as batch:
        sequences = np.count_nonzero(batch["next_sentence_weights"])
    assert report["sequences_per_step"] == sequences
    assert report["sequences_per_s"] == pytest.approx(
        sequences / report["sec_per_step_median"], rel=1e-3)
    tflops = report["flops_per_step"] / report["sec_per_step_median"] / 1e12
    assert report["tflops"] == pytest.approx(tflops, abs=6e-5)  # both shown to 4 decimals
    assert report["peak_share"] == pytest.approx(tflops / 0.5, abs=6e-5)
    assert "device_peak_gib" in report
    # Each step's new state is the next step's input: the global step counts every step run
    # and training moves the loss.
    assert report["steps_run"] == 1 + 2 * 2 + 1 and report["global_step"] == 6
    assert report["loss_finite"] and report["loss_first"] != report["loss_last"]


def test_the_profile_maps_the_kernels_to_every_part_of_the_model(packed_report):
    result, report = packed_report
    profile = report["profile"]
    assert profile["source"] == "host CPU thunks" and profile["busy_ms_per_step"] > 0
    parts = {p["part"]: p for p in profile["parts"]}
    for part in PARTS:
        assert profile["kernels_per_part"].get(part, 0) > 0, part
        assert parts[part]["ops"] > 0, part
    assert parts["other"]["share"] < 0.05, parts["other"]
    assert sum(p["share"] for p in profile["parts"]) == pytest.approx(1.0, abs=0.01)
    assert profile["top_ops"] and all(op["ms_per_step"] >= 0 for op in profile["top_ops"])
    assert "attention: dropout" in result.stderr and "top ops" in result.stderr


def test_a_padded_export_counts_one_sequence_a_row(exported_step):
    result = time_step(exported_step(False), "--steps=1", "--warmup=0")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert not report["packed"] and report["sequences_per_step"] == report["rows_per_step"]
    assert report["global_step"] == 2 and report["loss_finite"]


def copy_export(exported_step, tmp_path, name="step"):
    """A copy of the packed export to spoil."""
    return shutil.copytree(exported_step(True), tmp_path / name)


def assert_one_line_error(result, *expected: str) -> None:
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    for text in expected:
        assert text in lines[0], lines[0]


def test_a_missing_folder_is_one_line(tmp_path):
    assert_one_line_error(time_step(tmp_path / "nowhere"), "nowhere: no such folder")


@pytest.mark.parametrize("text, problem", [
    ("{not json", "step.json: not valid JSON"),
    ("[" * 100000, "step.json: "),
    ('{"params": "x"}', 'step.json: "params" is missing or not a list'),
], ids=["corrupt", "nested", "no-params"])
def test_a_bad_step_json_is_one_line(exported_step, tmp_path, text, problem):
    folder = copy_export(exported_step, tmp_path)
    (folder / "step.json").write_text(text)
    assert_one_line_error(time_step(folder), problem)


def test_a_manifest_asking_for_too_much_memory_is_refused(exported_step, tmp_path):
    folder = copy_export(exported_step, tmp_path)
    meta = json.loads((folder / "step.json").read_text())
    meta["params"][-1]["shape"] = [1 << 20, 1 << 20]
    (folder / "step.json").write_text(json.dumps(meta))
    assert_one_line_error(time_step(folder), "step.json: its parameters hold", "over the limit")


def test_a_batch_unlike_the_manifest_or_a_broken_module_is_one_line(exported_step, tmp_path):
    folder = copy_export(exported_step, tmp_path, "bad\x1b[31mname")
    with np.load(folder / "batch.npz") as batch:
        arrays = {k: batch[k] for k in batch.files}
    np.savez(folder / "batch.npz", **{**arrays, "input_ids": arrays["input_ids"][:1]})
    result = time_step(folder)
    assert_one_line_error(result, "batch.npz: input_ids is int32[1, 64]", "bad\\x1b[31mname")
    np.savez(folder / "batch.npz", **arrays)
    (folder / "step.hlo.pb.xz").write_bytes(b"not xz")
    assert_one_line_error(time_step(folder), "step.hlo.pb.xz: not an xz file")
