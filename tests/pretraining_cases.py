"""The create_pretraining_data / pick_eval_samples cases whose reference outputs are committed.

`fixtures/pretraining/cases.json` lists each case (inputs, flags, vocabulary) with the digests
(`cleanup_scripts.records.tfrecord_digest`) of the TFRecords the MLCommons reference scripts wrote
for it; the procedure that made them is in `fixtures/pretraining/README.md`. This module is shared
by the tests and by that procedure, so both read the same cases and build the same derived files.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from cleanup_scripts import VOCAB_FILE
from cleanup_scripts.records.pretraining_features import encode_examples, feature_spec, frame_record

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures" / "pretraining"
CASES_FILE = FIXTURES / "cases.json"
MLPERF_DIGESTS = TESTS / "fixtures" / "reference-wiki_00-01" / "tfrecord-digests.txt"


def load_cases() -> dict:
    """{case name: case} from cases.json."""
    return json.loads(CASES_FILE.read_text(encoding="utf-8"))


def derived_vocab_lines() -> list[bytes]:
    """The lines of the `dup-vocab` variant of the benchmark vocabulary.

    It starts with a blank line (a token of its own: every id moves up by one), inserts a new
    token in the middle, and ends with 600 repeats of existing tokens (some with trailing
    spaces or CRLF, one with a "\\r" inside), which add no ids but make the file longer.
    """
    lines = Path(VOCAB_FILE).read_bytes().split(b"\n")[:-1]
    out = [b""] + lines[:15000] + [b"zzqqxxnewtoken"] + lines[15000:]
    for index in range(600):
        token = lines[(index * 47) % len(lines)]
        out.append(token + (b"   " if index % 3 == 1 else b"\r" if index % 3 == 2 else b""))
    out.append(b"th\re")  # "the" once "\r" is dropped
    return out


def write_vocab(kind: str, directory: str | os.PathLike) -> str:
    """Path of the vocabulary of a case: the benchmark's, or a variant written to `directory`."""
    if kind == "default":
        return str(VOCAB_FILE)
    if kind != "dup-vocab":
        raise ValueError(f"unknown vocab kind {kind}")
    path = Path(directory) / "dup-vocab.txt"
    path.write_bytes(b"\n".join(derived_vocab_lines()) + b"\n")
    return str(path)


def mlperf_digests() -> dict[str, tuple[int, str]]:
    """{text part name: (records, decoded md5)} of the reference's TFRecords for MLPerf flags."""
    names = {"part-00000-of-00500.tfrecord": "part-00000-of-00500",
             "part-00001-of-00500.tfrecord": "part-00001-of-00500",
             "eval_intermediate": "eval.txt"}
    table = {}
    for line in MLPERF_DIGESTS.read_text().splitlines():
        name, count, md5 = line.split()[:3]
        table[names[name]] = (int(count), md5)
    return table


def synthetic_records(count: int, max_seq_length: int, max_predictions_per_seq: int) -> list[bytes]:
    """`count` distinct, deterministic pretraining records (for pick_eval_samples tests)."""
    rows = np.arange(count)[:, None]
    seq = np.arange(max_seq_length)[None, :]
    pred = np.arange(max_predictions_per_seq)[None, :]
    lengths = 3 + rows % max(1, max_seq_length - 2)
    columns = {
        "input_ids": np.where(seq < lengths, (rows * 131 + seq * 7) % 30522, 0),
        "input_mask": (seq < lengths).astype(np.int64),
        "segment_ids": ((seq >= lengths // 2) & (seq < lengths)).astype(np.int64),
        "masked_lm_positions": np.where(pred < rows % 5, (rows + pred * 3) % max_seq_length, 0),
        "masked_lm_ids": np.where(pred < rows % 5, (rows * 17 + pred) % 30522, 0),
        "masked_lm_weights": (pred < rows % 5).astype(np.float32),
        "next_sentence_labels": rows % 2,
    }
    assert list(columns) == list(feature_spec(max_seq_length, max_predictions_per_seq))
    return encode_examples(columns)


def write_synthetic_tfrecord(path: str | os.PathLike, count: int, max_seq_length: int,
                             max_predictions_per_seq: int) -> None:
    """Write `synthetic_records(...)` as a TFRecord file."""
    with open(path, "wb") as handle:
        for record in synthetic_records(count, max_seq_length, max_predictions_per_seq):
            handle.write(frame_record(record))


# The reference create_pretraining_data.py defaults; every case states all of its flags.
REFERENCE_DEFAULTS = {"do_lower_case": True, "max_seq_length": 128, "max_predictions_per_seq": 20,
                      "masked_lm_prob": 0.15, "short_seq_prob": 0.1, "random_seed": 12345,
                      "dupe_factor": 10, "preserve_unused_tokens": False}


def case_flags(case: dict) -> dict:
    """All flags of a create case (reference defaults overridden by the case's own)."""
    return {**REFERENCE_DEFAULTS, **case["flags"]}


def flag_args(flags: dict) -> list[str]:
    """`--name=value` arguments for a flags dict (booleans as true/false)."""
    return [f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
            for name, value in flags.items()]


def sweep_lines(sample: bool) -> list[str]:
    """Lines putting every code point (or a sample) in several word contexts, 64 per line."""
    points = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000
              and (not sample or cp < 0x2500 or cp % 97 == 0)]
    lines = []
    for start in range(0, len(points), 64):
        lines.append(" ".join(f"x{chr(cp)}y A{chr(cp)} {chr(cp)}Q{chr(cp)}{chr(cp)}"
                              for cp in points[start:start + 64]))
    return lines
