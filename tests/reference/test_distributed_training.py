"""One device, two mirrored replicas, two workers and gradient accumulation train alike.

For the same global batch (dropout 0, records of equal masked-LM weight, the averaged gradient
clipped once: --clip_by_global_norm_after_gradient_allreduce) the data order, the initial
weights (stateless, from --seed) and the updates do not depend on how the batch is split, so
the weights and eval metrics after 20 updates agree to float rounding:

- MirroredStrategy over 2 logical CPU devices (--cpu_devices=2), also compiled with --use_xla;
- MultiWorkerMirroredStrategy with 2 worker processes on localhost (TF_CONFIG; slow);
- batch 32 x 2 accumulated micro-batches vs batch 64 (the schedule spans 10^6 updates in
  both, so reading the rate at micro-step 2k+1 instead of k changes it by ~1e-6 only).
"""
from __future__ import annotations

import json
import os
import shlex
import socket
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests import forked
from tests.conftest import REPO
from tests.reference import synthetic_data
from tests.reference.test_run_pretraining import (as_flags, metadata, read_eval_results,
                                                  read_mllog, run_trainer, values)

COMMON = {"do_train": "true", "do_eval": "true", "eval_batch_size": 100, "max_eval_steps": 2,
          "learning_rate": 0.02, "num_warmup_steps": 0, "seed": 11,
          "eval_frequency_samples": 640, "noncompliant_eval_frequency": "true",
          "clip_by_global_norm_after_gradient_allreduce": "true"}
ONE_BATCH = {"train_batch_size": 64, "num_train_steps": 1_000_000, "stop_steps": 20,
             "iterations_per_loop": 10}
ACCUMULATED = {"train_batch_size": 32, "steps_per_update": 2, "num_train_steps": 2_000_000,
               "stop_steps": 40, "iterations_per_loop": 20}
WEIGHT_TOL = 2e-5  # measured: <= 5e-7 (float32 sums taken in another order)
# The split runs form the masked-LM logits in blocks of 64 rows (training) and 50 or 100 (eval);
# the baseline forms all 256 (400) rows at once.
BLOCKS = ["--masked_lm_block_rows=100"]


def model_weights(output_dir) -> dict[str, np.ndarray]:
    """The model's variables in the latest checkpoint of `output_dir`."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(output_dir)))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/") and name.endswith("VARIABLE_VALUE")
            and "key/bias" not in name}  # zero gradient up to rounding; LAMB scales the noise


def assert_same_training(ours, baseline) -> None:
    a, b = model_weights(ours), model_weights(baseline)
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=WEIGHT_TOL, err_msg=name)
    ours_eval = read_eval_results(ours / "eval_results.txt")
    base_eval = read_eval_results(baseline / "eval_results.txt")
    for key, value in base_eval.items():
        if key != "global_step":  # micro-steps: twice as many with 2 accumulated batches
            assert ours_eval[key] == pytest.approx(value, abs=1e-5), key
    ours_log, base_log = read_mllog(ours / "mlperf.log"), read_mllog(baseline / "mlperf.log")
    for key in ("global_batch_size", "train_samples"):
        assert values(ours_log, key) == values(base_log, key), key
    assert values(ours_log, "eval_accuracy") == pytest.approx(values(base_log, "eval_accuracy"),
                                                              abs=1e-5)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # One training file: with two workers and fewer files than workers, records are dealt
    # out of one seeded stream, which is what makes the union of their batches the same batch.
    return synthetic_data.write_dataset(tmp_path_factory.mktemp("dist") / "data",
                                        train_files=1, train_records=512, eval_records=200)


@pytest.fixture(scope="module")
def baseline(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("baseline") / "out"
    run_trainer(*as_flags(data), *as_flags(COMMON), *as_flags(ONE_BATCH), f"--output_dir={out}")
    return out


def test_two_mirrored_replicas_match_one_device(data, baseline, tmp_path):
    out = tmp_path / "out"
    result = run_trainer(*as_flags(data), *as_flags(COMMON), *as_flags(ONE_BATCH),
                         "--cpu_devices=2", *BLOCKS, f"--output_dir={out}")
    assert "aborted at step 20, 1280 samples" in result.stdout
    assert values(read_mllog(out / "mlperf.log"), "submission_platform") == ["2xCPU"]
    assert_same_training(out, baseline)


def test_xla_compiled_mirrored_replicas_match_one_device(data, baseline, tmp_path):
    """--use_xla under MirroredStrategy: compiled replica steps, per-variable compiled LAMB
    updates on each device copy; the same weights, metrics and log as the uncompiled run."""
    out = tmp_path / "out"
    result = run_trainer(*as_flags(data), *as_flags(COMMON), *as_flags(ONE_BATCH),
                         "--cpu_devices=2", "--use_xla", *BLOCKS, f"--output_dir={out}")
    assert "aborted at step 20, 1280 samples" in result.stdout
    assert_same_training(out, baseline)


def test_accumulated_micro_batches_match_one_large_batch(data, baseline, tmp_path):
    out = tmp_path / "out"
    result = run_trainer(*as_flags(data), *as_flags(COMMON), *as_flags(ACCUMULATED),
                         *BLOCKS, f"--output_dir={out}")
    assert "aborted at step 40, 1280 samples" in result.stdout
    records = read_mllog(out / "mlperf.log")
    assert values(records, "gradient_accumulation_steps") == [2]
    assert values(records, "opt_learning_rate_training_steps") == [1_000_000]
    assert_same_training(out, baseline)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_workers_match_one_device(data, baseline, tmp_path):
    out = tmp_path / "out"
    cluster = {"worker": [f"localhost:{free_port()}", f"localhost:{free_port()}"]}
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        workers.append(forked.start(
            [sys.executable, "-m", "reference.run_pretraining", *as_flags(data),
             *as_flags(COMMON), *as_flags(ONE_BATCH), f"--output_dir={out}"],
            env=dict(env, TF_CONFIG=tf_config)))
    outputs = [worker.communicate(timeout=600) for worker in workers]
    for worker, (stdout, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stderr[-3000:]
        assert "aborted at step 20, 1280 samples" in stdout
    assert not (out / ".worker-1").exists()  # the other worker's scratch checkpoints are gone
    assert values(read_mllog(out / "mlperf.log"), "submission_platform") == ["2xCPU"]
    assert_same_training(out, baseline)


# The README's multi-host example ("Scale out"), one `make train` per host with its TF_CONFIG.
# Here both hosts are this machine (two ports on localhost), the preset is the CPU smoke preset
# (the GPU presets need GPUs) and TRAIN_ARGS fit it to the tiny synthetic records; on real
# hosts HOST0/HOST1 are their addresses, PRESET a GPU preset, DATA and TRAIN_OUT shared paths.
TWO_HOSTS = string.Template(
    """TF_CONFIG='{"cluster": {"worker": ["$host0", "$host1"]}, "task": {"type": "worker", """
    """"index": $index}}' make train PRESET=$preset DATA=$data TRAIN_OUT=$out """
    """TRAIN_ARGS="$args\"""")


@pytest.mark.slow
def test_the_readme_two_host_example_trains_as_two_workers_on_localhost(data, tmp_path):
    out = tmp_path / "two hosts"
    args = (f"--bert_config_file={data['bert_config_file']} --max_seq_length=16 "
            "--max_predictions_per_seq=4 --eval_batch_size=100")
    hosts = {"host0": f"localhost:{free_port()}", "host1": f"localhost:{free_port()}"}
    commands = [TWO_HOSTS.substitute(hosts, index=index, preset="smoke",
                                     data=shlex.quote(str(Path(data["input_file"]).parent)),
                                     out=shlex.quote(str(out)), args=args)
                for index in range(2)]
    env = dict(os.environ, PYTHONPATH=str(REPO), MAKEFLAGS=f"PY={sys.executable}")
    workers = [subprocess.Popen(["bash", "-c", command], cwd=REPO, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for command in commands]
    outputs = [worker.communicate(timeout=900) for worker in workers]
    for index, (worker, (stdout, stderr)) in enumerate(zip(workers, outputs)):
        assert worker.returncode == 0, stderr[-3000:]
        assert "run_pretraining: success at step" in stdout
        assert f"MultiWorkerMirroredStrategy: task worker/{index}, 2 replicas in sync" in stderr
    log = read_mllog(out / "mlperf.log")  # the chief's
    assert [m["status"] for m in metadata(log, "run_stop")] == ["success"]
    assert values(log, "global_batch_size") == [16]  # the preset's, split over both workers
    check = subprocess.run(["make", "--no-print-directory", "check", f"LOG={out}/mlperf.log"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.splitlines()[-1].startswith("PASSED")
