"""Stage 4: one sentence per line, a blank line between articles (NLTK 3.4.5 Punkt, English).

Drop-in for the reference `do_sentence_segmentation.py`:

    python -m cleanup_scripts.do_sentence_segmentation --data='text/*/wiki_??' \\
        --input_suffix=.2 --output_suffix=.3 --nworker=0

For each file `GLOB match + input_suffix` (read as UTF-8 with universal newlines, so `\\r\\n`
and a lone `\\r` end a line too) it writes `match + output_suffix`: per input line, first an
empty line if the line is a single character (in practice a bare newline, the gap between
articles), then every sentence of the line, stripped of surrounding whitespace, on a line of
its own; finally one more empty line at the end of the file. Sentences come from
`cleanup_scripts.text.sentence_splitter.split_sentences`, which reproduces NLTK 3.4.5's
`sent_tokenize` exactly, so the output is byte-identical to the reference's.
"""
from __future__ import annotations

import argparse
import io
from typing import Iterable

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output
from cleanup_scripts.pipeline.runner import run_suffix_stage
from cleanup_scripts.text.sentence_splitter import get_splitter


# Lines read and segmented at a time (a size hint in characters; bounds a worker's memory).
_CHUNK_CHARS = 1 << 22


def segment_lines(lines: Iterable[str]) -> tuple[str, int]:
    """The output text for `lines` of one file, and how many sentence lines it holds.

    `lines` are text lines as a file iterates them (newline-terminated, except perhaps the
    last). Per line: "\\n" first if the line is a single character, then each sentence,
    stripped, on a line of its own. The file's closing empty line is not included.
    """
    split = get_splitter().split
    pieces = []
    sentences = 0
    for line in lines:
        if len(line) == 1:
            pieces.append("\n")
        found = split(line)
        if found:
            sentences += len(found)
            pieces.append("\n".join([sentence.strip() for sentence in found]))
            pieces.append("\n")
    return "".join(pieces), sentences


def segment_file(input_path: str, output_path: str) -> int:
    """Segment `input_path` into sentences, writing `output_path` atomically.

    Reads UTF-8 with universal newlines, `_CHUNK_CHARS` at a time. Returns the number of
    sentence lines written (blank separator lines not counted). Raises InputError if the input
    cannot be read or is not UTF-8, or the output cannot be written; then no file is left
    under `output_path`.
    """
    try:
        source = io.open(input_path, "r", encoding="utf-8")
    except OSError as err:
        raise InputError(f"{input_path}: cannot read ({err.strerror})") from err
    sentences = 0
    with source, atomic_output(output_path) as out:
        try:
            while lines := source.readlines(_CHUNK_CHARS):
                text, count = segment_lines(lines)
                out.write(text)
                sentences += count
        except UnicodeDecodeError as err:
            raise InputError(f"{input_path}: not UTF-8 text (byte {err.start}: {err.reason})"
                             ) from err
        out.write("\n")
    return sentences


def _process(job: tuple[str, str]) -> int:
    return segment_file(*job)


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference do_sentence_segmentation.py (same flags and defaults,
    except --nworker, whose default 0 means all cores)."""
    parser = argparse.ArgumentParser(description="Sentence segmentation for BERT documents.")
    parser.add_argument("--data", default="./*/*.compact",
                        help="Glob of input files, without the input suffix.")
    parser.add_argument("--input_suffix", default=".2", help="Suffix of the files read.")
    parser.add_argument("--output_suffix", default=".3", help="Suffix of the files written.")
    parser.add_argument("--nworker", type=int, default=0, help="Worker processes (0: all cores).")
    args = parser.parse_args(argv)
    get_splitter()  # check the model files once, before any worker starts
    run_suffix_stage("do_sentence_segmentation", _process, args.data, args.input_suffix,
                     args.output_suffix, args.nworker)


if __name__ == "__main__":
    exit_on_user_error(main)
