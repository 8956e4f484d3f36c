"""The packages' layering, read from their source with `ast` (nothing is imported):
`benchmark` <- `cleanup_scripts` <- `reference` <- `devtools`, no import cycle among their
modules, the developer tools outside the product, the data pipeline's top level small, and the
shared helpers (errors, safe file access) reached by one route."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

# Each package may import only itself and the packages before it (`checksums` is package data).
LAYERS = ("checksums", "benchmark", "cleanup_scripts", "reference", "devtools")
PRODUCT = ("benchmark", "cleanup_scripts", "reference")
# The names the MLCommons reference gives its scripts: `python -m cleanup_scripts.NAME`.
REFERENCE_SCRIPTS = ("create_pretraining_data", "pick_eval_samples", "cleanup_file", "do_gather",
                     "seperate_test_set", "do_sentence_segmentation", "process_wiki")
MAX_TOP_LEVEL_MODULES = 10  # directly in cleanup_scripts/, __init__ included
# Developer tools that once shipped inside the product, and where they are now.
TOOLS = {"cleanup_scripts.bench": "devtools.bench_data", "reference.bench": "devtools.bench_train",
         "benchmark.agreement": "devtools.agreement",
         "benchmark.round_checker": "devtools.round_checker",
         "benchmark.round_worker": "devtools.round_worker"}
# The one module each shared helper is imported from.
HOMES = {"UserError": "benchmark.errors", "printable": "benchmark.errors",
         "exit_on_user_error": "benchmark.errors", "InputError": "benchmark.files",
         "DiskFullError": "benchmark.files", "atomic_output": "benchmark.files",
         "ensure_dir": "benchmark.files", "expand_inputs": "benchmark.files",
         "exclusive_lock": "benchmark.files", "require_regular_file": "benchmark.files"}


def module_name(path: Path) -> str:
    """The dotted name of the module at `path` (a file under REPO)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every module of the layered packages: dotted name -> file."""
    return {module_name(path): path for package in LAYERS
            for path in sorted((REPO / package).rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` imports anywhere in its source (inside
    functions too), with the packages whose `__init__` each import runs first."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {module for module in found if module in known and module != name}


@pytest.fixture(scope="module")
def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def test_lower_layers_never_import_higher_ones(import_graph):
    layer = {package: index for index, package in enumerate(LAYERS)}
    upward = sorted(f"{name} imports {target}" for name, targets in import_graph.items()
                    for target in targets
                    if layer[target.split(".")[0]] > layer[name.split(".")[0]])
    assert upward == []


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` as [a, b, ..., a], or [] when there is none (iterative
    depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(target) == 1:
                return path[path.index(target):] + [target]
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(sorted(graph[target])))
    return []


def test_no_import_cycle_among_the_modules(import_graph):
    assert find_cycle(import_graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_developer_tools_live_in_devtools_not_in_the_product():
    modules = project_modules()
    assert sorted(old for old in TOOLS if old in modules) == []
    assert sorted(new for new in TOOLS.values() if new not in modules) == []


def test_cleanup_scripts_keeps_the_reference_scripts_and_few_modules_at_its_top():
    top = sorted(path.stem for path in (REPO / "cleanup_scripts").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    assert set(REFERENCE_SCRIPTS) <= set(top)


def test_every_subpackage_says_what_it_holds():
    undocumented = sorted(str(folder.relative_to(REPO)) for package in LAYERS
                          for folder in [REPO / package, *(REPO / package).rglob("*")]
                          if folder.is_dir() and any(folder.glob("*.py"))
                          and not ast.get_docstring(ast.parse(
                              (folder / "__init__.py").read_text(encoding="utf-8"))))
    assert undocumented == []


def test_shared_helpers_are_imported_from_their_one_home():
    strays = []
    for package in (*LAYERS, "tests"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    strays += [f"{path.relative_to(REPO)}: {alias.name} from {node.module}"
                               for alias in node.names
                               if HOMES.get(alias.name, node.module) != node.module]
    assert strays == []
