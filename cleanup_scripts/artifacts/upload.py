"""Upload a prepared dataset to a Google Cloud Storage bucket, in parallel, md5-checked.

    python -m cleanup_scripts.artifacts.upload --bucket=gs://BUCKET/PREFIX \\
        [--source_dir=build/dataset] [--nworker=8] [--chunk_mb=16]
    make upload BUCKET=gs://BUCKET/PREFIX

What is sent, and in which order, is `storage.upload_tree`'s. Prints one line of what was done
and the summary: files, MB sent, seconds, MB/s.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmark.errors import exit_on_user_error
from cleanup_scripts.artifacts import storage
from cleanup_scripts.pipeline.runner import report

DEFAULT_SOURCE = "build/dataset"


def main(argv: list[str] | None = None) -> None:
    """CLI: upload SOURCE_DIR to BUCKET and check every object's md5."""
    parser = argparse.ArgumentParser(
        description="Upload a prepared dataset to gs://bucket/prefix (parallel, resumable, "
                    "md5-verified).")
    parser.add_argument("--bucket", required=True, metavar="gs://BUCKET/PREFIX",
                        help="Where the dataset goes; objects are named PREFIX/<path>.")
    parser.add_argument("--source_dir", default=DEFAULT_SOURCE,
                        help=f"The dataset to upload (default {DEFAULT_SOURCE}).")
    parser.add_argument("--nworker", type=int, default=storage.DEFAULT_THREADS,
                        help=f"Files uploaded at once, in threads (0: "
                             f"{storage.DEFAULT_THREADS}).")
    parser.add_argument("--chunk_mb", type=float, default=storage.DEFAULT_CHUNK_SIZE >> 20,
                        help="Size of each request of a resumable upload, in MiB (rounded up "
                             "to 256 KiB); files over 8 MiB are uploaded in such chunks.")
    args = parser.parse_args(argv)
    url = storage.parse_gcs_url(args.bucket)
    started = time.time()
    transfers = storage.upload_tree(Path(args.source_dir), url, args.nworker,
                                    storage.chunk_size_bytes(args.chunk_mb))
    print(storage.describe(transfers, "upload", f"to {url}"), flush=True)
    report(storage.summary("upload", transfers, started))


if __name__ == "__main__":
    exit_on_user_error(main)
