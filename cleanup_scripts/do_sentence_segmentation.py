"""Stage 4: one sentence per line, a blank line between articles (NLTK 3.4.5 Punkt, English).

Drop-in for the reference `do_sentence_segmentation.py`:

    python -m cleanup_scripts.do_sentence_segmentation --data='text/*/wiki_??' \\
        --input_suffix=.2 --output_suffix=.3 --nworker=0

For each file `GLOB match + input_suffix` (read as UTF-8 with universal newlines, so `\\r\\n`
and a lone `\\r` end a line too) it writes `match + output_suffix`: per input line, first an
empty line if the line is a single character (in practice a bare newline, the gap between
articles), then every sentence of the line, stripped of surrounding whitespace, on a line of
its own; finally one more empty line at the end of the file. Sentences come from
`cleanup_scripts.sentence_splitter.split_sentences`, which reproduces NLTK 3.4.5's
`sent_tokenize` exactly, so the output is byte-identical to the reference's.
"""
from __future__ import annotations

import argparse
import io
from typing import Iterable, Iterator

from cleanup_scripts.fileio import InputError, atomic_output
from cleanup_scripts.runner import exit_on_input_error, run_suffix_stage
from cleanup_scripts.sentence_splitter import get_tokenizer, split_sentences


def segment_lines(lines: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """Yield the output lines for `lines` of one file, each with whether it is a sentence.

    `lines` are text lines as a file iterates them (newline-terminated, except perhaps the
    last). Every yielded line ends with "\\n"; the closing empty line of the file is included.
    """
    for line in lines:
        if len(line) == 1:
            yield "\n", False
        for sentence in split_sentences(line):
            yield sentence.strip() + "\n", True
    yield "\n", False


def segment_file(input_path: str, output_path: str) -> int:
    """Segment `input_path` into sentences, writing `output_path` atomically.

    Returns the number of sentence lines written (blank separator lines not counted). Raises
    InputError if the input cannot be read or is not UTF-8, or the output cannot be written;
    then no file is left under `output_path`.
    """
    try:
        source = io.open(input_path, "r", encoding="utf-8")
    except OSError as err:
        raise InputError(f"{input_path}: cannot read ({err.strerror})") from err
    sentences = 0
    with source, atomic_output(output_path) as out:
        try:
            for text, is_sentence in segment_lines(source):
                out.write(text)
                sentences += is_sentence
        except UnicodeDecodeError as err:
            raise InputError(f"{input_path}: not UTF-8 text (byte {err.start}: {err.reason})"
                             ) from err
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
    get_tokenizer()  # check the model files once, before any worker starts
    run_suffix_stage("do_sentence_segmentation", _process, args.data, args.input_suffix,
                     args.output_suffix, args.nworker)


if __name__ == "__main__":
    exit_on_input_error(main)
