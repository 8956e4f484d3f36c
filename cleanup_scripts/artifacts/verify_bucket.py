"""Check a bucket copy of the benchmark's files against the official md5s, without downloading.

Each known artifact (see `checksums/`) is looked for under the prefix in the layouts
`verify_dir` looks in, and judged from the object's size and the md5 of its metadata (one
listing). A composite object has no md5 there, so it differs. The only object read is a
`results/eval.md5` (330 KB), to count its official eval hashes.
"""
from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath

from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts import storage
from cleanup_scripts.artifacts.verify_dir import Finding, judge

NO_MD5 = ("no md5 in the object's metadata (a composite object?): re-upload it with "
          "cleanup_scripts.artifacts.upload")


def check_remote_artifact(objects: dict[str, storage.RemoteObject],
                          artifact: checksums.Artifact) -> Finding:
    """Judge `artifact` by the first of its candidate objects in `objects` (keyed by path under
    the prefix); `found_at` is that path."""
    for candidate in checksums.candidate_paths(artifact.path):
        remote = objects.get(candidate)
        if remote is not None:
            return judge(artifact, PurePosixPath(candidate), remote.size, lambda: remote.md5,
                         NO_MD5)
    return Finding(artifact, "missing")


def check_bucket(url: storage.GcsUrl) -> list[Finding]:
    """Check every known artifact under `url` (from `storage.parse_gcs_url`) from object
    metadata only. InputError (one line) for a missing bucket or missing credentials."""
    objects = storage.list_objects(url)
    return [check_remote_artifact(objects, artifact)
            for artifact in checksums.known_artifacts().values()]


def count_official_eval_hashes_in_bucket(url: storage.GcsUrl, findings: list[Finding]
                                         ) -> tuple[str, int, int] | None:
    """(where, official hashes, hashes) of the bucket's `results/eval.md5` (located by
    `findings`), downloaded into a temporary folder; None when there is none."""
    found = next((f for f in findings
                  if f.artifact.path == "results/eval.md5" and f.found_at is not None), None)
    if found is None:
        return None
    relative = found.found_at.as_posix()
    remote = storage.RemoteObject(url.object_name(relative), found.size, None)  # any md5
    with tempfile.TemporaryDirectory() as scratch:
        storage.download_object(storage.access(), url, relative, remote, Path(scratch))
        return (relative, *checksums.count_official_eval_hashes(Path(scratch) / relative))
