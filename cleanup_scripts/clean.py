"""Stage 3b: the reference `clean.sh` chain (two line filters, then ordered substitutions).

Drop-in for `clean.sh INPUT OUTPUT`:

    python -m cleanup_scripts.clean text/AA/wiki_00.1 text/AA/wiki_00.2

The reference pipes the file through `grep -v` twice and then ~70 `sed s///g` commands, one after
another. Each command sees every line once, so applying the whole ordered list to one line
before moving to the next gives the same bytes. Patterns work on bytes, as sed does; each is a
literal, or a literal followed by one character class and a literal, so Python's leftmost,
greedy matching selects the same spans as POSIX leftmost-longest matching. Like grep, the output
ends every kept line with a newline.
"""
from __future__ import annotations

import os
import re
import sys
import time
from typing import Iterable

from cleanup_scripts.fileio import InputError, atomic_output
from cleanup_scripts.runner import StageSummary, exit_on_input_error, report

# Lines removed whole: a leftover `<doc ...>` header, and category links.
_DROPPED_LINES = (
    re.compile(rb"^<doc [^>]*>$"),
    re.compile(rb"\[\[Category:[^\]\[]*\]\]"),
)

_NOT_BRACKET_OR_PIPE = rb"[^\]|\[]*"


def _tag_pair(name: bytes) -> bytes:
    """`<name...</name>`: an element with no nested tag, its attributes and text kept in \\1."""
    return b"<" + name + rb"([^<]*)</" + name + b">"


# (pattern, replacement) in the reference's order. The comment gives the sed pattern.
_SUBSTITUTIONS: tuple[tuple[bytes, bytes], ...] = (
    (rb"\[\[(" + _NOT_BRACKET_OR_PIPE + rb")\]\]", rb"\1"),            # [[a]] -> a
    (rb"\[\[(" + _NOT_BRACKET_OR_PIPE + rb")\]\]", rb"\1"),            # (twice, for nesting)
    (rb"\[\[" + _NOT_BRACKET_OR_PIPE + rb"\|(" + _NOT_BRACKET_OR_PIPE + rb")\]\]", rb"\1"),  # [[a|b]]
    (rb"\[\[" + _NOT_BRACKET_OR_PIPE + rb"\|(" + _NOT_BRACKET_OR_PIPE + rb")\]\]", rb"\1"),
    (rb"\[\[:*[Ff]ile:[^\]\[]*\]\]", b""),                            # file links
    (rb"\[\[[Mm]edia:[^\]\[]*\]\]", b""),                             # media links
    (rb"\[\[[Ii]mage:[^\]\[]*\]\]", b""),                             # image links
    (rb"\[(" + _NOT_BRACKET_OR_PIPE + rb")\]", rb"\1"),                # [a] -> a
    (rb"\[\[([^\]\[]*)\]\]", b""),                                    # any other [[...]]
    (rb"alt=", b""),
    (rb"</doc>", b"\r"),
    (_tag_pair(b"chem"), rb"\1"),
    (_tag_pair(b"ins"), rb"\1"),
    (rb"<, ref ([^<]*)</ref>", b""),
    (_tag_pair(b"includeonly"), b""),
    (_tag_pair(b"graph"), b""),
    (rb"<section([^\\]*)/>", b""),
    (rb"<meta([^\\]*)/>", b""),
    (rb"<hr([^\\]*)/>", b""),
    (rb"<gallery([^>]*)>", b""),
    (_tag_pair(b"ref"), b""),
    (rb"<ref([^>]*)>", b""),
    (rb"<http([^>]*)>", b""),
    (rb"<Ref([^>]*)>", b""),
    (rb"<mapframe ([^\\/]*)/>", b""),  # sed reads this class as "neither \\ nor /"
    (rb"<mapframe([^>]*)>", b""),
) + tuple((re.escape(literal), b"") for literal in (
    b"</mapframe>", b"<poem>", b"</poem>", b"<math>", b"</math>", b"<ref>", b"</ref>",
)) + (
    (rb"<div([^>]*)>", b""),
    (rb"</div([^>]*)>", b""),
) + tuple((re.escape(literal), b"") for literal in (
    b"</div style>", b"</div>", b"<sup>", b"</sup>", b"<br>", b"</br>", b"<BR>", b"</BR>",
    b"<Br>", b"</Br>", b"<del>", b"</del>", b"<nowiki>", b"</nowiki>", b"<NOWIKI>",
    b"</NOWIKI>", b"<onlyinclude>", b"</onlyinclude>", b"<includeonly>", b"</includeonly>",
    b"<small>", b"</small>", b"<chem>", b"</chem>", b"<noinclude>", b"</noinclude>",
    b"<gallery>", b"</gallery>", b"<graph>{", b"<graph>", b"}</graph>", b"</graph>",
    b"</references>",
)) + (
    (rb"<poem ([^>]*)>", b""),
)


_COMPILED = tuple((re.compile(pattern), replacement) for pattern, replacement in _SUBSTITUTIONS)


def clean_line(line: bytes) -> bytes | None:
    """Apply the clean.sh chain to one line (without its newline); None if the line is dropped."""
    for dropped in _DROPPED_LINES:
        if dropped.search(line):
            return None
    if b"<" not in line and b"[" not in line and b"alt=" not in line:
        return line
    for pattern, replacement in _COMPILED:
        line = pattern.sub(replacement, line)
    return line


def lines_of(data: bytes) -> Iterable[bytes]:
    """The lines of `data` without their newlines, as grep sees them."""
    lines = data.split(b"\n")
    return lines[:-1] if lines[-1] == b"" else lines


def clean_bytes(data: bytes) -> bytes:
    """Apply the clean.sh chain to a whole file's bytes; every kept line ends with a newline."""
    kept = (clean_line(line) for line in lines_of(data))
    return b"".join(line + b"\n" for line in kept if line is not None)


def clean_file(input_path: str, output_path: str) -> int:
    """Write `output_path`: `input_path` through the clean.sh chain. Returns lines written."""
    try:
        with open(input_path, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise InputError(f"{input_path}: cannot read ({err.strerror})") from err
    cleaned = clean_bytes(data)
    with atomic_output(output_path, "wb") as out:
        out.write(cleaned)
    return cleaned.count(b"\n")


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference clean.sh: `python -m cleanup_scripts.clean INPUT OUTPUT`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise InputError("usage: python -m cleanup_scripts.clean INPUT OUTPUT")
    started = time.time()
    print(f"Further clean up: {argv[0]} => {argv[1]}", file=sys.stderr)
    written = clean_file(argv[0], argv[1])
    report(StageSummary("clean", 1, written, os.path.getsize(argv[0]), started))


if __name__ == "__main__":
    exit_on_input_error(main)
