"""verify: ok / differs / missing per known artifact, and the eval-hash match count."""
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from benchmark import files
from benchmark.errors import exit_on_user_error
import cleanup_scripts
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts import verify, verify_dir
from cleanup_scripts.pipeline.layout import DatasetLayout
from cleanup_scripts.pipeline.ledger import Entry, write_manifest
from tests.conftest import run_module

OFFICIAL_EVAL_MD5 = checksums.CHECKSUMS_DIR / checksums.EVAL_ARTICLES_FILE


def statuses(findings):
    return {finding.artifact.path: finding.status for finding in findings}


@pytest.fixture
def dataset_dir(tmp_path):
    """Our output layout: vendored config and vocab, the official eval.md5 as results/."""
    shutil.copy(cleanup_scripts.VOCAB_FILE, tmp_path / "vocab.txt")
    shutil.copy(cleanup_scripts.BERT_CONFIG_FILE, tmp_path / "bert_config.json")
    (tmp_path / "results").mkdir()
    shutil.copy(OFFICIAL_EVAL_MD5, tmp_path / "results" / "eval.md5")
    return tmp_path


def test_md5_helpers(tmp_path):
    path = tmp_path / "data"
    payload = bytes(range(256)) * 9000  # more than one chunk
    path.write_bytes(payload)
    assert files.md5_file(path) == hashlib.md5(payload).hexdigest()
    assert files.verify_file(path, hashlib.md5(payload).hexdigest().upper())
    assert not files.verify_file(path, "0" * 32)
    assert not files.verify_file(tmp_path / "absent", "0" * 32)


def test_reports_ok_and_missing(dataset_dir):
    found = statuses(verify_dir.check_directory(dataset_dir))
    assert found["vocab.txt"] == "ok"
    assert found["bert_config.json"] == "ok"
    assert found["results/eval.md5"] == "ok"
    assert found["results/eval.txt"] == "missing"
    assert found["tf1_ckpt/model.ckpt-28252.index"] == "missing"
    assert found["text/FE/wiki_00"] == "missing"
    assert set(found.values()) == {"ok", "missing"}


def test_reports_differs_by_size_and_by_md5(dataset_dir):
    (dataset_dir / "results" / "eval.txt").write_text("not the eval set\n")
    vocab = bytearray(cleanup_scripts.VOCAB_FILE.read_bytes())
    vocab[0] ^= 1  # same size, other md5
    (dataset_dir / "vocab.txt").write_bytes(bytes(vocab))
    findings = {f.artifact.path: f for f in verify_dir.check_directory(dataset_dir)}
    assert findings["results/eval.txt"].status == "differs"
    assert "expected 32851144" in findings["results/eval.txt"].detail
    assert findings["vocab.txt"].status == "differs"
    assert "expected 64800d5d8528ce344256daf115d4965e" in findings["vocab.txt"].detail


def test_cli_counts_official_eval_hashes_and_exits_zero(dataset_dir, capsys):
    verify.main([str(dataset_dir)])
    out = capsys.readouterr().out
    assert "ok       vocab.txt" in out
    assert "missing  tf2_ckpt/model.ckpt-28252.index" in out
    assert "results/eval.md5: 10000 of its 10000 hashes are official" in out
    assert "3 ok, 0 differ, 36 missing" in out


def test_cli_exits_one_when_something_differs(dataset_dir, capsys):
    (dataset_dir / "bert_config.json").write_text("{}\n")
    with pytest.raises(SystemExit) as exit_info:
        verify.main([str(dataset_dir), "--hide_missing"])
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert "differs  bert_config.json" in out
    assert "missing" not in out.split("\n")[0]


def test_partial_eval_md5_match_count(tmp_path):
    official = checksums.read_hash_list(OFFICIAL_EVAL_MD5)
    ours = official[:3] + [hashlib.md5(b"not an eval article").hexdigest()] * 2
    path = tmp_path / "eval.md5"
    path.write_text("\n".join(ours) + "\n")
    assert checksums.count_official_eval_hashes(path) == (3, 5)


def test_reference_layouts_are_recognised(tmp_path, capsys):
    (tmp_path / "wiki").mkdir()
    shutil.copy(cleanup_scripts.VOCAB_FILE, tmp_path / "wiki" / "vocab.txt")
    (tmp_path / "results4").mkdir()
    shutil.copy(OFFICIAL_EVAL_MD5, tmp_path / "results4" / "eval.md5")
    fe = tmp_path / "cleanup_scripts" / "text" / "FE"
    fe.mkdir(parents=True)
    (fe / "wiki_17").write_text("<doc>\n")
    findings = {f.artifact.path: f for f in verify_dir.check_directory(tmp_path)}
    assert findings["vocab.txt"].status == "ok"
    assert findings["results/eval.md5"].status == "ok"
    assert findings["text/FE/wiki_17"].status == "differs"
    with pytest.raises(SystemExit):
        verify.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "ok       vocab.txt  (at wiki/vocab.txt)" in out
    assert "results4/eval.md5: 10000 of its 10000" in out


def test_missing_directory_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        exit_on_user_error(lambda: verify.main([str(tmp_path / "absent")]))
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().endswith("absent: not a directory")


def preprocess_output(root: Path, rows: list[str]) -> Path:
    """A folder `make verify` takes for a preprocess output: .state/, text/a (listed first in
    its manifest.tsv), then `rows` (path, 1 byte, an md5); its manifest, with the records the
    manifest stage writes."""
    layout = DatasetLayout(root)
    layout.state_dir.mkdir(parents=True)
    (root / "text").mkdir()
    (root / "text" / "a").write_bytes(b"a")
    entry = Entry(1, 0, hashlib.md5(b"a").hexdigest())
    write_manifest(layout, {row: entry for row in ["text/a"] + rows})
    return layout.manifest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row, reason", [
    ("../../../../../../../../../..{secret}", "is not a plain relative path"),
    ("{secret}", "is an absolute path"),
    ("/dev/zero", "is an absolute path"),
    ("text/zero", "leads outside {root} (a link to /dev/zero)"),
    ("text/secret", "leads outside {root} (a link to {secret})"),
    ("text/fifo", "is a FIFO, not a regular file"),
])
def test_verify_refuses_a_manifest_row_leading_out_and_reads_nothing(tmp_path, row, reason):
    # Followed, such a row has `verify --rehash` hash /etc/hostname and print its md5, or read
    # /dev/zero for ever.
    secret = tmp_path / "secret"
    secret.write_text("root:$6$not-for-printing\n")
    root = tmp_path / "out"
    row = row.format(secret=secret)
    manifest = preprocess_output(root, [row])
    (root / "text" / "zero").symlink_to("/dev/zero")
    (root / "text" / "secret").symlink_to(secret)
    os.mkfifo(root / "text" / "fifo")
    result = run_module("cleanup_scripts.artifacts.verify", str(root), "--rehash", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {manifest}:3: '{row}' "
                                    f"{reason.format(root=root, secret=secret)}")
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("; not read\n")
    assert hashlib.md5(secret.read_bytes()).hexdigest() not in result.stdout + result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("preprocessed", [False, True])
def test_verify_never_follows_a_link_out_of_the_tree_nor_quotes_what_it_leads_to(
        tmp_path, preprocessed):
    # OUT/results/eval.md5 -> /etc/shadow: its first line must not reach the error.
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$not-for-printing\n")
    root = tmp_path / "out"
    if preprocessed:
        preprocess_output(root, [])
    (root / "results").mkdir(parents=True)
    (root / "results" / "eval.md5").symlink_to(secret)
    result = run_module("cleanup_scripts.artifacts.verify", str(root), check=False)
    assert result.returncode == 1
    assert result.stderr == (f"error: {root}: 'results/eval.md5' leads outside {root} (a link "
                             f"to {secret}); not read\n")
    assert "not-for-printing" not in result.stdout + result.stderr


@pytest.mark.timeout(60)
def test_verify_names_a_manifest_that_is_a_fifo(tmp_path):
    root = tmp_path / "out"
    manifest = preprocess_output(root, [])
    manifest.unlink()
    os.mkfifo(manifest)  # opened for reading, it would wait for a writer for ever
    result = run_module("cleanup_scripts.artifacts.verify", str(root), check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"error: {root}: 'manifest.tsv' is a FIFO, not a regular file; "
                             f"not read\n")


def one_error_line(result) -> str:
    """The `error:` line verify printed alone on stderr, with exit status 1 and no verdict."""
    assert result.returncode == 1 and "verify: " not in result.stdout, result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    return result.stderr.rstrip("\n")


@pytest.mark.parametrize("damage", ["emptied", "header only", "a row cut", "a row added",
                                    "no record", "ledger edited"])
def test_verify_refuses_a_manifest_that_is_not_the_one_the_build_wrote(tmp_path, damage):
    # An emptied manifest.tsv with the dataset deleted gave "verify: PASSED: 0 file(s)", exit 0.
    root = tmp_path / "out"
    manifest = preprocess_output(root, ["text/b"])
    (root / "text" / "b").write_bytes(b"a")
    layout = DatasetLayout(root)
    written = manifest.read_text()
    header, first, second = written.splitlines()
    cut = f"{header}\n{first}\n"
    if damage in ("emptied", "header only"):
        shutil.rmtree(root / "text")
        manifest.write_text("" if damage == "emptied" else header + "\n")
    elif damage == "a row cut":
        manifest.write_text(cut)
    elif damage == "a row added":
        (root / "text" / "c").write_bytes(b"a")
        manifest.write_text(written + second.replace("text/b", "text/c") + "\n")
    elif damage == "no record":  # the manifest stage did not finish, or an older version ran
        layout.manifest_record.unlink()
    else:
        ledger = layout.state_dir / "manifest.outputs"
        ledger.write_text(ledger.read_text().splitlines()[0] + "\n")
    line = one_error_line(run_module("cleanup_scripts.artifacts.verify", str(root), check=False))
    record = f"({layout.manifest_record}): changed since; delete it and run make preprocess " \
             f"again to rewrite it"
    expected = {
        "emptied": f"{manifest}: lists no files (a manifest lists every file of its dataset); "
                   f"not a dataset",
        "a row cut": f"{manifest}: {len(cut)} bytes, md5 "
                     f"{hashlib.md5(cut.encode()).hexdigest()}; the manifest "
                     f"stage wrote {len(written)} bytes, md5 "
                     f"{hashlib.md5(written.encode()).hexdigest()} {record}",
        "no record": f"{manifest}: no record of it in {layout.manifest_record}, so nothing shows "
                     f"it is the manifest the build wrote (its manifest stage did not finish, or "
                     f"an older version ran it): run make preprocess again",
        "ledger edited": f"{manifest}: lists 2 files, {layout.state_dir / 'manifest.outputs'} "
                         f"recorded 1 when it was written (first difference: text/b); delete "
                         f"it and run make preprocess again to rewrite it",
    }
    expected["header only"] = expected["emptied"]
    if damage == "a row added":
        assert line.startswith(f"error: {manifest}: {len(written) + len(second) + 1} bytes, md5 ")
        assert line.endswith(record)
    else:
        assert line == f"error: {expected[damage]}"


def test_verify_names_the_first_missing_files_and_counts_the_rest(tmp_path):
    # 300,000 missing rows printed 300,000 lines.
    root = tmp_path / "out"
    rows = [f"text/m{i:03d}" for i in range(45)]
    preprocess_output(root, rows)
    result = run_module("cleanup_scripts.artifacts.verify", str(root), check=False)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("missing ")] == [
        f"missing  {row}  [listed in manifest.tsv]" for row in rows[:20]]
    assert "... and 25 more missing or changed (not listed)" in lines
    assert "manifest.tsv: 1 of 46 files as recorded" in result.stdout
    assert lines[-1] == "verify: FAILED: 45 file(s) missing or changed since preprocess"
