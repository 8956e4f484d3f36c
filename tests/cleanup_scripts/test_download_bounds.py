"""download against hostile servers (issue 24): every transfer bounded in time and bytes, and
every failure one truthful line.

Loopback servers only (127.0.0.1); the deadline is shortened to about a second, so each test
takes a few seconds. The name-lookup failure is injected into `socket.getaddrinfo` (no query
leaves the machine).
"""
import http.server
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from benchmark.files import InputError
import cleanup_scripts
from cleanup_scripts.artifacts import partial_name, r2, transfer
from tests.cleanup_scripts.range_server import loopback, send_ranged
from tests.cleanup_scripts.test_download import run_cli
from tests.conftest import REPO, run_module

VOCAB = cleanup_scripts.VOCAB_FILE.read_bytes()  # 231,508 bytes, md5 in checksums/
DRIP_S = 0.2  # one byte this often (the real case: one every 20 s; the deadline scales too)
DRIP_BYTES = 40  # then the server hangs up, so the test ends even without a deadline
ENDLESS_CAP = 64 << 20  # the "endless" body ends here, so the test ends without a limit
FLOOR_S = 1.0


class HostileServer:
    """Loopback server: /vocab.txt served properly; /drip-body drips the body one byte per
    DRIP_S (Content-Length announced); /drip-headers drips the headers the same way;
    /endless sends bytes without Content-Length until ENDLESS_CAP (counting in `sent` what the
    client took); /huge announces 10**12 bytes; /loop redirects to itself; /evil answers 403
    with a terminal escape sequence in its reason phrase; /to-file redirects to a local file
    (`file://`). `requests` counts the requests."""

    def __init__(self):
        self.sent = self.requests = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def drip(self, data: bytes) -> None:
                for byte in data[:DRIP_BYTES]:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(DRIP_S)
                self.close_connection = True

            def do_GET(self):
                server.requests += 1
                try:
                    self.answer()
                except OSError:  # the client hung up
                    self.close_connection = True

            def answer(self):
                if self.path == "/vocab.txt":
                    send_ranged(self, VOCAB)
                elif self.path == "/drip-body":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(VOCAB)))
                    self.end_headers()
                    self.wfile.flush()
                    self.drip(VOCAB)
                elif self.path == "/drip-headers":
                    self.wfile.write(b"HTTP/1.0 200 OK\r\n")
                    self.drip(b"X-Padding: " + b"a" * 1000)
                elif self.path in ("/endless", "/huge"):
                    self.send_response(200)
                    if self.path == "/huge":
                        self.send_header("Content-Length", str(10**12))
                    self.end_headers()
                    block = VOCAB[: 1 << 16]
                    while server.sent < ENDLESS_CAP:
                        self.wfile.write(block)
                        server.sent += len(block)
                    self.close_connection = True
                elif self.path == "/loop":
                    self.send_response(302)
                    self.send_header("Location", "/loop")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/to-file":
                    self.send_response(302)
                    self.send_header("Location", "file:///etc/hostname")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/evil":
                    self.send_response(403, "Forbidden\x1b[2J\x1b[31m")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_error(404)

        self.httpd, self.url, self.thread = loopback(Handler)


@pytest.fixture
def server():
    hostile = HostileServer()
    hostile.thread.start()
    yield hostile
    hostile.httpd.shutdown()
    hostile.httpd.server_close()


@pytest.fixture
def short_deadline(monkeypatch):
    """Every file's deadline: FLOOR_S, whatever its size."""
    monkeypatch.setattr(transfer, "DEADLINE_FLOOR_S", FLOOR_S)
    monkeypatch.setattr(transfer, "MIN_RATE", 1 << 40)


def one_error_line(capsys) -> str:
    """The CLI's whole stderr, which must be one `error:` line (no retry chatter, no
    traceback); returned without its newline."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.rstrip("\n")


def vocab_from(url, out, *more):
    return [f"--output_dir={out}", "--artifacts=vocab", f"--url=vocab.txt={url}", *more]


def timed_cli(args):
    started = time.monotonic()
    status = run_cli(args)
    return status, time.monotonic() - started


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/drip-body", "/drip-headers"])
def test_a_dripping_server_meets_the_deadline(server, short_deadline, tmp_path, capsys, path):
    url = server.url + path
    status, seconds = timed_cli(vocab_from(url, tmp_path, "--retries=3"))
    assert status == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: {tmp_path / 'vocab.txt'}: download from {url} too slow: ")
    assert f"(deadline 1 s: {FLOOR_S:g} s plus 1 s per " in line
    assert seconds < FLOOR_S + 2, seconds  # not DRIP_BYTES * DRIP_S, nor the retries
    assert not (tmp_path / "vocab.txt").exists()
    if path == "/drip-headers":  # no byte of the file came
        assert "resume" not in line and list(tmp_path.iterdir()) == []
    elif partial_name(tmp_path / "vocab.txt").exists():
        assert line.endswith("; run again to resume from vocab.txt.partial")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/drip-body", "/drip-headers"])
def test_a_drip_below_the_rate_floor_is_cut_long_before_the_deadline(server, tmp_path, capsys,
                                                                     monkeypatch, path):
    # The deadline grows with the file (37 h for the dump), so a server dripping a byte a second
    # held the download that long; the floor of bytes per second cuts it after one window.
    monkeypatch.setattr(transfer, "RATE_WINDOW_S", 1.0)
    url = server.url + path
    status, seconds = timed_cli(vocab_from(url, tmp_path, "--retries=3"))
    assert status == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: {tmp_path / 'vocab.txt'}: download from {url} too slow: ")
    assert re.search(r"\(\d+\.\d bytes/s over 1 s, below the floor of 16 KiB/s\)", line), line
    assert seconds < 1 + 1.5, seconds  # not the 300 s deadline, nor DRIP_BYTES * DRIP_S
    if path == "/drip-body":  # what came is kept to resume from
        assert line.endswith("; run again to resume from vocab.txt.partial")
        assert 0 < partial_name(tmp_path / "vocab.txt").stat().st_size < DRIP_BYTES


class StallingServer:
    """Loopback server of the vocabulary: a request from byte 0 gets the first HELD bytes and
    then nothing until `release` is set; a Range request gets the rest (the offsets asked for
    are in `ranges`)."""

    HELD = 3000  # fewer than a write buffer holds: lost on a kill unless flushed

    def __init__(self):
        self.release, self.ranges = threading.Event(), []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.ranges.append(self.headers.get("Range"))
                if self.headers.get("Range"):
                    send_ranged(self, VOCAB)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(VOCAB)))
                self.end_headers()
                self.wfile.write(VOCAB[:StallingServer.HELD])
                self.wfile.flush()
                server.release.wait(30)
                self.close_connection = True

        self.httpd, self.url, self.thread = loopback(Handler)


@pytest.mark.timeout(90)
def test_a_killed_download_keeps_every_byte_it_received_and_the_rerun_resumes(tmp_path):
    stalling = StallingServer()
    stalling.thread.start()
    partial = partial_name(tmp_path / "vocab.txt")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [sys.executable, "-m", "cleanup_scripts.artifacts.download",
         *vocab_from(stalling.url + "/vocab.txt", tmp_path)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (partial.exists() and partial.stat().st_size == StallingServer.HELD):
            assert time.monotonic() < deadline, "the bytes received never reached the file"
            assert process.poll() is None
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL
        assert partial.read_bytes() == VOCAB[:StallingServer.HELD]
        assert run_module("cleanup_scripts.artifacts.download",
                          *vocab_from(stalling.url + "/vocab.txt", tmp_path)).returncode == 0
        assert stalling.ranges == [None, f"bytes={StallingServer.HELD}-"]
        assert (tmp_path / "vocab.txt").read_bytes() == VOCAB and not partial.exists()
    finally:
        if process.poll() is None:
            process.kill()
        stalling.release.set()
        stalling.httpd.shutdown()
        stalling.httpd.server_close()


def test_the_default_deadline_is_generous_and_grows_with_the_size():
    assert transfer.Deadline(231_508).limit_s() == pytest.approx(300 + 231_508 / (128 << 10))
    dump = transfer.Deadline(17_751_214_669)
    assert 37 * 3600 < dump.limit_s() < 38 * 3600
    assert "deadline 300 s: 300 s plus 1 s per 128 KiB of the file" == \
        transfer.Deadline(0).describe()


@pytest.mark.timeout(60)
def test_an_endless_body_is_stopped_at_the_official_size(server, tmp_path, capsys):
    status, seconds = timed_cli(vocab_from(server.url + "/endless", tmp_path))
    assert status == 1
    assert one_error_line(capsys) == (
        f"error: {tmp_path / 'vocab.txt'}: {server.url}/endless sent more bytes, the official "
        f"file has 231,508; stopped, nothing kept")
    assert list(tmp_path.iterdir()) == []
    time.sleep(0.2)  # let the server notice the hang-up
    # What the server got out: the reads up to the limit plus what socket buffers took.
    assert server.sent < 16 << 20, server.sent


def test_an_announced_size_beyond_the_official_one_writes_nothing(server, tmp_path, capsys):
    assert run_cli(vocab_from(server.url + "/huge", tmp_path)) == 1
    assert one_error_line(capsys) == (
        f"error: {tmp_path / 'vocab.txt'}: {server.url}/huge announces 1,000,000,000,000 bytes, "
        f"the official file has 231,508; stopped, nothing kept")
    assert list(tmp_path.iterdir()) == []


def test_a_file_of_unknown_size_is_bounded_by_its_ceiling(server, tmp_path):
    with pytest.raises(InputError, match=r"endless sent more bytes, the most expected "
                                                  r"of it is 100,000; stopped, nothing kept"):
        transfer.fetch(server.url + "/endless", tmp_path / "list.txt", max_size=100_000)
    assert list(tmp_path.iterdir()) == []


def test_a_redirect_loop_is_one_line_naming_the_url(server, tmp_path, capsys):
    url = server.url + "/loop"
    assert run_cli(vocab_from(url, tmp_path)) == 1
    assert one_error_line(capsys) == (f"error: too many redirects from {url} (the last, "
                                      f"HTTP 302, to {url})")
    assert list(tmp_path.iterdir()) == []


def test_a_servers_words_are_escaped(server, tmp_path, capsys):
    assert run_cli(vocab_from(server.url + "/evil", tmp_path)) == 1
    line = one_error_line(capsys)
    assert "\x1b" not in line
    assert line == f"error: {server.url}/evil: HTTP 403 Forbidden\\x1b[2J\\x1b[31m"


@pytest.fixture
def no_such_host(monkeypatch):
    """`artifacts.invalid` fails its name lookup, as a resolver answers for it."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host == "artifacts.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return "http://artifacts.invalid/vocab.txt"


def test_a_failed_name_lookup_advises_resuming_only_from_a_partial_file(no_such_host, tmp_path,
                                                                         capsys):
    dest = tmp_path / "vocab.txt"
    assert run_cli(vocab_from(no_such_host, tmp_path, "--retries=0")) == 1
    assert one_error_line(capsys) == (
        f"error: {dest}: download from {no_such_host} failed ([Errno -2] Name or service not "
        f"known)")
    assert list(tmp_path.iterdir()) == []

    partial_name(dest).write_bytes(VOCAB[:1000])
    assert run_cli(vocab_from(no_such_host, tmp_path, "--retries=0")) == 1
    assert one_error_line(capsys).endswith("known); run again to resume from vocab.txt.partial")


def test_negative_retries_are_one_line(tmp_path, capsys):
    assert run_cli(vocab_from("http://artifacts.invalid/vocab.txt", tmp_path,
                              "--retries=-1")) == 1
    assert one_error_line(capsys) == "error: --retries=-1: must be 0 or more"
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_host_is_not_retried_a_temporary_lookup_failure_is(no_such_host, tmp_path,
                                                                       capsys, monkeypatch):
    # With the default retries: an unknown host is the same answer each time, one line at once.
    status, seconds = timed_cli(vocab_from(no_such_host, tmp_path))
    assert status == 1 and seconds < 5
    assert "Name or service not known" in one_error_line(capsys)

    def temporary(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", temporary)
    assert run_cli(vocab_from(no_such_host, tmp_path, "--retries=1")) == 1
    err = capsys.readouterr().err
    assert "retrying (1/1)" in err and err.count("Temporary failure in name resolution") == 2


@pytest.mark.timeout(60)
def test_an_endless_metadata_file_is_stopped(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(r2, "R2_METADATA_MAX_BYTES", 100_000)
    args = [f"--output_dir={tmp_path / 'out'}", "--artifacts=vocab",
            f"--r2_metadata={server.url}/endless#"]
    assert run_cli(args) == 1
    dest = tmp_path / "out" / "r2" / "bert-input-files" / "bert-input-files.uri"
    assert one_error_line(capsys) == (f"error: {dest}: {server.url}/endless#/bert-input-files.uri "
                                      f"sent more bytes, the most expected of it is 100,000; "
                                      f"stopped, nothing kept")


def test_the_deadline_wakes_a_blocked_read(monkeypatch):
    """The watchdog shuts a watched socket at the deadline: a read blocked on a silent peer
    returns at once."""
    monkeypatch.setattr(transfer, "DEADLINE_FLOOR_S", 0.3)
    left, right = socket.socketpair()
    with left, right, transfer.Deadline(0) as deadline:
        deadline.watch(left)
        started = time.monotonic()
        assert left.recv(10) == b""
        assert 0.25 < time.monotonic() - started < 2
        assert deadline.expired and deadline.passed()
    assert not any(thread.name == "download-deadline" for thread in threading.enumerate())


def test_a_redirect_to_a_local_file_is_refused_at_once(server, tmp_path, capsys):
    # Not refused, it is retried three times with back-off (35 s), then a line about
    # connection adapters.
    url = server.url + "/to-file"
    status, seconds = timed_cli(vocab_from(url, tmp_path))
    assert status == 1
    assert one_error_line(capsys) == (f"error: {url}: redirects to file:///etc/hostname; only "
                                      f"http:// and https:// redirects are followed")
    assert seconds < 5 and server.requests == 1
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_during_a_download_is_one_line_and_the_rerun_resumes(server, tmp_path):
    """The process may write at most LIMIT bytes to a file (RLIMIT_FSIZE: the write fails with
    EFBIG, as one fails with ENOSPC on a full disk); the vocabulary has 231,508."""
    limit = 100_000
    dest, partial = tmp_path / "vocab.txt", partial_name(tmp_path / "vocab.txt")
    args = [sys.executable, "-m", "cleanup_scripts.artifacts.download",
            *vocab_from(server.url + "/vocab.txt", tmp_path)]
    result = subprocess.run(
        args, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
        timeout=60, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert (result.returncode, result.stderr) == (
        1, f"error: {partial}: no space left on device (file too large)\n")
    assert not dest.exists() and VOCAB.startswith(partial.read_bytes())
    assert 0 < partial.stat().st_size <= limit
    assert run_module("cleanup_scripts.artifacts.download",
                      *vocab_from(server.url + "/vocab.txt", tmp_path)).returncode == 0
    assert dest.read_bytes() == VOCAB and not partial.exists()
