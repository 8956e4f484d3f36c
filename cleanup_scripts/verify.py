"""Check a directory's files against the benchmark's official md5s and sizes.

    python -m cleanup_scripts.verify DIR        (or: make verify DIR=...)
    python -m cleanup_scripts.verify gs://BUCKET/PREFIX

Every known artifact (see `checksums/`) is looked for under DIR, in our layout
(`DIR/bert_config.json`, `DIR/tf1_ckpt/…`, `DIR/results/…`, `DIR/text/FE/…`,
`DIR/tfrecords/…`) and in the reference's (`wiki/`, `cleanup_scripts/text/`, `results4/`, …),
and reported as `ok`, `differs` or `missing`. When an `eval.md5` is present, the number of its
hashes found in the official list of 10,000 eval articles is reported too. Exit status 0 when
nothing differs, 1 otherwise. A `gs://` argument checks a bucket copy the same way, from the
objects' size and md5 metadata, without downloading them (`cleanup_scripts/verify_bucket.py`).

`md5_file` and `verify_file` are the chunked md5 helpers the other stages use.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from tqdm import tqdm

from cleanup_scripts import checksums
from cleanup_scripts.fileio import InputError
from cleanup_scripts.runner import StageSummary, exit_on_input_error, report

CHUNK_SIZE = 1 << 20
# A progress bar is shown (on a terminal) for files larger than this.
_PROGRESS_MIN_BYTES = 256 << 20

# Where each canonical folder of an artifact may sit under DIR: our layout first, then the
# reference's (download_and_uncompress.sh's `wiki/`, process_wiki.sh run in `cleanup_scripts/`,
# the processed-results archive's `results4/`, a flat TF1 checkpoint folder `phase1/`).
_LAYOUTS = {
    "": ("", "wiki/", "cleanup_scripts/wiki/"),
    "tf1_ckpt/": ("tf1_ckpt/", "wiki/tf1_ckpt/", "cleanup_scripts/wiki/tf1_ckpt/", "phase1/"),
    "tf2_ckpt/": ("tf2_ckpt/", "wiki/tf2_ckpt/", "cleanup_scripts/wiki/tf2_ckpt/"),
    "results/": ("results/", "results4/", "cleanup_scripts/results/"),
    "text/FE/": ("text/FE/", "cleanup_scripts/text/FE/"),
    "tfrecords/": ("tfrecords/", "tfrecord/"),
}


def md5_file(path: str | os.PathLike, progress: bool | None = None) -> str:
    """The md5 hex digest of a file, read in 1 MiB chunks.

    `progress`: True/False forces a byte progress bar on/off; None shows one on a terminal
    for big files. Raises OSError if the file cannot be read.
    """
    digest = hashlib.md5()
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
    size = os.path.getsize(path)
    if progress is None:  # tqdm's None: shown only on a terminal
        disable = None if size >= _PROGRESS_MIN_BYTES else True
    else:
        disable = not progress
    with open(path, "rb") as handle, tqdm(total=size, unit="B", unit_scale=True, leave=False,
                                           desc=f"md5 {Path(path).name}", disable=disable) as bar:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            bar.update(count)
    return digest.hexdigest()


def verify_file(path: str | os.PathLike, expected_md5: str) -> bool:
    """True when `path` exists and its md5 equals `expected_md5` (case-insensitive)."""
    try:
        return md5_file(path) == expected_md5.lower()
    except OSError:
        return False


def candidate_paths(path: str) -> list[str]:
    """The relative locations where the official layouts put the artifact `path`."""
    head, _, name = path.rpartition("/")
    folder = head + "/" if head else ""
    return [prefix + name for prefix in _LAYOUTS.get(folder, (folder,))]


def locate(root: Path, path: str) -> Path | None:
    """The first existing file among `path`'s candidate locations under `root`, or None."""
    for candidate in candidate_paths(path):
        full = root / candidate
        if full.is_file():
            return full
    return None


@dataclass
class Finding:
    """The outcome of checking one artifact."""

    artifact: checksums.Artifact
    status: str  # "ok", "differs" or "missing"
    found_at: PurePath | None = None  # a file; for a bucket, the object's path under the prefix
    detail: str = ""
    size: int | None = None  # bytes of what was found


def check_artifact(root: Path, artifact: checksums.Artifact) -> Finding:
    """Look for `artifact` under `root` and compare its size, then its md5."""
    found = locate(root, artifact.path)
    if found is None:
        return Finding(artifact, "missing")
    size = found.stat().st_size
    if artifact.size is not None and size != artifact.size:
        return Finding(artifact, "differs", found,
                       f"{size} bytes, expected {artifact.size}", size)
    if artifact.md5 is None:
        return Finding(artifact, "ok", found, "size only: no official md5", size)
    try:
        actual = md5_file(found)
    except OSError as err:
        raise InputError(f"{found}: cannot read ({err.strerror})") from err
    if actual != artifact.md5:
        return Finding(artifact, "differs", found, f"md5 {actual}, expected {artifact.md5}",
                       size)
    return Finding(artifact, "ok", found, size=size)


def check_directory(root: str | os.PathLike) -> list[Finding]:
    """Check every known artifact under `root`; InputError if `root` is not a directory."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    return [check_artifact(root, artifact) for artifact in checksums.known_artifacts().values()]


def count_official_eval_hashes(eval_md5: str | os.PathLike) -> tuple[int, int]:
    """(hashes of `eval_md5` in the official eval-article list, hashes in `eval_md5`)."""
    official = checksums.official_eval_hashes()
    hashes = checksums.read_hash_list(eval_md5)
    return sum(value in official for value in hashes), len(hashes)


def format_finding(root: PurePath, finding: Finding) -> str:
    """One report line: status, artifact path, where it was found if elsewhere, details."""
    line = f"{finding.status:<8} {finding.artifact.path}"
    if finding.found_at is not None:
        relative = finding.found_at.relative_to(root).as_posix()
        if relative != finding.artifact.path:
            line += f"  (at {relative})"
    if finding.detail:
        line += f"  [{finding.detail}]"
    return line


def main(argv: list[str] | None = None) -> None:
    """CLI: report every known artifact under DIR; exit 1 when any differs."""
    parser = argparse.ArgumentParser(
        description="Check files under DIR against the benchmark's official md5s and sizes.")
    parser.add_argument("directory", metavar="DIR",
                        help="A download directory, a preprocess output or a reference tree; "
                             "or gs://BUCKET/PREFIX, a bucket copy of one.")
    parser.add_argument("--hide_missing", action="store_true",
                        help="Do not list artifacts that are absent (they are still counted).")
    args = parser.parse_args(argv)
    started = time.time()
    eval_counts = None  # (where, official hashes, hashes)
    if args.directory.startswith("gs://"):
        from cleanup_scripts import storage, verify_bucket  # google-cloud-storage, if needed
        url = storage.parse_gcs_url(args.directory)  # checked before any request
        root = PurePosixPath()
        findings = verify_bucket.check_bucket(url)
        eval_counts = verify_bucket.count_official_eval_hashes_in_bucket(url, findings)
    else:
        root = Path(args.directory)
        findings = check_directory(root)
        eval_md5 = locate(root, "results/eval.md5")
        if eval_md5 is not None:
            eval_counts = (eval_md5.relative_to(root).as_posix(),
                           *count_official_eval_hashes(eval_md5))
    for finding in findings:
        if finding.status != "missing" or not args.hide_missing:
            print(format_finding(root, finding))
    if eval_counts is not None:
        where, matched, total = eval_counts
        print(f"{where}: {matched} of its {total} hashes are official eval-article hashes")
    counts = {status: sum(f.status == status for f in findings)
              for status in ("ok", "differs", "missing")}
    print(f"{counts['ok']} ok, {counts['differs']} differ, {counts['missing']} missing")
    checked = [f for f in findings if f.found_at is not None]
    report(StageSummary("verify", len(checked), counts["ok"],
                        sum(f.size or 0 for f in checked), started))
    if counts["differs"]:
        sys.exit(1)


if __name__ == "__main__":
    exit_on_input_error(main)
