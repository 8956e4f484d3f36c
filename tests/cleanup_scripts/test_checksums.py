"""The manifests in checksums/ and the table cleanup_scripts.artifacts.checksums builds from
them."""
import hashlib
import shutil
import subprocess

import pytest

from benchmark.files import InputError
import cleanup_scripts
from cleanup_scripts.artifacts import checksums


def test_table_holds_every_official_artifact_with_md5_and_size():
    known = checksums.known_artifacts()
    groups = {}
    for artifact in known.values():
        groups.setdefault(artifact.group, []).append(artifact)
    assert len(groups["inputs"]) == 9
    assert len(groups["results"]) == 8
    assert len(groups["text-FE"]) == 18
    for artifact in groups["inputs"] + groups["results"] + groups["text-FE"]:
        assert len(artifact.md5) == 32 and artifact.size > 0, artifact
    assert known["vocab.txt"].md5 == "64800d5d8528ce344256daf115d4965e"
    assert known["vocab.txt"].size == 231_508
    assert known["tf1_ckpt/model.ckpt-28252.data-00000-of-00001"].size == 4_034_713_312
    assert known["text/FE/wiki_17"].size == 398_182


def test_tfrecords_are_known_by_size_only():
    known = checksums.known_artifacts()
    tfrecords = {path: a for path, a in known.items() if a.group == "sizes"}
    assert set(tfrecords) == {"tfrecords/eval_intermediate", "tfrecords/eval_10k",
                              "tfrecords/part-00000-of-00500", "tfrecords/part-00499-of-00500"}
    assert all(a.md5 is None for a in tfrecords.values())
    assert tfrecords["tfrecords/eval_10k"].size == 25_382_591


def test_vendored_files_match_vendored_manifest_and_official_md5s():
    # checksums/vendored.md5: {path relative to cleanup_scripts/data: md5} of the files
    # vendored in the package.
    vendored = checksums.parse_md5_manifest(checksums.CHECKSUMS_DIR / "vendored.md5")
    for relative, md5 in vendored.items():
        data = (cleanup_scripts.DATA_DIR / relative).read_bytes()
        assert hashlib.md5(data).hexdigest() == md5, relative
    data_files = {path.relative_to(cleanup_scripts.DATA_DIR).as_posix()
                  for path in cleanup_scripts.DATA_DIR.rglob("*")
                  if path.is_file() and path.suffix != ".md"}  # notes such as LICENSE.md
    assert data_files == set(vendored)
    known = checksums.known_artifacts()
    assert vendored["bert/vocab.txt"] == known["vocab.txt"].md5
    assert vendored["bert/bert_config.json"] == known["bert_config.json"].md5


def test_official_eval_article_list_is_the_official_eval_md5_file():
    path = checksums.CHECKSUMS_DIR / checksums.EVAL_ARTICLES_FILE
    assert hashlib.md5(path.read_bytes()).hexdigest() == \
        checksums.known_artifacts()["results/eval.md5"].md5
    assert len(checksums.read_hash_list(path)) == 10_000
    assert len(checksums.official_eval_hashes()) == 9_941  # some articles occur twice


@pytest.mark.skipif(shutil.which("md5sum") is None, reason="needs GNU md5sum")
def test_manifests_work_with_md5sum_check():
    result = subprocess.run(
        ["md5sum", "--check", "--strict", str(checksums.CHECKSUMS_DIR / "vendored.md5")],
        cwd=cleanup_scripts.DATA_DIR, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_malformed_manifest_lines_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.md5"
    bad.write_text("64800d5d8528ce344256daf115d4965e  vocab.txt\nnot a checksum line\n")
    with pytest.raises(InputError, match=r"bad.md5:2: not an md5sum line"):
        checksums.parse_md5_manifest(bad)
    sizes = tmp_path / "sizes.tsv"
    sizes.write_text("path\tbytes\nvocab.txt\tmany\n")
    with pytest.raises(InputError, match=r"sizes.tsv:2"):
        checksums.parse_sizes(sizes)


def test_binary_mode_md5sum_lines_are_read(tmp_path):
    manifest = tmp_path / "m.md5"
    manifest.write_text("# comment\n64800D5D8528CE344256DAF115D4965E *vocab.txt\n")
    assert checksums.parse_md5_manifest(manifest) == {
        "vocab.txt": "64800d5d8528ce344256daf115d4965e"}
