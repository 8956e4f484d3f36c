"""Check a bucket copy of the benchmark's files against the official md5s, without downloading.

    python -m cleanup_scripts.verify gs://BUCKET/PREFIX     (or: make verify DIR=gs://...)

Each known artifact (see `checksums/`) is looked for under the prefix in the same layouts as
`cleanup_scripts.artifacts.verify_dir` looks in a directory (ours, then the reference's), and reported as
`ok`, `differs` or `missing` from the object's size and its md5 in the bucket's metadata: one
listing, no object is read. The only object read is a `results/eval.md5` (330 KB), to count
its hashes among the official 10,000 as the directory check does. An object without an md5 in
its metadata (a composite object) cannot be checked that way and is reported as `differs`.
"""
from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath

from google.api_core import exceptions as api_exceptions

from benchmark.files import InputError
from cleanup_scripts import checksums
from cleanup_scripts.artifacts import storage
from cleanup_scripts.artifacts.verify_dir import Finding


def check_remote_artifact(objects: dict[str, storage.RemoteObject],
                          artifact: checksums.Artifact) -> Finding:
    """Compare `artifact` with the first of its candidate objects in `objects` (keyed by path
    under the prefix); `found_at` is that path."""
    for candidate in checksums.candidate_paths(artifact.path):
        remote = objects.get(candidate)
        if remote is not None:
            break
    else:
        return Finding(artifact, "missing")
    found = PurePosixPath(candidate)
    if artifact.size is not None and remote.size != artifact.size:
        return Finding(artifact, "differs", found,
                       f"{remote.size} bytes, expected {artifact.size}", remote.size)
    if artifact.md5 is None:
        return Finding(artifact, "ok", found, "size only: no official md5", remote.size)
    if remote.md5 is None:
        return Finding(artifact, "differs", found,
                       "no md5 in the object's metadata (a composite object?): re-upload it "
                       "with cleanup_scripts.upload", remote.size)
    if remote.md5 != artifact.md5:
        return Finding(artifact, "differs", found,
                       f"md5 {remote.md5}, expected {artifact.md5}", remote.size)
    return Finding(artifact, "ok", found, size=remote.size)


def check_bucket(url: storage.GcsUrl) -> list[Finding]:
    """Check every known artifact under `url` (from `storage.parse_gcs_url`) from object
    metadata only. InputError (one line) for a missing bucket or missing credentials.
    """
    objects = storage.list_objects(url)
    return [check_remote_artifact(objects, artifact)
            for artifact in checksums.known_artifacts().values()]


def count_official_eval_hashes_in_bucket(url: storage.GcsUrl, findings: list[Finding]
                                         ) -> tuple[str, int, int] | None:
    """(where, official hashes, hashes) of the bucket's `results/eval.md5` (located by
    `findings`), read into a temporary file; None when there is none."""
    found = next((f.found_at for f in findings
                  if f.artifact.path == "results/eval.md5" and f.found_at is not None), None)
    if found is None:
        return None
    where = url.child(found.as_posix())
    client = storage.make_client()
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(scratch) / "eval.md5"
        try:
            client.bucket(url.bucket).blob(url.object_name(found.as_posix())) \
                .download_to_filename(str(local), client=client)
        except api_exceptions.GoogleAPIError as err:
            raise InputError(f"{where}: cannot read ({err})") from err
        return (found.as_posix(), *checksums.count_official_eval_hashes(local))
