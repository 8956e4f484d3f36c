"""Check a directory's files against the benchmark's official md5s and sizes.

Every known artifact (see `checksums/`) is looked for under the directory in our layout and in
the reference's (`checksums.candidate_paths`) and found `ok`, `differs` or `missing`
(`Finding`, made by `judge`, which `verify_bucket` uses for a bucket copy too).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Callable

from benchmark.files import InputError, md5_file
from cleanup_scripts.artifacts import checksums


@dataclass
class Finding:
    """The outcome of checking one artifact."""

    artifact: checksums.Artifact
    status: str  # "ok", "differs" or "missing"
    found_at: PurePath | None = None  # a file; for a bucket, the object's path under the prefix
    detail: str = ""
    size: int | None = None  # bytes of what was found


def judge(artifact: checksums.Artifact, found: PurePath, size: int,
          md5: Callable[[], str | None], no_md5: str = "") -> Finding:
    """The finding for `artifact` found at `found` with `size` bytes: its size is compared,
    then (only when it matches and an official md5 exists) the md5 `md5()` gives; a None md5
    differs, with `no_md5` as the detail."""
    if artifact.size is not None and size != artifact.size:
        return Finding(artifact, "differs", found, f"{size} bytes, expected {artifact.size}", size)
    if artifact.md5 is None:
        return Finding(artifact, "ok", found, "size only: no official md5", size)
    actual = md5()
    if actual != artifact.md5:
        detail = f"md5 {actual}, expected {artifact.md5}" if actual else no_md5
        return Finding(artifact, "differs", found, detail, size)
    return Finding(artifact, "ok", found, size=size)


def check_artifact(root: Path, artifact: checksums.Artifact) -> Finding:
    """Look for `artifact` under `root` and compare its size, then its md5."""
    found = checksums.locate(root, artifact.path)
    if found is None:
        return Finding(artifact, "missing")

    def md5() -> str:
        try:
            return md5_file(found)
        except OSError as err:
            raise InputError(f"{found}: cannot read ({err.strerror})") from err
    return judge(artifact, found, found.stat().st_size, md5)


def check_directory(root: str | os.PathLike) -> list[Finding]:
    """Check every known artifact under `root`; InputError if `root` is not a directory."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    return [check_artifact(root, artifact) for artifact in checksums.known_artifacts().values()]


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
