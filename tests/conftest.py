"""Shared pytest helpers: running the project's CLIs as a user would."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_module(module: str, *args: str, cwd: str | os.PathLike | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m module args...` in a subprocess; return it (stdout/stderr captured)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                            capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"{module} failed ({result.returncode}):\n{result.stderr}")
    return result


def md5_of(path: str | os.PathLike) -> str:
    """Hex md5 of a file's bytes."""
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def read_md5_manifest(path: str | os.PathLike) -> dict[str, str]:
    """Parse `md5sum` lines (`<md5>  <name>`), ignoring `#` comments, into {name: md5}."""
    table = {}
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith("#"):
            digest, name = line.split(maxsplit=1)
            table[name] = digest
    return table


@pytest.fixture
def fixtures_dir() -> Path:
    """The committed test fixtures."""
    return REPO / "tests" / "fixtures"
