"""Check a directory's files, or a bucket copy's, against the official md5s and sizes.

    python -m cleanup_scripts.verify DIR        (or: make verify DIR=...)
    python -m cleanup_scripts.verify gs://BUCKET/PREFIX

Every known artifact is reported `ok`, `differs` or `missing` (`verify_dir`, `verify_bucket`),
with the number of official eval-article hashes in an `eval.md5`. Exit status 1 when anything
differs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path, PurePosixPath

from benchmark.errors import exit_on_user_error
from cleanup_scripts import checksums
from cleanup_scripts.artifacts.verify_dir import check_directory, format_finding
from cleanup_scripts.runner import StageSummary, report


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
        from cleanup_scripts.artifacts import storage, verify_bucket  # google-cloud-storage
        url = storage.parse_gcs_url(args.directory)  # checked before any request
        root = PurePosixPath()
        findings = verify_bucket.check_bucket(url)
        eval_counts = verify_bucket.count_official_eval_hashes_in_bucket(url, findings)
    else:
        root = Path(args.directory)
        findings = check_directory(root)
        eval_md5 = checksums.locate(root, "results/eval.md5")
        if eval_md5 is not None:
            eval_counts = (eval_md5.relative_to(root).as_posix(),
                           *checksums.count_official_eval_hashes(eval_md5))
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
    exit_on_user_error(main)
