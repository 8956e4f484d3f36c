"""Read an MLPerf log (`:::MLLOG {json}` lines) into records that keep their line numbers.

Built to survive anything: garbage lines, truncated JSON, NaN, binary data, wrong types. Lines
are split and prefixes stripped the way `mlperf_logging`'s own parser does (latin-1 text,
universal newlines, the text from the last `:::MLLOG ` on a line), so a line this parser
rejects is one the official checker rejects too; `benchmark.official` hands the same lines to
the official checker, so both speak of the same line numbers.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.errors import UserError
from benchmark.problems import ERROR, WARNING, Problem

TOKEN = ":::MLLOG "
REQUIRED_FIELDS = ("time_ms", "key", "value", "metadata")
MAX_DEPTH = 32  # MLPerf values are scalars or small lists/objects; deeper is garbage


class LogReadError(UserError):
    """The file could not be read at all (missing, a folder, no permission)."""


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
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        return bad(f"not valid JSON after ':::MLLOG ' ({reason}); truncated or corrupted line")
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


def parse_text(text: str, path: str = "<log>") -> ParsedLog:
    """Parse log text (already decoded as latin-1, as the official parser reads files)."""
    parsed = ParsedLog(path=path)
    for line_no, line in enumerate(io.StringIO(text, newline=""), start=1):
        at = line.rfind(TOKEN)
        if at < 0:
            if "MLLOG" in line:
                parsed.problems.append(Problem(
                    path, line_no, "log/not-mllog",
                    "line mentions MLLOG but lacks the ':::MLLOG ' prefix; both checkers ignore it",
                    WARNING))
            continue
        full = (TOKEN + line[at + len(TOKEN):]).strip()
        parsed.mllog_lines.append(line_no)
        parsed.mllog_texts.append(full)
        record, problems = parse_line(line_no, full, path)
        if record is not None:
            parsed.records.append(record)
        parsed.problems.extend(problems)
    if not parsed.mllog_lines:
        parsed.problems.append(Problem(path, 0, "log/empty", "no ':::MLLOG ' lines in the file",
                                       ERROR))
    return parsed


def read_text(path: str | Path) -> str:
    """The file's bytes as latin-1 text (every byte decodes); raises LogReadError."""
    try:
        return Path(path).read_bytes().decode("latin-1")
    except IsADirectoryError:
        raise LogReadError("is a folder, not a log file") from None
    except FileNotFoundError:
        raise LogReadError("no such file") from None
    except PermissionError:
        raise LogReadError("permission denied") from None
    except OSError as exc:
        raise LogReadError(exc.strerror or type(exc).__name__) from None


def parse_log(path: str | Path) -> ParsedLog:
    """Read and parse the log at `path`; raises LogReadError if it cannot be read."""
    return parse_text(read_text(path), str(path))
