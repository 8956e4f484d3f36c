"""gs:// storage against a real GCS emulator (gcp-storage-emulator) on 127.0.0.1: upload,
bucket verification, a corrupted object, transfers killed with SIGKILL and resumed, and
TensorFlow reading a gs:// TFRecord."""
from __future__ import annotations

import datetime
import hashlib
import http.server
import os
import re
import resource
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

pytest.importorskip("gcp_storage_emulator", reason="the GCS emulator (test extra) is needed")
google_crc32c = pytest.importorskip("google_crc32c")

from benchmark.files import InputError  # noqa: E402
import cleanup_scripts  # noqa: E402
from cleanup_scripts.artifacts import checksums  # noqa: E402
from cleanup_scripts.artifacts import storage, transfer, verify_bucket  # noqa: E402
from cleanup_scripts.pipeline.layout import DatasetLayout  # noqa: E402
from cleanup_scripts.pipeline.ledger import Entry, write_manifest  # noqa: E402
from tests.cleanup_scripts.range_server import loopback  # noqa: E402
from tests.conftest import REPO, md5_of, run_module  # noqa: E402

OFFICIAL_EVAL_MD5 = checksums.CHECKSUMS_DIR / checksums.EVAL_ARTICLES_FILE
SUBPROCESS_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.005):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """A gcp-storage-emulator process on a free 127.0.0.1 port, in memory; its base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("emulator") / "emulator.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
             "--port", str(port), "--in-memory", "-q"],
            stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
    endpoint = f"http://127.0.0.1:{port}"

    def healthy():
        assert process.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(endpoint + "/", timeout=1) as response:
                return response.read() == b"OK"
        except OSError:
            return False

    try:
        wait_for(healthy, 20, "the emulator to start", 0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def bucket(emulator, monkeypatch):
    """A new, empty bucket on the emulator; STORAGE_EMULATOR_HOST points there (and so for
    the subprocesses the test starts)."""
    monkeypatch.setenv(storage.EMULATOR_ENV, emulator)
    name = f"test-{uuid.uuid4().hex[:12]}"
    storage.make_client().create_bucket(name)
    return name


def tfrecord(records: list[bytes]) -> bytes:
    """TFRecord framing: length, masked crc32c of the length, data, masked crc32c of the data."""
    def masked_crc(data: bytes) -> bytes:
        crc = google_crc32c.value(data)
        return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    out = bytearray()
    for record in records:
        length = struct.pack("<Q", len(record))
        out += length + masked_crc(length) + record + masked_crc(record)
    return bytes(out)


TF_RECORDS = [f"record {i}: {'x' * i}".encode() for i in range(50)]


@pytest.fixture
def dataset(tmp_path) -> Path:
    """A small prepared dataset: official config, vocab and eval.md5, a text file, a results
    part and a TFRecord, with the manifest.tsv that `make preprocess` writes and its records
    in .state/."""
    root = tmp_path / "dataset"
    files = {
        "bert_config.json": cleanup_scripts.BERT_CONFIG_FILE.read_bytes(),
        "vocab.txt": cleanup_scripts.VOCAB_FILE.read_bytes(),
        "results/eval.md5": OFFICIAL_EVAL_MD5.read_bytes(),
        "results/part-00100-of-00500":
            (REPO / "tests" / "fixtures" / "wiki-extracted" / "wiki_00").read_bytes(),
        "text/AA/wiki_00": b"<doc id=\"1\">\nTitle\n\nText.\n</doc>\n",
        "tfrecords/part-00100-of-00500": tfrecord(TF_RECORDS),
    }
    for relative, payload in sorted(files.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
    (root / ".state").mkdir()
    (root / ".state" / "manifest").write_text("a stage marker, not uploaded\n")
    record_manifest(root)
    return root


def record_manifest(root: Path) -> None:
    """Write `root`'s manifest.tsv and its records, as the manifest stage of `make preprocess`
    does, listing every file but `.state/` and the manifest."""
    listed = sorted(path for path in root.rglob("*") if path.is_file()
                    and path.name != "manifest.tsv" and ".state" not in path.parts)
    write_manifest(DatasetLayout(root), {path.relative_to(root).as_posix(): Entry.of(path)
                                         for path in listed})


def bucket_md5s(url: str) -> dict[str, str | None]:
    return {path: remote.md5 for path, remote in
            storage.list_objects(storage.parse_gcs_url(url)).items()}


# ----------------------------------------------------------------------------------------------


def test_gs_urls_parse_and_md5s_convert():
    assert storage.parse_gcs_url("gs://bkt") == storage.GcsUrl("bkt", "")
    url = storage.parse_gcs_url("gs://bkt/data/bert/")
    assert url == storage.GcsUrl("bkt", "data/bert")
    assert url.child("results/eval.txt") == "gs://bkt/data/bert/results/eval.txt"
    assert str(url) == "gs://bkt/data/bert"
    for bad in ("bkt/data", "gs://", "gs:///x", "gs://bkt/../x"):
        with pytest.raises(InputError, match="not a gs://bucket/prefix URL"):
            storage.parse_gcs_url(bad)
    digest = hashlib.md5(b"abc").hexdigest()
    assert storage.md5_hex(storage.md5_base64(digest)) == digest
    assert storage.chunk_size_bytes(0.25) == 256 << 10
    assert storage.chunk_size_bytes(0.3) == 512 << 10


def test_upload_then_verify_the_bucket_copy(dataset, bucket):
    url = f"gs://{bucket}/bert"
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={dataset}", "--nworker=4")
    assert f"upload: 7 files to {url}: 7 transferred" in result.stdout
    assert "upload: 7 files, 7 records" in result.stderr  # the summary line, with MB and MB/s
    expected = {line.split("\t")[0]: line.split("\t")[2]
                for line in (dataset / "manifest.tsv").read_text().splitlines()[1:]}
    expected["manifest.tsv"] = md5_of(dataset / "manifest.tsv")
    assert bucket_md5s(url) == expected  # nothing hidden (.state/) went up

    again = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",

                       f"--source_dir={dataset}")
    assert "0 transferred, 7 already there with the right md5" in again.stdout

    verified = run_module("cleanup_scripts.artifacts.verify", url)
    assert "ok       vocab.txt" in verified.stdout
    assert "ok       bert_config.json" in verified.stdout
    assert "missing  tf1_ckpt/model.ckpt-28252.index" in verified.stdout
    assert "results/eval.md5: 10000 of its 10000 hashes are official" in verified.stdout
    assert "3 ok, 0 differ, 36 missing" in verified.stdout


def test_verify_names_a_corrupted_object_and_upload_repairs_it(dataset, bucket):
    url = f"gs://{bucket}/bert"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}")
    vocab = bytearray(cleanup_scripts.VOCAB_FILE.read_bytes())
    vocab[100] ^= 1  # same size, another md5
    client = storage.make_client()
    client.bucket(bucket).blob("bert/vocab.txt").upload_from_string(bytes(vocab))

    result = run_module("cleanup_scripts.artifacts.verify", url, "--hide_missing", check=False)
    assert result.returncode == 1
    assert (f"differs  vocab.txt  [md5 {hashlib.md5(vocab).hexdigest()}, "
            f"expected 64800d5d8528ce344256daf115d4965e]") in result.stdout
    assert "2 ok, 1 differ, 36 missing" in result.stdout

    repaired = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",

                          f"--source_dir={dataset}")
    assert "1 transferred, 6 already there" in repaired.stdout
    assert run_module("cleanup_scripts.artifacts.verify", url).returncode == 0


def test_verify_finds_reference_layout_in_a_bucket(bucket):
    client = storage.make_client()
    client.bucket(bucket).blob("x/wiki/vocab.txt").upload_from_filename(
        str(cleanup_scripts.VOCAB_FILE))
    findings = {f.artifact.path: f for f in verify_bucket.check_bucket(
        storage.parse_gcs_url(f"gs://{bucket}/x"))}
    assert findings["vocab.txt"].status == "ok"
    assert findings["vocab.txt"].found_at.as_posix() == "wiki/vocab.txt"
    assert findings["bert_config.json"].status == "missing"


def flip_first_byte(path: Path) -> tuple[str, str]:
    """Change `path`'s first byte (same size); (md5 before, md5 after)."""
    data = bytearray(path.read_bytes())
    before = hashlib.md5(data).hexdigest()
    data[0] ^= 1
    path.write_bytes(bytes(data))
    return before, hashlib.md5(data).hexdigest()


def test_upload_refuses_a_file_changed_since_the_manifest_before_sending_anything(
        dataset, bucket):
    part = dataset / "results" / "part-00100-of-00500"
    manifest_md5, file_md5 = flip_first_byte(part)
    url = f"gs://{bucket}/bert"
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={dataset}", check=False)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {part}: changed since manifest.tsv was written: manifest md5 {manifest_md5}, "
        f"file md5 {file_md5}, not in the bucket ({url}/results/part-00100-of-00500); "
        f"nothing uploaded\n")
    assert bucket_md5s(url) == {}  # not even the files that are fine
    assert not (dataset / ".state" / "upload").exists()


@pytest.mark.parametrize("damage", ["emptied", "header only", "a row cut"])
def test_upload_refuses_a_manifest_the_build_did_not_write(dataset, bucket, damage):
    # Unchecked, an emptied manifest.tsv with the dataset deleted is uploaded, exit 0, and the
    # bucket then "downloads" with 0 files.
    manifest = dataset / "manifest.tsv"
    header, *rows = manifest.read_text().splitlines()
    if damage == "a row cut":
        manifest.write_text("\n".join([header] + rows[1:]) + "\n")
    else:
        for relative in [row.split("\t")[0] for row in rows]:
            (dataset / relative).unlink()
        manifest.write_text("" if damage == "emptied" else header + "\n")
    url = f"gs://{bucket}/bert"
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={dataset}", check=False)
    assert (result.returncode, result.stdout) == (1, "")
    if damage == "a row cut":
        assert result.stderr.startswith(f"error: {manifest}: {manifest.stat().st_size:,} bytes, "
                                        f"md5 {md5_of(manifest)}; the manifest stage wrote ")
        assert result.stderr.endswith("): changed since; delete it and run make preprocess "
                                      "again to rewrite it\n")
    else:
        assert result.stderr == (f"error: {manifest}: lists no files (a manifest lists every "
                                 f"file of its dataset); not a dataset\n")
    assert bucket_md5s(url) == {}


def test_a_copy_without_state_needs_a_manifest_that_lists_files(tmp_path, bucket):
    """A bucket copy has no .state/ to hold its manifest to: an upload of one, or a download
    of a bucket, refuses a manifest that lists no file; an upload of a tree with no file at all
    sends nothing."""
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "manifest.tsv").write_text("path\tbytes\tmd5\n")
    url = f"gs://{bucket}/bert"
    upload = ["cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={copy}"]
    result = run_module(*upload, check=False)
    assert (result.returncode, result.stderr) == (
        1, f"error: {copy / 'manifest.tsv'}: lists no files (a manifest lists every file of its "
           f"dataset); not a dataset\n")
    (copy / "manifest.tsv").unlink()
    (copy / ".hidden").write_text("not sent\n")
    result = run_module(*upload, check=False)
    assert (result.returncode, result.stderr) == (
        1, f"error: {copy}: no files to upload (nor a manifest.tsv)\n")
    assert bucket_md5s(url) == {}

    put_copy(bucket, "bert", {})  # a bucket copy whose manifest lists nothing
    result = run_module("cleanup_scripts.artifacts.storage", "download", url,
                        str(tmp_path / "down"), check=False)
    assert (result.returncode, result.stderr) == (
        1, f"error: {url}/manifest.tsv: lists no files (a manifest lists every file of its "
           f"dataset); not a dataset\n")
    assert not (tmp_path / "down").exists()


def test_object_names_and_prefixes_reach_the_console_escaped(dataset, bucket):
    client = storage.make_client()
    client.bucket(bucket).blob("x/evil\x1b[2J\x07").upload_from_string(b"x")
    listed = run_module("cleanup_scripts.artifacts.storage", "ls", f"gs://{bucket}/x")
    assert listed.stdout == f"evil\\x1b[2J\\x07\t1\t{hashlib.md5(b'x').hexdigest()}\n"
    url = f"gs://{bucket}/bert\x1b[31m"
    sent = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                      f"--source_dir={dataset}")
    assert f"upload: 7 files to gs://{bucket}/bert\\x1b[31m: 7 transferred" in sent.stdout
    copied = run_module("cleanup_scripts.artifacts.storage", "download", url,
                        str(dataset.parent / "copy"))
    assert f"download: 7 files from gs://{bucket}/bert\\x1b[31m: 7 transferred" in copied.stdout
    assert "\x1b" not in listed.stdout + sent.stdout + copied.stdout


def test_a_full_disk_during_a_bucket_download_is_one_line_and_the_rerun_resumes(tmp_path,
                                                                                bucket):
    """The process may write at most LIMIT bytes to a file (RLIMIT_FSIZE: the write fails with
    EFBIG, as one fails with ENOSPC on a full disk)."""
    limit, payload = 300_000, os.urandom(1 << 20)
    put_copy(bucket, "d", {"tfrecords/part-00000": payload})
    dest = tmp_path / "copy" / "tfrecords" / "part-00000"
    args = ["cleanup_scripts.artifacts.storage", "download", f"gs://{bucket}/d",
            str(tmp_path / "copy")]
    result = subprocess.run(
        [sys.executable, "-m", *args], env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    partial = dest.with_name("part-00000.partial")
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"error: {partial}: no space left on device (file too large)\n")
    held = partial.read_bytes()
    assert 0 < len(held) <= limit and payload.startswith(held) and not dest.exists()
    assert "part-00000 resumed at byte" in run_module(*args).stdout
    assert dest.read_bytes() == payload


def test_bucket_refuses_bytes_that_are_not_the_md5_sent(tmp_path, bucket):
    path = tmp_path / "data.bin"
    path.write_bytes(b"the bytes on disk")
    url = storage.parse_gcs_url(f"gs://{bucket}/x")
    claimed = hashlib.md5(b"other bytes").hexdigest()
    local = storage.LocalFile("data.bin", path, path.stat().st_size, claimed)
    with pytest.raises(InputError, match=f"^{url}/data.bin: the bucket's md5 of the uploaded "
                                         f"bytes is not {claimed}, the md5 of {path} "):
        storage.upload_file(storage.make_client(), url, local, None, storage.DEFAULT_CHUNK_SIZE)
    assert bucket_md5s(str(url)) == {}


def test_missing_bucket_is_a_one_line_error(emulator, monkeypatch):
    monkeypatch.setenv(storage.EMULATOR_ENV, emulator)
    result = run_module("cleanup_scripts.artifacts.verify", "gs://no-such-bucket/x", check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == "error: gs://no-such-bucket/x: not found (no such bucket " \
                                    "or object)"


# ----------------------------------------------------------------------------------------------
# Refused before anything is sent: a bad bucket name, paths outside the source directory, files
# that changed since the manifest was written.


@pytest.mark.parametrize("url, reason", [
    ("gs://Bad_Name!!/x", "'!', 'B', 'N' not allowed (only lowercase letters, digits, '-', '_' "
                          "and '.')"),
    ("gs://my bucket/x", "' ' not allowed"),
    ("gs://ab", "2 characters, must be 3 to 63 (up to 222 when it has dots)"),
    ("gs://" + "a" * 64, "64 characters, must be 3 to 63"),
    ("gs://" + "a" * 64 + ".example", "a dot-separated part is longer than 63 characters"),
    ("gs://-bucket/x", "must start and end with a letter or digit"),
    ("gs://bucket_", "must start and end with a letter or digit"),
    ("gs://192.168.5.4/x", "must not be an IP address"),
    ("gs://goog-data", "must not start with 'goog'"),
    ("gs://my-g00gle-data", "must not contain 'google' or a look-alike"),
])
def test_bucket_names_that_break_the_naming_rules(url, reason):
    bucket = url[len("gs://"):].partition("/")[0]
    with pytest.raises(InputError) as raised:
        storage.parse_gcs_url(url)
    assert str(raised.value).startswith(f"{url}: invalid bucket name {bucket!r}: {reason}")


def test_bucket_names_within_the_rules_and_prefixes_without_line_breaks():
    for bucket in ("abc", "my_bucket.example-1", "0" * 63, ".".join(["a" * 63] * 3)):
        assert storage.parse_gcs_url(f"gs://{bucket}/x") == storage.GcsUrl(bucket, "x")
    with pytest.raises(InputError) as raised:
        storage.parse_gcs_url("gs://bkt/a\nb")
    assert str(raised.value) == "gs://bkt/a\\nb: object names cannot contain line breaks"
    with pytest.raises(InputError, match="the prefix leaves no room for object names"):
        storage.parse_gcs_url("gs://bkt/" + "p" * 1023)


def test_a_bad_bucket_name_is_one_line_before_any_request(dataset, monkeypatch):
    # Nothing listens there: a request would fail with another message (or a traceback).
    monkeypatch.setenv(storage.EMULATOR_ENV, f"http://127.0.0.1:{free_port()}")
    url = "gs://Bad_Name!!/x"
    expected = (f"error: {url}: invalid bucket name 'Bad_Name!!': '!', 'B', 'N' not allowed "
                f"(only lowercase letters, digits, '-', '_' and '.')\n")
    for args in (["cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}"],
                 ["cleanup_scripts.artifacts.storage", "ls", url],
                 ["cleanup_scripts.artifacts.storage", "download", url, str(dataset / "copy")],
                 ["cleanup_scripts.artifacts.verify", url]):
        result = run_module(*args, check=False)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", expected), args
    assert not (dataset / ".state" / "upload").exists()
    assert not (dataset / "copy").exists()


def add_manifest_line(dataset: Path, relative: str, payload: bytes) -> int:
    """Append `relative` (with `payload`'s size and md5) to the manifest; its line number."""
    manifest = dataset / "manifest.tsv"
    lines = manifest.read_text().splitlines()
    lines.append(f"{relative}\t{len(payload)}\t{hashlib.md5(payload).hexdigest()}")
    manifest.write_text("\n".join(lines) + "\n")
    return len(lines)


@pytest.mark.parametrize("listed, reason", [
    ("{outside}", "is an absolute path; not read"),
    ("../outside.txt", "is not a plain relative path (a '..', '.' or empty component, or a "
                       "control character); not read"),
    ("results/../../outside.txt", "is not a plain relative path"),
    ("results/escape", "leads outside {dataset} (a link to {outside}); not read"),
    ("linked/outside.txt", "leads outside {dataset} (a link to {outside}); not read"),
])
def test_upload_refuses_manifest_paths_outside_the_source_dir(dataset, bucket, listed, reason):
    payload = b"not part of the dataset\n"
    outside = dataset.parent / "outside.txt"
    outside.write_bytes(payload)
    (dataset / "results" / "escape").symlink_to(outside)  # a file symlink leading out
    (dataset / "linked").symlink_to(dataset.parent)  # a folder symlink leading out
    listed = listed.format(outside=outside)
    number = add_manifest_line(dataset, listed, payload)
    url = f"gs://{bucket}/bert"
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={dataset}", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error: {dataset / 'manifest.tsv'}:{number}: {listed!r} "
        f"{reason.format(dataset=dataset, outside=outside)}")
    assert result.stderr.count("\n") == 1
    assert bucket_md5s(url) == {}


def test_upload_follows_symlinks_only_inside_the_source_dir(tmp_path, bucket):
    source = tmp_path / "source"
    (source / "data").mkdir(parents=True)
    (source / "data" / "a.txt").write_bytes(b"a\n")
    (source / "alias.txt").symlink_to(source / "data" / "a.txt")  # stays inside: uploaded
    url = f"gs://{bucket}/tree"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={source}")
    md5 = hashlib.md5(b"a\n").hexdigest()
    sent = bucket_md5s(url)
    assert sent.pop("manifest.tsv")  # the commit record upload writes for a tree without one
    assert sent == {"data/a.txt": md5, "alias.txt": md5}

    (tmp_path / "secret").write_bytes(b"secret\n")
    (source / "data" / "z.txt").write_bytes(b"z\n")
    (source / "data" / "secret").symlink_to(tmp_path / "secret")
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={source}", check=False)
    assert result.returncode == 1
    assert result.stderr == (f"error: {source / 'data' / 'secret'}: 'data/secret' leads outside "
                             f"{source} (a link to {tmp_path / 'secret'}); not read\n")
    held = bucket_md5s(url)
    assert held.pop("manifest.tsv") and held == sent  # z.txt not sent either


def test_upload_does_not_skip_a_file_that_changed_after_it_was_uploaded(dataset, bucket):
    url = f"gs://{bucket}/bert"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}")
    vocab = dataset / "vocab.txt"
    manifest_md5, file_md5 = flip_first_byte(vocab)  # same size: the manifest's size matches
    before = bucket_md5s(url)
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={dataset}", check=False)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {vocab}: changed since manifest.tsv was written: manifest md5 {manifest_md5}, "
        f"file md5 {file_md5}, bucket md5 {manifest_md5} ({url}/vocab.txt); nothing "
        f"uploaded\n")
    assert bucket_md5s(url) == before


def test_a_ledger_vouches_for_files_whose_size_and_mtime_it_recorded(dataset, bucket):
    """`make preprocess` leaves `.state/<stage>.outputs` (size, mtime, md5 per output): a file
    that still has the recorded size and mtime is not hashed again, any other one is."""
    url = f"gs://{bucket}/bert"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}")
    part = dataset / "tfrecords" / "part-00100-of-00500"
    recorded = part.stat().st_mtime_ns
    (dataset / ".state" / "tfrecords.outputs").write_text(  # a ledger line, as a stage writes it
        f"tfrecords/part-00100-of-00500\t{part.stat().st_size}\t{recorded}\t{md5_of(part)}\n")
    manifest_md5, file_md5 = flip_first_byte(part)
    os.utime(part, ns=(recorded, recorded))  # size and mtime as recorded: the ledger is trusted
    again = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                       f"--source_dir={dataset}")
    assert "0 transferred, 7 already there with the right md5" in again.stdout

    os.utime(part, ns=(recorded + 10**9, recorded + 10**9))  # touched: hashed again
    result = run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}",
                        f"--source_dir={dataset}", check=False)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error: {part}: changed since manifest.tsv was written: manifest md5 {manifest_md5}, "
        f"file md5 {file_md5}, bucket md5 {manifest_md5} ")


def start_and_kill(args: list[str], started: callable) -> None:
    """Run `python -m args...`, SIGKILL it as soon as `started()` is true; check it was
    still running then (the kill, not the end of the work, stopped it)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        wait_for(lambda: started() or process.poll() is not None, SUBPROCESS_TIMEOUT_S,
                 f"{args[0]} to start transferring")
        assert process.poll() is None, "finished before it could be interrupted"
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


BIG = 16 << 20  # 64 chunks of 256 KiB


def test_a_killed_upload_redoes_only_the_file_in_flight(tmp_path, bucket):
    """One file at a time: a `kill -9` once the first is in the bucket; the re-run skips every
    object already there by its md5 and sends only the others (the one in flight again)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("a.bin", "b.bin"):
        (source / name).write_bytes(os.urandom(BIG))
    (source / "c.txt").write_bytes(b"small\n")
    url = f"gs://{bucket}/big"
    args = ["cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={source}",
            "--chunk_mb=0.25", "--nworker=1"]
    start_and_kill(args, lambda: bucket_md5s(url))
    held = bucket_md5s(url)
    assert "a.bin" in held and len(held) < 3, held  # the kill came before the end

    result = run_module(*args)
    assert (f"upload: 4 files to {url}: {4 - len(held)} transferred, {len(held)} already there "
            f"with the right md5") in result.stdout  # the three, and the manifest it writes
    sent = bucket_md5s(url)
    assert sent.pop("manifest.tsv")
    assert sent == {name: md5_of(source / name) for name in ("a.bin", "b.bin", "c.txt")}
    assert not (source / ".state").exists()  # no upload sessions kept on disk


def put_copy(bucket: str, prefix: str, objects: dict[str, bytes]) -> None:
    """`objects` under gs://bucket/prefix, with the manifest.tsv an upload sends last."""
    client = storage.make_client()
    rows = ["path\tbytes\tmd5"]
    for relative, payload in objects.items():
        client.bucket(bucket).blob(f"{prefix}/{relative}").upload_from_string(payload)
        rows.append(f"{relative}\t{len(payload)}\t{hashlib.md5(payload).hexdigest()}")
    client.bucket(bucket).blob(f"{prefix}/manifest.tsv").upload_from_string(
        "\n".join(rows) + "\n")


def test_killed_download_resumes_its_partial_file(tmp_path, bucket):
    payload = os.urandom(BIG)
    put_copy(bucket, "big", {"tfrecords/part-00000": payload})
    dest = tmp_path / "copy"
    partial = dest / "tfrecords" / "part-00000.partial"
    args = ["cleanup_scripts.artifacts.storage", "download", f"gs://{bucket}/big", str(dest)]
    start_and_kill(args, lambda: partial.exists() and partial.stat().st_size > 0)

    held = partial.stat().st_size
    assert 0 < held < BIG
    assert not (dest / "tfrecords" / "part-00000").exists()

    result = run_module(*args)
    assert "part-00000 resumed at byte" in result.stdout
    assert md5_of(dest / "tfrecords" / "part-00000") == hashlib.md5(payload).hexdigest()
    assert not partial.exists()
    again = run_module(*args)
    assert "0 transferred, 2 already there with the right md5" in again.stdout


class DrippingProxy:
    """A loopback HTTP proxy in front of the emulator: every GET passes through, but the body of
    an object download (`alt=media`) whose name holds "drip" comes FAST bytes at once, then a
    byte every DRIP_S seconds: a server that keeps the connection alive but sends next to
    nothing."""

    FAST, DRIP_S = 64 << 10, 0.05

    def __init__(self, upstream: str) -> None:
        self.stop = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                headers = {key: value for key, value in self.headers.items()
                           if key.lower() not in ("host", "accept-encoding")}
                request = urllib.request.Request(upstream + self.path, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        status, body, sent = response.status, response.read(), response.headers
                except urllib.error.HTTPError as err:
                    status, body, sent = err.code, err.read(), err.headers
                self.send_response(status)
                for key, value in sent.items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                drip = "alt=media" in self.path and "drip" in self.path
                try:
                    self.wfile.write(body[:DrippingProxy.FAST] if drip else body)
                    self.wfile.flush()
                    for index in range(DrippingProxy.FAST, len(body) if drip else 0):
                        if proxy.stop.wait(DrippingProxy.DRIP_S):
                            break
                        self.wfile.write(body[index:index + 1])
                        self.wfile.flush()
                except OSError:  # the client cut the connection
                    pass
                self.close_connection = drip

        self.httpd, self.url, self.thread = loopback(Handler)


@pytest.fixture
def dripping_proxy(emulator):
    proxy = DrippingProxy(emulator)
    proxy.thread.start()
    yield proxy
    proxy.stop.set()
    proxy.httpd.shutdown()
    proxy.httpd.server_close()


@pytest.mark.timeout(60)
def test_a_bucket_dripping_below_the_rate_floor_is_cut_and_the_rerun_resumes(
        tmp_path, emulator, bucket, dripping_proxy, monkeypatch, capsys):
    # A download held only the library's 300 s read timeout per socket read: a server sending
    # a byte every few seconds kept it for ever. Now the HTTP downloads' floor holds here too.
    payload = os.urandom(1 << 20)
    put_copy(bucket, "slow", {"tfrecords/drip-00000": payload})
    monkeypatch.setattr(transfer, "RATE_WINDOW_S", 1.0)
    monkeypatch.setenv(storage.EMULATOR_ENV, dripping_proxy.url)
    url, dest = f"gs://{bucket}/slow", tmp_path / "copy"
    started = time.monotonic()
    assert run_in_process(storage.main, ["download", url, str(dest)]) == 1
    seconds = time.monotonic() - started
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"error: {url}/tfrecords/drip-00000: download too slow: "), err
    assert re.search(r"\(\d+\.\d bytes/s over 1 s, below the floor of 16 KiB/s\); run again "
                     r"to resume from drip-00000\.partial\n$", err), err
    assert seconds < 1 + 3, seconds  # one window, no retries: not DRIP_S per byte
    partial = dest / "tfrecords" / "drip-00000.partial"
    assert DrippingProxy.FAST <= partial.stat().st_size < len(payload)
    assert not (dest / "tfrecords" / "drip-00000").exists()

    monkeypatch.setenv(storage.EMULATOR_ENV, emulator)  # the same bucket, at full speed
    assert run_in_process(storage.main, ["download", url, str(dest)]) == 0
    assert "drip-00000 resumed at byte" in capsys.readouterr().out
    assert md5_of(dest / "tfrecords" / "drip-00000") == hashlib.md5(payload).hexdigest()


def test_download_restarts_a_partial_file_that_does_not_match(tmp_path, bucket):
    payload = os.urandom(1 << 20)
    put_copy(bucket, "d", {"blob.bin": payload})
    partial = tmp_path / "blob.bin.partial"
    partial.write_bytes(b"\0" * 1000)  # not the object's first bytes
    transfers = storage.download_prefix(f"gs://{bucket}/d", tmp_path, nworker=2)
    assert [t.action for t in transfers] == ["downloaded", "downloaded"]
    assert (tmp_path / "blob.bin").read_bytes() == payload


# ----------------------------------------------------------------------------------------------
# TensorFlow's own GCS filesystem. TF 2.20 has no emulator setting: its endpoints
# (https://www.googleapis.com, https://storage.googleapis.com) are fixed. It does honour
# libcurl's https_proxy and CURL_CA_BUNDLE, so the test runs a CONNECT proxy on 127.0.0.1 that
# ends TLS with a certificate from a throw-away CA and passes the requests to the emulator.


def make_tls_files(directory: Path) -> tuple[Path, Path]:
    """A throw-away CA (ca.pem) and a certificate for the googleapis hosts signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = dict(not_valid_before=now - datetime.timedelta(hours=1),
                 not_valid_after=now + datetime.timedelta(hours=1))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-storage CA")])
    ca = (x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name,
                                  public_key=ca_key.public_key(),
                                  serial_number=x509.random_serial_number(), **valid)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                       False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder(
        subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "googleapis.com")]),
        issuer_name=ca_name, public_key=key.public_key(),
        serial_number=x509.random_serial_number(), **valid)
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("www.googleapis.com"), x509.DNSName("storage.googleapis.com")]),
            critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256()))
    ca_file, leaf_file = directory / "ca.pem", directory / "leaf.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    leaf_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return ca_file, leaf_file


class EmulatorTlsProxy:
    """An HTTP CONNECT proxy on 127.0.0.1 for the two googleapis hosts only: it ends TLS and
    forwards the bytes to the emulator's port on 127.0.0.1. Nothing else is reached."""

    HOSTS = (b"www.googleapis.com:443", b"storage.googleapis.com:443")

    def __init__(self, leaf_file: Path, emulator_port: int) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(leaf_file)
        self.emulator_port = emulator_port
        self.tunnels: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _tunnel(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                data = client.recv(4096)
                if not data:
                    return
                head += data
            method, _, target = head.split(b"\r\n")[0].partition(b" ")
            target = target.split(b" ")[0]
            if method != b"CONNECT" or target not in self.HOSTS:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            self.tunnels.append(target)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            try:
                tls = self.context.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                return
            with tls, socket.create_connection(("127.0.0.1", self.emulator_port)) as upstream:
                back = threading.Thread(target=self._pipe, args=(upstream, tls), daemon=True)
                back.start()
                self._pipe(tls, upstream)
                back.join(timeout=10)


TF_READER = """
import hashlib, sys
import tensorflow as tf
url = sys.argv[1]
print("glob", tf.io.gfile.glob(url.rsplit("/", 1)[0] + "/*"))
with tf.io.gfile.GFile(url, "rb") as handle:
    print("md5", hashlib.md5(handle.read()).hexdigest())
print("records", len([r for r in tf.data.TFRecordDataset(url)]))
print("last", list(tf.data.TFRecordDataset(url))[-1].numpy().decode())
"""


def test_tensorflow_reads_a_gs_tfrecord_from_the_emulator(dataset, bucket, emulator, tmp_path):
    pytest.importorskip("cryptography")
    url = f"gs://{bucket}/bert"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}")
    ca_file, leaf_file = make_tls_files(tmp_path)
    proxy = EmulatorTlsProxy(leaf_file, int(emulator.rsplit(":", 1)[1]))
    proxy_url = f"http://127.0.0.1:{proxy.port}"
    env = {key: value for key, value in os.environ.items()
           if key.lower() not in ("no_proxy", "all_proxy", "http_proxy", "https_proxy")}
    env.update(https_proxy=proxy_url, http_proxy=proxy_url, CURL_CA_BUNDLE=str(ca_file),
               GOOGLE_AUTH_TOKEN_FOR_TESTING="emulator", NO_GCE_CHECK="true",
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    record = f"{url}/tfrecords/part-00100-of-00500"
    try:
        result = subprocess.run([sys.executable, "-c", TF_READER, record], env=env,
                                capture_output=True, text=True, timeout=120)
    finally:
        proxy.close()
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"glob ['{record}']" in result.stdout
    assert f"md5 {md5_of(dataset / 'tfrecords' / 'part-00100-of-00500')}" in result.stdout
    assert f"records {len(TF_RECORDS)}" in result.stdout
    assert f"last {TF_RECORDS[-1].decode()}" in result.stdout
    assert set(proxy.tunnels) <= set(EmulatorTlsProxy.HOSTS) and proxy.tunnels


# ----------------------------------------------------------------------------------------------
# Interrupted uploads, incomplete bucket copies, an endpoint that is down (issue 24)


def run_in_process(main, args: list[str]) -> int:
    """Run a CLI's `main` as `python -m` would (so monkeypatched limits apply); its status."""
    from benchmark.errors import exit_on_user_error
    try:
        exit_on_user_error(lambda: main(args))
    except SystemExit as exit_info:
        return exit_info.code
    return 0


def manifest_tree(root: Path, files: dict[str, bytes]) -> Path:
    """`files` under `root` with the manifest.tsv that `make preprocess` would write."""
    rows = ["path\tbytes\tmd5"]
    for relative, payload in sorted(files.items()):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(payload)
        rows.append(f"{relative}\t{len(payload)}\t{hashlib.md5(payload).hexdigest()}")
    (root / "manifest.tsv").write_text("\n".join(rows) + "\n")
    return root


def test_a_killed_upload_leaves_no_manifest_and_the_rerun_commits_it(tmp_path, bucket):
    """manifest.tsv is the commit record: a `kill -9` mid-upload leaves the bucket without it
    (never a manifest listing files that are not there), and the re-run sends it last."""
    source = manifest_tree(tmp_path / "source", {"tfrecords/big": os.urandom(BIG),
                                                 "vocab.txt": b"[PAD]\n[UNK]\n"})
    url = f"gs://{bucket}/bert"
    args = ["cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={source}",
            "--chunk_mb=0.25"]
    # Both files go up at once: the small one lands while the big one is in flight.
    start_and_kill(args, lambda: "vocab.txt" in bucket_md5s(url))
    held = bucket_md5s(url)
    assert "tfrecords/big" not in held  # the kill came mid-file
    assert "manifest.tsv" not in held, held

    copy = tmp_path / "copy"
    result = run_module("cleanup_scripts.artifacts.storage", "download", url, str(copy),
                        check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"error: {url}: holds no manifest.tsv, which an upload sends last: "
                             f"an upload that did not finish (run it again), or not a copy made "
                             f"by cleanup_scripts.artifacts.upload; nothing downloaded\n")
    assert not copy.exists()

    run_module(*args)
    assert bucket_md5s(url)["manifest.tsv"] == md5_of(source / "manifest.tsv")
    run_module("cleanup_scripts.artifacts.storage", "download", url, str(copy))
    for relative in ("tfrecords/big", "vocab.txt", "manifest.tsv"):
        assert md5_of(copy / relative) == md5_of(source / relative)


def test_the_manifest_goes_up_only_after_every_file_succeeded(dataset, bucket, monkeypatch):
    """A fault between data and manifest: one file fails, so the manifest is not sent, and a
    bucket manifest of an earlier upload that no longer holds is deleted first."""
    url = storage.parse_gcs_url(f"gs://{bucket}/bert")
    storage.upload_tree(dataset, url, nworker=4)
    old_manifest = bucket_md5s(str(url))["manifest.tsv"]
    vocab = dataset / "vocab.txt"
    vocab.write_bytes(vocab.read_bytes() + b"[NEW]\n")
    record_manifest(dataset)  # a new build of the dataset
    manifest = dataset / "manifest.tsv"
    real = storage.upload_file

    def failing(client, url_, local, *args, **kwargs):
        if local.relative == "vocab.txt":
            raise InputError(f"{url_.child(local.relative)}: upload failed (injected)")
        return real(client, url_, local, *args, **kwargs)

    monkeypatch.setattr(storage, "upload_file", failing)
    with pytest.raises(InputError, match="injected"):
        storage.upload_tree(dataset, url, nworker=4)
    held = bucket_md5s(str(url))
    assert "manifest.tsv" not in held, (held.get("manifest.tsv"), old_manifest)
    monkeypatch.setattr(storage, "upload_file", real)
    storage.upload_tree(dataset, url, nworker=4)
    assert bucket_md5s(str(url))["manifest.tsv"] == md5_of(manifest)


@pytest.mark.parametrize("fault", ["missing", "differs"])
def test_download_refuses_a_copy_its_manifest_does_not_describe(dataset, bucket, tmp_path,
                                                                 fault):
    url = f"gs://{bucket}/bert"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}")
    blob = storage.make_client().bucket(bucket).blob("bert/results/part-00100-of-00500")
    part = dataset / "results" / "part-00100-of-00500"
    if fault == "missing":
        blob.delete()
        problem = "results/part-00100-of-00500 is missing"
    else:
        blob.upload_from_string(b"other bytes")
        problem = (f"results/part-00100-of-00500 is 11 bytes with md5 "
                   f"{hashlib.md5(b'other bytes').hexdigest()}, the manifest says "
                   f"{part.stat().st_size:,} bytes, md5 {md5_of(part)}")
    copy = tmp_path / "copy"
    result = run_module("cleanup_scripts.artifacts.storage", "download", url, str(copy),
                        check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"error: {url}/manifest.tsv: lists 6 files, but {problem}: an "
                             f"incomplete or overlapping upload; nothing downloaded\n")
    assert not copy.exists()


def test_a_hostile_bucket_manifest_is_one_escaped_line(dataset, bucket, tmp_path):
    url = f"gs://{bucket}/bert"
    run_module("cleanup_scripts.artifacts.upload", f"--bucket={url}", f"--source_dir={dataset}")
    storage.make_client().bucket(bucket).blob("bert/manifest.tsv").upload_from_string(
        b"path\tbytes\tmd5\n../../etc/x\x1b[2J\t1\t" + b"0" * 32 + b"\n")
    result = run_module("cleanup_scripts.artifacts.storage", "download", url,
                        str(tmp_path / "copy"), check=False)
    assert result.returncode == 1
    assert result.stderr == (f"error: {url}/manifest.tsv:2: '../../etc/x\\x1b[2J' is not a plain "
                             f"relative path (a '..', '.' or empty component, or a control "
                             f"character); not read\n")


@pytest.mark.timeout(60)
def test_a_storage_endpoint_that_is_down_is_one_line_naming_it(dataset, monkeypatch, capsys):
    """Nothing listens on the emulator's port: each command gives up within its retry budget
    (here 1 s; 10 s by default, not the library's 120 s) with one line that says so."""
    from cleanup_scripts.artifacts import upload, verify
    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv(storage.EMULATOR_ENV, endpoint)
    monkeypatch.setattr(storage, "RETRY_TIMEOUT_S", 1.0, raising=False)
    url = "gs://down-bucket/bert"
    for main, args in ((storage.main, ["ls", url]),
                       (storage.main, ["download", url, str(dataset.parent / "copy")]),
                       (upload.main, [f"--bucket={url}", f"--source_dir={dataset}"]),
                       (verify.main, [url])):
        started = time.monotonic()
        assert run_in_process(main, args) == 1, args
        seconds = time.monotonic() - started
        err = capsys.readouterr().err
        assert err == (f"error: {url}: cannot reach the storage endpoint {endpoint}: [Errno 111] "
                       f"Connection refused (retried for 1 s)\n"), args
        assert seconds < 5, (args, seconds)
    assert storage.RETRY_TIMEOUT_S == 1.0 and not (dataset.parent / "copy").exists()


def test_a_failed_object_download_advises_resuming_only_from_a_partial_file(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv(storage.EMULATOR_ENV, f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(storage, "RETRY_TIMEOUT_S", 0.5, raising=False)
    url = storage.parse_gcs_url("gs://down-bucket/bert")
    remote = storage.RemoteObject("bert/vocab.txt", 1000, "0" * 32, 1)
    for held, hint in ((b"", ""), (b"x" * 100, "; run again to resume from vocab.txt.partial")):
        if held:
            (tmp_path / "vocab.txt.partial").write_bytes(held)
        with pytest.raises(InputError) as raised:
            storage.download_object(storage.access(), url, "vocab.txt", remote, tmp_path)
        assert str(raised.value).endswith(f"/vocab.txt: cannot reach the storage endpoint "
                                          f"{storage.endpoint()}: [Errno 111] Connection "
                                          f"refused (retried for 0.5 s){hint}")


@pytest.mark.parametrize("megabytes", [0.0, -1.0, float("nan"), float("inf"), 2048.0])
def test_a_chunk_size_that_is_no_size_is_one_line(megabytes):
    with pytest.raises(InputError, match=r"^--chunk_mb=.*: must be more than 0 and at most 1024"):
        storage.chunk_size_bytes(megabytes)


def test_chunk_sizes_round_up_to_the_unit_gcs_requires():
    assert storage.chunk_size_bytes(0.001) == 256 << 10
    assert storage.chunk_size_bytes(16) == 16 << 20


def test_download_never_writes_through_a_link_leading_out_of_its_folder(tmp_path, bucket):
    put_copy(bucket, "d", {"tfrecords/part-00000": b"records\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "tfrecords").symlink_to(outside)
    result = run_module("cleanup_scripts.artifacts.storage", "download", f"gs://{bucket}/d",
                        str(copy), check=False)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"error: gs://{bucket}/d/manifest.tsv:2: 'tfrecords/part-00000' "
                             f"leads outside {copy} (a link to {outside / 'part-00000'}); "
                             f"not read\n")
    assert list(outside.iterdir()) == []
