"""`devtools` is developer tooling: no package of the benchmark's own imports it."""
from __future__ import annotations

import re

from tests.conftest import REPO


def test_no_benchmark_package_imports_devtools():
    importing = re.compile(r"^\s*(from|import)\s+devtools\b", re.MULTILINE)
    offenders = [str(path.relative_to(REPO))
                 for package in ("benchmark", "cleanup_scripts", "reference")
                 for path in (REPO / package).rglob("*.py")
                 if importing.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
