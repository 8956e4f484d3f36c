"""download from the MLCommons R2 bucket: a replica bucket on a loopback HTTP server.

The replica has the layout of the real one (mlcommons/r2-infra, training/metadata/):
`/metadata/<dataset>.uri` holds one line, the URL of the dataset's folder; `<dataset>.md5`
beside it lists every file of that folder (`md5  relative/path`, sorted), and the files sit
under that folder. `bert-input-files` keeps the TF1 checkpoint's data file as
`model.ckpt-28252-003.data-…`; `bert-preprocessed-wikipedia-dataset` holds results/ packed as
`results4/` in `results_text.tar.gz` and `.zip`, with `bert_reference_results_text_md5.txt`.
File contents are small fakes, so the md5 tables they are checked against are written here
(`--checksums_dir`); checksums/ is not used.

`FAKE_DOWNLOADER` stands in for mlcommons/r2-downloader's mlc-r2-downloader.sh: the same
options (-d -s -t -x -h), the same cf-access-token header once "logged in", the same output
(`<dir>/<dataset>.md5` and every listed file at its path under `<dir>`, resumed with Range
requests), the same md5 check at the end and exit status 1 on any failure.
"""
import bz2
import hashlib
import http.server
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from benchmark.files import InputError
from cleanup_scripts.artifacts import partial_name, r2, write_checked
from tests.cleanup_scripts.range_server import loopback, send_ranged
from tests.cleanup_scripts.test_download import run_cli

INPUTS, PROCESSED = "bert-input-files", "bert-preprocessed-wikipedia-dataset"
DUMP = "enwiki-20200101-pages-articles-multistream.xml.bz2"
TF1_DATA = "tf1_ckpt/model.ckpt-28252.data-00000-of-00001"
TF1_DATA_IN_BUCKET = "tf1_ckpt/model.ckpt-28252-003.data-00000-of-00001"
TOKEN = "fake-cf-access-token"
LOGIN = "https://mlcommons.cloudflareaccess.com/cdn-cgi/access/login/training.example"
RESULT_NAMES = ["eval.md5", "eval.txt"] + [f"part-{i:05d}-of-00500" for i in range(5)]


def md5(data):
    return hashlib.md5(data).hexdigest()


def fake(name, repeat=300):
    return f"fake {name}: not the official bytes\n".encode() * repeat


def listing(files):
    """A bucket's .md5 list, as `rclone md5sum | LC_ALL=C sort` writes it."""
    return "".join(sorted(f"{md5(data)}  {path}\n" for path, data in files.items())).encode()


class Replica:
    """The bucket's two BERT datasets, their metadata, and the md5 tables for them."""

    def __init__(self):
        # Hex digests: text that bzip2 cannot shrink to nothing, so a cut lands mid-file.
        self.xml = b"".join(hashlib.sha256(str(i).encode()).hexdigest().encode() + b"\n"
                            for i in range(3000))
        self.inputs = {  # our artifact path -> bytes
            "bert_config.json": fake("config", 3),
            "vocab.txt": fake("vocab"),
            "tf1_ckpt/model.ckpt-28252.index": fake("tf1 index"),
            "tf1_ckpt/model.ckpt-28252.meta": fake("tf1 meta"),
            TF1_DATA: fake("tf1 data", 3000),
            "tf2_ckpt/model.ckpt-28252.index": fake("tf2 index"),
            "tf2_ckpt/model.ckpt-28252.data-00000-of-00001": fake("tf2 data", 1000),
            DUMP: bz2.compress(self.xml),
        }
        self.results = {name: fake(name, 50 + 10 * i) for i, name in enumerate(RESULT_NAMES)}

    def input_files(self):
        """The bucket's input_files/ folder: our files (one renamed) plus its extras."""
        files = {(TF1_DATA_IN_BUCKET if path == TF1_DATA else path): data
                 for path, data in self.inputs.items()}
        files["License.txt"] = b"license of the inputs\n"
        files["tf1_ckpt/License.txt"] = files["tf2_ckpt/License.txt"] = b"checkpoint licence\n"
        files[DUMP + ".md5sum"] = f"{md5(self.inputs[DUMP])}  {DUMP}\n".encode()
        return files

    def processed_files(self, results=None):
        """The bucket's processed_dataset/ folder; `results` overrides the archived bytes."""
        packed = dict(self.results, **(results or {}))
        tar_bytes, zip_bytes = io.BytesIO(), io.BytesIO()
        with tarfile.open(fileobj=tar_bytes, mode="w:gz") as archive:
            folder = tarfile.TarInfo("results4")
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(folder)
            for name, data in packed.items():
                info = tarfile.TarInfo(f"results4/{name}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        with zipfile.ZipFile(zip_bytes, "w") as archive:
            for name, data in packed.items():
                archive.writestr(f"results4/{name}", data)
        md5_list = "".join(f"{md5(data)}  ./{name}\n" for name, data in self.results.items())
        return {"License.txt": b"license of the processed dataset\n",
                "results_text.tar.gz": tar_bytes.getvalue(),
                "results_text.zip": zip_bytes.getvalue(),
                "bert_reference_results_text_md5.txt": md5_list.encode()}

    def publish(self, server, inputs=None, processed=None):
        """Put both datasets (or the given folders) and their metadata on `server`."""
        for name, folder, files in ((INPUTS, "input_files", inputs or self.input_files()),
                                    (PROCESSED, "processed_dataset",
                                     processed or self.processed_files())):
            base = f"/wikipedia_for_bert/{folder}"
            server.files[f"/metadata/{name}.uri"] = f"{server.url}{base}\n".encode()
            server.files[f"/metadata/{name}.md5"] = listing(files)
            for path, data in files.items():
                server.files[f"{base}/{path}"] = data

    def write_tables(self, directory):
        """md5 tables in the format of checksums/, for the fake bytes."""
        directory.mkdir()
        inputs = dict(self.inputs)
        inputs[DUMP.removesuffix(".bz2")] = self.xml
        results = {f"results/{name}": self.results[name]
                   for name in ("eval.md5", "eval.txt", "part-00000-of-00500")}
        (directory / "inputs.md5").write_text(
            "".join(f"{md5(data)}  {path}\n" for path, data in inputs.items()))
        (directory / "results.md5").write_text(
            "".join(f"{md5(data)}  {path}\n" for path, data in results.items()))
        (directory / "text-FE.md5").write_text("")
        (directory / "sizes.tsv").write_text("path\tbytes\n" + "".join(
            f"{path}\t{len(data)}\n" for path, data in {**inputs, **results}.items()))
        return directory


class Bucket:
    """A loopback HTTP server with Range support; `protected` mimics Cloudflare Access: a
    redirect to its login (302), or a refusal (403), without the token."""

    def __init__(self):
        self.files = {}
        self.requests = []  # (path, Range header)
        self.protected = None  # None, 302 or 403
        self.cut = {}  # path -> bytes to send once before hanging up
        bucket = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                bucket.requests.append((self.path, self.headers.get("Range")))
                if bucket.protected == 403 and self.headers.get("cf-access-token") != TOKEN:
                    self.send_error(403)
                    return
                if bucket.protected == 302 and self.headers.get("cf-access-token") != TOKEN:
                    self.send_response(302)
                    self.send_header("Location", LOGIN)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = bucket.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                if send_ranged(self, data, cut=bucket.cut.get(self.path)):
                    bucket.cut.pop(self.path, None)

        self.httpd, self.url, self.thread = loopback(Handler)

    def fetched(self):
        """The data files requested (metadata left out)."""
        return [path for path, _ in self.requests if not path.startswith("/metadata/")]


FAKE_DOWNLOADER = r'''#!/bin/bash
# Test double of mlcommons/r2-downloader's mlc-r2-downloader.sh (same options and layout).
echo "$*" >> "__LOG__"
download_dir=""
debug=0
while getopts "d:xhst" opt; do
    case $opt in
        d) download_dir="$OPTARG" ;;
        s) ;;
        t) ;;
        x) debug=1 ;;
        h) echo "USAGE: bash [-d download-path] [-s] [-t] [-x] [-h] <URL>"; exit 0 ;;
        \?) echo "Invalid option: -$OPTARG" >&2; exit 1 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ]; then
    echo "Error: A download URL is required as a mandatory argument." >&2
    exit 1
fi
if [[ ! "$1" =~ \.uri$ ]]; then
    echo "Error: URL path does not end with .uri extension" >&2
    exit 1
fi
exec "__PYTHON__" - "$download_dir" "$1" "$debug" <<'EOF'
import hashlib, http.client, os, sys, urllib.error, urllib.request
download_dir, uri, debug = sys.argv[1:4]

def get(url, offset=0):
    headers = {"cf-access-token": "__TOKEN__"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30)

name = os.path.basename(uri)[: -len(".uri")]
base_url = get(uri).read().decode().strip()
download_dir = download_dir or base_url.rsplit("/", 1)[1]
if debug == "1":
    print(f"dataset_name: {name}\ndataset_base_url: {base_url}\ndownload_dir: {download_dir}")
    sys.exit(100)
os.makedirs(download_dir, exist_ok=True)
hashes = os.path.join(download_dir, name + ".md5")
if not os.path.exists(hashes):
    with open(hashes, "wb") as out:
        out.write(get(uri[: -len(".uri")] + ".md5").read())
entries = [line.split(None, 1) for line in open(hashes).read().splitlines() if line.strip()]
for _, path in entries:
    dest = os.path.join(download_dir, path)
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    offset = os.path.getsize(dest) if os.path.exists(dest) else 0
    try:
        response = get(f"{base_url}/{path.removeprefix('./')}", offset)
    except urllib.error.HTTPError as err:
        if err.code == 416:
            continue  # already complete
        print(f"Error: Download failed ({err}). Re-run the script to resume the download.",
              file=sys.stderr)
        sys.exit(1)
    with open(dest, "ab" if response.status == 206 else "wb") as out:
        try:
            while chunk := response.read(65536):
                out.write(chunk)
        except (OSError, http.client.HTTPException):
            print("Error: Download failed. Re-run the script to resume the download.",
                  file=sys.stderr)
            sys.exit(1)
failed = 0
for expected, path in entries:
    ok = hashlib.md5(open(os.path.join(download_dir, path), "rb").read()).hexdigest() == expected
    print(f"{path}: {'OK' if ok else 'FAILED'}")
    failed += not ok
if failed:
    print("Error: Hash verification failed", file=sys.stderr)
    sys.exit(1)
print(f"All files have been downloaded and verified in: {download_dir}")
EOF
'''


@pytest.fixture
def replica():
    return Replica()


@pytest.fixture
def bucket(replica):
    server = Bucket()
    server.thread.start()
    replica.publish(server)
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def tables(replica, tmp_path):
    return replica.write_tables(tmp_path / "tables")


class Downloader:
    """The fake mlc-r2-downloader.sh, in a bin/ folder of its own; `log` has its arguments."""

    def __init__(self, folder):
        self.script = folder / "bin" / r2.R2_DOWNLOADER
        self.log = folder / "downloader.log"
        self.script.parent.mkdir()
        self.script.write_text(FAKE_DOWNLOADER.replace("__LOG__", str(self.log))
                               .replace("__PYTHON__", sys.executable)
                               .replace("__TOKEN__", TOKEN))
        self.script.chmod(0o755)


@pytest.fixture
def downloader(tmp_path):
    return Downloader(tmp_path)


def r2_args(out, bucket, tables, *more):
    return [f"--output_dir={out}", f"--r2_metadata={bucket.url}/metadata",
            f"--checksums_dir={tables}", *more]


def assert_inputs(out, replica):
    for path, data in replica.inputs.items():
        assert (out / path).read_bytes() == data, path


def assert_results(out, replica, names=RESULT_NAMES):
    assert sorted(p.name for p in (out / "results").iterdir()) == sorted(names)
    for name in names:
        assert (out / "results" / name).read_bytes() == replica.results[name], name


def error_line(capsys):
    """The one `error:` line the CLI printed (the last line of stderr)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if line.startswith("error:")] == err[-1:], err
    return err[-1]


def leftovers(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if "partial" in p.name)


# ----------------------------------------------------------------------------------------------
# Over HTTPS, from the .uri and .md5 metadata


def test_inputs_come_from_the_uri_folder_by_the_md5_list(bucket, replica, tables, tmp_path,
                                                         capsys):
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=all", "--decompress")) == 0
    assert_inputs(out, replica)
    assert (out / DUMP.removesuffix(".bz2")).read_bytes() == replica.xml
    # Only the files asked for; the TF1 data file under the bucket's own name.
    base = "/wikipedia_for_bert/input_files/"
    assert sorted(bucket.fetched()) == sorted(
        base + (TF1_DATA_IN_BUCKET if path == TF1_DATA else path) for path in replica.inputs)
    assert [path for path, _ in bucket.requests if path.startswith("/metadata/")] == \
        [f"/metadata/{INPUTS}.uri", f"/metadata/{INPUTS}.md5"]
    assert (out / "r2" / INPUTS / f"{INPUTS}.md5").read_bytes() == \
        bucket.files[f"/metadata/{INPUTS}.md5"]
    assert leftovers(out) == []
    assert "ok  tf1_ckpt/model.ckpt-28252.data-00000-of-00001" in capsys.readouterr().out


def test_results_are_unpacked_and_each_file_verified(bucket, replica, tables, tmp_path):
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=results")) == 0
    assert_results(out, replica)
    base = "/wikipedia_for_bert/processed_dataset/"
    assert bucket.fetched() == [base + "bert_reference_results_text_md5.txt",
                                base + "results_text.tar.gz"]
    bucket.requests.clear()
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=results")) == 0
    assert bucket.fetched() == []  # complete: neither the list nor the archive again
    assert leftovers(out) == []


def test_one_results_file(bucket, replica, tables, tmp_path):
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=results/eval.txt")) == 0
    assert_results(out, replica, ["eval.txt"])


def test_md5_mismatch_is_one_line_and_leaves_no_file(bucket, replica, tables, tmp_path,
                                                     capsys):
    path = "tf2_ckpt/model.ckpt-28252.index"
    good = replica.inputs[path]
    bad = good.replace(b"fake", b"FAKE")  # same size, other bytes: damaged on the way
    bucket.files[f"/wikipedia_for_bert/input_files/{path}"] = bad
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=tf2_ckpt", "--retries=0")) == 1
    line = error_line(capsys)
    assert re.fullmatch(rf"error: {re.escape(str(out / path))}: md5 {md5(bad)} is not the "
                        rf"official {md5(good)}; download removed \(source .*\)", line)
    assert not (out / path).exists()
    assert leftovers(out) == []


def test_results_member_mismatch_is_not_kept(bucket, replica, tables, tmp_path, capsys):
    name = "part-00003-of-00500"
    bad = replica.results[name].replace(b"fake", b"FAKE")
    replica.publish(bucket, processed=replica.processed_files({name: bad}))
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=results")) == 1
    assert re.fullmatch(rf"error: {re.escape(str(out / 'results' / name))}: md5 {md5(bad)} is "
                        rf"not the official {md5(replica.results[name])} \(unpacked from .*"
                        rf"results_text\.tar\.gz\); not kept", error_line(capsys))
    assert not (out / "results" / name).exists()
    assert leftovers(out) == []


def test_a_bucket_list_at_odds_with_checksums_stops_before_downloading(
        bucket, replica, tables, tmp_path, capsys):
    inputs = replica.input_files()
    inputs["vocab.txt"] = b"another vocabulary\n"
    replica.publish(bucket, inputs=inputs)
    assert run_cli(r2_args(tmp_path / "out", bucket, tables, "--artifacts=vocab")) == 1
    assert re.search(rf"lists md5 {md5(inputs['vocab.txt'])} for vocab.txt, the official md5 is "
                     rf"{md5(replica.inputs['vocab.txt'])}$", error_line(capsys))
    assert bucket.fetched() == []


def test_a_results_list_at_odds_with_checksums_stops_before_the_archive(
        bucket, replica, tables, tmp_path, capsys):
    processed = replica.processed_files()
    official = md5(replica.results["eval.txt"])
    processed["bert_reference_results_text_md5.txt"] = \
        processed["bert_reference_results_text_md5.txt"].replace(official.encode(), b"0" * 32)
    replica.publish(bucket, processed=processed)
    assert run_cli(r2_args(tmp_path / "out", bucket, tables, "--artifacts=results")) == 1
    assert error_line(capsys).endswith(f"bert_reference_results_text_md5.txt: lists md5 "
                                       f"{'0' * 32} for results/eval.txt, the official md5 is "
                                       f"{official}")
    assert not any(path.endswith(".tar.gz") for path in bucket.fetched())


def test_an_interrupted_download_resumes_with_a_range_request(bucket, replica, tables,
                                                              tmp_path, capsys):
    url_path = f"/wikipedia_for_bert/input_files/{DUMP}"
    cut = len(replica.inputs[DUMP]) // 3
    bucket.cut[url_path] = cut
    out = tmp_path / "out"
    args = r2_args(out, bucket, tables, "--artifacts=dump", "--retries=0")
    assert run_cli(args) == 1
    assert "run again to resume" in error_line(capsys)
    assert not (out / DUMP).exists()
    assert partial_name(out / DUMP).stat().st_size == cut
    bucket.requests.clear()
    assert run_cli(args) == 0
    assert bucket.requests[-1] == (url_path, f"bytes={cut}-")
    assert (out / DUMP).read_bytes() == replica.inputs[DUMP]


def test_a_uri_naming_a_local_folder_is_one_line_and_nothing_there_is_read(
        bucket, replica, tables, tmp_path, capsys):
    # A `.uri` of file:///some/folder, followed, would have the files there opened and placed.
    local = tmp_path / "local"
    for path, data in replica.input_files().items():
        (local / path).parent.mkdir(parents=True, exist_ok=True)
        (local / path).write_bytes(data)
    bucket.files[f"/metadata/{INPUTS}.uri"] = f"{local.as_uri()}\n".encode()
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=config")) == 1
    assert error_line(capsys) == (
        f"error: {bucket.url}/metadata/{INPUTS}.uri: names the dataset folder {local.as_uri()}, "
        f"a file:// URL; only http:// or https:// is followed")
    assert [path for path, _ in bucket.requests] == [f"/metadata/{INPUTS}.uri"]
    assert not (out / "bert_config.json").exists()


def test_the_bucket_metadata_leads_only_to_https():
    uri = f"{r2.R2_METADATA_URL}/{INPUTS}.uri"
    r2.check_dataset_scheme(uri, "https://training.mlcommons-storage.org/wikipedia_for_bert")
    for folder in ("http://training.mlcommons-storage.org/x", "file:///etc", "ftp://host/x"):
        with pytest.raises(InputError) as raised:
            r2.check_dataset_scheme(uri, folder)
        assert str(raised.value) == (f"{uri}: names the dataset folder {folder}, a "
                                     f"{folder.partition(':')[0]}:// URL; only https:// is "
                                     f"followed")


@pytest.mark.parametrize("name", ["eval.txt", "part-00003-of-00500"])
def test_an_archive_member_over_its_size_is_refused_before_a_byte_is_written(
        bucket, replica, tables, tmp_path, capsys, monkeypatch, name):
    # Unbounded, each member would be written whole (until the disk is full) before its md5
    # is checked.
    monkeypatch.setattr(r2, "R2_RESULTS_MEMBER_MAX_BYTES", 1 << 20, raising=False)
    bomb = bytes(8 << 20)  # zeros: 8 MiB from a few KB of gzip
    replica.publish(bucket, processed=replica.processed_files({name: bomb}))
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=results")) == 1
    archive = out / "r2" / PROCESSED / "results_text.tar.gz"
    bound = (f"its recorded size is {len(replica.results[name]):,}" if name == "eval.txt"
             else "a results/ file has at most 1,048,576")
    assert error_line(capsys) == (f"error: {archive}: member results4/{name} is 8,388,608 "
                                  f"bytes, {bound}; nothing of it unpacked")
    assert not (out / "results" / name).exists() and leftovers(out) == []


def test_md5_checked_writing_stops_at_the_most_bytes_expected(tmp_path):
    def endless():
        while True:
            yield b"x" * 4096

    with pytest.raises(InputError, match=r"out.txt: more than 10,000 bytes \(an endless "
                                         r"source\); stopped, not kept$"):
        write_checked(endless(), tmp_path / "out.txt", None, "an endless source", 10_000)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# When the bucket asks for a login: the official downloader


@pytest.mark.parametrize("answer", [302, 403])
def test_a_login_drives_the_official_downloader_from_path(bucket, replica, tables, downloader,
                                                          tmp_path, monkeypatch, answer):
    bucket.protected = answer
    monkeypatch.setenv("PATH", f"{downloader.script.parent}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=all")) == 0
    assert_inputs(out, replica)
    staged = out / "r2" / INPUTS
    assert downloader.log.read_text().split() == \
        ["-d", str(staged), f"{bucket.url}/metadata/{INPUTS}.uri"]
    assert os.path.samefile(out / TF1_DATA, staged / TF1_DATA_IN_BUCKET)  # linked, not copied
    # Everything verified: a re-run does not run the downloader again.
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=all")) == 0
    assert len(downloader.log.read_text().splitlines()) == 1


@pytest.mark.parametrize("answer, words", [(302, "asks for a Cloudflare Access login"),
                                           (403, "HTTP 403 Forbidden")])
def test_a_login_without_the_downloader_says_how_to_get_it_or_do_without(
        bucket, replica, tables, downloader, tmp_path, monkeypatch, capsys, answer, words):
    bucket.protected = answer
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=all")) == 1
    uri = f"{bucket.url}/metadata/{INPUTS}.uri"
    assert error_line(capsys) == (
        f"error: {uri}: {words}: the official mlc-r2-downloader.sh is needed and is not on "
        f"PATH: get it with `curl -fsSLO https://raw.githubusercontent.com/mlcommons/"
        f"r2-downloader/refs/heads/main/mlc-r2-downloader.sh` and pass "
        f"--r2_downloader=./mlc-r2-downloader.sh, or run it yourself (`bash "
        f"mlc-r2-downloader.sh -d DIR <dataset .uri>`) and pass --from_dir=DIR")
    assert bucket.fetched() == [] and not (out / "vocab.txt").exists()
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=vocab",
                           f"--r2_downloader={tmp_path / 'nowhere.sh'}")) == 1
    assert "nowhere.sh: no such file (the official R2 downloader); get it with `curl" in \
        error_line(capsys)
    folder = tmp_path / "r2-inputs"  # the other way the line gives: run it, then --from_dir
    monkeypatch.setenv("PATH", path)
    subprocess.run(["bash", str(downloader.script), "-d", str(folder), uri], check=True,
                   capture_output=True)
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=all", f"--from_dir={folder}")) == 0
    assert_inputs(out, replica)


def test_the_official_downloader_md5_mismatch_removes_its_file(bucket, replica, tables,
                                                              downloader, tmp_path, capsys):
    good = replica.inputs["vocab.txt"]
    bad = good.replace(b"fake", b"FAKE")
    bucket.files["/wikipedia_for_bert/input_files/vocab.txt"] = bad  # the list keeps md5(good)
    out = tmp_path / "out"
    args = r2_args(out, bucket, tables, "--artifacts=vocab",
                   f"--r2_downloader={downloader.script}")
    assert run_cli(args) == 1
    staged = out / "r2" / INPUTS / "vocab.txt"
    assert re.fullmatch(rf"error: {re.escape(str(staged))}: md5 {md5(bad)} is not the official "
                        rf"{md5(good)} of vocab.txt; removed, run again to download it anew "
                        rf"\(the official downloader exited with status 1\)", error_line(capsys))
    assert not staged.exists() and not (out / "vocab.txt").exists()
    bucket.files["/wikipedia_for_bert/input_files/vocab.txt"] = good
    assert run_cli(args) == 0
    assert (out / "vocab.txt").read_bytes() == good


def test_the_official_downloader_resumes_after_an_interruption(bucket, replica, tables,
                                                               downloader, tmp_path, capsys):
    path = "tf2_ckpt/model.ckpt-28252.data-00000-of-00001"
    url_path = f"/wikipedia_for_bert/input_files/{path}"
    bucket.cut[url_path] = 4096
    out = tmp_path / "out"
    args = r2_args(out, bucket, tables, "--artifacts=tf2_ckpt",
                   f"--r2_downloader={downloader.script}")
    assert run_cli(args) == 1
    size = len(replica.inputs[path])
    assert error_line(capsys).endswith(f"{path}: incomplete (4096 of {size} bytes); run again to "
                                       f"resume the download (the official downloader exited "
                                       f"with status 1)")
    assert (out / "r2" / INPUTS / path).stat().st_size == 4096  # kept for the resume
    assert not (out / path).exists()
    bucket.requests.clear()
    assert run_cli(args) == 0
    assert (url_path, "bytes=4096-") in bucket.requests
    for tf2_path, data in replica.inputs.items():
        if tf2_path.startswith("tf2_ckpt/"):
            assert (out / tf2_path).read_bytes() == data


def test_the_official_downloader_brings_results(bucket, replica, tables, downloader, tmp_path):
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=results",
                           f"--r2_downloader={downloader.script}")) == 0
    assert_results(out, replica)
    assert downloader.log.read_text().split() == \
        ["-d", str(out / "r2" / PROCESSED), f"{bucket.url}/metadata/{PROCESSED}.uri"]


# ----------------------------------------------------------------------------------------------
# From a folder the official downloader filled


def fill_like_the_downloader(downloader, bucket, folder):
    """Run the fake downloader as a user would: no -d, so input_files/, processed_dataset/."""
    folder.mkdir()
    for name in (INPUTS, PROCESSED):
        subprocess.run(["bash", str(downloader.script), f"{bucket.url}/metadata/{name}.uri"],
                       cwd=folder, check=True, capture_output=True)
    return folder


def test_from_dir_takes_the_downloader_folders_without_network(bucket, replica, tables,
                                                               downloader, tmp_path):
    filled = fill_like_the_downloader(downloader, bucket, tmp_path / "downloads")
    assert sorted(p.name for p in filled.iterdir()) == ["input_files", "processed_dataset"]
    bucket.requests.clear()
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=all,results",
                           f"--from_dir={filled}")) == 0
    assert bucket.requests == []
    assert_inputs(out, replica)
    assert_results(out, replica)
    # A folder without the downloader's .md5 list (files copied by hand) still maps.
    (filled / "input_files" / f"{INPUTS}.md5").unlink()
    out2 = tmp_path / "out2"
    assert run_cli(r2_args(out2, bucket, tables, "--artifacts=tf1_ckpt",
                           f"--from_dir={filled / 'input_files'}")) == 0
    assert (out2 / TF1_DATA).read_bytes() == replica.inputs[TF1_DATA]


def test_from_dir_results_from_the_zip_or_the_unpacked_folder(bucket, replica, tables,
                                                                downloader, tmp_path, capsys):
    filled = fill_like_the_downloader(downloader, bucket, tmp_path / "downloads")
    processed = filled / "processed_dataset"
    (processed / "results_text.tar.gz").unlink()  # a user who kept only the .zip
    args = r2_args(tmp_path / "out", bucket, tables, "--artifacts=results",
                   f"--from_dir={filled}")
    assert run_cli(args) == 0
    assert_results(tmp_path / "out", replica)
    with zipfile.ZipFile(processed / "results_text.zip") as archive:  # or unpacked it by hand
        archive.extractall(processed)
    (processed / "results_text.zip").unlink()
    assert (processed / "results4").is_dir()
    args[0] = f"--output_dir={tmp_path / 'out2'}"
    assert run_cli(args) == 0
    assert_results(tmp_path / "out2", replica)
    shutil.rmtree(processed / "results4")
    args[0] = f"--output_dir={tmp_path / 'out3'}"
    assert run_cli(args) == 1
    assert error_line(capsys) == (f"error: {processed}: holds none of results_text.tar.gz, "
                                  f"results_text.zip, results4 (results/ of the processed "
                                  f"dataset)")


def test_from_dir_mismatch_names_the_file_and_keeps_the_users_copy(bucket, replica, tables,
                                                                  downloader, tmp_path, capsys):
    filled = fill_like_the_downloader(downloader, bucket, tmp_path / "downloads")
    damaged = filled / "input_files" / "bert_config.json"
    bad = damaged.read_bytes().replace(b"fake", b"FAKE")
    damaged.write_bytes(bad)
    out = tmp_path / "out"
    assert run_cli(r2_args(out, bucket, tables, "--artifacts=config",
                           f"--from_dir={filled}")) == 1
    assert error_line(capsys) == (f"error: {damaged}: md5 {md5(bad)} is not the official "
                                  f"{md5(replica.inputs['bert_config.json'])} of "
                                  f"bert_config.json; not used")
    assert damaged.read_bytes() == bad
    assert not (out / "bert_config.json").exists()


def test_from_dir_needs_the_r2_source(tmp_path, capsys):
    assert run_cli([f"--output_dir={tmp_path}", "--source=url",
                    f"--from_dir={tmp_path}"]) == 1
    assert "does not go with --source=url" in error_line(capsys)
