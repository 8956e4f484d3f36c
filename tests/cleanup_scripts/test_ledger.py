"""State files of preprocess: ledgers, stage markers, damage."""
from __future__ import annotations

import logging
import os

import pytest

from benchmark.files import InputError
from cleanup_scripts.pipeline import ledger as state_files
from cleanup_scripts.pipeline.ledger import (STATE_LIMIT, DamagedState, Entry, OutputLedger,
                                             read_marker, read_state, write_entries, write_marker)


def make_ledger(tmp_path) -> OutputLedger:
    (tmp_path / "state").mkdir()
    return OutputLedger(tmp_path / "state" / "stage.outputs", tmp_path)


def test_an_entry_vouches_for_a_file_while_its_size_and_mtime_are_kept(tmp_path):
    ledger = make_ledger(tmp_path)
    output = tmp_path / "part"
    output.write_bytes(b"abc\n")
    write_entries(ledger.path, {"part": Entry.of(output)})
    entry = ledger.entries()["part"]
    assert entry == Entry.of(output) and entry.vouches_for(output)
    os.utime(output, ns=(0, 0))  # touched: no longer vouched for (a reader hashes it again)
    assert not entry.vouches_for(output)
    output.unlink()
    assert not entry.vouches_for(output)


def test_malformed_lines_are_skipped_and_a_ledger_is_replaced_whole(tmp_path):
    ledger = make_ledger(tmp_path)
    write_entries(ledger.path, {"done": Entry(1, 2, "0" * 32)})
    with open(ledger.path, "a") as out:
        out.write("torn\t1\t123\nbad\tsize\t1\t" + "0" * 32 + "\n")
    assert ledger.entries() == {"done": Entry(1, 2, "0" * 32)}
    write_entries(ledger.path, {"other": Entry(1, 2, "0" * 32)})
    assert ledger.entries() == {"other": Entry(1, 2, "0" * 32)}


def test_a_damaged_ledger_vouches_for_nothing(tmp_path, caplog):
    ledger = make_ledger(tmp_path)
    ledger.path.write_bytes(b"\xff\xfe\t4\t1\t" + b"0" * 32 + b"\n")
    with caplog.at_level(logging.WARNING):
        assert ledger.entries() == {}
    assert "damaged state file (not UTF-8 text)" in caplog.text
    assert OutputLedger(tmp_path / "absent", tmp_path).entries() == {}


# ---- stage markers -------------------------------------------------------------------------------

def test_marker_holds_the_key_and_each_output_with_its_size(tmp_path):
    (tmp_path / "text").mkdir()
    outputs = [tmp_path / "text" / "wiki_00", tmp_path / "manifest.tsv"]
    for index, path in enumerate(outputs):
        path.write_bytes(b"x" * index)
    marker = tmp_path / "extract"
    write_marker(marker, "5387f27dfc6f1c9dd3d32b5263666ee2", tmp_path, outputs)
    assert read_marker(marker, tmp_path) == ("5387f27dfc6f1c9dd3d32b5263666ee2",
                                   {"text/wiki_00": 0, "manifest.tsv": 1})
    marker.write_text("5387f27dfc6f1c9dd3d32b5263666ee2")  # a key alone: no outputs listed
    assert read_marker(marker, tmp_path) == ("5387f27dfc6f1c9dd3d32b5263666ee2", {})


def test_marker_with_a_malformed_line_counts_as_never_written(tmp_path, caplog):
    marker = tmp_path / "clean"
    marker.write_text("5387f27dfc6f1c9dd3d32b5263666ee2\ntext/AA/wiki_00\tmany\n")
    with caplog.at_level(logging.WARNING):
        assert read_marker(marker, tmp_path) is None
    assert [record.getMessage() for record in caplog.records] == [
        f"{marker}: damaged state file (not a stage record); removed: it counts as never "
        f"written, so its work is redone"]
    assert not marker.exists()


# ---- state files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("content, problem", [
    (b"\xff\xfe5387f27dfc6f1c9dd3d32b5263666e", "not UTF-8 text"),
    (b"5387f27d\x00fc6f1c9dd3d32b5263666ee2", "NUL bytes"),
    (b"0" * (STATE_LIMIT + 1), "longer than a state file can be"),
])
def test_damaged_state_file_counts_as_never_written(tmp_path, caplog, content, problem):
    state = tmp_path / "clean"
    state.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert read_state(state) is None
    assert [record.getMessage() for record in caplog.records] == [
        f"{state}: damaged state file ({problem}); removed: it counts as never written, so its "
        f"work is redone"]
    assert not state.exists()
    state.write_bytes(content)
    with pytest.raises(DamagedState, match=f"^{state}: damaged state file \\({problem}\\)$"):
        read_state(state, remove_damaged=False)
    assert state.exists()


def test_state_file_that_is_no_regular_file_is_named_and_never_opened(tmp_path):
    fifo = tmp_path / "clean"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    with pytest.raises(InputError, match=f"^{fifo}: is a FIFO, not a regular file; not read$"):
        read_state(fifo)
    assert read_state(tmp_path / "absent") is None
    (tmp_path / "key").write_text("5387f27dfc6f1c9dd3d32b5263666ee2")
    assert read_state(tmp_path / "key") == "5387f27dfc6f1c9dd3d32b5263666ee2"


def test_a_manifest_is_read_bounded_and_one_line_when_it_cannot_be(tmp_path, monkeypatch):
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text(state_files.MANIFEST_HEADER + f"text/a\t3\t{'0' * 32}\n")
    assert state_files.read_manifest_rows(manifest) == [(2, "text/a", 3, "0" * 32)]
    monkeypatch.setattr(state_files, "MANIFEST_MAX_BYTES", 20)
    with pytest.raises(InputError,
                       match=r"manifest.tsv: is 57 bytes, over the limit of 20 bytes; not read"):
        state_files.read_manifest_rows(manifest)
    monkeypatch.undo()
    manifest.write_bytes(b"path\tbytes\tmd5\n\xff\n")
    with pytest.raises(InputError, match=r"manifest.tsv: cannot read the manifest \(not UTF-8"):
        state_files.read_manifest_rows(manifest)
    manifest.unlink()
    os.mkfifo(manifest)  # never opened: nothing blocks
    with pytest.raises(InputError, match=r"manifest.tsv: is a FIFO, not a regular file"):
        state_files.read_manifest_rows(manifest)


@pytest.mark.parametrize("listed, reason", [
    ("../victim.txt", "is not a plain relative path"),
    ("{victim}", "is an absolute path"),
    ("text/out/victim.txt", "leads outside {root} (a link to {victim})"),
    ("text/fifo", "is a FIFO, not a regular file"),
])
def test_marker_naming_a_path_outside_its_tree_is_one_line_naming_the_record(tmp_path, listed,
                                                                             reason):
    root, victim = tmp_path / "out", tmp_path / "victim.txt"
    victim.write_text("not ours\n")
    (root / "text").mkdir(parents=True)
    (root / "text" / "out").symlink_to(tmp_path)
    os.mkfifo(root / "text" / "fifo")
    marker = root / "clean"
    marker.write_text(f"5387f27dfc6f1c9dd3d32b5263666ee2\ntext/AA/wiki_00\t3\n"
                      f"{listed.format(victim=victim)}\t3\n")
    with pytest.raises(InputError) as raised:
        read_marker(marker, root)
    assert str(raised.value).startswith(
        f"{marker}:3: '{listed.format(victim=victim)}' "
        f"{reason.format(root=root, victim=victim)}")
    assert str(raised.value).endswith("; not read")
    assert marker.exists() and victim.read_text() == "not ours\n"
