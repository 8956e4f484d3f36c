"""The MLCommons R2 bucket: its two BERT datasets over HTTPS, or from a folder its official
downloader (mlcommons/r2-downloader) filled.

Each dataset has two metadata files: `<dataset>.uri`, one line, the URL of its folder, and
`<dataset>.md5`, every file of that folder with its md5. `bert-input-files` holds the inputs
(one under another name, found by its md5); `bert-preprocessed-wikipedia-dataset` holds
results/ packed in a .tar.gz, with the md5 list of its files. A file takes its name only with
the md5 of `checksums/` (or, for a results/ file that lacks one, of the bucket's list).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterator, Mapping

from benchmark.errors import printable
from benchmark.files import InputError, ensure_dir, md5_file, resolve_inside
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts import place, verified, write_checked
from cleanup_scripts.artifacts.transfer import CHUNK_SIZE, LoginRequired, fetch

R2_METADATA_URL = "https://training.mlcommons-storage.org/metadata"
R2_INPUTS = "bert-input-files"
R2_PROCESSED = "bert-preprocessed-wikipedia-dataset"
# The folder the official downloader fills when it is given no -d (the end of the .uri's URL).
R2_DEFAULT_FOLDERS = {R2_INPUTS: "input_files", R2_PROCESSED: "processed_dataset"}
# Files the bucket keeps under another name than ours (same bytes), for a folder without the
# bucket's .md5 list (with one, the name is found by md5).
R2_OTHER_NAMES = {"tf1_ckpt/model.ckpt-28252.data-00000-of-00001":
                  ("tf1_ckpt/model.ckpt-28252-003.data-00000-of-00001",)}
R2_RESULTS_LIST = "bert_reference_results_text_md5.txt"
R2_RESULTS_ARCHIVE = "results_text.tar.gz"  # what is fetched over HTTPS
# What a folder the user filled may hold instead: the bucket's .zip of the same files, or the
# folder the archives unpack to.
R2_RESULTS_SOURCES = (R2_RESULTS_ARCHIVE, "results_text.zip", "results4")
# Ceilings for the files of unpublished size: the metadata and the results md5 list (502 files
# in ~40 KB), and the results archive (its 502 text files hold ~13.6 GB; packed, they can only
# be a little larger).
R2_METADATA_MAX_BYTES = 1 << 20
R2_RESULTS_ARCHIVE_MAX_BYTES = 16 << 30
# The most a results/ file without a size in checksums/sizes.tsv may unpack to (the official
# parts have ~27 MB each, eval.txt 33 MB).
R2_RESULTS_MEMBER_MAX_BYTES = 1 << 30
R2_DOWNLOADER = "mlc-r2-downloader.sh"
R2_DOWNLOADER_URL = ("https://raw.githubusercontent.com/mlcommons/r2-downloader/refs/heads/main/"
                     + R2_DOWNLOADER)
R2_STAGING = "r2"  # OUTPUT_DIR/r2/<dataset>/: its metadata and results files, as fetched


def dataset_uri(metadata_url: str, dataset: str) -> str:
    """The URL of dataset `dataset`'s `.uri` metadata file."""
    return f"{metadata_url.rstrip('/')}/{dataset}.uri"


@dataclass
class R2Request:
    """What is asked of the bucket: input artifacts, and results/ files (None: all of them)."""

    inputs: list[str]
    results: list[str] | None
    any_results: bool

    def datasets(self) -> list[str]:
        return ([R2_INPUTS] if self.inputs else []) + ([R2_PROCESSED] if self.any_results else [])


def r2_request(paths: list[str], names: list[str], known: Mapping[str, checksums.Artifact]
               ) -> R2Request:
    """Sort artifact `paths` (selected by the `--artifacts` `names`) into the two datasets;
    InputError for one the bucket does not hold."""
    inputs, results = [], []
    for path in paths:
        if path.startswith("results/"):
            results.append(path.removeprefix("results/"))
        elif known[path].group == "inputs" and not path.endswith(".xml"):
            inputs.append(path)
        else:
            hint = " (it has the .bz2: add --decompress)" if path.endswith(".xml") else ""
            raise InputError(f"{path}: not in the R2 bucket{hint}; give --url {path}=URL or "
                             f"--base_url")
    whole = "results" in names
    return R2Request(inputs, None if whole else results, whole or bool(results))


def read_listing(path: Path) -> dict[str, str]:
    """A bucket's `.md5` list: {path in the dataset folder: md5}, a leading `./` dropped."""
    return {name.removeprefix("./"): md5
            for name, md5 in checksums.parse_md5_manifest(path).items()}


@dataclass(frozen=True)
class Dataset:
    """One dataset as its metadata describes it, and the local folder it is staged in."""

    uri: str  # the .uri file's URL
    base_url: str  # the dataset folder's URL
    listing: dict[str, str]  # {path in the folder: md5}
    folder: Path
    retries: int  # of each fetch (see `transfer.fetch`)

    def url(self, path: str) -> str:
        """The URL of file `path` of the dataset."""
        quoted = urllib.parse.quote(path) if self.base_url.startswith("http") else path
        return f"{self.base_url}/{quoted}"

    def list_url(self) -> str:
        """The URL of the dataset's `.md5` list (beside its `.uri`)."""
        return self.uri.removesuffix(".uri") + ".md5"

    def fetch_file(self, name: str) -> None:
        """Fetch file `name` of the dataset into the folder, with the listing's md5."""
        if name not in self.listing:
            raise InputError(f"{self.list_url()}: does not list {name}")
        ceiling = R2_METADATA_MAX_BYTES if name == R2_RESULTS_LIST else \
            R2_RESULTS_ARCHIVE_MAX_BYTES
        fetch(self.url(name), self.folder / name, self.listing[name], retries=self.retries,
              max_size=ceiling)


def check_dataset_scheme(uri: str, base_url: str) -> None:
    """InputError, one line naming the `.uri` file `uri`, unless the dataset folder it names,
    `base_url`, is https, or of the scheme `uri` itself was read with (a mirror the user
    named with --r2_metadata): the bucket's metadata never sends the download to a local file
    (`file://`) or another protocol."""
    scheme = urllib.parse.urlsplit(base_url).scheme.lower()
    allowed = {"https", urllib.parse.urlsplit(uri).scheme.lower()}
    if scheme not in allowed:
        raise InputError(f"{uri}: names the dataset folder {printable(base_url)}, a {scheme}:// "
                         f"URL; only {' or '.join(sorted(f'{s}://' for s in allowed))} is "
                         f"followed")


def open_dataset(metadata_url: str, name: str, folder: Path, retries: int) -> Dataset:
    """Fetch dataset `name`'s `.uri` and `.md5` into `folder`, where the official downloader
    keeps them too. LoginRequired when the bucket wants credentials."""
    uri = dataset_uri(metadata_url, name)
    where = ensure_dir(folder) / f"{name}.uri"
    fetch(uri, where, retries=retries, max_size=R2_METADATA_MAX_BYTES)
    lines = where.read_text(encoding="utf-8", errors="replace").split()
    if len(lines) != 1 or not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$", lines[0]):
        raise InputError(f"{uri}: not a dataset .uri file (one line, the URL of the dataset's "
                         f"folder, was expected)")
    check_dataset_scheme(uri, lines[0])
    listing = folder / f"{name}.md5"
    fetch(uri.removesuffix(".uri") + ".md5", listing, retries=retries,
          max_size=R2_METADATA_MAX_BYTES)
    return Dataset(uri, lines[0].rstrip("/"), read_listing(listing), folder, retries)


def bucket_path(artifact: checksums.Artifact, listing: Mapping[str, str], where: str) -> str:
    """The path under which the bucket's list `listing` holds `artifact`: its own path, or
    another with the official md5 (the bucket renamed a file)."""
    listed = listing.get(artifact.path)
    if listed is not None:
        if artifact.md5 is not None and listed != artifact.md5:
            raise InputError(f"{where}: lists md5 {listed} for {artifact.path}, the official md5 "
                             f"is {artifact.md5}")
        return artifact.path
    same = sorted(path for path, md5 in listing.items() if md5 == artifact.md5)
    if not same:
        raise InputError(f"{artifact.path}: not in the bucket's list {where}")
    folder = artifact.path.rpartition("/")[0]
    return next((path for path in same if path.rpartition("/")[0] == folder), same[0])


def fetch_inputs(dataset: Dataset, paths: list[str], known: Mapping[str, checksums.Artifact],
                 output_dir: Path) -> list[Path]:
    """Download the input artifacts `paths` from `dataset` into `output_dir`."""
    for path in paths:
        artifact = known[path]
        remote = bucket_path(artifact, dataset.listing, dataset.list_url())
        fetch(dataset.url(remote), output_dir / path,
              artifact.md5, artifact.size, retries=dataset.retries)
        print(f"ok  {path}")
    return [output_dir / path for path in paths]


def find_downloader(given: str | None, why: str = "") -> Path:
    """The official `mlc-r2-downloader.sh`: `given`, else the one on PATH. InputError (one
    line: `why`, then how to get it or to do without) when there is none."""
    get_it = (f"get it with `curl -fsSLO {R2_DOWNLOADER_URL}` and pass "
              f"--r2_downloader=./{R2_DOWNLOADER}, or run it yourself (`bash {R2_DOWNLOADER} -d "
              f"DIR <dataset .uri>`) and pass --from_dir=DIR")
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise InputError(f"{given}: no such file (the official R2 downloader); {get_it}")
        return path
    found = shutil.which(R2_DOWNLOADER)
    if found:
        return Path(found)
    raise InputError(f"{why + ': ' if why else ''}the official {R2_DOWNLOADER} is needed and is "
                     f"not on PATH: {get_it}")


def run_downloader(script: Path, uri: str, folder: Path) -> int:
    """Run the official downloader for the dataset of `uri` into `folder` (its -d); returns its
    exit status. It logs in (a browser, or the service token of CF_ACCESS_CLIENT_ID and
    CF_ACCESS_CLIENT_SECRET: its -s), resumes what an earlier run left and checks md5s."""
    command = ["bash", str(script)]
    if os.environ.get("CF_ACCESS_CLIENT_ID") and os.environ.get("CF_ACCESS_CLIENT_SECRET"):
        command.append("-s")
    command += ["-d", str(ensure_dir(folder)), uri]
    print("running " + " ".join(command), file=sys.stderr, flush=True)
    try:
        return subprocess.run(command, check=False).returncode
    except OSError as err:
        raise InputError(f"{script}: cannot run it with bash ({err.strerror})") from err


def _check_found(found: Path, md5: str, label: str, size: int | None = None,
                 staged: bool = False) -> None:
    """InputError unless `found` has md5 `md5`. A file the user gave is left as it is; one the
    official downloader staged (`staged`) is kept when short of `size` (its next run resumes
    it) and removed when its bytes are wrong (its next run fetches it anew)."""
    if staged and size is not None and found.stat().st_size < size:
        raise InputError(f"{found}: incomplete ({found.stat().st_size} of {size} bytes); run "
                         f"again to resume the download")
    actual = md5_file(found)
    if actual == md5:
        return
    if staged:
        found.unlink()
        raise InputError(f"{found}: md5 {actual} is not the official {md5} of {label}; removed, "
                         f"run again to download it anew")
    raise InputError(f"{found}: md5 {actual} is not the official {md5} of {label}; not used")


def find_folder(root: Path, name: str) -> tuple[Path, dict[str, str] | None]:
    """The folder under `root` that the official downloader filled with dataset `name`, and
    the dataset's md5 list found there (None when there is none): `root` itself (its -d), its
    default folder under `root`, or another folder directly under `root` holding `<name>.md5`."""
    if not root.is_dir():
        raise InputError(f"{root}: no such folder")
    default = root / R2_DEFAULT_FOLDERS[name]
    for folder in [root, default] + sorted(p for p in root.iterdir() if p.is_dir()):
        if (folder / f"{name}.md5").is_file():
            return folder, read_listing(folder / f"{name}.md5")
    return (default if default.is_dir() else root), None


def import_inputs(folder: Path, listing: Mapping[str, str] | None, paths: list[str],
                  known: Mapping[str, checksums.Artifact], output_dir: Path,
                  staged: bool = False) -> list[Path]:
    """Check the input artifacts `paths` in a folder the official downloader filled (`staged`:
    our run of it, see `_check_found`) and place them under `output_dir` (hard links where
    possible); returns the files placed."""
    where = str(folder / f"{R2_INPUTS}.md5")
    for path in paths:
        artifact = known[path]
        if listing is not None:
            candidates = [bucket_path(artifact, listing, where)]
        else:
            candidates = [path, *R2_OTHER_NAMES.get(path, ())]
        found = next((folder / c for c in candidates if (folder / c).is_file()), None)
        if found is None:
            raise InputError(f"{folder / candidates[0]}: missing ({path} is not in {folder})")
        if not verified(output_dir / path, artifact.md5, artifact.size):
            _check_found(found, artifact.md5, path, artifact.size, staged)
            place(found, output_dir / path)
        print(f"ok  {path}")
    return [output_dir / path for path in paths]


# The results/ folder


def _flat_name(path: str) -> str | None:
    """The file name of a results/ entry (`part-…`, `./part-…`, `results4/part-…`), or None
    for anything else (deeper paths, `..`, absolute paths)."""
    parts = [part for part in PurePosixPath(path).parts if part != "."]
    if path.startswith("/") or not parts or len(parts) > 2 or ".." in parts:
        return None
    return parts[-1]


def results_expected(list_path: Path, known: Mapping[str, checksums.Artifact]
                     ) -> dict[str, str]:
    """{file name in results/: md5}: the bucket's list, and the official values of
    `checksums/`, which it must agree with."""
    expected: dict[str, str] = {}
    for path, md5 in checksums.parse_md5_manifest(list_path).items():
        name = _flat_name(path)
        if name is None:
            raise InputError(f"{list_path}: {path!r} is not a file of the results/ folder")
        expected[name] = md5
    for path, artifact in known.items():
        if artifact.group != "results" or artifact.md5 is None:
            continue
        name = path.removeprefix("results/")
        if expected.setdefault(name, artifact.md5) != artifact.md5:
            raise InputError(f"{list_path}: lists md5 {expected[name]} for {path}, the official "
                             f"md5 is {artifact.md5}")
    return expected


def results_sizes(known: Mapping[str, checksums.Artifact]) -> dict[str, int]:
    """{file name in results/: bytes} of the results/ files `known` records a size for."""
    return {path.removeprefix("results/"): artifact.size for path, artifact in known.items()
            if path.startswith("results/") and artifact.size is not None}


def _members(source: Path) -> Iterator[tuple[str, int, BinaryIO]]:
    """(path, size its header declares, stream) of each file of a results archive (.tar.gz
    read as a stream, .zip) or of the folder it unpacks to (a link there leading out of it is
    an InputError, `resolve_inside`)."""
    if source.is_dir():
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            relative = path.relative_to(source).as_posix()
            with open(resolve_inside(source, relative, str(source)), "rb") as handle:
                yield relative, os.fstat(handle.fileno()).st_size, handle
    elif source.suffix == ".zip":
        with zipfile.ZipFile(source) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    with archive.open(info) as handle:
                        yield info.filename, info.file_size, handle
    else:
        with tarfile.open(source, "r|*") as archive:  # a stream: one pass, no index
            for member in archive:
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    yield member.name, member.size, handle


def unpack_results(archive: Path, expected: Mapping[str, str], names: list[str],
                   results_dir: Path, sizes: Mapping[str, int]) -> None:
    """Write files `names` of results/ from `archive` (see `_members`) into `results_dir`, each
    with its md5 of `expected` before it takes its name. Each is bounded before a byte is
    written: a member whose header declares more than its size in `sizes` (or, without one,
    R2_RESULTS_MEMBER_MAX_BYTES) is refused, and one that brings more is stopped there."""
    ensure_dir(results_dir)
    todo = set(names)
    try:
        for member, declared, stream in _members(archive):
            name = _flat_name(member)
            if name in todo:
                limit = sizes.get(name, R2_RESULTS_MEMBER_MAX_BYTES)
                if declared > limit:
                    what = ("its recorded size is" if name in sizes
                            else "a results/ file has at most")
                    raise InputError(f"{archive}: member {printable(member)} is {declared:,} "
                                     f"bytes, {what} {limit:,}; nothing of it unpacked")
                write_checked(iter(lambda: stream.read(CHUNK_SIZE), b""), results_dir / name,
                              expected[name], f"unpacked from {archive}", limit)
                todo.discard(name)
                if not todo:
                    break
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
        raise InputError(f"{archive}: damaged archive ({' '.join(str(err).split())})") from err
    if todo:
        raise InputError(f"{archive}: has no results/{min(todo)} ({len(todo)} of the "
                         f"{len(names)} files asked for are missing)")


def import_results(folder: Path, listing: Mapping[str, str] | None,
                   known: Mapping[str, checksums.Artifact], wanted: list[str] | None,
                   results_dir: Path, fetch_file: Callable[[str], None] | None = None
                   ) -> list[Path]:
    """Check and unpack the results/ files `wanted` (None: all) from the processed dataset's
    folder; `fetch_file(name)` brings a file of the dataset there (without, it is there).
    Returns the files of results/ placed."""
    list_path = folder / R2_RESULTS_LIST
    if fetch_file is not None:
        fetch_file(R2_RESULTS_LIST)
    if not list_path.is_file():
        raise InputError(f"{list_path}: missing (the md5 list of the processed dataset)")
    if listing is not None and R2_RESULTS_LIST in listing:
        _check_found(list_path, listing[R2_RESULTS_LIST], R2_RESULTS_LIST)
    expected = results_expected(list_path, known)
    names = sorted(expected) if wanted is None else wanted
    for name in names:
        if name not in expected:
            raise InputError(f"results/{name}: not in the bucket's list {list_path}")
    pending = [name for name in names if not verified(results_dir / name, expected[name])]
    if pending:
        if fetch_file is not None:
            fetch_file(R2_RESULTS_ARCHIVE)
        source = next((folder / name for name in R2_RESULTS_SOURCES
                       if (folder / name).exists()), None)
        if source is None:
            raise InputError(f"{folder}: holds none of {', '.join(R2_RESULTS_SOURCES)} "
                             f"(results/ of the processed dataset)")
        unpack_results(source, expected, pending, results_dir, results_sizes(known))
    for name in names:
        print(f"ok  results/{name}")
    return [results_dir / name for name in names]


def r2_download(request: R2Request, known: Mapping[str, checksums.Artifact], output_dir: Path,
                metadata_url: str, from_dir: str | None, retries: int,
                downloader: str | None = None) -> list[Path]:
    """Get the requested artifacts from the bucket into `output_dir`; returns the files placed.

    From `from_dir` when given (a folder the official downloader filled); else over HTTPS,
    staged in `output_dir/r2/<dataset>/`, while the bucket asks for no login; else (or with
    `downloader`) through the official downloader, the one given or on PATH, into that folder.
    """
    script = find_downloader(downloader) if downloader else None
    placed = []
    for name in request.datasets():
        staging = output_dir / R2_STAGING / name
        if from_dir:
            placed += _import(name, Path(from_dir).expanduser(), request, known, output_dir)
            continue
        if script is None:
            try:
                dataset = open_dataset(metadata_url, name, staging, retries)
            except LoginRequired as err:
                script = find_downloader(None, why=str(err))
            else:
                placed += (import_results(dataset.folder, dataset.listing, known,
                                          request.results, output_dir / "results",
                                          dataset.fetch_file)
                           if name == R2_PROCESSED else fetch_inputs(dataset, request.inputs,
                                                                     known, output_dir))
                continue
        placed += _through_downloader(script, name, dataset_uri(metadata_url, name), staging,
                                      request, known, output_dir)
    return placed


def _import(name: str, root: Path, request: R2Request, known: Mapping[str, checksums.Artifact],
            output_dir: Path, staged: bool = False) -> list[Path]:
    """Place dataset `name`'s requested files from the folder under `root` the official
    downloader filled."""
    folder, listing = find_folder(root, name)
    if name == R2_PROCESSED:
        return import_results(folder, listing, known, request.results, output_dir / "results")
    return import_inputs(folder, listing, request.inputs, known, output_dir, staged)


def _through_downloader(script: Path, name: str, uri: str, staging: Path, request: R2Request,
                        known: Mapping[str, checksums.Artifact], output_dir: Path) -> list[Path]:
    """Run the official downloader for dataset `name` into `staging` (not when every input
    asked for is already verified), then place the requested files from there."""
    if name == R2_INPUTS and all(verified(output_dir / path, known[path].md5, known[path].size)
                                 for path in request.inputs):
        for path in request.inputs:
            print(f"ok  {path}")
        return [output_dir / path for path in request.inputs]
    status = run_downloader(script, uri, staging)
    try:
        placed = _import(name, staging, request, known, output_dir, staged=True)
    except InputError as err:
        if status == 0:
            raise
        raise InputError(f"{err} (the official downloader exited with status {status})") from err
    if status != 0:
        print(f"{script.name} exited with status {status}, but every file asked for is verified",
              file=sys.stderr)
    return placed
