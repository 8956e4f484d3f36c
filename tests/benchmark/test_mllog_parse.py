"""The log parser keeps line numbers and survives garbage, truncation, NaN and wrong types."""
from __future__ import annotations

import math

import pytest

from benchmark.mllog_parse import LogReadError, parse_log, parse_text

GOOD = ':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "POINT_IN_TIME", ' \
       '"key": "seed", "value": 7, "metadata": {"file": "x.py", "lineno": 3}}'


def rules_at(parsed):
    return [(p.line, p.rule) for p in parsed.problems]


def test_records_keep_their_file_line_numbers_among_noise():
    text = "hello\n\n" + GOOD + "\nTraceback (most recent call last):\n" + GOOD + "\n"
    parsed = parse_text(text, "f.txt")
    assert [r.line for r in parsed.records] == [3, 5]
    assert parsed.mllog_lines == [3, 5]
    assert parsed.problems == []


def test_prefix_before_token_is_stripped_like_the_official_parser():
    parsed = parse_text("[rank 0] 12:00:01 " + GOOD + "\n")
    assert parsed.records[0].key == "seed"
    assert parsed.records[0].text == GOOD


def test_carriage_returns_split_lines_as_python_text_files_do():
    parsed = parse_text(GOOD + "\r" + GOOD + "\r\n" + GOOD)
    assert [r.line for r in parsed.records] == [1, 2, 3]


@pytest.mark.parametrize("line, fragment", [
    (GOOD[:60], "not valid JSON"),
    (":::MLLOG [1, 2]", "not an object"),
    (':::MLLOG {"key": "seed", "value": 1, "metadata": {}}', "lacks time_ms"),
    (':::MLLOG {"time_ms": 1, "key": 5, "value": 1, "metadata": {}}', "not a string"),
    (':::MLLOG {"time_ms": "soon", "key": "a", "value": 1, "metadata": {}}', "not a number"),
    (":::MLLOG " + "[" * 100000, "not valid JSON"),
    (":::MLLOG ", "not valid JSON"),
])
def test_malformed_lines_are_reported_with_their_line(line, fragment):
    parsed = parse_text("noise\n" + line + "\n")
    assert parsed.records == []
    assert [(p.line, p.rule) for p in parsed.problems] == [(2, "log/malformed-line")]
    assert fragment in parsed.problems[0].message


def test_nan_and_string_timestamps_are_kept_but_reported():
    nan = GOOD.replace('"time_ms": 1000', '"time_ms": NaN')
    text = GOOD.replace('"time_ms": 1000', '"time_ms": "1000"')
    parsed = parse_text(nan + "\n" + text + "\n")
    assert math.isnan(parsed.records[0].time_ms) and parsed.records[1].time_ms == 1000.0
    assert rules_at(parsed) == [(1, "log/time-ms"), (2, "log/time-ms")]


def test_metadata_of_wrong_type_keeps_the_record():
    parsed = parse_text(GOOD.replace('{"file": "x.py", "lineno": 3}', "null"))
    assert parsed.records[0].metadata == {}
    assert rules_at(parsed) == [(1, "log/malformed-line")]


def test_lines_mentioning_mllog_without_the_token_are_a_warning():
    parsed = parse_text(GOOD.replace(":::MLLOG ", ":::MLLOG{") + "\n")
    assert parsed.records == [] and parsed.problems[0].rule == "log/not-mllog"
    assert parsed.problems[0].severity == "warning"


def test_empty_and_binary_input():
    assert rules_at(parse_text("")) == [(0, "log/empty")]
    assert rules_at(parse_text("\x00\xff\xfe" * 100)) == [(0, "log/empty")]


def test_utf8_strings_survive_latin1_reading(tmp_path):
    path = tmp_path / "log.txt"
    path.write_bytes(GOOD.replace('"value": 7', '"value": "Café"').encode("utf-8"))
    assert parse_log(path).records[0].value == "Café"


def test_unreadable_paths_raise_one_line_errors(tmp_path):
    with pytest.raises(LogReadError, match="no such file"):
        parse_log(tmp_path / "missing.txt")
    with pytest.raises(LogReadError, match="folder"):
        parse_log(tmp_path)
