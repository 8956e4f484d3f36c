"""The benchmark's known artifacts (path, md5, size), read from the manifests in `checksums/`.

The official values live only in those files (plain `md5sum` manifests and `sizes.tsv`); this
module parses them into a table for the code:

    >>> known_artifacts()["vocab.txt"].md5
    '64800d5d8528ce344256daf115d4965e'

Paths are relative, `/`-separated, as in the manifests: `bert_config.json`,
`tf1_ckpt/model.ckpt-28252.index`, `results/eval.txt`, `text/FE/wiki_00`, `tfrecords/eval_10k`.

Also where an artifact may sit in a folder (`candidate_paths`, `locate`: our layout, then the
reference's), and how many of an `eval.md5`'s hashes are official (`count_official_eval_hashes`).
"""
from __future__ import annotations

import functools
import re
import os
import types
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import printable
from benchmark.files import InputError, read_regular, relative_path_problem, resolve_inside
from checksums import CHECKSUMS_DIR

# The md5sum manifests of official artifacts; each file's stem names its group.
OFFICIAL_MANIFESTS = ("inputs.md5", "results.md5", "text-FE.md5")
SIZES_FILE = "sizes.tsv"
EVAL_ARTICLES_FILE = "eval-articles.md5"
# A checksum file or an eval.md5 is read whole: this much at most (eval.md5 is 330 KB).
CHECKSUM_FILE_MAX_BYTES = 64 << 20

# Where each canonical folder of an artifact may sit under DIR: our layout first, then the
# reference's (download_and_uncompress.sh's `wiki/`, process_wiki.sh run in `cleanup_scripts/`,
# the processed-results archive's `results4/`, a flat TF1 checkpoint folder `phase1/`).
_LAYOUTS = {
    "": ("", "wiki/", "cleanup_scripts/wiki/"),
    "tf1_ckpt/": ("tf1_ckpt/", "wiki/tf1_ckpt/", "cleanup_scripts/wiki/tf1_ckpt/", "phase1/"),
    "tf2_ckpt/": ("tf2_ckpt/", "wiki/tf2_ckpt/", "cleanup_scripts/wiki/tf2_ckpt/"),
    "results/": ("results/", "results4/", "cleanup_scripts/results/"),
    "text/FE/": ("text/FE/", "cleanup_scripts/text/FE/"),
    "tfrecords/": ("tfrecords/", "tfrecord/"),
}

_MD5_LINE = re.compile(r"^([0-9a-fA-F]{32}) [ *](.+)$")
_MD5 = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class Artifact:
    """One known artifact: its relative path, official md5 and size (None where unpublished)."""

    path: str
    md5: str | None
    size: int | None
    group: str  # "inputs", "results", "text-FE" (the manifest's stem) or "sizes" (size only)


def _read_lines(path: Path) -> list[str]:
    """The lines of the checksum file `path` (at most CHECKSUM_FILE_MAX_BYTES, a regular file,
    UTF-8), or InputError naming it."""
    try:
        return read_regular(path, CHECKSUM_FILE_MAX_BYTES).decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text, not a checksum file") from err
    except OSError as err:
        raise InputError(f"{path}: cannot read checksum file ({err.strerror})") from err


def _checked_path(name: str, where: str) -> str:
    """`name`, a file a table row names, when it is a plain relative path (a leading `./`
    allowed, as `md5sum` writes it); else InputError naming `where` (the table and line)."""
    problem = relative_path_problem(name.removeprefix("./"))
    if problem is not None:
        raise InputError(f"{where}: '{printable(name)}' {problem}; not used")
    return name


def parse_md5_manifest(path: str | Path) -> dict[str, str]:
    """Read an `md5sum` manifest: {relative path: lower-case md5}, in file order.

    Blank lines and `#` comments are skipped; any other malformed line, or a path that is not
    plain and relative (`..`, absolute: it would lead out of the folder), is an InputError
    naming the file and line.
    """
    path = Path(path)
    table: dict[str, str] = {}
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _MD5_LINE.match(line)
        if not match:
            raise InputError(f"{path}:{number}: not an md5sum line: {line[:60]!r}")
        table[_checked_path(match.group(2), f"{path}:{number}")] = match.group(1).lower()
    return table


def parse_sizes(path: str | Path) -> dict[str, int]:
    """Read `sizes.tsv` (a `path<TAB>bytes` header, then one row per file): {path: bytes}.
    InputError naming the file and line for a malformed row or a path that is not plain and
    relative."""
    path = Path(path)
    lines = _read_lines(path)
    table: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[1].isdigit():
            raise InputError(f"{path}:{number}: expected 'path<TAB>bytes': {line[:60]!r}")
        table[_checked_path(fields[0], f"{path}:{number}")] = int(fields[1])
    return table


@functools.lru_cache(maxsize=None)
def known_artifacts(directory: str | Path = CHECKSUMS_DIR) -> types.MappingProxyType:
    """Every official artifact with a published md5 or size, keyed by relative path.

    Manifest order is kept (inputs, results, text/FE), then the size-only rows (TFRecords).
    """
    directory = Path(directory)
    sizes = parse_sizes(directory / SIZES_FILE)
    table: dict[str, Artifact] = {}
    for manifest in OFFICIAL_MANIFESTS:
        group = manifest.removesuffix(".md5")
        for path, md5 in parse_md5_manifest(directory / manifest).items():
            table[path] = Artifact(path, md5, sizes.get(path), group)
    for path, size in sizes.items():
        if path not in table:
            table[path] = Artifact(path, None, size, "sizes")
    return types.MappingProxyType(table)


@functools.lru_cache(maxsize=None)
def official_eval_hashes(directory: str | Path = CHECKSUMS_DIR) -> frozenset[str]:
    """The md5s of the official held-out eval articles (the official `eval.md5`).

    The file has 10,000 lines but 9,941 distinct values: some articles occur twice.
    """
    return frozenset(read_hash_list(Path(directory) / EVAL_ARTICLES_FILE))


def read_hash_list(path: str | Path) -> list[str]:
    """Read a file of one md5 per line (the format of `eval.md5`); InputError if malformed."""
    path = Path(path)
    hashes = []
    for number, line in enumerate(_read_lines(path), start=1):
        value = line.strip().lower()
        if not value:
            continue
        if not _MD5.match(value):
            raise InputError(f"{path}:{number}: not an md5 hash: {line[:60]!r}")
        hashes.append(value)
    return hashes


def count_official_eval_hashes(eval_md5: str | os.PathLike) -> tuple[int, int]:
    """(hashes of `eval_md5` in the official eval-article list, hashes in `eval_md5`)."""
    official = official_eval_hashes()
    hashes = read_hash_list(eval_md5)
    return sum(value in official for value in hashes), len(hashes)


def candidate_paths(path: str) -> list[str]:
    """The relative locations where the official layouts put the artifact `path`."""
    head, _, name = path.rpartition("/")
    folder = head + "/" if head else ""
    return [prefix + name for prefix in _LAYOUTS.get(folder, (folder,))]


def locate(root: Path, path: str) -> Path | None:
    """The first existing file among `path`'s candidate locations under `root`, or None.
    InputError (`resolve_inside`) for a candidate that is a link leading out of `root` or no
    regular file: it is never read."""
    for candidate in candidate_paths(path):
        full = root / candidate
        if os.path.lexists(full) and resolve_inside(root, candidate, str(root)).exists():
            return full
    return None
