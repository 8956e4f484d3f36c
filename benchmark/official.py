"""The official `mlperf_logging` checkers, run in-process, their verdicts turned into Problems.

- `run_compliance`: the compliance checker (YAML rulesets, `training_<ruleset>/common.yaml`,
  which picks the closed or open rules from the log's `submission_division`).
- `run_rcp`: the reference-convergence-point check of a folder of `result_*.txt`.
- `run_package_checker`: the package checker on a copy of a submission tree (it writes
  `scaling.json` into result folders, so it never runs on the user's own tree). The copy
  holds only what it reads, built from what this checker already read: each result log
  reduced to its `:::MLLOG` lines (a log not read is left out), the
  system descriptions as parsed, `package_checker_params` up to 1 MiB, the names under
  `power/`; at most MAX_COPY_BYTES in all, in a scratch folder a later run removes if this
  process is killed (`benchmark.files.scratch_dir`). No special file, link or sparse file of
  the user's tree is ever read through it.
- `system_description_problems`: the system-description checker for one `systems/*.json`.

These tools report through `logging` and `print` and some inputs make them raise; every call
here captures their output and turns a crash into an error line, so their verdict is kept
(a crash is a failure) without a traceback reaching the user.

A log is untrusted input. The compliance engine turns a log's submission_division and
submission_benchmark values into the path of the next YAML file it loads and runs the code
in it, so a crafted value such as `../../x` would run a YAML of the submitter's choosing.
Two guards stand in the way: the engine only sees logs whose division and benchmark are
known values (`untrusted_values`), and the YAML reader it uses here refuses any file outside
the installed mlperf_logging package (`benchmark.adapters.mlperf_logging.PackageYaml`), which also keeps each parsed ruleset
file in memory so checking a whole round does not re-read it per log.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from benchmark import log_keys as k
from benchmark.adapters import mlperf_logging
from benchmark.files import RefusedFile, read_regular, scratch_dir, size_words
from benchmark.mllog_parse import ParsedLog
from benchmark.problems import ERROR, WARNING, Problem
from benchmark.rulesets import DEFAULT_RULESET, RULESETS, ruleset as ruleset_facts

USAGE = "training"
# Every benchmark name the official rulesets 1.0.0-5.1.0 accept in submission_benchmark.
KNOWN_BENCHMARKS = ("bert", "dlrm", "dlrm_dcnv2", "gpt3", "llama2_70b_lora", "maskrcnn",
                    "minigo", "resnet", "retinanet", "rnnt", "ssd", "stable_diffusion",
                    "unet3d", "gnn", "llama31_405b", "llama31_8b", "flux1")
PARSE_ERRORS = "Log lines had parsing errors."  # the compliance checker's own message
LONGEST_LINE = 20_000  # characters; the official tools' per-line regex is quadratic beyond
MAX_COPY_BYTES = 300 << 20  # what the copies for the RCP and package checkers may take
MAX_SMALL_FILE_BYTES = 1 << 20  # a systems/*.json or package_checker_params (published: 2.5 KB)
MAX_POWER_ENTRIES = 10_000  # names copied from a result folder's power/ (published: 40)
_SPEC = importlib.util.find_spec("mlperf_logging")
_PACKAGE_DIR = str(Path(_SPEC.origin).parent) + "/" if _SPEC and _SPEC.origin else ""


class _Collect(logging.Handler):
    """A logging handler that keeps every record."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _captured(level: int | None = logging.INFO) -> Iterator[_Collect]:
    """Capture stdout, stderr, Python warnings and (from `level` up) root-logger records for
    the block; level None silences logging altogether (for tools whose verdict is returned)."""
    root = logging.getLogger()
    handler = _Collect()
    saved_level, saved_disable = root.level, logging.root.manager.disable
    if level is None:
        logging.disable(logging.CRITICAL)
    else:
        root.addHandler(handler)
        root.setLevel(level)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
        logging.disable(saved_disable)


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed log call inside the tool
        return str(record.msg)


def _one_line(text: str, limit: int = 200) -> str:
    """`text` on one line, without mlperf_logging's install folder, at most `limit` characters:
    a longer one loses its middle, so both the start and the verdict at its end stay (a long
    path in "Result file PATH logs no seed." no longer hides "logs no seed")."""
    text = str(text)
    if _PACKAGE_DIR:
        text = text.replace(_PACKAGE_DIR, "")
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    tail = (limit - 5) // 2
    return f"{text[:limit - 5 - tail]} ... {text[len(text) - tail:]}"


def _describe(exc: BaseException) -> str:
    """`Type: message` of an exception raised inside an official tool, short."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{type(exc).__name__}: {Path(str(exc.filename)).name}: {exc.strerror}"
    return f"{type(exc).__name__}: {_one_line(exc, 100)}"


def available_rulesets() -> list[str]:
    """The BERT rulesets (`benchmark.rulesets`) the installed mlperf_logging has."""
    from mlperf_logging.compliance_checker import mlp_compliance
    base = Path(mlp_compliance.__file__).parent
    return [v for v in RULESETS if (base / f"{USAGE}_{v}" / f"closed_bert.yaml").is_file()]


def untrusted_values(parsed: ParsedLog) -> list[Problem]:
    """One error per submission_division / submission_benchmark value that is not a known
    name: the official engine would turn such a value into a file path."""
    known = {k.SUBMISSION_DIVISION: ("division", k.DIVISIONS),
             k.SUBMISSION_BENCHMARK: ("benchmark", KNOWN_BENCHMARKS)}
    problems = []
    for record in parsed.records:
        if record.key in known:
            what, names = known[record.key]
            if record.value not in names:
                shown = repr(record.value)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                problems.append(Problem(
                    parsed.path, record.line, f"official/{record.key}",
                    f"unknown {what} {shown}; the official checker was not run on this log "
                    f"(known: {', '.join(names)})"))
    return problems


@functools.lru_cache(maxsize=None)
def _rule_files(ruleset: str) -> tuple[tuple[str, str], ...]:
    """(file name, text) of the YAML files the compliance checker reads for a BERT log."""
    if not _PACKAGE_DIR:
        return ()
    base = Path(_PACKAGE_DIR) / "compliance_checker" / f"{USAGE}_{ruleset}"
    files = []
    for name in ("closed_bert.yaml", "open_bert.yaml", "closed_common.yaml", "open_common.yaml",
                 "common.yaml"):
        try:
            files.append((name, (base / name).read_text()))
        except OSError:
            continue
    return tuple(files)


@functools.lru_cache(maxsize=4096)
def compliance_source(ruleset: str, key: str) -> str:
    """Where the compliance checker's rule for `key` lives: the installed package's YAML file
    of `ruleset` that names it, e.g. "mlperf_logging 4.1.68, training_1.0.0/closed_bert.yaml:
    eval_accuracy"."""
    version = _package_version()
    files = [name for name, text in _rule_files(ruleset)
             if re.search(rf"NAME:\s*{re.escape(key)}\s*$", text, re.M)]
    where = ", ".join(f"{USAGE}_{ruleset}/{name}" for name in files[:2]) or \
        f"{USAGE}_{ruleset}/*.yaml"
    return f"mlperf_logging {version} compliance checker, {where}: {key}"


@functools.lru_cache(maxsize=None)
def _package_version() -> str:
    try:
        return importlib.metadata.version("mlperf-logging")
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def _with_sources(problems: list[Problem], ruleset: str) -> list[Problem]:
    """`problems` of the compliance checker, each error naming the YAML rule it comes from."""
    return [dataclasses.replace(p, source=compliance_source(ruleset, p.rule.split("/", 1)[1]))
            if p.severity == ERROR and p.rule.startswith("official/") else p
            for p in problems]


def _round_leniency(problems: list[Problem], ruleset: str) -> list[Problem]:
    """`problems` with the findings the round's own checker only warned about downgraded
    (`benchmark.rulesets.Ruleset.lenient_official`), the reason appended."""
    lenient = ruleset_facts(ruleset).lenient_official
    kept = []
    for problem in problems:
        reason = next((why for marker, why in lenient
                       if problem.severity == ERROR
                       and marker in f"{problem.rule} {problem.message}"),
                      None)
        kept.append(problem.downgraded(reason) if reason else problem)
    return kept


# --------------------------------------------------------------------------------------------
# Compliance checker

@dataclass
class ComplianceOutcome:
    """The official compliance checker's verdict on one log.

    passed: the verdict of the checker MLCommons ran in the ruleset's round: the installed
        checker's, with the findings that round only warned about as warnings
        (`benchmark.rulesets`); True if no error remains and it did not crash.
    crashed: it raised instead of giving a verdict (counts as a failure).
    problems: its messages as Problems (rule "official/<key>"), errors and warnings.
    installed_passed: the installed mlperf_logging's own verdict.
    """
    passed: bool
    crashed: bool = False
    problems: list[Problem] = field(default_factory=list)
    installed_passed: bool | None = None


_FAILED_IN_LINE = re.compile(r"CHECK for '(?P<key>[^']*)' failed in line (?P<n>\d+):")
_FAILED_TEST = re.compile(r"^failed test: (?P<test>.*)$", re.M)
_TRIGGERED = re.compile(r"triggered by line ?:\n(?P<line>.*)$", re.M)
_REQUIRED = re.compile(r"Required (?P<req>\S+) occurrence of '(?P<key>[^']*)' but found "
                       r"(?P<n>\d+)")
_REQUIRED_ALT = re.compile(r"Required AT_LEAST_ONE occurrence of (?P<keys>'.*')")
_AT_LEAST_ONE_CHECK = re.compile(r"Failed checks for (?P<key>\S+) : (?P<test>.*)")


class _Locator:
    """Finds the file line an official message is about when the message does not say."""

    def __init__(self, parsed: ParsedLog) -> None:
        self.parsed = parsed
        self.by_text: dict[str, int] = {}
        self.by_key: dict[str, list[int]] = {}
        for line, text in zip(parsed.mllog_lines, parsed.mllog_texts):
            self.by_text.setdefault(text, line)
        for record in parsed.records:
            self.by_key.setdefault(record.key, []).append(record.line)

    def text(self, full_string: str) -> int:
        return self.by_text.get(full_string.strip(), 0)

    def nth_of_key(self, key: str, n: int) -> int:
        lines = self.by_key.get(key, [])
        return lines[n] if 0 <= n < len(lines) else 0


def _compliance_problem(path: str, text: str, locate: _Locator, severity: str,
                        key_hint: str | None) -> Problem:
    """Turn one (multi-line) compliance-checker message into a Problem."""
    match = _FAILED_IN_LINE.search(text)
    if match:
        test = _FAILED_TEST.search(text)
        detail = test.group("test").strip() if test else "check failed"
        return Problem(path, int(match.group("n")), f"official/{match['key']}",
                       f"check failed: {detail}", severity)
    if text.startswith("Failed executing"):
        trigger = _TRIGGERED.search(text)
        line = locate.text(trigger.group("line")) if trigger else 0
        head, _, rest = text.partition("\n")
        if head.startswith("Failed executing CHECK code"):
            what = f"check could not run: {_one_line(rest.partition(chr(10))[0], 120)}"
        else:
            what = f"the ruleset's {head.split()[3] if len(head.split()) > 3 else ''} code failed"
        return Problem(path, line, f"official/{key_hint or 'compliance'}",
                       f"{what} (a missing field or a value of the wrong type?)", severity)
    match = _REQUIRED.search(text)
    if match:
        n = int(match.group("n"))
        line = locate.nth_of_key(match["key"], 1 if n > 1 else 0) if n else 0
        return Problem(path, line, f"official/{match['key']}", _one_line(text), severity)
    match = _REQUIRED_ALT.search(text)
    if match:
        keys = re.findall(r"'([^']*)'", match.group("keys"))
        return Problem(path, 0, f"official/{keys[0] if keys else 'compliance'}",
                       _one_line(text), severity)
    match = _AT_LEAST_ONE_CHECK.search(text)
    if match:
        return Problem(path, 0, f"official/{match['key']}",
                       f"no {match['key']} record satisfies: {match['test'].strip()}", severity)
    if text.startswith("failed test:"):
        test = text[len("failed test:"):].split("\ncurrent context")[0]
        return Problem(path, 0, f"official/{key_hint or 'end'}",
                       f"end-of-log check failed: {_one_line(test, 120)}", severity)
    return Problem(path, 0, f"official/{key_hint or 'compliance'}", _one_line(text), severity)


def _official_loglines(parsed: ParsedLog, ruleset: str) -> tuple[list, list[tuple[int, str]]]:
    """The official parser's (loglines, errors) for the log's `:::MLLOG` lines.

    Each line goes through the ruleset's own `string_to_logline`, as its `parse_file` does,
    with the file line number as `lineno`. Only the splitting of the file into lines is ours
    (the same lines; its `re.sub` on every line is quadratic and takes minutes on a long
    garbage line). A ValueError is a parse error, as there; any other exception propagates,
    as there.
    """
    module = importlib.import_module(
        f"mlperf_logging.compliance_checker.mlp_parser.ruleset_{ruleset.replace('.', '')}")
    loglines, errors = [], []
    for line_no, text in zip(parsed.mllog_lines, parsed.mllog_texts):
        try:
            loglines.append(module.string_to_logline(line_no, text))
        except ValueError as exc:
            errors.append((line_no, str(exc)))
    return loglines, errors


def run_compliance(parsed: ParsedLog, ruleset: str = DEFAULT_RULESET) -> ComplianceOutcome:
    """Run the official compliance checker (its parser, engine and YAML rules) on a log.

    parsed: the log read by `benchmark.mllog_parse`.
    ruleset: e.g. "1.0.0"; the checker starts at `training_<ruleset>/common.yaml`, which
        picks closed or open rules from the log's submission_division.
    """
    path = parsed.path
    try:
        from mlperf_logging.compliance_checker import mlp_compliance
    except Exception as exc:  # noqa: BLE001
        return ComplianceOutcome(False, True, [Problem(
            path, 0, "official/unavailable",
            f"cannot import mlperf_logging's compliance checker: {_one_line(exc)}")])
    unknown = untrusted_values(parsed)
    if unknown:
        return ComplianceOutcome(False, False, unknown, False)
    mlperf_logging.guard_engine()
    locate = _Locator(parsed)
    checker = mlp_compliance.make_checker(USAGE, ruleset, quiet=False, werror=False)
    problems: list[Problem] = []
    mlp_compliance.enqueued_configs.clear()
    with _captured(None):
        try:
            loglines, parse_errors = _official_loglines(parsed, ruleset)
            if parse_errors:  # what ComplianceChecker.check_file does with parse errors
                checker.put_message(PARSE_ERRORS)
            checker.check_loglines(loglines, f"{USAGE}_{ruleset}/common.yaml")
            valid = not checker.has_messages()
            crashed = None
        except Exception as exc:  # noqa: BLE001 - the official parser raises on some lines
            valid, crashed, parse_errors = False, exc, []
        finally:
            mlp_compliance.enqueued_configs.clear()
    if crashed is not None:
        problems.append(Problem(
            path, 0, "official/crash",
            f"the official compliance checker stopped with {_describe(crashed)}; "
            "it cannot accept this log"))
    if parse_errors:
        problems.append(Problem(path, 0, "official/parse",
                                f"{len(parse_errors)} line(s) could not be parsed "
                                "('Log lines had parsing errors.')"))
    for key, text in checker.warnings.items():
        problems.append(_compliance_problem(path, text, locate, WARNING, key))
    for key, text in checker.overwritable.items():
        problems.append(_compliance_problem(path, text, locate, ERROR, key))
    for text in checker.not_overwritable:
        if text == PARSE_ERRORS:
            continue  # reported above with a count
        problems.append(_compliance_problem(path, text, locate, ERROR, None))
    if not valid and not any(p.severity == ERROR for p in problems):
        problems.append(Problem(path, 0, "official/compliance", "the compliance checker failed"))
    problems = _round_leniency(_with_sources(problems, ruleset), ruleset)
    passed = bool(valid) or (crashed is None and not any(p.severity == ERROR for p in problems))
    return ComplianceOutcome(passed, crashed is not None, problems, bool(valid))


# --------------------------------------------------------------------------------------------
# RCP checker

@dataclass
class RcpOutcome:
    """The RCP checker's verdict on a folder of result files.

    ran: False when it was skipped (see message).
    passed: its verdict (None when skipped).
    message: its own words ("RCP found", "RCP Interpolation", ...), or why it was skipped.
    norm_factor: the factor it would scale the score by (1.0: none).
    """
    ran: bool
    passed: bool | None
    message: str
    norm_factor: float = 1.0
    numbers: str = ""


def _rcp_numbers(records: Sequence[logging.LogRecord]) -> str:
    """The numbers behind an RCP verdict, from the checker's own log records: the
    submission's mean samples to converge (fastest and slowest run dropped), the RCP's mean
    and the bound below which it fails (RCP mean / max speedup); "" if not logged."""
    rcp, mean = None, None
    for record in records:
        text = str(record.msg)
        if "RCP Record" in text and isinstance(record.args, dict):
            rcp = record.args  # logging keeps a lone dict argument as the args
        elif "Submission mean epochs" in text and record.args:
            mean = record.args[0] if isinstance(record.args, tuple) else None
    try:
        rcp_mean, speedup = float(rcp["RCP Mean"]), float(rcp["Max Speedup"])
        return (f"samples to converge {float(mean):,.0f} (mean without the fastest and slowest "
                f"run), RCP mean {rcp_mean:,.0f} at batch {rcp.get('BS', '?')}, bound "
                f"{rcp_mean / speedup:,.0f} (RCP mean / max speedup {speedup:.4f})")
    except (TypeError, KeyError, ValueError, ZeroDivisionError):
        return ""


@functools.lru_cache(maxsize=None)
def rcp_batch_sizes(ruleset: str = DEFAULT_RULESET) -> tuple[int, ...]:
    """Batch sizes with a BERT reference convergence point in `ruleset` (empty if none);
    read once per ruleset and process (the package's RCP files do not change)."""
    try:
        from mlperf_logging.rcp_checker import rcp_checker
        with _captured(None):
            checker = rcp_checker.RCP_Checker(USAGE, ruleset, "bert", verbose=False)
        return tuple(sorted(int(r["BS"]) for r in checker.rcp_data.values()))
    except Exception:  # noqa: BLE001 - no RCPs for this ruleset
        return ()


def reduced_size(parsed: ParsedLog) -> int:
    """The bytes `_write_reduced` writes for `parsed`."""
    if not parsed.mllog_lines:
        return 1
    return parsed.mllog_lines[-1] + sum(len(text) for text in parsed.mllog_texts)


def over_copy_limit(logs: Sequence[ParsedLog]) -> str | None:
    """Why reduced copies of `logs` are not written (None: they may be): together they would
    take more than MAX_COPY_BYTES."""
    total = sum(reduced_size(parsed) for parsed in logs)
    if total <= MAX_COPY_BYTES:
        return None
    return (f"the copies of the logs the official tools read would take {size_words(total)}, "
            f"over the limit of {size_words(MAX_COPY_BYTES)}")


def _write_reduced(parsed: ParsedLog, dest: Path) -> None:
    """Write `parsed` to `dest` as the official tools read it: every `:::MLLOG` line from its
    last token on, every other line empty, so line numbers stay and the tools' per-line
    regex (`re.sub(".*:::MLLOG", ...)`, slow on long lines) has little to scan."""
    lines: list[str] = []
    for line, text in zip(parsed.mllog_lines, parsed.mllog_texts):
        lines.extend([""] * (line - 1 - len(lines)))
        lines.append(text)
    dest.write_text("\n".join(lines) + "\n", encoding="latin-1", errors="replace")


class _OverLimit(Exception):
    """The copy for the package checker would exceed MAX_COPY_BYTES."""


class _TreeCopy:
    """Writes the copy of a submission tree the package checker reads (see the module
    docstring), counting its bytes against MAX_COPY_BYTES; the compliance verdict of each log
    is remembered by its new path."""

    def __init__(self, logs: Sequence[tuple[ParsedLog, bool]], limit: int = MAX_COPY_BYTES):
        self._logs = {parsed.path: (parsed, passed) for parsed, passed in logs}
        self.verdicts: dict[str, bool] = {}
        self.left = limit

    def _spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise _OverLimit

    def log(self, src: str, dest: Path) -> None:
        """A result log, reduced, if it was read; a log not read (refused, unreadable) is left
        out (its own line says why; the package checker then counts one file fewer)."""
        known = self._logs.get(src)
        if known is None:
            return
        self._spend(reduced_size(known[0]))
        _write_reduced(known[0], dest)
        self.verdicts[str(dest.resolve())] = known[1]

    def small(self, src: Path, dest: Path) -> None:
        """A package_checker_params, if it is a regular file of at most 1 MiB."""
        try:
            data = read_regular(src, MAX_SMALL_FILE_BYTES)
        except (OSError, RefusedFile):
            return
        self._spend(len(data))
        dest.write_bytes(data)

    def text(self, dest: Path, text: str) -> None:
        data = text.encode("utf-8")
        self._spend(len(data))
        dest.write_bytes(data)

    @staticmethod
    def power(src: Path, dest: Path) -> None:
        """The names under power/ (power/<run>/node_N.txt, sw_N.txt), as empty files: the
        power checker reads names, not contents."""
        try:
            runs = sorted(os.scandir(src), key=lambda e: e.name)[:MAX_POWER_ENTRIES]
        except OSError:
            return
        dest.mkdir()
        count = len(runs)
        for run in runs:
            if not run.is_dir(follow_symlinks=False):
                (dest / run.name).write_bytes(b"")
                continue
            (dest / run.name).mkdir()
            try:
                names = sorted(e.name for e in os.scandir(run.path))
            except OSError:
                continue
            for name in names[:max(0, MAX_POWER_ENTRIES - count)]:
                (dest / run.name / name).write_bytes(b"")
            count += len(names)


def _copy_for_package_checker(org: Path, tree: Path,
                              folders: Sequence[tuple[str, Sequence[str]]],
                              systems: dict[str, dict], copier: _TreeCopy) -> None:
    """Write the copy at `tree`: results/<system>/bert/ of each (folder, result files) of
    `folders` (paths under `org`), the system-level and folder-level package_checker_params,
    power/ names, and systems/<name>.json of each parsed description in `systems`."""
    (tree / "results").mkdir(parents=True)
    for folder, results in folders:
        relative = Path(folder).relative_to(org)
        system_src, system_dst = org / relative.parent, tree / relative.parent
        if not system_dst.is_dir():
            system_dst.mkdir(parents=True)
            copier.small(system_src / PARAMS_FILE, system_dst / PARAMS_FILE)
        dest = tree / relative
        dest.mkdir()
        for path in results:
            copier.log(path, dest / Path(path).name)
        copier.small(Path(folder) / PARAMS_FILE, dest / PARAMS_FILE)
        if (Path(folder) / "power").is_dir() and not (Path(folder) / "power").is_symlink():
            copier.power(Path(folder) / "power", dest / "power")
    (tree / "systems").mkdir()
    for name, contents in systems.items():
        copier.text(tree / "systems" / name, json.dumps(contents))


SEED_BYPASS = "seed-checker-bypass"  # a line of package_checker_params the package checker reads
PARAMS_FILE = "package_checker_params"


def _seedless_folders_pass(org_dir: str, tree: Path,
                           logs: Sequence[tuple[ParsedLog, bool]]) -> list[str]:
    """Give the package checker the round's seed leniency on the copy at `tree` of
    `org_dir`: in each result folder of `logs` where no run logs a seed (and no params file
    exists), a package_checker_params asking it to skip the seed check. Returns those
    folders."""
    folders: dict[Path, bool] = {}
    for parsed, _ in logs:
        folder = Path(parsed.path).parent
        seeded = any(r.key == k.SEED for r in parsed.records)
        folders[folder] = folders.get(folder, False) or seeded
    bypassed = []
    for folder, seeded in folders.items():
        try:
            relative = folder.resolve().relative_to(Path(org_dir).resolve())
        except ValueError:
            continue
        params = tree / relative / PARAMS_FILE
        if not seeded and params.parent.is_dir() and not params.exists():
            params.write_text(SEED_BYPASS)  # no newline: the checker compares whole lines
            bypassed.append(str(folder))
    return bypassed


def run_rcp(folder: str, batch_size: int | None, logs: Sequence[ParsedLog],
            ruleset: str = DEFAULT_RULESET, train_samples: bool = True) -> RcpOutcome:
    """Run the RCP check on the runs `logs` of `folder` if `batch_size` has RCPs.

    The batch size has RCPs when the ruleset has a record for it or it lies between two
    records (the checker interpolates). train_samples: read each run's samples to converge
    from its train_samples record, the BERT mode the training rules define for the package
    checker (--rcp-bert-train-samples); else from the last eval's epoch_num. The checker
    runs on reduced copies of the logs (`_write_reduced`) in a temporary folder; nothing is
    written into `folder`.
    """
    sizes = rcp_batch_sizes(ruleset)
    if not sizes:
        return RcpOutcome(False, None, f"ruleset {ruleset} has no BERT RCPs")
    if batch_size is None:
        return RcpOutcome(False, None, "no usable global_batch_size in the logs")
    if batch_size not in sizes and not sizes[0] < batch_size < sizes[-1]:
        listed = ", ".join(str(s) for s in sizes)
        return RcpOutcome(False, None, f"no RCP for global_batch_size {batch_size} "
                                       f"(RCPs: {listed})")
    try:
        from mlperf_logging.rcp_checker import rcp_checker
        mlperf_logging.guard_engine()
        too_big = over_copy_limit(logs)
        if too_big:
            return RcpOutcome(True, False, f"not run: {too_big}")
        with scratch_dir("bert-rcp") as tmp, _captured(logging.INFO) as log:
            for parsed in logs:
                _write_reduced(parsed, Path(tmp) / Path(parsed.path).name)
            passed, message, norm = rcp_checker.check_directory(
                tmp, USAGE, ruleset, False, train_samples, rcp_pass="pruned_rcps",
                rcp_bypass=False, set_scaling=False)
    except Exception as exc:  # noqa: BLE001 - it reads the logs with bare json.loads
        return RcpOutcome(True, False, f"the RCP checker stopped with {_describe(exc)}")
    source = "train_samples" if train_samples else "the evals' epoch_num"
    return RcpOutcome(True, bool(passed), f"{message}; samples to converge from {source}",
                      float(norm), _rcp_numbers(log.records))


# --------------------------------------------------------------------------------------------
# System description and package checkers

# The fields mlperf_logging's system_desc_checker requires of systems/<system>.json.
SYSTEM_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes",
    "host_processors_per_node", "host_processor_model_name", "host_processor_core_count",
    "host_processor_vcpu_count", "host_processor_frequency", "host_processor_caches",
    "host_processor_interconnect", "host_memory_capacity", "host_storage_type",
    "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity",
    "accelerator_interconnect", "accelerator_interconnect_topology", "cooling", "hw_notes",
    "framework", "other_software_stack", "operating_system", "sw_notes")


def _round_status(contents: dict, ruleset: str) -> tuple[str, str] | None:
    """(status, the installed checker's name for it) when a system description's `contents`
    has a status the round's checker accepted but the installed one refuses
    (`Ruleset.status_aliases`); None otherwise."""
    aliases = dict(ruleset_facts(ruleset).status_aliases)
    status = contents.get("status")
    canonical = aliases.get(status.lower()) if aliases and isinstance(status, str) else None
    return (status, canonical) if canonical and canonical != status else None


def _with_round_status(contents: dict, shown: str, ruleset: str) -> tuple[dict, Problem | None]:
    """`contents` with a status the round accepted in the installed checker's words
    (`_round_status`), and the warning that says so (None when nothing changed)."""
    found = _round_status(contents, ruleset)
    if found is None:
        return contents, None
    return {**contents, "status": found[1]}, Problem(shown, 0, "official/system-desc", (
        f"status {found[0]!r}: the {ruleset} round's system-description checker accepted it "
        f"(as {found[1]!r}); mlperf_logging 4.1 and later take only the canonical names"),
        WARNING)


def system_description_problems(json_path: str, contents: dict,
                                ruleset: str = DEFAULT_RULESET) -> list[Problem]:
    """The system-description checker's complaints about one systems/<system>.json.

    contents: the file as already read and checked (`benchmark.submission`): the official
    checker reads a copy of it, never the user's file. A status the round's checker accepted
    is checked under the installed checker's name for it, with a warning.
    """
    notes: list[Problem] = []
    try:
        from mlperf_logging.system_desc_checker import system_desc_checker
        with scratch_dir("bert-system") as tmp, _captured(logging.ERROR) as log:
            checked = Path(tmp) / "system.json"
            contents, note = _with_round_status(contents, json_path, ruleset)
            notes = [note] if note else []
            checked.write_text(json.dumps(contents))
            valid, *_ = system_desc_checker.check_system_desc(str(checked), USAGE, ruleset)
    except Exception as exc:  # noqa: BLE001
        return [Problem(json_path, 0, "official/system-desc",
                        f"the system description checker stopped with {_describe(exc)}")]
    if valid:
        return notes
    problems = notes
    for record in log.records:
        if record.levelno >= logging.ERROR and isinstance(record.args, tuple) \
                and len(record.args) == 2 and isinstance(record.args[1], list):
            problems.extend(Problem(json_path, 0, "official/system-desc", _one_line(reason))
                            for reason in record.args[1])
    return problems or [Problem(json_path, 0, "official/system-desc",
                                "the system description checker failed")]


@dataclass
class PackageOutcome:
    """The package checker's verdict on a submission tree.

    passed: it reported no errors and did not crash.
    problems: its error messages (rule "package/checker").
    """
    passed: bool
    problems: list[Problem] = field(default_factory=list)


def run_package_checker(org_dir: str, folders: Sequence[tuple[str, Sequence[str]]],
                        systems: dict[str, dict],
                        logs: Sequence[tuple[ParsedLog, bool]] = (),
                        ruleset: str = DEFAULT_RULESET) -> PackageOutcome:
    """Run the package checker on a copy of `org_dir` holding only what it reads.

    folders: (results/<system>/bert folder, its result_*.txt paths), as checked.
    systems: systems/<name>.json file name -> the description as read and checked.
    logs: (log, compliance verdict) for the result files already checked (`run_compliance`,
        the round's verdict); they are copied reduced and not run through the compliance
        engine a second time. A result file not among them is left out.
    The RCP test runs with its bypass set here: each result folder gets it from `run_rcp`,
    in the reading of the samples the submitter may choose, which the package checker
    fixes for a whole tree.
    """
    shown = org_dir.rstrip("/") or org_dir
    with scratch_dir("bert-check") as tmp:
        tree = Path(tmp) / (Path(shown).name or "submission")
        copier = _TreeCopy(logs)
        notes = []
        for name in systems:
            systems[name], note = _with_round_status(systems[name],
                                                     str(Path(shown) / "systems" / name), ruleset)
            notes += [note] if note else []
        try:
            _copy_for_package_checker(Path(org_dir), tree, folders, systems, copier)
        except _OverLimit:
            return PackageOutcome(False, [Problem(
                shown, 0, "package/checker",
                f"package checker not run: the copy of the tree it reads would take more than "
                f"{size_words(MAX_COPY_BYTES)}")])
        except OSError as exc:
            return PackageOutcome(False, [Problem(shown, 0, "package/checker",
                                                  f"cannot copy the tree: {_one_line(exc)}")])
        try:
            from mlperf_logging.compliance_checker import mlp_compliance
            from mlperf_logging.package_checker import package_checker
        except Exception as exc:  # noqa: BLE001
            return PackageOutcome(False, [Problem(
                shown, 0, "package/checker",
                f"cannot import mlperf_logging's package checker: {_one_line(exc)}")])
        if ruleset_facts(ruleset).seedless_folders_pass:
            notes += [Problem(folder, 0, "package/checker", (
                f"no run logs a seed: the {ruleset} round's seed checker passed such a folder "
                "(mlperf_logging 4.x fails it)"), WARNING)
                for folder in _seedless_folders_pass(org_dir, tree, logs)]
        mlperf_logging.guard_engine()
        mlp_compliance.enqueued_configs.clear()
        try:
            with _captured() as log, mlperf_logging.known_compliance(copier.verdicts):
                package_checker.check_training_package(
                    str(tree), USAGE, ruleset, True, False, True, True, False,
                    str(Path(tmp) / "package_checker.log"))
            crashed = None
        except Exception as exc:  # noqa: BLE001 - it raises on missing or invalid files
            crashed = exc
        finally:
            mlp_compliance.enqueued_configs.clear()
        if crashed is not None:
            text = _describe(crashed).replace(str(tree), shown)
            return PackageOutcome(False, [Problem(
                shown, 0, "package/checker", f"the package checker stopped with {text}")])
        problems = []
        success = False
        for record in log.records:
            text = _message(record).replace(str(tree), shown)
            if "FOUND NO ERRORS" in text:
                success = True
            if record.levelno >= logging.ERROR:
                problems.append(Problem(shown, 0, "package/checker", _one_line(text)))
        passed = success and not problems
        if not passed and not problems:
            problems.append(Problem(shown, 0, "package/checker", "the package checker failed"))
        return PackageOutcome(passed, problems + notes)
