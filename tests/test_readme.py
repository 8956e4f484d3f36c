"""The README and docs/ run as written: every command of their `sh` blocks is either run here,
in a scratch copy of the repository, or listed with the reason it cannot run offline on this
machine (a test fails on a command that is neither, so a new one cannot slip by untested). The
README stays a short guide: at most 25 KB, its first command block within its first 40 lines,
and every link into docs/ leads to a page and heading that exist."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Commands the default suite runs, in this order, in one scratch copy.
RUN = ["make smoke", "make preprocess", "make verify"]
# Commands the slow suite runs after RUN (minutes on 2 cores).
RUN_SLOW = ["make preprocess && make train", "make check LOG=build/train/demo/mlperf.log",
            'make train TRAIN_OUT=build/train/demo-eval TRAIN_ARGS="--do_eval --nodo_train '
            '--init_checkpoint=build/train/demo"']
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
README_MAX_BYTES = 25 * 1024
FIRST_COMMAND_BY_LINE = 40
# Why the other commands are not run here (a fragment of the command -> the reason).
NOT_RUN = {
    "make install": "it is how the suite's environment was made (CI runs it first)",
    "make test": "it is this suite",
    "MLPERF_RESULTS=": "needs local copies of the published results repositories",
    "make bench": "needs a checkout of mlcommons/training (the reference)",
    "DUMP=/data/": "needs the 18 GB Wikipedia dump",
    "DUMP=https://": "needs the network",
    "make download": "needs the network (the MLCommons R2 bucket)",
    "DIR=/data/bert": "needs the downloaded official artifacts",
    "BUCKET=gs://": "needs a GCS bucket (tests/cleanup_scripts/test_storage.py runs the same "
                    "code against the storage emulator)",
    "storage download gs://": "needs a GCS bucket (the emulator tests cover it)",
    "TPU=v3-128": "needs a TPU pod",
    "GPU=": "needs GPUs and the official checkpoint",
    "RESULTS=/data/": "needs the official results/ text (make download ARTIFACTS=results)",
    "--cpu_devices=2": "a second demo run (minutes); tests/reference run the mirrored path",
    "tensorboard --logdir": "a server that runs until it is stopped",
    "/data/bert/tfrecords": "needs the full dataset",
    "<org>": "a placeholder for the user's own submission",
    "training_results_v1.1": "needs the published results repository",
    "LOG=run.txt": "a placeholder for the user's own log",
    "PACK=1 && make train PACKED=1": "the demo's packed twin of the slow run (minutes)",
    "python -m cleanup_scripts.": "the one-script-at-a-time block: "
                                  "tests/cleanup_scripts/test_preprocess_console.py runs it",
    ". .venv/bin/activate && mkdir -p build/by-hand": "the same block",
    "for f in text/*/wiki_??": "the same block",
    "make export-step STEP_OUT=build/step-tiny": "minutes; tests/devtools export a smaller "
                                                 "update of the same model and time it",
    "make time-step STEP_OUT=build/step-tiny": "the same",
}


def commands(page: Path = README) -> list[str]:
    """Every command of a page's sh blocks (continuation lines joined, comments cut)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            command = " ".join(command.split("#", 1)[0].split())
            if command:
                found.append(command)
    return found


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    turned into hyphens."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_command_is_run_or_has_a_reason(page):
    unaccounted = [c for c in commands(page) if c not in RUN + RUN_SLOW
                   and not any(fragment in c for fragment in NOT_RUN)]
    assert unaccounted == []


def test_the_commands_the_suite_runs_are_on_the_pages():
    shown = {command for page in [README, *DOCS] for command in commands(page)}
    assert set(RUN + RUN_SLOW) <= shown
    assert set(RUN) <= set(commands(README))


def test_the_readme_is_a_short_guide_with_a_command_early():
    assert README.stat().st_size <= README_MAX_BYTES
    lines = README.read_text(encoding="utf-8").splitlines()
    assert "```sh" in lines[:FIRST_COMMAND_BY_LINE]


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_link_to_a_page_of_the_docs_resolves(page):
    text = page.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+\.md)(?:#([^)\s]+))?\)", text)
    if page == README:
        assert any(target.startswith("docs/") for target, _ in links)
    for target, anchor in links:
        linked = (page.parent / target).resolve()
        assert linked.is_file(), f"{page.name}: {target}"
        if anchor:
            assert anchor in heading_anchors(linked), f"{page.name}: {target}#{anchor}"
    for anchor in re.findall(r"\]\(#([^)\s]+)\)", text):
        assert anchor in heading_anchors(page), f"{page.name}: #{anchor}"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The tracked files of the repository, with its .venv, as a fresh clone would hold them."""
    root = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


def _run(command: str, cwd: Path, timeout: int) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    result = subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=env, text=True,
                            capture_output=True, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{output[-3000:]}"
    assert "Traceback" not in output, f"{command}\n{output[-3000:]}"
    return result.stdout


def test_the_quick_commands_run_as_written(checkout):
    smoke = _run(RUN[0], checkout, 600)
    assert "PASSED: 0 error(s)" in smoke and "success" in smoke
    _run(RUN[1], checkout, 300)
    assert (checkout / "build" / "dataset" / "tfrecords" / "eval_10k").is_file()
    _run(RUN[2], checkout, 300)


@pytest.mark.slow
def test_the_demo_commands_run_as_written(checkout):
    train, check, evaluate = [_run(command, checkout, 3600) for command in RUN_SLOW]
    assert "run_pretraining: success at step" in train
    assert "PASSED: 0 error(s)" in check
    assert "run_pretraining: evaluated at step" in evaluate
