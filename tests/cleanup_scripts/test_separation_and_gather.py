"""seperate_test_set and do_gather give the reference's bytes for default and other flags.

The expected md5s in fixtures/separation_gather/reference.md5 were made by running the reference
scripts on the tree that tests.corpus.build_text_tree writes.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmark.files import InputError
from cleanup_scripts import seperate_test_set as separation
from cleanup_scripts.do_gather import gathered_bytes, plan_parts, worker_splits
from tests.conftest import md5_of, run_module
from tests.corpus import build_text_tree

FIXTURE = Path(__file__).parents[1] / "fixtures" / "separation_gather" / "reference.md5"


def reference_cases() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """{case: (flags, {relative path: md5})} from the reference fixture file."""
    cases: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    current = None
    for line in FIXTURE.read_text().splitlines():
        header = re.match(r"# case (\w+): (.*)", line)
        if header:
            flags = dict(re.findall(r"--(\w+)=(\S+)", header.group(2)))
            current = cases.setdefault(header.group(1), (flags, {}))
        elif line:
            digest, name = line.split()
            current[1][name.removeprefix("./")] = digest
    return cases


CASES = reference_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_separation_and_gather_match_reference(case, tmp_path):
    flags, expected = CASES[case]
    data = build_text_tree(tmp_path)
    run_module("cleanup_scripts.seperate_test_set", f"--data={data}", "--input_suffix=.3",
               "--output_suffix=.4", f"--num_test_articles={flags['num_test_articles']}",
               f"--seed={flags['seed']}", f"--test_output={tmp_path}/results/eval")
    run_module("cleanup_scripts.do_gather", f"--data={data}", "--input_suffix=.4",
               f"--block_size={flags['block_size']}", f"--out_dir={tmp_path}/results",
               f"--nworker={flags['nworker']}")
    produced = {str(p.relative_to(tmp_path)): md5_of(p) for p in tmp_path.rglob("*")
                if p.is_file() and (p.suffix == ".4" or p.parent.name == "results")}
    assert produced == expected


def test_test_article_shares_sum_to_total():
    for files in (1, 3, 7, 502):
        assert sum(separation.test_article_count(i, files, 10_000) for i in range(files)) == 10_000


def test_pick_test_ids_are_distinct_and_seeded():
    ids = separation.pick_test_ids(50, 20, seed=12345 + 13 * 4)
    assert len(set(ids)) == 20 and all(0 <= i < 50 for i in ids)
    assert ids == separation.pick_test_ids(50, 20, seed=12345 + 13 * 4)
    with pytest.raises(ValueError):
        separation.pick_test_ids(3, 4, seed=1)


def test_too_few_articles_is_a_clear_error_not_a_hang(tmp_path):
    data = build_text_tree(tmp_path)
    result = run_module("cleanup_scripts.seperate_test_set", f"--data={data}",
                        "--num_test_articles=200", f"--test_output={tmp_path}/results/eval",
                        check=False)
    assert result.returncode == 1
    assert re.search(r"error: .*wiki_\d\d\.3: \d+ test articles wanted from \d+ articles",
                     result.stderr)
    assert not (tmp_path / "results" / "eval.txt").exists()


def test_plan_parts_closes_a_part_before_it_would_pass_the_block_size():
    mib = 1024 * 1024
    assert plan_parts([mib, mib, mib], 2.0) == [[0, 1], [2]]
    assert plan_parts([3 * mib, mib], 2.0) == [[0], [1]]
    assert plan_parts([], 2.0) == []


def test_worker_splits_follow_the_reference_partition():
    assert [list(r) for r in worker_splits(7, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [list(r) for r in worker_splits(2, 3)] == [[0], [1], []]


@pytest.mark.parametrize("content", [
    b"\xef\xbb\xbfa\n\n", b"a\r\nb\r\r\n\n", b"x\r", b"x\r\r", b"\n\n", b"\n", b"",
    "caf\u00e9\n\n\n".encode(), "a\ufeff\n\u2028\n\n".encode()])
def test_gathered_bytes_are_the_text_the_reference_reads(tmp_path, content):
    path = tmp_path / "wiki_00.4"
    path.write_bytes(content)
    with open(path, encoding="utf-8-sig") as handle:
        text = handle.read()
    if len(text) >= 2 and text[-1] == text[-2] == "\n":
        text = text[:-1]
    assert gathered_bytes(str(path)) == text.encode("utf-8")


def test_non_utf8_inputs_are_input_errors(tmp_path):
    bad = tmp_path / "wiki_00.4"
    bad.write_bytes(b"caf\xe9\n\n")
    with pytest.raises(InputError, match="UTF-8"):
        gathered_bytes(str(bad))
    job = separation.SeparationJob(str(bad), str(tmp_path / "out"), 0, 1, 0, 1)
    with pytest.raises(InputError, match="not UTF-8"):
        separation.separate_file(job)
