"""The reference's WikiExtractor (version 2.75), loaded unmodified on this Python.

The benchmark's text was made by `WikiExtractor.py` of attardi/wikiextractor at commit
3162bb6c (version 2.75) under Python 3.7. PyPI's `wikiextractor==0.1` ships that file byte for
byte (`wikiextractor/WikiExtractor.py`, md5 below). `load()` runs that installed file, unedited,
as a private module object, and gives it, through its own `__import__`, the two things that
changed under it since Python 3.7:

* A global inline flag such as `(?i)` placed after the start of a pattern. Python 3.7 applied
  it to the whole pattern (with a DeprecationWarning); since 3.11 it is an error. Two
  module-level patterns do this (`ExtLinkBracketedRegex`, `EXT_IMAGE_REGEX`). The module's `re`
  is the real one except that `compile` moves such flags to the front first: the 3.7 meaning.
* `cgi.escape`, removed in Python 3.8 (and `cgi` itself in 3.13). The module's `cgi` has just
  `escape`, with the old meaning (`&`, `<`, `>`, and `"` when asked). It is used only for
  `--html` output, which the benchmark does not use.

Nothing else is changed, so each `load()` gives a fresh module with the script's defaults (its
`options` are module state). The calling process's `re`, `cgi` and `time` are untouched.
"""
from __future__ import annotations

import builtins
import hashlib
import html
import importlib.util
import re
import types
import warnings
from pathlib import Path

from benchmark.files import InputError

VERSION = "2.75"
SOURCE_COMMIT = "3162bb6c3c9ebd2d15be507aa11d6fa818a454ac"
SOURCE_MD5 = "96fc661a218d8e881f222133e053eb52"
PACKAGE_PIN = "wikiextractor==0.1"

_GLOBAL_FLAGS_ERROR = "global flags not at the start"
_INLINE_GLOBAL_FLAGS = re.compile(r"(?<!\\)\(\?([aiLmsux]+)\)")


def python37_pattern(pattern: str | bytes) -> str | bytes:
    """`pattern` with every inline global flag group (`(?i)`, `(?su)`, …) removed from where it
    stands and put at the very start: what Python 3.7 made of a pattern with such a group
    after its start. Patterns whose groups are all at the start come back unchanged."""
    if isinstance(pattern, bytes):
        return python37_pattern(pattern.decode("latin-1")).encode("latin-1")
    letters = "".join(_INLINE_GLOBAL_FLAGS.findall(pattern))
    if not letters:
        return pattern
    stripped = _INLINE_GLOBAL_FLAGS.sub("", pattern)
    return f"(?{''.join(sorted(set(letters)))}){stripped}"


def _compile_as_python37(pattern, flags=0):
    """`re.compile`, except that a pattern Python 3.11+ refuses only because a global flag
    group is not at its start is compiled as Python 3.7 compiled it."""
    try:
        return re.compile(pattern, flags)
    except re.error as err:
        if _GLOBAL_FLAGS_ERROR not in str(err):
            raise
        return re.compile(python37_pattern(pattern), flags)


def _cgi_escape(text: str, quote: bool = False) -> str:
    """Python 3.7's `cgi.escape`: `&`, `<`, `>` as entities, and `"` too when `quote`."""
    escaped = html.escape(text, quote=False)
    return escaped.replace('"', "&quot;") if quote else escaped


def _script_modules() -> dict[str, types.ModuleType]:
    """The stand-ins the script imports instead of `re` and `cgi`."""
    regex = types.ModuleType("re", "re, with Python 3.7's reading of late global flags")
    regex.__dict__.update({name: value for name, value in vars(re).items()
                           if not name.startswith("__")})
    regex.compile = _compile_as_python37
    cgi = types.ModuleType("cgi", "the part of Python 3.7's cgi that WikiExtractor uses")
    cgi.escape = _cgi_escape
    return {"re": regex, "cgi": cgi}


def installed_script() -> Path:
    """The path of the installed `wikiextractor/WikiExtractor.py`; InputError if the installed
    package is not the pinned one (the file's md5 is checked)."""
    spec = importlib.util.find_spec("wikiextractor")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"the wikiextractor package is not installed: pip install {PACKAGE_PIN}")
    path = Path(list(spec.submodule_search_locations)[0]) / "WikiExtractor.py"
    try:
        digest = hashlib.md5(path.read_bytes()).hexdigest()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror}); pip install {PACKAGE_PIN}") \
            from err
    if digest != SOURCE_MD5:
        raise InputError(f"{path}: md5 {digest} is not WikiExtractor {VERSION} of "
                         f"attardi/wikiextractor@{SOURCE_COMMIT[:8]} ({SOURCE_MD5}); "
                         f"pip install {PACKAGE_PIN}")
    return path


def load() -> types.ModuleType:
    """A fresh module object running the installed WikiExtractor 2.75 (see the module doc).

    Its `main`, `process_dump`, `pages_from`, `load_templates`, `Extractor`, `options`, … are
    the script's own. Raises InputError if the installed file is not the pinned one.
    """
    path = installed_script()
    stand_ins = _script_modules()

    def script_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name in stand_ins:
            return stand_ins[name]
        return builtins.__import__(name, globals, locals, fromlist, level)

    module = types.ModuleType("WikiExtractor", f"WikiExtractor {VERSION} ({path})")
    module.__file__ = str(path)
    module.__builtins__ = dict(vars(builtins), __import__=script_import)
    with warnings.catch_warnings():
        # Its regex strings have escapes such as "\|" that Python now warns about.
        warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
        code = compile(path.read_bytes(), str(path), "exec")
        exec(code, module.__dict__)  # noqa: S102 -- the pinned, md5-checked script
    return module
