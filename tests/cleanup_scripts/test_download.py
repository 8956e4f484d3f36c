"""download and transfer.fetch: a local HTTP server, resuming, md5 rejection, bz2 decompression."""
import bz2
import hashlib
import http.server
import os
import re
import shutil
import urllib.parse
from pathlib import Path

import pytest

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError
import cleanup_scripts
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts import download, partial_name, transfer
from tests.cleanup_scripts.range_server import loopback, send_ranged

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MAGIC_WORDS_DUMP = FIXTURES / "wiki-dump" / "magic-words.xml.bz2"
VOCAB = cleanup_scripts.VOCAB_FILE.read_bytes()
CONFIG = cleanup_scripts.BERT_CONFIG_FILE.read_bytes()


class FileServer:
    """A loopback HTTP server with Range support; `files` maps URL paths to bytes."""

    def __init__(self):
        self.files = {}
        self.requests = []  # (path, Range header)
        self.ignore_range = False
        self.cut_next_response_at = None  # send only this many bytes, once, then hang up
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urllib.parse.urlsplit(self.path)
                server.requests.append((parts.path, self.headers.get("Range")))
                name = parts.path
                if name not in server.files:
                    self.send_error(404)
                    return
                if send_ranged(self, server.files[name], not server.ignore_range,
                               server.cut_next_response_at):
                    server.cut_next_response_at = None

        self.httpd, self.url, self.thread = loopback(Handler)

    def paths_requested(self):
        return [path for path, _ in self.requests]


@pytest.fixture
def server():
    file_server = FileServer()
    file_server.files = {"/vocab.txt": VOCAB, "/bert_config.json": CONFIG}
    file_server.thread.start()
    yield file_server
    file_server.httpd.shutdown()
    file_server.httpd.server_close()


def run_cli(args):
    """Run download's CLI as `python -m` would; returns its exit status (0 when it returns)."""
    try:
        exit_on_user_error(lambda: download.main(args))
    except SystemExit as exit_info:
        return exit_info.code
    return 0


def test_downloads_from_base_url_and_verifies(server, tmp_path, capsys):
    assert run_cli([f"--output_dir={tmp_path}", "--artifacts=vocab,config",
                    f"--base_url={server.url}"]) == 0
    assert (tmp_path / "vocab.txt").read_bytes() == VOCAB
    assert (tmp_path / "bert_config.json").read_bytes() == CONFIG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert_config.json", "vocab.txt"]
    assert "ok  vocab.txt" in capsys.readouterr().out


def test_resumes_a_partial_file_with_a_range_request(server, tmp_path):
    dest = tmp_path / "vocab.txt"
    partial_name(dest).write_bytes(VOCAB[:100_000])
    transfer.fetch(f"{server.url}/vocab.txt", dest, checksums.known_artifacts()["vocab.txt"].md5)
    assert server.requests == [("/vocab.txt", "bytes=100000-")]
    assert dest.read_bytes() == VOCAB
    assert not partial_name(dest).exists()


def test_restarts_when_the_server_ignores_range(server, tmp_path):
    server.ignore_range = True
    dest = tmp_path / "vocab.txt"
    partial_name(dest).write_bytes(b"x" * 5000)  # not even the right bytes
    transfer.fetch(f"{server.url}/vocab.txt", dest, hashlib.md5(VOCAB).hexdigest())
    assert dest.read_bytes() == VOCAB


def test_interrupted_transfer_is_retried_and_resumed(server, tmp_path):
    server.cut_next_response_at = 50_000
    dest = tmp_path / "vocab.txt"
    transfer.fetch(f"{server.url}/vocab.txt", dest, hashlib.md5(VOCAB).hexdigest(),
                   len(VOCAB), retries=2, retry_wait_s=0)
    assert server.requests == [("/vocab.txt", None), ("/vocab.txt", "bytes=50000-")]
    assert dest.read_bytes() == VOCAB


def test_wrong_md5_is_rejected_and_no_file_is_left(server, tmp_path, capsys):
    server.files["/vocab.txt"] = VOCAB.replace(b"[MASK]", b"[MASQ]")  # same size
    status = run_cli([f"--output_dir={tmp_path}", "--artifacts=vocab.txt",
                      f"--base_url={server.url}"])
    assert status == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert re.match(r"error: .*vocab\.txt: md5 [0-9a-f]{32} is not the official "
                    r"64800d5d8528ce344256daf115d4965e", err)
    assert list(tmp_path.iterdir()) == []


def test_file_urls_and_local_paths(tmp_path):
    out = tmp_path / "out"
    vocab_url = cleanup_scripts.VOCAB_FILE.as_uri()
    assert run_cli([f"--output_dir={out}", "--artifacts=vocab,config",
                    f"--url=vocab={vocab_url}",
                    f"--url=bert_config.json={cleanup_scripts.BERT_CONFIG_FILE}"]) == 0
    assert (out / "vocab.txt").read_bytes() == VOCAB
    assert (out / "bert_config.json").read_bytes() == CONFIG


def test_a_fifo_or_device_as_a_local_source_is_one_line_and_never_blocks(tmp_path, capsys):
    # A FIFO source opened for reading would wait for a writer for ever.
    fifo = tmp_path / "vocab-fifo"
    os.mkfifo(fifo)
    for source, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        out = tmp_path / f"out-{source.name}"
        assert run_cli([f"--output_dir={out}", "--artifacts=vocab",
                        f"--url=vocab={source}"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.endswith(f"{source}: is {kind}, not a regular file; not read"), err
        assert len(err.splitlines()) == 1
        assert not (out / "vocab.txt").exists()


def test_verified_file_is_not_downloaded_again(server, tmp_path):
    shutil.copy(cleanup_scripts.VOCAB_FILE, tmp_path / "vocab.txt")
    assert run_cli([f"--output_dir={tmp_path}", "--artifacts=vocab",
                    f"--base_url={server.url}"]) == 0
    assert server.requests == []


def test_there_is_no_google_drive_route(capsys):
    """The R2 bucket holds every file the reference's Drive ids did (the TF1 data file under
    another name, found by its md5), so --source=drive is gone."""
    assert run_cli(["--output_dir=unused", "--source=drive", "--list"]) == 2
    assert "invalid choice: 'drive'" in capsys.readouterr().err
    inputs = download.artifact_groups()["all"]
    assert len(inputs) == 8 and all(checksums.known_artifacts()[path].group == "inputs"
                                    for path in inputs)


def test_the_default_is_make_downloads_and_the_size_is_said_before_starting(capsys, tmp_path):
    assert run_cli(["--output_dir=unused", "--list"]) == 0
    assert sorted(line.split("\t")[0] for line in capsys.readouterr().out.splitlines()) == [
        "bert_config.json", "vocab.txt"]
    config = tmp_path / "bert_config.json"
    config.write_text("{}")  # not the official file: the md5 check fails after the plan line
    run_cli([f"--output_dir={tmp_path / 'out'}", "--source=url", "--artifacts=config",
             f"--url=bert_config.json={config}"])
    assert capsys.readouterr().out.splitlines()[0] == "downloading 1 file(s), 314 bytes"


def test_list_defaults_to_the_mlcommons_r2_bucket(capsys):
    assert run_cli(["--output_dir=unused", "--artifacts=all,results", "--list"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    inputs = "https://training.mlcommons-storage.org/metadata/bert-input-files.uri"
    processed = ("https://training.mlcommons-storage.org/metadata/"
                 "bert-preprocessed-wikipedia-dataset.uri")
    assert len(lines) == 9
    assert lines["tf1_ckpt/model.ckpt-28252.index"] == inputs
    assert lines["results/*"] == processed


def test_unknown_artifact_and_missing_source_are_errors(capsys):
    assert run_cli(["--output_dir=unused", "--artifacts=weights"]) == 1
    assert "weights: unknown artifact" in capsys.readouterr().err
    assert run_cli(["--output_dir=unused", "--artifacts=results/eval.txt", "--source=url",
                    "--list"]) == 1
    assert "results/eval.txt: no default source" in capsys.readouterr().err
    assert run_cli(["--output_dir=unused", "--artifacts=vocab", "--source=url", "--list"]) == 1
    assert "vocab.txt: no default source" in capsys.readouterr().err


def test_decompress_bz2_streams_and_verifies(tmp_path):
    expected = bz2.decompress(MAGIC_WORDS_DUMP.read_bytes())
    dest = tmp_path / "dump.xml"
    md5 = download.decompress_bz2(MAGIC_WORDS_DUMP, dest, hashlib.md5(expected).hexdigest())
    assert dest.read_bytes() == expected and md5 == hashlib.md5(expected).hexdigest()
    with pytest.raises(InputError, match=r"dump2.xml: md5 .* is not the official 0{32}"):
        download.decompress_bz2(MAGIC_WORDS_DUMP, tmp_path / "dump2.xml", "0" * 32)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump.xml"]


def test_decompress_rejects_truncated_and_empty_bz2(tmp_path):
    data = cleanup_scripts.SAMPLE_DUMP.read_bytes()
    truncated = tmp_path / "cut.xml.bz2"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut.xml.bz2: truncated bzip2 data"):
        download.decompress_bz2(truncated, tmp_path / "cut.xml")
    empty = tmp_path / "empty.xml.bz2"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty.xml.bz2: empty file"):
        download.decompress_bz2(empty, tmp_path / "empty.xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.xml.bz2", "empty.xml.bz2"]


@pytest.mark.parametrize("link", ["vocab.txt", "vocab.txt.partial"])
def test_a_download_never_writes_through_a_link_leading_out_of_its_folder(server, tmp_path,
                                                                          capsys, link):
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the download's\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / link).symlink_to(outside)
    assert run_cli([f"--output_dir={out}", "--artifacts=vocab",
                    f"--url=vocab.txt={server.url}/vocab.txt"]) == 1
    assert capsys.readouterr().err == (f"error: {out / 'vocab.txt'}: '{link}' leads outside "
                                       f"{out} (a link to {outside}); not read\n")
    assert outside.read_bytes() == b"not the download's\n"


@pytest.mark.parametrize("table, row", [("inputs.md5", "../../x"),
                                        ("inputs.md5", "{outside}/abs"),
                                        ("sizes.tsv", "tf1_ckpt/../../../x")])
def test_a_table_row_naming_a_path_out_of_the_output_dir_is_one_line_and_writes_nothing(
        tmp_path, capsys, table, row):
    # Such a row made download create the file outside --output_dir, exit 0.
    outside = tmp_path / "outside"
    outside.mkdir()
    row = row.format(outside=outside)
    source = tmp_path / "source.bin"
    source.write_bytes(b"any bytes\n")
    tables = tmp_path / "tables"
    tables.mkdir()
    md5 = hashlib.md5(source.read_bytes()).hexdigest()
    (tables / "inputs.md5").write_text(f"{md5}  {row}\n" if table == "inputs.md5" else "")
    (tables / "results.md5").write_text("")
    (tables / "text-FE.md5").write_text("")
    (tables / "sizes.tsv").write_text("path\tbytes\n" + (f"{row}\t10\n" if table == "sizes.tsv"
                                                         else ""))
    out = tmp_path / "a" / "b" / "out"
    number = 1 if table == "inputs.md5" else 2
    assert run_cli([f"--output_dir={out}", f"--checksums_dir={tables}", "--source=url",
                    f"--artifacts={row}", f"--url={row}={source}"]) == 1
    err = capsys.readouterr().err
    reason = ("is an absolute path" if row.startswith("/") else
              "is not a plain relative path (a '..', '.' or empty component, or a control "
              "character)")
    assert err == f"error: {tables / table}:{number}: '{row}' {reason}; not used\n"
    assert list(outside.iterdir()) == [] and not (tmp_path / "a").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "source.bin", "tables"]
