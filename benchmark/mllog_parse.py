"""Read an MLPerf log (`:::MLLOG {json}` lines) into records that keep their line numbers.

Built to survive anything: garbage lines, truncated JSON, NaN, binary data, wrong types. Lines
are split and prefixes stripped the way `mlperf_logging`'s own parser does (latin-1 text,
universal newlines, the text from the last `:::MLLOG ` on a line), so a line this parser
rejects is one the official checker rejects too; `benchmark.official` hands the same lines to
the official checker, so both speak of the same line numbers. A line this parser rejects
reaches the official tools as a bare `:::MLLOG` (a parse error there too): they never see a
record this parser did not (a value nested too deep to read here cannot slip past the guard
on the values the engine turns into file paths).

Bounded, whatever the file: a log is read as a stream, only if it is a regular file of at most
MAX_LOG_BYTES, with at most MAX_MLLOG_LINES `:::MLLOG` lines and no `:::MLLOG` line over
MAX_LINE_CHARS characters read as JSON (the largest published BERT log of rounds 1.0-5.0 is
3.8 MB, 5,054 `:::MLLOG` lines, 2,886 characters a line). A `ReadBudget` bounds the lines and
bytes of all the logs of one check.
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from benchmark.errors import UserError
from benchmark.files import RefusedFile, open_regular, size_words
from benchmark.problems import ERROR, WARNING, Problem

TOKEN = ":::MLLOG "
REQUIRED_FIELDS = ("time_ms", "key", "value", "metadata")
MAX_DEPTH = 32  # MLPerf values are scalars or small lists/objects; deeper is garbage
MAX_LOG_BYTES = 256 << 20  # a log larger than this is refused unread (published: <= 3.8 MB)
MAX_MLLOG_LINES = 100_000  # a log with more :::MLLOG lines is refused (published: <= 5,054)
MAX_LINE_CHARS = 1 << 20  # a longer :::MLLOG line is not read as JSON (published: <= 2,886)
# All the logs of one check together (all published BERT logs of 1.0-5.0: 1,780,000 lines,
# 660 MB; one round at most 324,000 lines, 118 MB; one submitter at most 108,000, 58 MB).
MAX_TOTAL_MLLOG_LINES = 500_000
MAX_TOTAL_LOG_BYTES = 1 << 30
ENGINE_STUB = TOKEN.strip()  # what the official tools get for a line rejected here


class LogReadError(UserError):
    """The file could not be read at all (missing, a folder, no permission, not a regular
    file, over a limit)."""


class LogTooLarge(LogReadError):
    """The file is over a limit: bytes or `:::MLLOG` lines."""


@dataclass
class ReadBudget:
    """What the logs of one check may still hold together: `:::MLLOG` lines and bytes.
    Logs read after it is spent are refused, so a tree of any size is read in bounded memory
    and time."""
    lines: int = MAX_TOTAL_MLLOG_LINES
    bytes: int = MAX_TOTAL_LOG_BYTES

    def spend(self, parsed: "ParsedLog", size: int) -> None:
        self.lines -= len(parsed.mllog_lines)
        self.bytes -= size


@dataclass(frozen=True)
class Limits:
    """The bounds of one log (see the module docstring); tests make them small."""
    log_bytes: int = MAX_LOG_BYTES
    mllog_lines: int = MAX_MLLOG_LINES
    line_chars: int = MAX_LINE_CHARS


@dataclass(frozen=True)
class LogRecord:
    """One well-formed MLLOG line.

    line: 1-based line number in the file.
    key: the record's key, e.g. "eval_accuracy".
    value: the JSON value (any type, possibly NaN).
    metadata: the metadata object (a dict).
    time_ms: the timestamp in milliseconds since the epoch, as float (NaN if unusable).
    event_type: "INTERVAL_START", "INTERVAL_END", "POINT_IN_TIME", or whatever was logged.
    text: the line from `:::MLLOG ` on, stripped (the official parser's `full_string`).
    """
    line: int
    key: str
    value: Any
    metadata: dict
    time_ms: float
    event_type: Any
    text: str


@dataclass
class ParsedLog:
    """A log file read line by line.

    path: the file as given.
    records: well-formed MLLOG records, in file order.
    problems: malformed or suspicious lines (rules "log/...").
    mllog_lines: line numbers of every line the official parser considers (contains the
        token), in order.
    mllog_texts: those lines as the official parser sees them (from the last `:::MLLOG ` on,
        stripped), parallel to mllog_lines.
    """
    path: str
    records: list[LogRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    mllog_lines: list[int] = field(default_factory=list)
    mllog_texts: list[str] = field(default_factory=list)


_LONG_NUMBER = re.compile(r"\d{4300,}")


def json_error(exc: BaseException, text: str) -> str:
    """What a JSON parse error (of `json.loads(text)`) means, in words."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON after ':::MLLOG ' ({exc.msg})" if text.startswith(TOKEN) \
            else f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
    if isinstance(exc, RecursionError):
        return f"not valid JSON: nested too deep to read (an MLPerf value has at most " \
               f"{MAX_DEPTH} levels)"
    found = _LONG_NUMBER.search(text)
    if found:
        return (f"holds a number with {len(found.group()):,} digits, more than JSON readers "
                "take (Python's limit is 4,300)")
    return f"not valid JSON ({type(exc).__name__}: {str(exc)[:80]})"


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests lists/objects more than `limit` levels (checked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _fix_text(value: Any) -> Any:
    """Undo latin-1 decoding of UTF-8 inside JSON strings (for display only), recursively."""
    if isinstance(value, str):
        try:
            return value.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            return value
    if isinstance(value, list):
        return [_fix_text(v) for v in value]
    if isinstance(value, dict):
        return {_fix_text(k): _fix_text(v) for k, v in value.items()}
    return value


def _short(value: Any, limit: int = 40) -> str:
    """repr(value) cut to `limit` characters, for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _timestamp(raw: Any) -> tuple[float | None, str | None]:
    """(time in ms as float, or None if unusable; a complaint if not a finite JSON number).

    Like the official parser, anything `float()` accepts (a numeric string, a boolean) still
    gives a timestamp; it is reported, not dropped.
    """
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        try:
            as_float = float(raw)
        except (TypeError, ValueError, OverflowError):
            return None, f"time_ms is {_short(raw)}, not a number"
        return as_float, f"time_ms is {_short(raw)} ({type(raw).__name__}), not a number"
    try:
        value = float(raw)
    except OverflowError:  # an integer with hundreds of digits
        return None, f"time_ms is {_short(raw)}, too large for a number of milliseconds"
    if not math.isfinite(value):
        return value, f"time_ms is {raw}, not a finite number"
    return value, None


def parse_line(line_no: int, full: str, path: str) -> tuple[LogRecord | None, list[Problem]]:
    """Parse one line, `full` being its text from `:::MLLOG ` on, stripped.

    Returns (record, []) for a well-formed line, (record, problems) for a usable line with a
    bad field, and (None, [problem]) for a line that cannot be used.
    """
    def bad(message: str) -> tuple[None, list[Problem]]:
        return None, [Problem(path, line_no, "log/malformed-line", message, ERROR)]

    try:
        obj = json.loads(full[len(TOKEN):])
    except (ValueError, RecursionError) as exc:
        suffix = "; truncated or corrupted line" if isinstance(exc, json.JSONDecodeError) else ""
        return bad(json_error(exc, full) + suffix)
    if not isinstance(obj, dict):
        return bad(f"the JSON after ':::MLLOG ' is a {type(obj).__name__}, not an object")
    if _too_deep(obj):
        return bad(f"the record nests lists or objects more than {MAX_DEPTH} levels deep")
    missing = [name for name in REQUIRED_FIELDS if name not in obj]
    if missing:
        return bad(f"record lacks {', '.join(missing)}")
    key = obj["key"]
    if not isinstance(key, str):
        return bad(f"key is {_short(key)}, not a string")
    time_ms, complaint = _timestamp(obj["time_ms"])
    if time_ms is None:
        return bad(f"{key}: {complaint}")
    metadata = obj["metadata"]
    problems = []
    if complaint:
        problems.append(Problem(path, line_no, "log/time-ms", f"{key}: {complaint}", ERROR))
    if not isinstance(metadata, dict):
        # Kept (with empty metadata) so that one bad field does not hide the whole record.
        problems.append(Problem(
            path, line_no, "log/malformed-line",
            f"metadata of '{key}' is {_short(metadata)}, not an object", ERROR))
        metadata = {}
    record = LogRecord(line=line_no, key=_fix_text(key), value=_fix_text(obj["value"]),
                       metadata=_fix_text(metadata), time_ms=time_ms,
                       event_type=obj.get("event_type"), text=full)
    return record, problems


def _parse_lines(lines: Iterable[str], path: str, limits: Limits) -> ParsedLog:
    """Parse lines (latin-1 text, line ends kept); raises LogReadError past `limits`."""
    parsed = ParsedLog(path=path)
    for line_no, line in enumerate(lines, start=1):
        at = line.rfind(TOKEN)
        if at < 0:
            if "MLLOG" in line:
                parsed.problems.append(Problem(
                    path, line_no, "log/not-mllog",
                    "line mentions MLLOG but lacks the ':::MLLOG ' prefix; both checkers ignore it",
                    WARNING))
            continue
        if len(parsed.mllog_lines) >= limits.mllog_lines:
            raise LogTooLarge(f"more than {limits.mllog_lines:,} ':::MLLOG' lines (a published "
                               "BERT log has at most 5,054); not read")
        full = (TOKEN + line[at + len(TOKEN):]).strip()
        parsed.mllog_lines.append(line_no)
        if len(full) > limits.line_chars:
            record, problems = None, [Problem(
                path, line_no, "log/malformed-line",
                f"a ':::MLLOG' line of {len(full):,} characters, over the limit of "
                f"{limits.line_chars:,}; not read (no MLLOG record is that long)")]
        else:
            record, problems = parse_line(line_no, full, path)
        # The official tools get exactly the records read here; a rejected line as a bare
        # token, which they count as a parse error.
        parsed.mllog_texts.append(full if record is not None else ENGINE_STUB)
        if record is not None:
            parsed.records.append(record)
        parsed.problems.extend(problems)
    if not parsed.mllog_lines:
        parsed.problems.append(Problem(path, 0, "log/empty", "no ':::MLLOG ' lines in the file",
                                       ERROR))
    return parsed


def parse_text(text: str, path: str = "<log>", limits: Limits = Limits()) -> ParsedLog:
    """Parse log text (already decoded as latin-1, as the official parser reads files)."""
    return _parse_lines(io.StringIO(text, newline=""), path, limits)


def _counted(lines: Iterable[str], path: str, limit: int) -> Iterator[str]:
    """`lines`, stopping with LogReadError once they hold more than `limit` characters (a
    file that grows while read)."""
    total = 0
    for line in lines:
        total += len(line)
        if total > limit:
            raise LogTooLarge(f"grew past the limit of {size_words(limit)} while read; "
                               "not read")
        yield line


def parse_log(path: str | Path, budget: ReadBudget | None = None,
              limits: Limits = Limits()) -> ParsedLog:
    """Read and parse the log at `path` as a stream; raises LogReadError if it cannot be
    read or is over a limit (of its own, or what is left of `budget`, which it spends)."""
    spent = LogReadError(
        "with it, the logs of this check would hold more than the most one check "
        f"reads ({MAX_TOTAL_MLLOG_LINES:,} ':::MLLOG' lines, {size_words(MAX_TOTAL_LOG_BYTES)})")
    if budget is not None and (budget.lines <= 0 or budget.bytes <= 0):
        raise spent
    own = limits
    if budget is not None:
        limits = dataclasses.replace(limits, log_bytes=min(limits.log_bytes, budget.bytes),
                                     mllog_lines=min(limits.mllog_lines, budget.lines))
    try:
        return _parse_log(path, budget, limits)
    except LogTooLarge:
        if limits != own:  # the budget, not the log's own limits, was the bound
            raise spent from None
        raise


def _parse_log(path: str | Path, budget: ReadBudget | None, limits: Limits) -> ParsedLog:
    try:
        with open_regular(path, limits.log_bytes) as raw:
            size = os.fstat(raw.fileno()).st_size
            text = io.TextIOWrapper(raw, encoding="latin-1", newline="")
            parsed = _parse_lines(_counted(text, str(path), limits.log_bytes), str(path), limits)
    except RefusedFile as exc:
        raise (LogTooLarge if exc.too_large else LogReadError)(exc.reason) from None
    except IsADirectoryError:
        raise LogReadError("is a folder, not a log file") from None
    except FileNotFoundError:
        raise LogReadError("no such file") from None
    except PermissionError:
        raise LogReadError("permission denied") from None
    except OSError as exc:
        raise LogReadError(exc.strerror or type(exc).__name__) from None
    if budget is not None:
        budget.spend(parsed, size)
    return parsed
