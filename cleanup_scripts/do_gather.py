"""Stage 6: gather the training text into parts of about `block_size` MB (reference `do_gather.py`).

    python -m cleanup_scripts.do_gather --data='text/*/wiki_??' --input_suffix=.4 \\
        --block_size=26.92 --out_dir=./results

Block sizes count the *original* files' bytes (the path matched by `--data`, without the suffix),
not the text actually copied: a new part starts when adding a file would pass `block_size` MiB.
Inputs are split into `--nworker` consecutive runs (the reference's partition); worker w names
its parts `part-{count + 1000*w:05d}-of-{num_outputs:05d}`. Each input is read as UTF-8 (a BOM
dropped, universal newlines) and, if it ends in two newlines, loses one.
"""
from __future__ import annotations

import argparse
import codecs
import os
import time
from dataclasses import dataclass

from benchmark import constants
from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output, ensure_dir, expand_inputs
from cleanup_scripts.pipeline.runner import StageSummary, map_in_workers, report


@dataclass(frozen=True)
class GatherSource:
    """One input of the gather: the file whose size counts and the file whose text is copied."""

    size_path: str
    text_path: str


def plan_parts(sizes: list[int], block_size_mb: float) -> list[list[int]]:
    """Group consecutive inputs (by index) into parts the way the reference does.

    `sizes` are byte counts. A part is closed before an input that would make its byte count
    exceed `block_size_mb` MiB; an input larger than a block still gets a part of its own.
    """
    limit = block_size_mb * 1024 * 1024
    parts: list[list[int]] = []
    part_bytes = 0
    for index, size in enumerate(sizes):
        if not parts or limit < part_bytes + size:
            parts.append([])
            part_bytes = 0
        parts[-1].append(index)
        part_bytes += size
    return parts


def worker_splits(num_inputs: int, nworker: int) -> list[range]:
    """The reference's partition of `num_inputs` inputs into `nworker` consecutive runs."""
    split = (num_inputs + nworker - 1) // nworker
    runs = [range(i * split, min((i + 1) * split, num_inputs)) for i in range(nworker - 1)]
    runs.append(range(min((nworker - 1) * split, num_inputs), num_inputs))
    return runs


def part_name(count: int, worker_id: int, num_outputs: int) -> str:
    """`part-XXXXX-of-YYYYY` for a worker's `count`-th part."""
    return f"part-{str(count + 1000 * worker_id).zfill(5)}-of-{str(num_outputs).zfill(5)}"


def gathered_bytes(path: str) -> bytes:
    """One input as the gather copies it, UTF-8 encoded.

    The reference reads it as UTF-8 text with a BOM dropped and universal newlines ("\\r\\n" and
    a lone "\\r" become "\\n"), and drops one of two final newlines; the same is done here on
    the bytes, after checking that they are UTF-8.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read as UTF-8 text ({err})") from err
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data[:-1] if data.endswith(b"\n\n") else data


def write_part(job: tuple[str, list[str]]) -> int:
    """Write one part from its text inputs; returns the number of inputs copied."""
    out_path, text_paths = job
    with atomic_output(out_path, "wb") as out:
        for text_path in text_paths:
            out.write(gathered_bytes(text_path))
    return len(text_paths)


def gather(sources: list[GatherSource], out_dir: str, block_size_mb: float, num_outputs: int,
           nworker: int = 1, nprocs: int = 0) -> list[str]:
    """Write the parts for `sources` (in order) into `out_dir`; returns the part paths.

    `nworker` is the reference's partition count (it changes part names); `nprocs` is how many
    processes write parts (0: all cores), which never changes the output.
    """
    ensure_dir(out_dir)
    sizes = [os.path.getsize(source.size_path) for source in sources]
    jobs = []
    for worker_id, run in enumerate(worker_splits(len(sources), nworker)):
        run_sizes = [sizes[i] for i in run]
        for count, members in enumerate(plan_parts(run_sizes, block_size_mb)):
            paths = [sources[run[i]].text_path for i in members]
            jobs.append((os.path.join(out_dir, part_name(count, worker_id, num_outputs)), paths))
    map_in_workers(write_part, jobs, nprocs, desc="do_gather",
                   sizes=[sum(map(os.path.getsize, paths)) for _, paths in jobs])
    return [path for path, _ in jobs]


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference do_gather.py (same flags and defaults)."""
    parser = argparse.ArgumentParser(description="Package BERT text into parts of a fixed size.")
    parser.add_argument("--data", default="~/book-corpus-feb-stn/*/*.txt",
                        help="Glob of the original files (their sizes set the parts).")
    parser.add_argument("--nworker", type=int, default=1,
                        help="Input partitions, as in the reference (changes part names).")
    parser.add_argument("--out_dir", default="~/book-corpus-large-gather/", help="Output dir.")
    parser.add_argument("--num_outputs", type=int, default=constants.GATHER_NUM_OUTPUTS,
                        help="The total written into part names.")
    parser.add_argument("--input_suffix", default=".3", help="Suffix of the files copied.")
    parser.add_argument("--block_size", type=float, default=32.0, help="Part size in MiB.")
    args = parser.parse_args(argv)
    if args.nworker < 1:
        raise InputError(f"--nworker={args.nworker}: must be at least 1")
    started = time.time()
    inputs = expand_inputs(args.data, args.input_suffix)
    sources = [GatherSource(path, path + args.input_suffix) for path in inputs]
    parts = gather(sources, os.path.expanduser(args.out_dir), args.block_size, args.num_outputs,
                   args.nworker)
    report(StageSummary("do_gather", len(inputs), len(parts),
                        sum(os.path.getsize(s.text_path) for s in sources), started))


if __name__ == "__main__":
    exit_on_user_error(main)
