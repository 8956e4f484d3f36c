"""The gallery of logs under tests/fixtures/logs/: valid runs and small mutations of them.

Each broken log is one edit of a valid log (a line dropped, duplicated, moved or changed), with
the rule(s) our checker must report and what the official compliance checker says about it.
`python -m tests.benchmark.gallery` rewrites the fixtures and manifest.json; a test checks the
committed files are what this module makes.
"""
from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmark.cadence import eval_frequency
from tests.benchmark.synthetic import (HYPERPARAMETERS_3072, RunSpec, find, record, render,
                                       write_run)

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
MANIFEST = LOGS / "manifest.json"

CLOSED = "valid/closed_bs256.txt"
OPEN = "valid/open_bs3072.txt"
VALID_SPECS = {
    CLOSED: RunSpec(seed=7),
    OPEN: RunSpec(seed=11, division="open", hyperparameters=HYPERPARAMETERS_3072,
                  converge_at=16, step_boundary=True, samples_per_second=5200.0),
}

Lines = list[str]


# --------------------------------------------------------------------------------------------
# Edits

def _edit(lines: Lines, key: str, nth: int, change: Callable[[dict], None], **meta) -> Lines:
    i = find(lines, key, nth, **meta)
    obj = record(lines[i])
    change(obj)
    return lines[:i] + [render(obj)] + lines[i + 1:]


def set_value(key: str, value, nth: int = 0) -> Callable[[Lines], Lines]:
    return lambda lines: _edit(lines, key, nth, lambda o: o.__setitem__("value", value))


def set_meta(key: str, name: str, value, nth: int = 0) -> Callable[[Lines], Lines]:
    return lambda lines: _edit(lines, key, nth, lambda o: o["metadata"].__setitem__(name, value))


def del_meta(key: str, name: str, nth: int = 0) -> Callable[[Lines], Lines]:
    return lambda lines: _edit(lines, key, nth, lambda o: o["metadata"].pop(name))


def set_time(key: str, time_ms, nth: int = 0) -> Callable[[Lines], Lines]:
    return lambda lines: _edit(lines, key, nth, lambda o: o.__setitem__("time_ms", time_ms))


def drop(key: str, nth: int = 0) -> Callable[[Lines], Lines]:
    def apply(lines: Lines) -> Lines:
        i = find(lines, key, nth)
        return lines[:i] + lines[i + 1:]
    return apply


def duplicate(key: str, nth: int = 0, value=None) -> Callable[[Lines], Lines]:
    """Repeat a line right after itself (with another value if given)."""
    def apply(lines: Lines) -> Lines:
        i = find(lines, key, nth)
        copy_line = lines[i]
        if value is not None:
            obj = record(copy_line)
            obj["value"] = value
            copy_line = render(obj)
        return lines[:i + 1] + [copy_line] + lines[i + 1:]
    return apply


def swap_next(key: str, nth: int = 0) -> Callable[[Lines], Lines]:
    """Swap a line with the one after it."""
    def apply(lines: Lines) -> Lines:
        i = find(lines, key, nth)
        out = list(lines)
        out[i], out[i + 1] = out[i + 1], out[i]
        return out
    return apply


def move_before(key: str, nth: int, anchor: str, anchor_nth: int = 0) -> Callable[[Lines], Lines]:
    """Move a line to just before another."""
    def apply(lines: Lines) -> Lines:
        i = find(lines, key, nth)
        moved = lines[i]
        rest = lines[:i] + lines[i + 1:]
        j = find(rest, anchor, anchor_nth)
        return rest[:j] + [moved] + rest[j:]
    return apply


def chain(*edits: Callable[[Lines], Lines]) -> Callable[[Lines], Lines]:
    def apply(lines: Lines) -> Lines:
        for e in edits:
            lines = e(lines)
        return lines
    return apply


def shift_times_from(key: str, delta_ms: int, nth: int = 0) -> Callable[[Lines], Lines]:
    """Add delta_ms to the time of a line and of every line after it."""
    def apply(lines: Lines) -> Lines:
        start = find(lines, key, nth)
        out = list(lines[:start])
        for line in lines[start:]:
            obj = record(line)
            if obj is not None:
                obj["time_ms"] += delta_ms
                line = render(obj)
            out.append(line)
        return out
    return apply


def remap_samples(factor_num: int, factor_den: int) -> Callable[[Lines], Lines]:
    """Scale every sample count (eval epoch_num, block fields, train_samples)."""
    def scale(n: int) -> int:
        return n * factor_num // factor_den

    def apply(lines: Lines) -> Lines:
        out = []
        for line in lines:
            obj = record(line)
            if obj is not None:
                meta = obj["metadata"]
                for name in ("epoch_num", "first_epoch_num", "epoch_count"):
                    if name in meta:
                        meta[name] = scale(meta[name])
                if obj["key"] == "train_samples":
                    obj["value"] = scale(obj["value"])
                line = render(obj)
            out.append(line)
        return out
    return apply


def drop_eval(nth: int) -> Callable[[Lines], Lines]:
    """Remove the nth eval (its eval_start, eval_stop and eval_accuracy)."""
    return chain(drop("eval_start", nth), drop("eval_stop", nth), drop("eval_accuracy", nth))


def eval_samples_to(nth: int, samples: int) -> Callable[[Lines], Lines]:
    """Log the nth eval at another sample count (its three lines)."""
    return chain(*(set_meta(key, "epoch_num", samples, nth)
                   for key in ("eval_start", "eval_stop", "eval_accuracy")))


def train_past_target(extra: int) -> Callable[[Lines], Lines]:
    """Keep training `extra` blocks after the eval at target, then stop."""
    def apply(lines: Lines) -> Lines:
        start = find(lines, "block_start", -1)
        stop = find(lines, "train_samples", -1)
        cycle = [record(line) for line in lines[start:stop]]
        span = cycle[-1]["time_ms"] - cycle[0]["time_ms"] + 50
        count = cycle[0]["metadata"]["epoch_count"]
        added = []
        for n in range(1, extra + 1):
            for obj in cycle:
                obj = copy.deepcopy(obj)
                obj["time_ms"] += n * span
                meta = obj["metadata"]
                for name in ("epoch_num", "first_epoch_num"):
                    if name in meta:
                        meta[name] += n * count
                if obj["key"] == "eval_accuracy":
                    obj["value"] = round(obj["value"] + 0.0004 * n, 6)
                added.append(render(obj))
        tail = [record(line) for line in lines[stop:]]
        for obj in tail:
            obj["time_ms"] += extra * span
            if obj["key"] == "train_samples":
                obj["value"] += extra * count
        return lines[:stop] + added + [render(o) for o in tail]
    return apply


def truncate_at(fraction: float) -> Callable[[str], str]:
    """Cut the text at `fraction` of its length (mid-line)."""
    return lambda text: text[:int(len(text) * fraction)]


def garbage_lines(seed: int) -> Callable[[Lines], Lines]:
    """Interleave the kind of noise real logs carry: shell echo, stack traces, binary junk."""
    def apply(lines: Lines) -> Lines:
        rng = random.Random(seed)
        noise = ["+ echo 'Beginning trial 1 of 10'", "Traceback (most recent call last):",
                 "  File \"train.py\", line 12, in <module>", "2025-11-22 10:00:01 INFO step 100",
                 "", "\t\t   ", "{'global_steps': 586, 'eval_loss': 4.06}",
                 "".join(chr(rng.randrange(0x80, 0xFF)) for _ in range(30)),
                 "vm.drop_caches = 3", "::: not an mllog line"]
        out = []
        for line in lines:
            if rng.random() < 0.3:
                out.append(rng.choice(noise))
            out.append(line)
        return out
    return apply


def corrupt_json(key: str, nth: int = 0) -> Callable[[Lines], Lines]:
    """Damage the JSON of one line (a bit flip turning a quote into garbage)."""
    def apply(lines: Lines) -> Lines:
        i = find(lines, key, nth)
        line = lines[i]
        at = line.index('"value"')
        return lines[:i] + [line[:at] + "\x07value" + line[at + 6:]] + lines[i + 1:]
    return apply


# --------------------------------------------------------------------------------------------
# The gallery

@dataclass(frozen=True)
class Case:
    """One gallery log.

    name: file name (without .txt) under valid/ (verdict pass) or broken/ (verdict fail).
    base: the valid log it is made from.
    edit: line edit (Lines -> Lines), or text edit if `text_edit`.
    verdict: our expected verdict, "pass" or "fail".
    rules: rules our checker must report (errors for "fail"; warnings allowed for "pass").
    official: the official compliance checker's expected verdict, "pass" or "fail".
    why: what the mutation does.
    """
    name: str
    base: str
    edit: Callable
    verdict: str
    rules: tuple[str, ...]
    official: str
    why: str
    text_edit: bool = False


FREQ = eval_frequency(256)
CASES: list[Case] = [
    # valid variations
    Case("garbage-lines-interleaved", CLOSED, garbage_lines(1), "pass", (), "pass",
         "non-MLLOG noise between the records is ignored by both checkers"),
    Case("duplicate-identical-hyperparameter", CLOSED, duplicate("opt_epsilon"), "pass",
         ("official/opt_epsilon",), "pass",
         "an EXACTLY_ONE key repeated with the same value is only a warning officially"),
    Case("duplicate-identical-run_start", CLOSED, duplicate("run_start"), "pass",
         ("official/run_start",), "pass", "run_start repeated with the same value: a warning"),
    # missing keys
    Case("missing-run_stop", CLOSED, drop("run_stop"), "fail",
         ("official/run_stop", "bert/stop-at-target"), "fail", "run_stop deleted"),
    Case("missing-hyperparameter", CLOSED, drop("opt_lamb_beta_1"), "fail",
         ("official/opt_lamb_beta_1",), "fail", "opt_lamb_beta_1 deleted"),
    Case("missing-cache_clear", CLOSED, drop("cache_clear"), "fail", ("official/cache_clear",),
         "fail", "cache_clear deleted"),
    Case("missing-eval_samples", CLOSED, drop("eval_samples"), "fail",
         ("official/eval_samples",), "fail", "eval_samples deleted"),
    Case("missing-run-stop-status", CLOSED, del_meta("run_stop", "status"), "fail",
         ("official/run_stop",), "fail", "run_stop without its status"),
    Case("missing-epoch_num", CLOSED, del_meta("eval_accuracy", "epoch_num", 3), "fail",
         ("official/eval_accuracy", "bert/eval-sequence"), "fail",
         "an eval_accuracy without epoch_num"),
    Case("missing-eval_accuracy", CLOSED, drop("eval_accuracy", 6), "fail",
         ("bert/eval-sequence", "bert/eval-cadence"), "pass",
         "an eval_stop not followed by its eval_accuracy"),
    # duplicated keys
    Case("duplicate-conflicting-batch-size", CLOSED, duplicate("global_batch_size", value=512),
         "fail", ("official/global_batch_size",), "fail",
         "global_batch_size logged twice with different values"),
    Case("duplicate-eval_accuracy", CLOSED, duplicate("eval_accuracy", 4), "pass",
         ("bert/eval-sequence", "bert/eval-cadence"), "pass",
         "one eval_accuracy line repeated: warnings (the same eval logged twice)"),
    # cadence
    Case("cadence-every-100k", CLOSED, remap_samples(2, 3), "fail", ("bert/eval-cadence",),
         "pass", "evals every 100,000 samples where 150,000 is due: the rules ask the same "
         "frequency"),
    Case("cadence-skipped-eval", CLOSED, drop_eval(3), "fail", ("bert/eval-cadence",), "pass",
         "the eval at 600,000 samples is missing"),
    Case("cadence-off-by-samples", CLOSED, eval_samples_to(2, 3 * FREQ + 100), "pass",
         ("bert/blocks",), "pass",
         "one eval at 450,100 samples instead of 450,000: late by less than a step, on time"),
    Case("cadence-late-by-steps", CLOSED, eval_samples_to(2, 3 * FREQ + 8 * 256), "pass",
         ("bert/eval-cadence",), "pass",
         "one eval 8 steps late, as accepted NVIDIA v2.0 results are: a warning"),
    Case("cadence-late-past-half-interval", CLOSED, eval_samples_to(2, 3 * FREQ + 6 * FREQ // 10),
         "fail", ("bert/eval-cadence",), "pass",
         "one eval 0.6 intervals late: nearer the next due point, so an eval was skipped"),
    Case("cadence-wrong-for-batch", CLOSED, set_value("global_batch_size", 8192), "fail",
         ("bert/eval-cadence",), "pass",
         "batch 8192 logged: its evals are due every 225,000 samples, the log has 150,000"),
    Case("cadence-every-300k", CLOSED, remap_samples(2, 1), "fail", ("bert/eval-cadence",),
         "pass", "evals every 300,000 samples, twice the interval for batch 256"),
    Case("open-cadence-every-100k", OPEN, remap_samples(4, 7), "pass",
         ("bert/blocks",), "pass",
         "open division, evals more often: the frequency rule is the closed division's"),
    # target and stop
    Case("target-never-reached", CLOSED,
         chain(set_value("eval_accuracy", 0.7195, -1), set_meta("run_stop", "status", "aborted")),
         "fail", ("official/eval_accuracy", "bert/target-reached"), "fail",
         "the last eval at 0.7195 and the run aborted"),
    Case("success-without-target", CLOSED, set_value("eval_accuracy", 0.7195, -1), "fail",
         ("official/eval_accuracy", "bert/target-reached", "bert/run-stop-status"), "fail",
         "no eval at target but run_stop says success"),
    Case("training-past-target", CLOSED, train_past_target(2), "pass",
         ("bert/stop-at-target",), "pass",
         "two more blocks and evals after the eval at target: slower, not invalid (a warning)"),
    Case("aborted-at-target", CLOSED, set_meta("run_stop", "status", "aborted"), "pass",
         ("bert/run-stop-status",), "pass",
         "the target was reached but run_stop says aborted: scored as not converged"),
    Case("eval-after-run_stop", CLOSED,
         chain(move_before("run_stop", 0, "block_start", -1),
               move_before("train_samples", 0, "run_stop")),
         "fail", ("bert/run-interval",), "pass",
         "run_stop moved before the last block and eval: training after the clock stopped"),
    Case("run_stop-before-run_start", CLOSED, set_time("run_stop", 1763800000000), "fail",
         ("bert/run-time",), "pass", "run_stop stamped before run_start"),
    Case("accuracy-above-one", CLOSED, set_value("eval_accuracy", 1.2, -1), "fail",
         ("official/eval_accuracy", "bert/eval-accuracy"), "fail", "the last accuracy is 1.2"),
    # truncation and garbage
    Case("truncated-mid-line", CLOSED, truncate_at(0.6), "fail",
         ("log/malformed-line", "official/parse", "official/run_stop"), "fail",
         "the file cut in the middle of a line", text_edit=True),
    Case("corrupted-json", CLOSED, corrupt_json("eval_stop", 5), "fail",
         ("log/malformed-line", "official/parse"), "fail", "one record's JSON damaged"),
    Case("empty-file", CLOSED, lambda text: "", "fail", ("log/empty",), "fail",
         "an empty file", text_edit=True),
    Case("binary-garbage", CLOSED,
         lambda text: "".join(chr(random.Random(3).randrange(256)) for _ in range(2000)),
         "fail", ("log/empty",), "fail", "random bytes", text_edit=True),
    # wrong types and NaN
    Case("wrong-type-batch-size", CLOSED, set_value("global_batch_size", "256"), "fail",
         ("bert/hyperparameters", "bert/eval-cadence"), "pass",
         "global_batch_size logged as a string"),
    Case("wrong-type-eval_accuracy", CLOSED, set_value("eval_accuracy", "0.720349", -1), "fail",
         ("official/crash", "bert/eval-accuracy"), "fail",
         "the last accuracy as a string (the official checker raises TypeError)"),
    Case("wrong-type-epoch_num", CLOSED, set_meta("eval_accuracy", "epoch_num", "300000", 1),
         "fail", ("bert/eval-epoch-num", "bert/eval-sequence"), "pass",
         "an eval's epoch_num as a string"),
    Case("wrong-type-time_ms", CLOSED, set_time("block_stop", "1763800355666"), "fail",
         ("log/time-ms",), "pass", "time_ms as a string"),
    Case("wrong-type-status", CLOSED, set_meta("run_stop", "status", 1), "fail",
         ("bert/run-stop-status",), "pass", "run_stop status as a number"),
    Case("nan-eval_accuracy", CLOSED, set_value("eval_accuracy", float("nan"), 5), "fail",
         ("bert/eval-accuracy",), "pass", "one accuracy is NaN"),
    Case("nan-time_ms", CLOSED, set_time("block_stop", float("nan"), 2), "fail",
         ("log/time-ms",), "pass", "one time_ms is NaN"),
    Case("nan-batch-size", CLOSED, set_value("global_batch_size", float("nan")), "fail",
         ("bert/hyperparameters", "bert/eval-cadence"), "pass", "global_batch_size is NaN"),
    # reordered lines and inconsistent numbers
    Case("reordered-eval-lines", CLOSED, swap_next("eval_stop", 4), "pass",
         ("bert/eval-sequence",), "pass",
         "eval_accuracy before its eval_stop: no rule orders them, a warning"),
    Case("reordered-run_start", CLOSED, swap_next("run_start"), "fail",
         ("official/block_start", "bert/run-interval"), "fail",
         "the first block_start before run_start"),
    Case("timestamps-backwards", CLOSED, set_time("block_stop", 1763800100000, 0), "pass",
         ("bert/timestamps",), "pass",
         "a block_stop earlier than its block_start: a warning (ranks, offline evaluation)"),
    Case("block-gap", CLOSED, set_meta("block_start", "first_epoch_num", 310000, 2), "pass",
         ("bert/blocks",), "pass",
         "a block starting at 310,000 samples, not 300,000: the official YAML allows it"),
    Case("train_samples-too-small", CLOSED, set_value("train_samples", 1000000), "fail",
         ("bert/train-samples",), "pass", "train_samples below the samples of the last eval"),
    Case("eval_samples-wrong", CLOSED, set_value("eval_samples", 5000), "fail",
         ("bert/eval-samples",), "pass", "eval_samples 5,000 instead of 10,000"),
    # official-only rules
    Case("init-too-long", CLOSED, shift_times_from("init_stop", 31 * 60 * 1000), "fail",
         ("official/init_stop",), "fail", "init_stop 31 minutes after init_start"),
    Case("bad-division", CLOSED, set_value("submission_division", "closd"), "fail",
         ("official/submission_division",), "fail", "submission_division misspelled"),
    Case("division-is-a-path", CLOSED,
         set_value("submission_division", "../../../../tmp/bert-check-crafted/x"), "fail",
         ("official/submission_division",), "fail",
         "a division naming a YAML file elsewhere: never handed to the official engine"),
    Case("not-bert", CLOSED, set_value("submission_benchmark", "resnet"), "fail",
         ("bert/benchmark",), "fail", "a log claiming another benchmark"),
]


def base_text(name: str) -> str:
    """The text of a valid log."""
    return (LOGS / name).read_text(encoding="latin-1")


def render_case(case: Case) -> str:
    """The text of a gallery log, made from its base."""
    text = base_text(case.base)
    if case.text_edit:
        return case.edit(text)
    return "\n".join(case.edit(text.splitlines())) + "\n"


def case_path(case: Case) -> Path:
    """Where the case's log lives: valid/ if our checker must pass it, else broken/."""
    return LOGS / ("valid" if case.verdict == "pass" else "broken") / f"{case.name}.txt"


def manifest() -> dict:
    """{relative path: expectations} for every gallery log."""
    entries = {name: {"verdict": "pass", "rules": [], "official": "pass",
                      "why": "a valid run written through benchmark.mlperf_log"}
               for name in VALID_SPECS}
    for case in CASES:
        entries[str(case_path(case).relative_to(LOGS))] = {
            "verdict": case.verdict, "rules": list(case.rules), "official": case.official,
            "why": case.why}
    return entries


def write_all() -> None:
    """Rewrite every fixture log and manifest.json."""
    for name, spec in VALID_SPECS.items():
        (LOGS / name).parent.mkdir(parents=True, exist_ok=True)
        write_run(LOGS / name, spec)
    for case in CASES:
        path = case_path(case)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(render_case(case).encode("latin-1"))
    MANIFEST.write_text(json.dumps(manifest(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_all()
