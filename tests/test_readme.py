"""The README and docs/ run as written: every command of their `sh` blocks is either run here,
in a scratch copy of the repository, or listed with the reason it cannot run offline on this
machine (a test fails on a command that is neither, so a new one cannot slip by untested).

What the pages show a command printing matches what it prints. An output excerpt is a `text`
block whose first line is `$ <command>`; each of its other lines, but `...`, must be a line of
that command's output, in the same order (lines the excerpt leaves out may fall anywhere). Both
sides are compared with what changes from run to run masked (`masked`): the checkout's path,
dates, versions, durations, rates, sizes, decimals and the step a timed progress line lands on.
The excerpts of the commands the suite runs are compared with their output; any other excerpt
is listed with the reason it is not.

The README stays a short guide: at most 25 KB, its first command block within its first 40
lines, and every link into docs/ leads to a page and heading that exist."""
from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import with_machine_threads

REPO = Path(__file__).resolve().parents[1]
# Commands the default suite runs, in this order, in one scratch copy.
RUN = ["make smoke", "make preprocess", "make verify"]
# Commands the slow suite runs after RUN (minutes on 2 cores).
RUN_SLOW = ["make preprocess && make train", "make check LOG=build/train/demo/mlperf.log",
            'make train TRAIN_OUT=build/train/demo-eval TRAIN_ARGS="--do_eval --nodo_train '
            '--init_checkpoint=build/train/demo"']
# The command of an output excerpt (its `$` line) -> the command of RUN or RUN_SLOW whose
# output it shows.
EXCERPT_OF = {"make smoke": "make smoke", "make preprocess": "make preprocess",
              "make train": "make preprocess && make train",
              "make check LOG=build/train/demo/mlperf.log":
                  "make check LOG=build/train/demo/mlperf.log"}
# Why the other excerpts are not compared (a line of the excerpt -> the reason).
NOT_COMPARED = {
    "^C": "needs a Ctrl-C mid-run: tests/reference/test_run_pretraining.py interrupts a run "
          "and checks the line it prints",
}
# Where the excerpts show the checkout (the output shows the scratch copy's path).
SHOWN_CHECKOUT = "~/mlperf-bert"
# What changes from run to run, masked on both sides: (pattern, replacement), in this order.
MASKS = [
    (r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?", "<date>"),
    (r"\b\d+\.\d+\.\d+\b", "<version>"),
    (r"^step \d+/(\d+) \| [\d,]+ samples", r"step <n>/\1 | <n> samples"),  # printed by time
    (r"\b(\d+h)?(\d+m)?\d+s\b", "<time>"),
    (r"\b\d[\d,]*(\.\d+)? ?(samples/s|MB/s|GB/s|steps/s)", "<rate>"),
    (r"\b\d[\d,]*(\.\d+)? ?(KB|MB|GB|KiB|MiB|GiB)\b", "<size>"),
    (r"\b\d[\d,]*(\.\d+)? ?(s|ms|min)\b", "<time>"),
    (r"\b\d[\d,]*\.\d+", "<x>"),
]
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


def excerpts(page: Path = README) -> list[tuple[str, list[str]]]:
    """(command, the lines shown after its `$` line) of each output excerpt of a page: a `text`
    block whose first line is `$ <command>`. A `text` block without it gives ("", lines)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```text\n(.*?)```", text, re.S):
        lines = block.splitlines()
        if lines and lines[0].startswith("$ "):
            found.append((lines[0][2:].strip(), lines[1:]))
        else:
            found.append(("", lines))
    return found


def masked(line: str) -> str:
    """`line` with runs of spaces made one, its ends stripped and `MASKS` applied."""
    line = " ".join(line.split())
    for pattern, replacement in MASKS:
        line = re.sub(pattern, replacement, line)
    return line


def excerpt_mismatch(shown: list[str], output: str, checkout: Path | None = None) -> str | None:
    """Why the excerpt lines `shown` are not lines of `output` in order (None: they are): the
    first shown line found nowhere after the previous one, with the closest output line.
    `checkout`, where it appears in the output, reads as SHOWN_CHECKOUT."""
    if checkout is not None:
        output = output.replace(str(checkout), SHOWN_CHECKOUT)
    printed = [masked(line) for line in output.splitlines()]
    at = 0
    for line in shown:
        if line.strip() == "...":
            continue
        wanted = masked(line)
        try:
            at = printed.index(wanted, at) + 1
        except ValueError:
            closest = difflib.get_close_matches(wanted, printed[at:], n=1, cutoff=0)
            return (f"shown, not printed (after output line {at}): {wanted!r}; closest: "
                    f"{closest[0] if closest else None!r}")
    return None


def assert_excerpts_match(command: str, output: str, checkout: Path) -> None:
    """Every excerpt of the README and docs/ that shows `command`'s output (`EXCERPT_OF`)
    matches `output` (`excerpt_mismatch`); excerpts of another run of it (`NOT_COMPARED`: a
    Ctrl-C) are left out."""
    for page in [README, *DOCS]:
        for shown_command, shown in excerpts(page):
            if EXCERPT_OF.get(shown_command) == command and \
                    not any(line in NOT_COMPARED for line in shown):
                problem = excerpt_mismatch(shown, output, checkout)
                assert problem is None, f"{page.name}, $ {shown_command}: {problem}"


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


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_output_excerpt_is_compared_or_has_a_reason(page):
    for command, shown in excerpts(page):
        assert command in EXCERPT_OF or any(line in NOT_COMPARED for line in shown), \
            f"{page.name}: an excerpt of {command or 'no $ command'!r}"


def test_an_excerpt_matches_by_its_words_with_what_varies_masked():
    printed = ("extract: 3 files, 106 records, 1.8 MB in 2.4 s (0.75 MB/s), peak RSS 98 MB\n"
               "noise\nstep 31/320 | 992 samples | 9.7 samples/s | next eval in 2m03s (at 1,600)"
               "\nmlperf.log success    3.02      320      0.0551   1   0    True\n")
    shown = ["extract: 3 files, 106 records, 1.7 MB in 1.9 s (0.90 MB/s), peak RSS 102 MB", "...",
             "step 23/320 | 736 samples | 11.5 samples/s | next eval in 1m14s (at 1,600)",
             "mlperf.log success 0.78 320 0.0550 1 0 True"]
    assert excerpt_mismatch(shown, printed) is None
    for i, line in enumerate(shown):
        for changed in (line.replace("records", "lines"), line.replace("106", "107"),
                        line.replace("(at 1,600)", "(at 3,200)"), line.replace("True", "False")):
            if changed != line:
                assert excerpt_mismatch(shown[:i] + [changed] + shown[i + 1:], printed)
    assert excerpt_mismatch(list(reversed(shown)), printed)  # the order counts


# Paths outside a checkout: a developer's (homes, work folders) or beside the repository; on the
# pages also scratch folders (the tests give /tmp itself as a folder that exists).
OUTSIDE = r"(?<![\w.~])(/home/|/work/|/root/|\.\./shared\b)"
OUTSIDE_ON_PAGES = re.compile(OUTSIDE[:-1] + r"|/tmp/)")


def test_no_page_or_module_names_a_path_outside_the_repository():
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "README.md", "docs", "*.py"],
                             check=True, capture_output=True, text=True).stdout.split()
    named = [f"{name}:{number}: {line.strip()}" for name in tracked
             if name != "tests/test_readme.py" and (REPO / name).is_file()
             for number, line in enumerate(
                 (REPO / name).read_text(encoding="utf-8").splitlines(), 1)
             if re.search(OUTSIDE_ON_PAGES if name.endswith(".md") else OUTSIDE, line)]
    assert named == []
    for page in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)\s#:]+)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).resolve().is_relative_to(REPO), f"{page.name}: {target}"


def test_the_makefile_lines_the_pages_show_are_those_of_their_targets():
    lines = (REPO / "Makefile").read_text(encoding="utf-8").splitlines()
    for page in [README, *DOCS]:
        for number, target in re.findall(r"\[Makefile:(\d+): ([\w-]+)\]", page.read_text()):
            rule = next(line for line in reversed(lines[:int(number) - 1])
                        if not line.startswith("\t"))
            assert lines[int(number) - 1].startswith("\t") and rule.startswith(f"{target}:"), \
                f"{page.name}: Makefile:{number} is no recipe line of {target}"


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


def _run(command: str, cwd: Path, timeout: int, machine_threads: bool = False) -> str:
    """What `command` prints (stdout and stderr in the order written), run in `cwd`; it must
    exit 0 without a traceback, and the excerpts of its output must match. With
    `machine_threads`, TensorFlow's intra-op threads are the machine's, not the suite's one."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    if machine_threads:
        with_machine_threads(env)
    env["PYTHONUNBUFFERED"] = "1"  # the order a terminal shows
    result = subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    output = result.stdout
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{output[-3000:]}"
    assert "Traceback" not in output, f"{command}\n{output[-3000:]}"
    assert_excerpts_match(command, output, cwd)
    return output


def test_the_quick_commands_run_as_written(checkout):
    smoke = _run(RUN[0], checkout, 600)
    assert "PASSED: 0 error(s)" in smoke and "success" in smoke
    assert "imported with oneDNN on" not in smoke  # repeatable: oneDNN off before the import
    _run(RUN[1], checkout, 300)
    assert (checkout / "build" / "dataset" / "tfrecords" / "eval_10k").is_file()
    _run(RUN[2], checkout, 300)


@pytest.mark.slow
def test_the_demo_commands_run_as_written(checkout):
    # The demo's training is most of `make test-all`'s time; on every core, as users run it.
    train, check, evaluate = [_run(command, checkout, 3600, machine_threads=True)
                              for command in RUN_SLOW]
    assert "run_pretraining: success at step" in train
    assert "PASSED: 0 error(s)" in check
    assert "run_pretraining: evaluated at step" in evaluate
