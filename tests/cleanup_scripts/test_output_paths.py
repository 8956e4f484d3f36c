"""The record tools never replace an input, a link or a special file with their output:
create_pretraining_data, pick_eval_samples and the packer refuse, in one line and before
anything is read, an output that is their input (the same path or a hard link), a symbolic
link, a FIFO or a character device; the path stays as it was. Before: exit 0, the input
replaced by records made from it, and as root `--output_file=/dev/null` made /dev/null a
regular file (here a FIFO and a device node of our own stand in for it). Their temporaries
are created anew, never through a link planted at their name."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from benchmark.files import atomic_output, temporary_name
from cleanup_scripts.create_pretraining_data import write_pretraining_data
from tests.conftest import md5_of, run_module
from tests.pretraining_cases import FIXTURES

SEQ, PRED = 128, 20
TEXT = FIXTURES / "one-doc.txt"


def _records(tmp_path: Path) -> Path:
    """A real TFRecord file of create_pretraining_data's (SEQ, PRED)."""
    path = tmp_path / "records.tfrecord"
    write_pretraining_data([str(TEXT)], [str(path)], max_seq_length=SEQ,
                           max_predictions_per_seq=PRED, dupe_factor=2)
    return path


def _command(tool: str, source: Path, output: Path) -> list[str]:
    """The module and flags that make `tool` read `source` and write `output`."""
    sizes = [f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}"]
    if tool == "create":
        return ["cleanup_scripts.create_pretraining_data", f"--input_file={source}",
                f"--output_file={output}", *sizes]
    if tool == "pick":
        return ["cleanup_scripts.pick_eval_samples", f"--input_tfrecord={source}",
                f"--output_tfrecord={output}", "--num_examples_to_pick=3", *sizes]
    return ["cleanup_scripts.pack_pretraining_data", f"--input_file={source}",
            f"--output_file={output}", "--nworker=1", *sizes]


def _input(tool: str, tmp_path: Path) -> Path:
    """A copy of `tool`'s input in tmp_path/in (text or records)."""
    folder = tmp_path / "in"
    folder.mkdir()
    source = folder / "input"
    source.write_bytes(TEXT.read_bytes() if tool == "create" else _records(tmp_path).read_bytes())
    return source


def _state(path: Path) -> tuple:
    """What is at `path`, not followed: its kind and, for a link, where it leads."""
    info = path.lstat()
    return stat.S_IFMT(info.st_mode), os.readlink(path) if path.is_symlink() else None


def _assert_refused(result, line: str) -> None:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == line and "Traceback" not in result.stderr
    assert result.stderr.count("error:") == 1


@pytest.mark.parametrize("tool, flag", [("create", "--output_file"),
                                        ("pick", "--output_tfrecord")])
@pytest.mark.parametrize("same", ["path", "hard link"])
def test_an_output_that_is_the_input_is_refused(tmp_path, tool, flag, same):
    source = _input(tool, tmp_path)
    output = source
    if same == "hard link":
        output = tmp_path / "hard"
        os.link(source, output)
    before = md5_of(source)
    result = run_module(*_command(tool, source, output), check=False)
    _assert_refused(result, f"error: {flag}: {output}: is the input {source} (the same file); "
                            "writing it would replace that input")
    assert md5_of(source) == before and sorted(os.listdir(source.parent)) == ["input"]


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a FIFO, not a regular file; an output never replaces it: remove it or name " \
           "another path"


def _device(path: Path) -> str:
    try:  # /dev/null's numbers, in a node of our own (root: the tests run as root)
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return "is a character device, not a regular file; an output never replaces it: remove " \
           "it or name another path"


def _link(path: Path) -> str:
    victim = path.with_name("victim")
    victim.write_text("not an output\n")
    path.symlink_to(victim)
    return f"is a symbolic link (to {victim}); outputs are never written through a link: " \
           "remove it or name another path"


@pytest.mark.parametrize("tool", ["create", "pick", "pack"])
@pytest.mark.parametrize("plant", [_fifo, _device, _link], ids=["fifo", "device", "link"])
def test_an_output_that_is_a_special_file_or_a_link_is_left_as_it_is(tmp_path, tool, plant):
    source = _input(tool, tmp_path)
    output = tmp_path / "out"
    problem = plant(output)
    before = _state(output)
    result = run_module(*_command(tool, source, output), check=False)
    _assert_refused(result, f"error: {output}: {problem}")
    assert _state(output) == before
    assert not [name for name in os.listdir(tmp_path) if ".partial-" in name]
    if output.is_symlink():
        assert output.read_text() == "not an output\n"


def test_a_link_planted_at_a_temporary_name_is_never_written_through(tmp_path):
    # Opened through the link, the temporary `.NAME.partial-PID` (a name anyone can foresee)
    # would give the link's target the output, and the link would be renamed to NAME.
    victim, output = tmp_path / "victim", tmp_path / "out.txt"
    victim.write_text("not an output\n")
    temporary_name(output).symlink_to(victim)
    with atomic_output(output) as out:
        out.write("the output\n")
    assert victim.read_text() == "not an output\n"
    assert not output.is_symlink() and output.read_text() == "the output\n"
    assert sorted(os.listdir(tmp_path)) == ["out.txt", "victim"]
