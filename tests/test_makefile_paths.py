"""The Makefile passes each path variable as one argument: `make preprocess DUMP="my dumps/x"`
used to split it at the space (and a quote in a path broke the shell command)."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest

import cleanup_scripts
from benchmark.errors import MAKE_VARIABLES, name_make_variables
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")

ODD = "/data/my dumps/it's here"  # a space and a single quote


def make(*args: str, dry_run: bool = True, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO),
                           *(["-n"] if dry_run else []), f"PY={sys.executable}", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def command_words(target: str, **variables: str) -> list[str]:
    """The words the shell gets from `make -n target VAR=value ...` (one recipe line)."""
    result = make(target, *(f"{name}={value}" for name, value in variables.items()))
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout.replace("\\\n", " "))


@pytest.mark.parametrize("target, variables, expected", [
    ("preprocess", {"OUT": ODD, "DUMP": f"{ODD}/dump.xml.bz2"},
     [f"--output_dir={ODD}", f"--dump={ODD}/dump.xml.bz2"]),
    ("preprocess", {"RESULTS": f"{ODD}/results"}, [f"--results_text={ODD}/results"]),
    ("download", {"DIR": ODD, "FROM_DIR": f"{ODD}/r2"},
     [f"--output_dir={ODD}", f"--from_dir={ODD}/r2"]),
    ("upload", {"OUT": ODD, "BUCKET": "gs://bucket/prefix"},
     [f"--source_dir={ODD}", "--bucket=gs://bucket/prefix"]),
    ("verify", {"DIR": ODD}, [ODD]),
    ("train", {"DATA": ODD, "TRAIN_OUT": f"{ODD}/run", "INIT_CHECKPOINT": f"{ODD}/model.ckpt"},
     [f"--data_dir={ODD}", f"--output_dir={ODD}/run", f"--init_checkpoint={ODD}/model.ckpt"]),
    ("bench-data", {"OUT": ODD, "REFERENCE_DIR": f"{ODD}/ref"},
     [f"--reference_dir={ODD}/ref", f"--text_dir={ODD}/text",
      f"--part={ODD}/results/part-00000-of-00500"]),
    ("bench-train", {"REFERENCE_DIR": f"{ODD}/ref"}, [f"--reference_dir={ODD}/ref/.."]),
    ("export-step", {"STEP_OUT": ODD}, [f"--output_dir={ODD}"]),
    ("time-step", {"STEP_OUT": ODD}, [ODD]),
])
def test_path_variables_reach_the_script_as_one_argument(target, variables, expected):
    words = command_words(target, **variables)
    for word in expected:
        assert word in words, words


def test_extra_args_still_split_into_flags():
    words = command_words("preprocess", PREPROCESS_ARGS="--dupe_factor=2 --max_seq_length=128")
    assert "--dupe_factor=2" in words and "--max_seq_length=128" in words


def test_make_preprocess_with_spaces_in_dump_and_out(tmp_path):
    folder = tmp_path / "my dumps" / "it's here"
    folder.mkdir(parents=True)
    dump = folder / "sample dump.xml.bz2"
    shutil.copy(cleanup_scripts.SAMPLE_DUMP, dump)
    out = folder / "data set"
    result = make("preprocess", f"DUMP={dump}", f"OUT={out}", "NWORKER=2",
                  "PREPROCESS_ARGS=--num_test_articles=20 --block_size=1.5 --dupe_factor=1 "
                  "--max_seq_length=128 --max_predictions_per_seq=20 --num_eval_examples=100",
                  dry_run=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "manifest.tsv").is_file()
    assert (out / "tfrecords" / "eval_10k").is_file()


def test_errors_through_make_name_the_make_variable_the_user_typed(tmp_path):
    result = make("train", "PRESET=v3-128", f"TRAIN_OUT={tmp_path}/run", dry_run=False)
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and lines[-1].startswith("make: *** ")
    assert lines[-2] == (
        "error: --preset=v3-128: DATA (--data_dir) is required (input_file is {data}/part-*)")


def test_flags_are_named_as_make_variables_only_where_make_set_them(monkeypatch):
    message = "--data_dir is required; --output_dir=x: bad; --data_dir_other"
    assert name_make_variables(message) == message  # not run by make
    monkeypatch.setenv(MAKE_VARIABLES, "--data_dir=DATA --output_dir=TRAIN_OUT")
    assert name_make_variables(message) == \
        "DATA (--data_dir) is required; --output_dir=x: bad; --data_dir_other"


def test_plain_make_lists_the_targets_and_their_variables_instead_of_installing():
    result = make(dry_run=False)
    assert result.returncode == 0 and "pip" not in result.stdout
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ")}
    phony = (REPO / "Makefile").read_text().split(".PHONY:")[1].splitlines()[0].split()
    assert listed == set(phony) - {"help"}
    assert make("help", dry_run=False).stdout == result.stdout
    train = next(line for line in result.stdout.splitlines() if line.startswith("  train "))
    assert "DATA" in train and "TRAIN_OUT" in train and "PRESET" in train
