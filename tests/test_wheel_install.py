"""The project installed from a wheel, outside the checkout: its package data (checksums,
presets, the vendored inputs) travel with it, and the four jobs run from another folder."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder the wheel was unpacked into, an empty working folder outside the repo)."""
    root = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(root / "dist"), str(REPO)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (root / "dist").glob("*.whl")
    site = root / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    work = root / "work"
    work.mkdir()
    return site, work


def run_installed(installed, *args, timeout=600):
    """`python ARGS` with only the installed copy importable, run in the working folder."""
    site, work = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_wheel_carries_its_data_and_reads_it_from_where_it_is_installed(installed):
    site, _ = installed
    probe = run_installed(installed, "-c", (
        "import checksums, cleanup_scripts, reference\n"
        "from cleanup_scripts.artifacts.checksums import known_artifacts, official_eval_hashes\n"
        "from reference import presets\n"
        "print(checksums.__file__, cleanup_scripts.__file__, reference.__file__)\n"
        "print(known_artifacts()['vocab.txt'].md5, len(official_eval_hashes()))\n"
        "print(' '.join(presets.available()))\n"
        "print(cleanup_scripts.VOCAB_FILE.is_file())\n"))
    assert probe.returncode == 0, probe.stderr[-2000:]
    where, hashes, names, vocab = probe.stdout.splitlines()
    assert all(path.startswith(str(site)) for path in where.split())
    assert hashes == "64800d5d8528ce344256daf115d4965e 9941"
    assert {"demo", "smoke", "v3-128", "gpu-8"} <= set(names.split())
    assert vocab == "True"


@pytest.mark.slow
def test_preprocess_verify_train_and_check_run_from_the_wheel(installed):
    _, work = installed
    steps = [
        ("-m", "cleanup_scripts.preprocess", "--output_dir=ds"),
        ("-m", "cleanup_scripts.artifacts.verify", "ds"),
        ("-m", "reference.run_pretraining", "--preset=smoke", "--data_dir=ds/tfrecords",
         "--output_dir=train"),
        ("-m", "benchmark.check", "train/mlperf.log"),
    ]
    outputs = []
    for args in steps:
        done = run_installed(installed, *args)
        assert done.returncode == 0, (args, done.stdout[-1500:], done.stderr[-1500:])
        outputs.append(done.stdout + done.stderr)
    assert "verify: PASSED: 11 file(s)" in outputs[1]
    assert "run_pretraining: success" in outputs[2]
    assert "\nPASSED: 0 error(s)" in outputs[3]
    assert (work / "train" / "mlperf.log").is_file()
