"""The one user-error class of the project, and how every command line reports it.

A `UserError` is a problem with what the user gave: a flag, a file, a dump, a log, a
checkpoint. Its message is one line that names the flag or file and the problem, printed
through `printable`, the one escaping of text from an input (file names, values) before it
reaches a terminal. Every CLI runs
its `main` through `exit_on_user_error`, which prints that line and exits with status 1; any
other exception is a bug and keeps its traceback. Each package's specific errors (bad dump,
bad config, bad checkpoint, ...) subclass it.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Callable

# Set by the Makefile for the command a target runs: "--flag=VARIABLE ..." for each flag it
# fills from a make variable (e.g. "--data_dir=DATA"), so that errors name what the user typed.
MAKE_VARIABLES = "MAKE_VARIABLES"


def _escape(char: str) -> str:
    if char in "\n\r\t":
        return repr(char)[1:-1]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with every character a terminal acts on or cannot encode as a backslash escape:
    control characters (ESC, CR, newline unless `keep_newlines`), line and paragraph
    separators, format characters such as bidi overrides, and the lone surrogates that stand
    for the bytes of a file name that is not UTF-8."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or (keep_newlines and c == "\n") else _escape(c)
                   for c in text)


def name_make_variables(message: str) -> str:
    """`message` with each flag that the Makefile fills from a make variable (the environment's
    MAKE_VARIABLES, "--flag=VARIABLE ...") named as "VARIABLE (--flag)" where it stands alone
    (not "--flag=value"); unchanged outside make."""
    for pair in os.environ.get(MAKE_VARIABLES, "").split():
        flag, _, variable = pair.partition("=")
        if flag.startswith("--") and variable:
            message = re.sub(rf"{re.escape(flag)}(?![\w=-])",
                             lambda _, v=variable, f=flag: f"{v} ({f})", message)
    return message


class UserError(Exception):
    """A problem with the user's input, flags or output paths; its message is one line naming
    the file or flag."""


def exit_on_user_error(main: Callable[[], None]) -> None:
    """Run `main`; a UserError becomes a one-line `error:` message on stderr and exit status 1."""
    try:
        main()
    except UserError as err:
        print(f"error: {printable(name_make_variables(str(err)))}", file=sys.stderr)
        sys.exit(1)


def one_line(err: BaseException) -> str:
    """The first non-blank line of `err`'s message (TensorFlow errors: their `.message`), or the
    exception's type name when the message is empty."""
    text = str(getattr(err, "message", err)).strip()
    return text.splitlines()[0] if text else type(err).__name__
