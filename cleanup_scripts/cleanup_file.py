"""Stage 3a: drop WikiExtractor's `<doc>` markup and article titles.

Drop-in for the reference `cleanup_file.py`:

    python -m cleanup_scripts.cleanup_file --data='text/*/wiki_??' --output_suffix=.1

Per line of the extracted file (read as UTF-8 with universal newlines, so a lone `\\r` also ends
a line): a line containing `<doc` is replaced by a blank line and the line after it (the title)
is dropped; lines containing `</doc>` and lines of length 1 (a bare newline) are dropped; every
other line is kept as it is.
"""
from __future__ import annotations

import argparse
import io
from typing import Sequence

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output
from cleanup_scripts.pipeline.runner import run_suffix_stage


def _without_blank_and_footer_lines(lines: Sequence[str]) -> list[str]:
    """`lines` less those of length 1 (a bare newline) and those containing `</doc>`."""
    return [line for line in lines if len(line) != 1 and "</doc>" not in line]


def strip_doc_markup(lines: Sequence[str]) -> list[str]:
    """The lines of an extracted file without `<doc>` headers, titles and `</doc>` lines.

    `lines` are newline-terminated text lines; each `<doc ...>` line becomes one "\\n" and the
    line after it (the title) is dropped, whatever it holds.
    """
    kept: list[str] = []
    position = 0
    for header in [index for index, line in enumerate(lines) if "<doc" in line]:
        if header < position:
            continue  # a title line that holds "<doc": dropped as a title
        kept += _without_blank_and_footer_lines(lines[position:header])
        kept.append("\n")
        position = header + 2
    kept += _without_blank_and_footer_lines(lines[position:])
    return kept


def read_text_lines(path: str) -> list[str]:
    """Read `path` as UTF-8 text with universal newlines; InputError if it is not UTF-8."""
    try:
        with io.open(path, "r", encoding="utf-8") as handle:
            return handle.readlines()
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from err
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err


def stripped_bytes(path: str) -> bytes:
    """`path` without doc markup and titles, as the UTF-8 bytes cleanup_file would write."""
    return "".join(strip_doc_markup(read_text_lines(path))).encode("utf-8")


def cleanup_one_file(input_path: str, output_path: str) -> int:
    """Write `output_path`: `input_path` without doc markup and titles. Returns lines written."""
    kept = strip_doc_markup(read_text_lines(input_path))
    with atomic_output(output_path) as out:
        out.writelines(kept)
    return len(kept)


def _process(job: tuple[str, str]) -> int:
    return cleanup_one_file(*job)


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference cleanup_file.py (same flags; --nworker 0 = all cores)."""
    parser = argparse.ArgumentParser(description="Remove <doc> tags and titles of pages.")
    parser.add_argument("--data", default="./wiki_??", help="Glob of extracted input files.")
    parser.add_argument("--input_suffix", default="", help="Suffix of the files read.")
    parser.add_argument("--output_suffix", default=".1", help="Suffix of the files written.")
    parser.add_argument("--nworker", type=int, default=0, help="Worker processes (0: all cores).")
    args = parser.parse_args(argv)
    run_suffix_stage("cleanup_file", _process, args.data, args.input_suffix, args.output_suffix,
                     args.nworker)


if __name__ == "__main__":
    exit_on_user_error(main)
