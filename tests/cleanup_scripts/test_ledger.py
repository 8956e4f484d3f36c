"""Ledgers of finished outputs: what counts as intact, torn lines, writers in several processes."""
from __future__ import annotations

import multiprocessing
import os

from cleanup_scripts.ledger import OutputLedger


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
