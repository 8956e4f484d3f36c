"""What `make preprocess` prints: one line per stage and a progress bar on a terminal, nothing
per article or per file; and what `make verify` says about its output."""
from __future__ import annotations

import fcntl
import io
import logging
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

import cleanup_scripts
from cleanup_scripts.pipeline import runner
from cleanup_scripts.text import extract
from tests.cleanup_scripts.test_preprocess import first_run_console  # noqa: F401
from tests.conftest import REPO, run_module

STAGES = ("extract", "clean", "segment", "separate", "gather", "tfrecords", "eval_10k",
          "manifest")
SUMMARY = re.compile(r"^(\w+): \d+ files, \d+ records, [\d.]+ MB in [\d.]+ s ", re.MULTILINE)


def article_titles(text_dir: Path) -> list[str]:
    """The titles of every article extracted into `text_dir`."""
    return [title for path in sorted(text_dir.rglob("wiki_*"))
            for title in re.findall(r'<doc id="\d+" url="[^"]*" title="([^"]*)">',
                                    path.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def piped_run(first_run_console):
    """`make preprocess` on the embedded slice, stdout and stderr pipes (not a terminal): the
    run test_preprocess.py checks the dataset of."""
    return first_run_console


def test_nothing_per_article_or_file_reaches_the_console(piped_run):
    output, result = piped_run
    titles = article_titles(output / "text")
    assert len(titles) == 106
    console = result.stdout + result.stderr
    for title in titles:
        assert f"\t{title}" not in console and f"] {title}" not in console, title
    assert "WikiExtractor" not in console
    lines = result.stderr.splitlines()
    # Nothing besides the summaries: no absl warning line on every run that the slice's eval
    # set (fewer records than 10,000) is repeated, as the reference repeats them.
    assert [line for line in lines if not SUMMARY.match(line)] == []
    assert "fewer than the 10000 asked for" not in result.stderr
    assert result.stdout.splitlines() == [
        f"preprocess: done in {result.stdout.split()[3]} s; manifest {output}/manifest.tsv"]


def test_each_stage_prints_exactly_one_summary_line(piped_run):
    _, result = piped_run
    assert SUMMARY.findall(result.stderr) == list(STAGES)
    assert "runner.py" not in result.stderr  # was logged through absl too, so printed twice


def test_no_progress_bar_when_stderr_is_not_a_terminal(piped_run):
    _, result = piped_run
    assert "\r" not in result.stderr and "%|" not in result.stderr


def test_a_rerun_says_once_per_stage_that_it_was_skipped(piped_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(piped_run[0], output)
    result = run_module("cleanup_scripts.preprocess", f"--output_dir={output}", "--nworker=2")
    assert result.stderr.splitlines() == [
        f"{stage}: already done with these parameters, skipped" for stage in STAGES]


def run_on_a_terminal(*args: str) -> tuple[str, str]:
    """Run `python -m args` with stderr on a pseudo-terminal (120 columns); (stdout, what the
    terminal received)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen([sys.executable, "-m", *args], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    received = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the other end closed
                return
            if not data:
                return
            received.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    stdout = process.stdout.read().decode()
    assert process.wait(timeout=600) == 0
    reader.join(timeout=60)
    os.close(master)
    return stdout, b"".join(received).decode("utf-8", "replace")


def test_on_a_terminal_each_stage_shows_one_progress_bar_then_its_summary(tmp_path):
    _, terminal = run_on_a_terminal("cleanup_scripts.preprocess",
                                    f"--output_dir={tmp_path / 'dataset'}", "--nworker=2")
    for stage in STAGES:
        # Items done of their total (or pages so far), bytes with a rate, or records, and an ETA.
        bars = re.findall(rf"\r{stage}( \d+(/\d+)? \w+)?: +\d+%\|[^\r]*\| "
                          rf"[\d.]+\w?/[\d.]+\w? \[[\d:]+<[\d:?]+, [^\]]*/s\]", terminal)
        assert bars, (stage, terminal)
        assert len(re.findall(rf"^{stage}: \d+ files", terminal.replace("\r", "\n"),
                              re.MULTILINE)) == 1
    assert re.search(r"\rclean \d/3 files: .*B/s\]", terminal)
    assert re.search(r"\rextract \d+ pages: .*B/s\]", terminal)
    # Each bar is cleared before its summary line: the line ends as the summary alone.
    for line in terminal.split("\n"):
        visible = line.rstrip("\r").rsplit("\r", 1)[-1]
        assert "%|" not in visible, line
    assert "tokenizing" not in terminal and "instances" not in terminal  # no bar within a stage


def test_extract_alone_logs_no_article_even_when_the_caller_logs_info(tmp_path, capfd):
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # as absl's app.run leaves it
    try:
        result = extract.extract_dump(cleanup_scripts.SAMPLE_DUMP, tmp_path / "text",
                                      processes=2)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    captured = capfd.readouterr()
    assert result.pages == 106
    assert captured.out == "" and captured.err == ""


def test_extract_cli_prints_its_summary_and_nothing_per_article(tmp_path):
    result = run_module("cleanup_scripts.text.extract", f"--input={cleanup_scripts.SAMPLE_DUMP}",
                        f"--output_dir={tmp_path / 'text'}", "--processes=2")
    assert result.stdout == ""
    assert SUMMARY.findall(result.stderr) == ["extract"]
    assert len(result.stderr.splitlines()) == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _double(item: int) -> int:
    return 2 * item


@pytest.mark.parametrize("terminal", [True, False])
def test_stage_bar_is_drawn_only_on_a_terminal(monkeypatch, terminal):
    stream = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with runner.StageProgress("clean", 3, 3000) as bar:
        assert runner.active_stage_bar() is bar and runner.inner_bar_disabled() is True
        results = runner.map_in_workers(_double, [1, 2, 3], 1, desc="clean",
                                        sizes=[1000, 1000, 1000])
        bar.bar.refresh()  # drawn at most twice a second: draw the last state now
    assert results == [2, 4, 6] and bar.done == 3
    assert runner.active_stage_bar() is None and runner.inner_bar_disabled() is None
    drawn = stream.getvalue()
    if terminal:
        assert "clean 3/3 files: 100%" in drawn and "3.00k/3.00k" in drawn
        assert drawn.endswith("\r")  # cleared when the stage ends
    else:
        assert drawn == ""


def test_verify_on_a_preprocess_output_passes_and_says_what_it_checked(piped_run):
    output, _ = piped_run
    result = run_module("cleanup_scripts.artifacts.verify", str(output))
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{output}: a make preprocess output (from a dump)")
    assert "manifest.tsv: 11 of 11 files as recorded" in result.stdout
    assert "missing" not in result.stdout.replace("0 missing or changed", "")
    assert re.search(r"not here, as expected: 9 official inputs preprocess does not produce "
                     r"\(bert_config.json, vocab.txt, checkpoints, the dump: make download\), "
                     r"23 official outputs this build did not make", result.stdout)
    assert "7 differ (expected: a build from a dump is not byte-identical" in result.stdout
    differing = [line for line in lines if "differs" in line]
    assert len(differing) == 7 and all(line.startswith("differs (expected for a dump) ") for line in differing)
    # The verdict is the last line (the throughput summary goes to stderr before it).
    assert lines[-1] == ("verify: PASSED: 11 file(s) as recorded; 7 official value(s) differ, "
                         "as expected from a dump")


def test_verify_on_a_preprocess_output_fails_on_a_changed_or_missing_file(piped_run, tmp_path):
    output = tmp_path / "dataset"
    shutil.copytree(piped_run[0], output)
    part = output / "results" / "part-00000-of-00500"
    part.write_bytes(part.read_bytes()[:-1] + b"#")  # same size, another mtime
    (output / "tfrecords" / "eval_10k").unlink()
    result = run_module("cleanup_scripts.artifacts.verify", str(output), check=False)
    assert result.returncode == 1
    assert "changed  results/part-00000-of-00500  [md5 " in result.stdout
    assert "missing  tfrecords/eval_10k  [listed in manifest.tsv]" in result.stdout
    assert "manifest.tsv: 9 of 11 files as recorded" in result.stdout
    assert result.stdout.splitlines()[-1] == \
        "verify: FAILED: 2 file(s) missing or changed since preprocess"


def readme_by_hand_block() -> str:
    """The one-script-at-a-time block of docs/preprocess.md (the sh block after 'One script at a
    time')."""
    readme = (REPO / "docs" / "preprocess.md").read_text(encoding="utf-8")
    after = readme[readme.index("One script at a time on the"):]
    return after[after.index("```sh\n") + len("```sh\n"):after.index("\n```\n")]


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "activate").is_file(), reason="no .venv")
def test_readme_one_script_at_a_time_block_runs_as_written(tmp_path):
    for name in (".venv", "cleanup_scripts"):  # a checkout: the block runs from its root
        (tmp_path / name).symlink_to(REPO / name)
    result = subprocess.run(["bash", "-e", "-c", readme_by_hand_block()], cwd=tmp_path,
                            capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr[-3000:]
    work = tmp_path / "build" / "by-hand"
    for path in ("text/AA/wiki_02.4", "results/eval.md5", "results/part-00001-of-00500",
                 "tfrecords/part-00000-of-00500", "tfrecords/eval_10k"):
        assert (work / path).is_file(), path
    assert len((work / "results" / "eval.md5").read_text().split()) == 20


def test_help_is_for_users():
    result = run_module("cleanup_scripts.preprocess", "--help", check=False)  # absl: status 1
    assert result.stdout.startswith("`make preprocess`: a Wikipedia dump")
    assert "docstring" not in result.stdout and "run_pipeline" not in result.stdout
