"""Stage 3b: the reference `clean.sh` chain (two line filters, then ordered substitutions).

Drop-in for `clean.sh INPUT OUTPUT`:

    python -m cleanup_scripts.text.clean text/AA/wiki_00.1 text/AA/wiki_00.2

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
from typing import Iterator

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output
from cleanup_scripts.pipeline.runner import StageSummary, report

# Lines removed whole, each with a literal that such a line must contain: a leftover
# `<doc ...>` header, and category links.
_DROPPED_LINES = (
    (b"<doc ", re.compile(rb"^<doc [^>]*>$")),
    (b"[[Category:", re.compile(rb"\[\[Category:[^\]\[]*\]\]")),
)

_NOT_BRACKET_OR_PIPE = rb"[^\]|\[]*"


def _tag_pair(name: bytes) -> bytes:
    """`<name...</name>`: an element with no nested tag, its attributes and text kept in \\1."""
    return b"<" + name + rb"([^<]*)</" + name + b">"


def _deleted(*literals: bytes) -> tuple[tuple[bytes, bytes, bytes], ...]:
    """Rules that delete each of `literals`, in order."""
    return tuple((literal, re.escape(literal), b"") for literal in literals)


# (trigger, pattern, replacement) in the reference's order; every match of a pattern starts
# with its trigger. The comment gives the sed pattern where it is not a plain literal.
_SUBSTITUTIONS: tuple[tuple[bytes, bytes, bytes], ...] = (
    (b"[[", rb"\[\[(" + _NOT_BRACKET_OR_PIPE + rb")\]\]", rb"\1"),      # [[a]] -> a
    (b"[[", rb"\[\[(" + _NOT_BRACKET_OR_PIPE + rb")\]\]", rb"\1"),      # (twice, for nesting)
    (b"[[", rb"\[\[" + _NOT_BRACKET_OR_PIPE + rb"\|(" + _NOT_BRACKET_OR_PIPE + rb")\]\]",
     rb"\1"),                                                           # [[a|b]] -> b
    (b"[[", rb"\[\[" + _NOT_BRACKET_OR_PIPE + rb"\|(" + _NOT_BRACKET_OR_PIPE + rb")\]\]",
     rb"\1"),
    (b"[[", rb"\[\[:*[Ff]ile:[^\]\[]*\]\]", b""),                      # file links
    (b"[[", rb"\[\[[Mm]edia:[^\]\[]*\]\]", b""),                       # media links
    (b"[[", rb"\[\[[Ii]mage:[^\]\[]*\]\]", b""),                       # image links
    (b"[", rb"\[(" + _NOT_BRACKET_OR_PIPE + rb")\]", rb"\1"),           # [a] -> a
    (b"[[", rb"\[\[([^\]\[]*)\]\]", b""),                              # any other [[...]]
    (b"alt=", rb"alt=", b""),
    (b"</doc>", rb"</doc>", b"\r"),
    (b"<chem", _tag_pair(b"chem"), rb"\1"),
    (b"<ins", _tag_pair(b"ins"), rb"\1"),
    (b"<, ref ", rb"<, ref ([^<]*)</ref>", b""),
    (b"<includeonly", _tag_pair(b"includeonly"), b""),
    (b"<graph", _tag_pair(b"graph"), b""),
    (b"<section", rb"<section([^\\]*)/>", b""),
    (b"<meta", rb"<meta([^\\]*)/>", b""),
    (b"<hr", rb"<hr([^\\]*)/>", b""),
    (b"<gallery", rb"<gallery([^>]*)>", b""),
    (b"<ref", _tag_pair(b"ref"), b""),
    (b"<ref", rb"<ref([^>]*)>", b""),
    (b"<http", rb"<http([^>]*)>", b""),
    (b"<Ref", rb"<Ref([^>]*)>", b""),
    (b"<mapframe ", rb"<mapframe ([^\\/]*)/>", b""),  # sed reads [^\/] as "neither \ nor /"
    (b"<mapframe", rb"<mapframe([^>]*)>", b""),
) + _deleted(
    b"</mapframe>", b"<poem>", b"</poem>", b"<math>", b"</math>", b"<ref>", b"</ref>",
) + (
    (b"<div", rb"<div([^>]*)>", b""),
    (b"</div", rb"</div([^>]*)>", b""),
) + _deleted(
    b"</div style>", b"</div>", b"<sup>", b"</sup>", b"<br>", b"</br>", b"<BR>", b"</BR>",
    b"<Br>", b"</Br>", b"<del>", b"</del>", b"<nowiki>", b"</nowiki>", b"<NOWIKI>",
    b"</NOWIKI>", b"<onlyinclude>", b"</onlyinclude>", b"<includeonly>", b"</includeonly>",
    b"<small>", b"</small>", b"<chem>", b"</chem>", b"<noinclude>", b"</noinclude>",
    b"<gallery>", b"</gallery>", b"<graph>{", b"<graph>", b"}</graph>", b"</graph>",
    b"</references>",
) + (
    (b"<poem ", rb"<poem ([^>]*)>", b""),
)

_COMPILED = tuple((trigger, re.compile(pattern), replacement)
                  for trigger, pattern, replacement in _SUBSTITUTIONS)


def _rules_for(angle: bool, bracket: bool) -> tuple[tuple[bytes, re.Pattern, bytes], ...]:
    """The rules whose trigger can occur in a line that has (`angle`) or lacks `<`, and has
    (`bracket`) or lacks `[`: no rule writes either byte, so a line never gains one."""
    return tuple(rule for rule in _COMPILED
                 if (angle or b"<" not in rule[0]) and (bracket or b"[" not in rule[0]))


# (line has "<", line has "[") -> the rules that can apply to it, in order.
_RULES_FOR = {(angle, bracket): _rules_for(angle, bracket)
              for angle in (False, True) for bracket in (False, True)}


def clean_line(line: bytes) -> bytes | None:
    """Apply the clean.sh chain to one line (without its newline); None if the line is dropped.

    A rule runs only when its trigger is in the line as it stands at that point of the chain
    (otherwise it cannot match), so most rules cost one substring test.
    """
    for trigger, dropped in _DROPPED_LINES:
        if trigger in line and dropped.search(line):
            return None
    for trigger, pattern, replacement in _RULES_FOR[b"<" in line, b"[" in line]:
        if trigger in line:
            line = pattern.sub(replacement, line)
    return line


# Every rule's trigger, and every dropped line, contains one of these.
_LINE_TRIGGERS = (b"<", b"[", b"alt=")


def _triggered_lines(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of `data` that holds a `_LINE_TRIGGERS` member, in order.

    `end` is the index of the line's newline (or `len(data)`). Each trigger is searched for
    from where the previous line ended, so the whole is one pass per trigger.
    """
    next_hit = [data.find(trigger) for trigger in _LINE_TRIGGERS]
    while True:
        hits = [hit for hit in next_hit if hit >= 0]
        if not hits:
            return
        hit = min(hits)
        start = data.rfind(b"\n", 0, hit) + 1
        end = data.find(b"\n", hit)
        end = len(data) if end < 0 else end
        yield start, end
        next_hit = [data.find(trigger, end) if 0 <= found < end else found
                    for trigger, found in zip(_LINE_TRIGGERS, next_hit)]


def clean_bytes(data: bytes) -> bytes:
    """Apply the clean.sh chain to a whole file's bytes; every kept line ends with a newline.

    Only lines holding a trigger can change or be dropped; the text between them is copied.
    """
    pieces = []
    copied = 0
    for start, end in _triggered_lines(data):
        pieces.append(data[copied:start])
        line = clean_line(data[start:end])
        if line is not None:
            pieces.append(line + b"\n")
        copied = end + 1
    rest = data[copied:]
    pieces.append(rest)
    if rest and not rest.endswith(b"\n"):
        pieces.append(b"\n")
    return b"".join(pieces)


def clean_file(input_path: str, output_path: str) -> int:
    """Write `output_path`: `input_path` through the clean.sh chain. Returns lines written."""
    try:
        with open(input_path, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise InputError(f"{input_path}: cannot read ({err.strerror})") from err
    return write_cleaned(data, output_path)


def write_cleaned(data: bytes, output_path: str) -> int:
    """Write `output_path` atomically: `data` through the clean.sh chain. Returns lines written."""
    cleaned = clean_bytes(data)
    with atomic_output(output_path, "wb") as out:
        out.write(cleaned)
    return cleaned.count(b"\n")


def main(argv: list[str] | None = None) -> None:
    """CLI drop-in for the reference clean.sh:
    `python -m cleanup_scripts.text.clean INPUT OUTPUT`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise InputError("usage: python -m cleanup_scripts.text.clean INPUT OUTPUT")
    started = time.time()
    print(f"Further clean up: {argv[0]} => {argv[1]}", file=sys.stderr)
    written = clean_file(argv[0], argv[1])
    report(StageSummary("clean", 1, written, os.path.getsize(argv[0]), started))


if __name__ == "__main__":
    exit_on_user_error(main)
