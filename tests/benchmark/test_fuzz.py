"""Random damage to a valid log (byte flips, truncation, lost, repeated, moved lines, odd
values) never crashes the checker, and whatever the official checker rejects, we reject."""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest

from benchmark.log_check import check_log
from tests.benchmark import gallery
from tests.benchmark.helpers import official_verdict

REPO = gallery.LOGS.parents[2]
ODD_VALUES = [b"NaN", b"-Infinity", b'"x"', b"null", b"-1", b"1e400", b"[]", b"{}", b"true",
              b"99999999999999999999999", b"1" * 400]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random edit of a log's bytes."""
    lines = data.split(b"\n")
    op = rng.randrange(7)
    if op == 0:
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        return bytes(damaged)
    if op == 1:
        return data[:rng.randrange(len(data))]
    i = rng.randrange(len(lines))
    if op == 2:
        del lines[i]
    elif op == 3:
        lines.insert(i, lines[i])
    elif op == 4:
        lines.insert(rng.randrange(len(lines)), lines.pop(i))
    elif op == 5:
        numbers = list(re.finditer(rb"-?\d+(\.\d+)?(e-?\d+)?", lines[i]))
        if numbers:
            m = rng.choice(numbers)
            lines[i] = lines[i][:m.start()] + rng.choice(ODD_VALUES) + lines[i][m.end():]
    else:
        lines[i] = lines[i].replace(b'"', b"", rng.randint(1, 3))
    return b"\n".join(lines)


@pytest.mark.parametrize("base", [gallery.CLOSED, gallery.OPEN])
def test_random_damage_never_crashes_and_never_passes_what_official_fails(base, tmp_path):
    rng = random.Random(20261122)
    original = (gallery.LOGS / base).read_bytes()
    for n in range(70):
        data = mutate(original, rng)
        if rng.random() < 0.3:
            data = mutate(data, rng)
        path = tmp_path / f"damaged_{n}.txt"
        path.write_bytes(data)
        report = check_log(str(path))          # must not raise
        assert not any(p.rule.startswith("internal/") for p in report.problems), report.problems
        assert all("\n" not in p.format() for p in report.problems)
        official = official_verdict(path)
        assert report.official.passed == official, (n, report.problems)
        if not official:
            assert not report.passed, (n, report.problems)


_VALID = (gallery.LOGS / gallery.CLOSED).read_bytes()
ODD_FILES = [
    b"", b"\x00\xff" * 5000, b":::MLLOG {" * 50, b":::MLLOG " + b"[" * 200000,
    b':::MLLOG {"time_ms": 1, "key": "eval_accuracy", "value": "x", "metadata": []}',
    _VALID.replace(b'"time_ms": 1763800189000', b'"time_ms": ' + b"9" * 400, 1),
    _VALID.replace(b'"value": 256', b'"value": ' + b"9" * 400, 1),
    _VALID + b':::MLLOG {"time_ms": 1, "key": "seed", "value": ' + b"[" * 900 + b"]" * 900
    + b', "metadata": {}}\n',
]


def test_command_line_never_prints_a_traceback(tmp_path):
    paths = []
    for n, content in enumerate(ODD_FILES):
        paths.append(tmp_path / f"odd_{n}.txt")
        paths[-1].write_bytes(content)
    for fmt in ("json", "text"):
        result = subprocess.run([sys.executable, "-m", "benchmark.check", *map(str, paths),
                                 str(tmp_path), "--format", fmt], capture_output=True,
                                text=True, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert result.returncode == 1
        assert "Traceback" not in result.stderr + result.stdout
