"""Build a submission tree from real runs of our trainer (`make example-submission`).

    python -m reference.example_submission --org=MLPerfHarness --runs=10 \\
        [--preset=demo] [--train_args="--target_mlm_accuracy=0.06"] [--output=submissions]

Trains RUNS runs (`--seed=1..RUNS`) under build/example/, lays their MLPerf logs out as
OUTPUT/ORG/results/SYSTEM/bert/result_0.txt ... result_<RUNS-1>.txt with
OUTPUT/ORG/systems/SYSTEM.json for this machine, and exits with the status of
`python -m benchmark.check --submission` on the tree.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output, ensure_dir
from benchmark.official import SYSTEM_FIELDS
from reference.run_pretraining import EXIT_TARGET_NOT_REACHED


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GB"
    except OSError:
        pass
    return "unknown"


def system_description(org: str, division: str, system_name: str) -> dict[str, str]:
    """systems/<system>.json for this machine (a CPU-only host): every required field."""
    description = {name: "" for name in SYSTEM_FIELDS}
    cores = str(os.cpu_count() or 1)
    description.update(
        submitter=org, division=division, status="research", system_name=system_name,
        number_of_nodes="1", host_processors_per_node="1",
        host_processor_model_name=_cpu_model(), host_processor_core_count=cores,
        host_processor_vcpu_count=cores, host_memory_capacity=_memory_gb(),
        accelerators_per_node="0", accelerator_model_name="none",
        framework=f"TensorFlow {importlib.metadata.version('tensorflow')}",
        operating_system=f"{platform.system()} {platform.release()}",
        other_software_stack=f"Python {platform.python_version()}",
        sw_notes="Made by reference.example_submission from runs of reference.run_pretraining.")
    return description


def run_one(seed: int, preset: str, org: str, system_name: str, train_args: list[str],
            work_dir: Path) -> Path:
    """Train one run from scratch in work_dir/run_<seed> with `preset` and `train_args`;
    returns its MLPerf log (a run that used its step budget without reaching the target is
    kept: olympic scoring may drop one). InputError if the run fails."""
    output = work_dir / f"run_{seed}"
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "reference.run_pretraining", f"--preset={preset}",
               f"--seed={seed}", f"--output_dir={output}", f"--submission_org={org}",
               f"--submission_platform={system_name}", *train_args]
    print(f"run {seed}: {shlex.join(command)}", flush=True)
    if subprocess.run(command).returncode not in (0, EXIT_TARGET_NOT_REACHED):
        raise InputError(f"{output}: training run {seed} failed")
    return output / "mlperf.log"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A submission tree from real training runs.")
    parser.add_argument("--org", default="MLPerfHarness", help="Submitting organisation.")
    parser.add_argument("--system", default="1xCPU-2core", help="System name.")
    parser.add_argument("--division", default="open", help="Division of the runs' preset.")
    parser.add_argument("--preset", default="demo", help="Training preset.")
    parser.add_argument("--runs", type=int, default=10, help="Runs (a BERT result has 10).")
    parser.add_argument("--train_args", default="", help="Extra run_pretraining flags.")
    parser.add_argument("--work_dir", default="build/example", help="Runs' output folders.")
    parser.add_argument("--output", default="submissions", help="Submission root folder.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """CLI (`argv`: the arguments, default sys.argv[1:]): make RUNS runs, lay them out as a
    submission, check it; exits with the checker's status."""
    args = _parse_args(argv)
    work_dir = ensure_dir(args.work_dir)
    org_dir = Path(args.output) / args.org
    results = ensure_dir(org_dir / "results" / args.system / "bert")
    for index in range(args.runs):
        log = run_one(index + 1, args.preset, args.org, args.system,
                      shlex.split(args.train_args), work_dir)
        shutil.copyfile(log, results / f"result_{index}.txt")
    ensure_dir(org_dir / "systems")
    with atomic_output(org_dir / "systems" / f"{args.system}.json") as out:
        json.dump(system_description(args.org, args.division, args.system), out, indent=2)
        out.write("\n")
    sys.exit(subprocess.run([sys.executable, "-m", "benchmark.check", "--submission",
                             str(org_dir)]).returncode)


if __name__ == "__main__":
    exit_on_user_error(main)
