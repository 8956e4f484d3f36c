"""Ledgers of finished outputs: what counts as intact, torn lines, writers in several processes."""
from __future__ import annotations

import logging
import multiprocessing
import os

import pytest

from cleanup_scripts.fileio import InputError
from cleanup_scripts.ledger import (LINE_LIMIT, STATE_LIMIT, DamagedState, OutputLedger,
                                    read_state)


def make_ledger(tmp_path) -> OutputLedger:
    (tmp_path / "state").mkdir()
    return OutputLedger(tmp_path / "state" / "stage.outputs", tmp_path)


def test_recorded_file_is_intact_until_its_bytes_change(tmp_path):
    ledger = make_ledger(tmp_path)
    output = tmp_path / "part"
    output.write_bytes(b"abc\n")
    ledger.record(output)
    assert ledger.intact(output, ledger.entries(), always_hash=True)
    os.utime(output, ns=(0, 0))  # touched, same bytes: hashed again, still intact
    assert ledger.damaged(always_hash=False) == []
    output.write_bytes(b"abd\n")
    assert ledger.damaged(always_hash=False) == ["part"]
    output.unlink()
    assert ledger.damaged(always_hash=False) == ["part"]


def test_same_size_and_mtime_is_trusted_unless_hashing_is_forced(tmp_path):
    ledger = make_ledger(tmp_path)
    output = tmp_path / "part"
    output.write_bytes(b"abc\n")
    ledger.record(output)
    stat = output.stat()
    output.write_bytes(b"xyz\n")
    os.utime(output, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ledger.damaged(always_hash=False) == []
    assert ledger.damaged(always_hash=True) == ["part"]


def test_unrecorded_file_is_not_finished_and_torn_line_is_ignored(tmp_path):
    ledger = make_ledger(tmp_path)
    done, torn = tmp_path / "done", tmp_path / "torn"
    done.write_bytes(b"1")
    torn.write_bytes(b"2")
    ledger.record(done)
    with open(ledger.path, "a") as out:
        out.write("torn\t1\t123")  # a writer killed mid-line
    entries = ledger.entries()
    assert set(entries) == {"done"}
    assert not ledger.intact(torn, entries, always_hash=False)
    ledger.reset()
    assert ledger.entries() == {}


def _record(args: tuple[OutputLedger, str]) -> None:
    ledger, path = args
    ledger.record(path)


def test_workers_in_several_processes_share_one_ledger(tmp_path):
    ledger = make_ledger(tmp_path)
    paths = []
    for index in range(300):
        path = tmp_path / f"out-{index:03d}"
        path.write_bytes(os.urandom(index))
        paths.append(str(path))
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_record, [(ledger, path) for path in paths], chunksize=1)
    assert len(ledger.path.read_text().splitlines()) == 300
    assert sorted(ledger.entries()) == [os.path.basename(p) for p in paths]
    assert ledger.damaged(always_hash=True) == []


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
        f"{state}: damaged state file ({problem}); removed: its stage runs again"]
    assert not state.exists()
    state.write_bytes(content)
    with pytest.raises(DamagedState, match=f"^{state}: damaged state file \\({problem}\\)$"):
        read_state(state, remove_damaged=False)
    assert state.exists()


def test_state_file_that_is_no_regular_file_is_named_and_never_opened(tmp_path):
    fifo = tmp_path / "clean"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    with pytest.raises(InputError, match=f"^{fifo}: state file is not a regular file; remove "
                                         "it and run again$"):
        read_state(fifo)
    assert read_state(tmp_path / "absent") is None
    (tmp_path / "key").write_text("5387f27dfc6f1c9dd3d32b5263666ee2")
    assert read_state(tmp_path / "key") == "5387f27dfc6f1c9dd3d32b5263666ee2"


def test_ledger_lines_too_long_or_not_utf8_are_skipped(tmp_path):
    ledger = make_ledger(tmp_path)
    output = tmp_path / "part"
    output.write_bytes(b"abc\n")
    ledger.record(output)
    with open(ledger.path, "ab") as handle:
        handle.write(b"x" * (3 * LINE_LIMIT) + b"\t4\t1\t" + b"0" * 32 + b"\n")
        handle.write(b"\xff\xfe\t4\t1\t" + b"0" * 32 + b"\n")
    assert list(ledger.entries()) == ["part", "\ufffd\ufffd"]
    assert ledger.damaged(always_hash=True) == ["\ufffd\ufffd"]
