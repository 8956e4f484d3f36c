"""`make verify`: check a folder or a bucket copy against the official md5s and sizes, or a
`make preprocess` output against its manifest.

    python -m cleanup_scripts.artifacts.verify DIR     a download folder, a reference tree
    python -m cleanup_scripts.artifacts.verify gs://BUCKET/PREFIX     a bucket copy of one
    python -m cleanup_scripts.artifacts.verify OUT     a `make preprocess` output (manifest.tsv,
                                                       .state/)

Any DIR but a preprocess output (`verify_official`): every known official artifact is reported
`ok`, `differs` or `missing` (a folder by `verify_dir`, a bucket copy by `verify_bucket`), with
the number of official eval-article hashes in an `eval.md5`; exit status 1 when anything
differs.

A preprocess output is checked for what it is, a dataset this harness built
(`verify_preprocess_output`):
1. its `manifest.tsv` is the one the manifest stage wrote (size and md5 as `.state/` recorded
   them, the files it lists those recorded with it; else one line, exit 1), and every file it
   lists is still as recorded (size; md5 where the mtime differs from the stage's record in
   `.state/`, every md5 with --rehash): this decides the exit status (1 when a file is missing
   or changed; the first SHOWN_PROBLEMS are named, the rest counted);
2. the files it holds that have official values (`checksums/`) are compared with them. A build
   from a dump is not byte-identical to the official text (see docs/exactness.md), so
   there a difference is reported, not an error; a build from the official text
   (--results_text) must match, and a difference exits 1;
3. the official files it does not hold are counted, not listed as missing: the inputs
   preprocess never writes (config, vocab, checkpoints, the dump: `make download`), and the
   outputs this build did not make (the embedded slice gives 2 parts, not 500).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path, PurePosixPath

from benchmark.errors import exit_on_user_error, printable
from benchmark.files import md5_file, resolve_inside
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts.verify_dir import check_artifact, check_directory, format_finding
from cleanup_scripts.pipeline.layout import DatasetLayout
from cleanup_scripts.pipeline.ledger import read_dataset_manifest, recorded_entries
from cleanup_scripts.pipeline.runner import StageSummary, report

# The official artifacts that preprocess never writes (checksums/inputs.md5).
INPUT_GROUP = "inputs"
SHOWN_PROBLEMS = 20  # files missing or changed named one per line; the others are counted


def is_preprocess_output(directory: str) -> bool:
    """Whether `directory` is a folder `make preprocess` wrote (manifest.tsv and .state/).
    InputError naming `manifest.tsv` when, beside `.state/`, it is there but is no regular
    file or a link leading out of `directory` (a FIFO is named, never opened)."""
    if directory.startswith("gs://"):
        return False
    layout = DatasetLayout(Path(directory))
    if not (layout.state_dir.is_dir() and os.path.lexists(layout.manifest)):
        return False
    resolve_inside(layout.root, layout.manifest.name, directory)
    return True


def manifest_problems(layout: DatasetLayout, rehash: bool) -> tuple[list[str], int, int]:
    """(a line per listed file that is missing or changed, files listed, their bytes).

    Each row's path goes through `resolve_inside`: one that is absolute, holds `..`, leads
    outside OUT through a link or names no regular file (a FIFO, /dev/zero) is an InputError
    naming the manifest's line, and nothing it names is read or hashed. Then the manifest is
    held to its record in `.state/` before any file it lists is (`read_dataset_manifest`)."""
    listed = read_dataset_manifest(layout)
    mtimes = {name: entries[-1].mtime_ns for name, entries in recorded_entries(layout).items()}
    problems = []
    for path, name, size, md5 in listed:
        try:
            stat = path.stat()
        except FileNotFoundError:
            problems.append(f"missing  {printable(name)}  [listed in manifest.tsv]")
            continue
        if stat.st_size != size:
            problems.append(f"changed  {printable(name)}  [{stat.st_size} bytes, manifest.tsv "
                            f"has {size}]")
        elif rehash or mtimes.get(name) != stat.st_mtime_ns:
            actual = md5_file(path, progress=False)
            if actual != md5:
                problems.append(f"changed  {printable(name)}  [md5 {actual}, manifest.tsv has "
                                f"{md5}]")
    return problems, len(listed), sum(size for _, _, size, _ in listed)


def verify_preprocess_output(directory: str, rehash: bool) -> bool:
    """Print the report on a preprocess output (see the module doc); True when it passes."""
    started = time.time()
    root = Path(directory)
    layout = DatasetLayout(root)
    from_results = layout.results_md5s.is_file()
    route = "the official results/ text" if from_results else "a dump"
    print(f"{directory}: a make preprocess output (from {route}): checking the files its "
          f"manifest.tsv lists, then those with official md5s or sizes")
    problems, listed, listed_bytes = manifest_problems(layout, rehash)
    for line in problems[:SHOWN_PROBLEMS]:
        print(line)
    if len(problems) > SHOWN_PROBLEMS:
        print(f"... and {len(problems) - SHOWN_PROBLEMS:,} more missing or changed (not "
              f"listed)")
    how = "md5 recomputed" if rehash else "size, and md5 where the mtime changed since it was made"
    print(f"manifest.tsv: {listed - len(problems)} of {listed} files as recorded ({how}); "
          f"{len(problems)} missing or changed")

    findings = [check_artifact(root, artifact)
                for artifact in checksums.known_artifacts().values()]
    held = [finding for finding in findings if finding.status != "missing"]
    for finding in held:
        line = format_finding(root, finding)
        if finding.status != "ok" and not from_results:  # a dump build: not a failure
            line = line.replace(finding.status, f"{finding.status} (expected for a dump)", 1)
        print(line)
    equal = sum(finding.status == "ok" for finding in held)
    differ = len(held) - equal
    if from_results:
        verdict = "a build from the official text must equal them" if differ else ""
    else:
        verdict = ("expected: a build from a dump is not byte-identical to them, see "
                   "docs/exactness.md" if differ else "")
    print(f"official: {equal} of the {len(held)} files here with official values equal them, "
          f"{differ} differ" + (f" ({verdict})" if verdict else ""))
    eval_md5 = checksums.locate(root, "results/eval.md5")
    if eval_md5 is not None:
        matched, total = checksums.count_official_eval_hashes(eval_md5)
        print(f"{eval_md5.relative_to(root).as_posix()}: {matched} of its {total} hashes are "
              f"official eval-article hashes")
    absent = [finding for finding in findings if finding.status == "missing"]
    inputs = sum(finding.artifact.group == INPUT_GROUP for finding in absent)
    outputs = len(absent) - inputs
    print(f"not here, as expected: {inputs} official inputs preprocess does not produce "
          f"(bert_config.json, vocab.txt, checkpoints, the dump: make download)" + (
              f", {outputs} official outputs this build did not make (a dump smaller than the "
              f"official one, such as the embedded slice, gives fewer than 500 parts and no "
              f"text/FE files)" if outputs else ""))
    report(StageSummary("verify", listed, listed - len(problems), listed_bytes, started))
    passed = not problems and not (from_results and differ)
    failures = [f"{len(problems)} file(s) missing or changed since preprocess"] if problems \
        else []
    if from_results and differ:
        failures.append(f"{differ} file(s) differ from their official values")
    expected = f"; {differ} official value(s) differ, as expected from a dump" \
        if differ and not from_results else ""
    print(f"verify: PASSED: {listed} file(s) as recorded{expected}" if passed else
          f"verify: FAILED: {'; '.join(failures)}", flush=True)
    return passed


def verify_official(directory: str, hide_missing: bool) -> bool:
    """Print a line per known official artifact under `directory` (a folder, or
    gs://BUCKET/PREFIX), the eval-hash count of an `eval.md5` and the totals; True when none
    differs. InputError (one line) for a missing folder, bucket or credentials."""
    started = time.time()
    eval_counts = None  # (where, official hashes, hashes)
    if directory.startswith("gs://"):
        from cleanup_scripts.artifacts import storage, verify_bucket  # google-cloud-storage
        url = storage.parse_gcs_url(directory)  # checked before any request
        root = PurePosixPath()
        findings = verify_bucket.check_bucket(url)
        eval_counts = verify_bucket.count_official_eval_hashes_in_bucket(url, findings)
    else:
        root = Path(directory)
        findings = check_directory(root)
        eval_md5 = checksums.locate(root, "results/eval.md5")
        if eval_md5 is not None:
            eval_counts = (eval_md5.relative_to(root).as_posix(),
                           *checksums.count_official_eval_hashes(eval_md5))
    for finding in findings:
        if finding.status != "missing" or not hide_missing:
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
    return not counts["differs"]


def main(argv: list[str] | None = None) -> None:
    """CLI: a preprocess output is checked as such; any other DIR as official artifacts."""
    parser = argparse.ArgumentParser(
        description="Check files under DIR against the benchmark's official md5s and sizes; "
                    "a make preprocess output against its manifest.tsv too.")
    parser.add_argument("directory", metavar="DIR",
                        help="A download directory, a preprocess output or a reference tree; "
                             "or gs://BUCKET/PREFIX, a bucket copy of one.")
    parser.add_argument("--hide_missing", action="store_true",
                        help="Do not list artifacts that are absent (they are still counted).")
    parser.add_argument("--rehash", action="store_true",
                        help="A preprocess output: recompute the md5 of every file its "
                             "manifest.tsv lists (default: those whose mtime changed).")
    args = parser.parse_args(argv)
    if is_preprocess_output(args.directory):
        passed = verify_preprocess_output(args.directory, args.rehash)
    else:
        passed = verify_official(args.directory, args.hide_missing)
    if not passed:
        sys.exit(1)


if __name__ == "__main__":
    exit_on_user_error(main)
