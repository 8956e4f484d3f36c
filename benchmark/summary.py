"""The runs table, the olympic score, their text/JSON/CSV/markdown forms and the accuracy plot.

Minutes are wall-clock minutes from run_start to run_stop. A run is scored when it passed its
checks and converged (closed: an eval reached 0.720 and run_stop says success; open: run_stop
says success); any other run counts as infinitely slow. The olympic score drops the fastest and
the slowest run and averages the rest (8 of BERT's 10).
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from benchmark.errors import UserError, printable
from benchmark.log_check import LogReport
from benchmark.problems import count_errors

COLUMNS = ["run", "status", "minutes", "samples_to_converge", "final_accuracy", "evals",
           "errors", "scored"]


class PlotError(UserError):
    """The plot could not be made (matplotlib missing, file not writable)."""


def run_row(report: LogReport, scored: bool = True, name: str | None = None) -> dict:
    """One table row for a checked log.

    scored: False when the run is excluded from the score whatever it says (e.g. it failed
        its checks but was accepted under olympic scoring).
    name: how the run is shown (default: its path).
    """
    view = report.view
    name = name or report.path
    if view is None:
        return {"run": name, "status": "unreadable", "minutes": None,
                "samples_to_converge": None, "final_accuracy": None, "evals": 0,
                "errors": count_errors(report.problems), "scored": False}
    converged = view.reached_goal
    if view.division == "closed":
        samples = view.samples_to_converge if converged else None
    else:  # open division: its own target; the samples of its last eval
        samples = view.evals[-1].samples if converged and view.evals else None
    status = view.status if view.status is not None else (
        "no run_stop" if view.run_stop is None else "no status")
    return {"run": name, "status": status, "minutes": view.minutes,
            "samples_to_converge": samples,
            "final_accuracy": view.final_accuracy, "evals": len(view.evals),
            "errors": count_errors(report.problems),
            "scored": bool(scored and report.passed and converged
                           and view.minutes is not None)}


def runs_table(reports: Sequence[LogReport], scored: Sequence[bool] | None = None) -> pd.DataFrame:
    """The runs as a DataFrame with COLUMNS (one row per log, in the given order)."""
    flags = list(scored) if scored is not None else [True] * len(reports)
    parents = {str(Path(r.path).parent) for r in reports}
    names = [Path(r.path).name if len(parents) == 1 else r.path for r in reports]
    rows = [run_row(r, s, n) for r, s, n in zip(reports, flags, names)]
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["minutes"] = pd.to_numeric(table["minutes"], errors="coerce")
    table["final_accuracy"] = pd.to_numeric(table["final_accuracy"], errors="coerce")
    table["samples_to_converge"] = table["samples_to_converge"].astype("Int64")
    return table


@dataclass(frozen=True)
class Score:
    """The olympic score of a set of runs.

    minutes: mean minutes of the runs left after dropping the fastest and the slowest
        (None when there is no valid score).
    runs: runs in the set; counted: runs averaged; note: how it was computed or why not.
    """
    minutes: float | None
    runs: int
    counted: int
    note: str


def olympic_score(minutes: Sequence[float | None], scored: Sequence[bool]) -> Score:
    """Drop the fastest and slowest run, average the rest; unscored runs are infinitely slow.

    minutes: run_start -> run_stop of each run, in minutes.
    scored: whether each run counts (converged and passed its checks).
    """
    times = sorted(m if (ok and m is not None and math.isfinite(m)) else math.inf
                   for m, ok in zip(minutes, scored))
    n = len(times)
    if n < 3:
        return Score(None, n, 0, f"needs at least 3 runs (BERT: {10}); got {n}")
    kept = times[1:-1]
    if any(math.isinf(t) for t in kept):
        failed = sum(math.isinf(t) for t in times)
        return Score(None, n, 0, f"{failed} of {n} runs did not converge or failed their checks;"
                                 " at most one may")
    note = f"mean of {len(kept)} of {n} runs (fastest and slowest dropped)"
    if n != 10:
        note += "; BERT needs 10 runs"
    return Score(sum(kept) / len(kept), n, len(kept), note)


def table_score(table: pd.DataFrame) -> Score:
    """The olympic score of a runs table."""
    minutes = [None if pd.isna(m) else float(m) for m in table["minutes"]]
    return olympic_score(minutes, [bool(s) for s in table["scored"]])


def _markdown(table: pd.DataFrame) -> str:
    """A GitHub markdown table (no tabulate needed)."""
    cells = [[_cell(v) for v in row] for row in table.itertuples(index=False)]
    lines = ["| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, str):
        return value.replace("|", "\\|")
    if isinstance(value, float):
        return f"{value:.4f}" if value < 1 else f"{value:.2f}"
    return str(value)


def _printable_cells(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its text cells (run names, statuses: input) made `printable`."""
    shown = table.copy()
    for column in shown.columns:
        if shown[column].dtype == object:
            shown[column] = shown[column].map(lambda v: printable(v) if isinstance(v, str) else v)
    return shown


def render_table(table: pd.DataFrame, fmt: str) -> str:
    """The runs table as "text", "csv" or "markdown"; text cells escaped (`printable`)."""
    table = _printable_cells(table)
    if fmt == "csv":
        return table.to_csv(index=False).rstrip("\n")
    if fmt == "markdown":
        return _markdown(table)
    shown = table.copy()
    shown["minutes"] = shown["minutes"].map(lambda m: "" if pd.isna(m) else f"{m:.2f}")
    shown["final_accuracy"] = shown["final_accuracy"].map(
        lambda a: "" if pd.isna(a) else f"{a:.4f}")
    shown["samples_to_converge"] = shown["samples_to_converge"].map(
        lambda s: "" if pd.isna(s) else f"{int(s):,}")
    return shown.to_string(index=False)


def render_score(score: Score, decimals: int = 2) -> str:
    """One line: the olympic score (minutes to `decimals` places) or why there is none."""
    if score.minutes is None:
        return f"olympic score: none ({score.note})"
    return f"olympic score: {score.minutes:.{decimals}f} minutes ({score.note})"


def score_dict(score: Score) -> dict:
    """The score as a JSON-ready dict."""
    return asdict(score)


def plot_available() -> str | None:
    """None if --plot can work, else the one-line reason it cannot."""
    try:
        import matplotlib  # noqa: F401
    except Exception:  # noqa: BLE001
        return "--plot needs matplotlib, which is not installed in this environment"
    return None


def run_labels(paths: Sequence[str]) -> list[str]:
    """A distinct legend label per log path: "<system>/<file>" for a result tree's
    results/<system>/<benchmark>/<file>, else the file name; labels that still repeat take
    more of their folders until they differ (two `mlperf.log` become "demo/mlperf.log" and
    "smoke/mlperf.log")."""
    def label(path: str, more: int) -> str:
        parts = Path(path).parts
        at = len(parts) - 4
        if at >= 0 and parts[at] == "results" and not more:
            return f"{parts[at + 1]}/{parts[-1]}"
        return "/".join(parts[-1 - more:]) if more else parts[-1]

    depth = [0] * len(paths)
    labels = [label(path, 0) for path in paths]
    while len(set(labels)) < len(labels):
        repeated = {x for x in labels if labels.count(x) > 1}
        grown = False
        for i, path in enumerate(paths):
            if labels[i] in repeated and depth[i] + 1 < len(Path(path).parts):
                depth[i] += 1
                labels[i], grown = label(path, depth[i]), True
        if not grown:  # the same path more than once: number its copies
            seen: dict[str, int] = {}
            for i, x in enumerate(labels):
                if x in repeated:
                    seen[x] = seen.get(x, 0) + 1
                    labels[i] = f"{x} ({seen[x]})"
    return labels


def _y_range(accuracies: Sequence[float], targets: Sequence[float]) -> tuple[float, float]:
    """(bottom, top) of the accuracy axis: from 0.1 below the lowest target (or the lowest
    accuracy when that is higher) to just above the highest target and accuracy, so the
    approach to the target is not squashed by the first, low evals."""
    top = max([*accuracies, *targets]) + 0.01
    bottom = min(accuracies)
    if targets:
        bottom = max(bottom, min(targets) - 0.1)
    return max(0.0, bottom - 0.01), min(1.0, top)


def plot_runs(reports: Sequence[LogReport], out_path: str) -> int:
    """Save eval accuracy vs samples trained, one line per run (its system and file in the
    legend, a colour of its own), with each division's target line; returns the runs drawn.

    Raises PlotError (one-line message) if matplotlib is missing, no log has an eval to draw,
    or the file cannot be written; then no file is left at `out_path`.
    """
    reason = plot_available()
    if reason:
        raise PlotError(reason)
    curves = []
    for report in reports:
        points = [] if report.view is None else [
            (ev.samples, ev.accuracy) for ev in report.view.evals
            if ev.samples is not None and ev.accuracy is not None]
        if points:
            curves.append((report.path, points))
    if not curves:
        raise PlotError(f"nothing to plot: no log has an eval with its sample count; "
                        f"{out_path} not written")
    targets = sorted({(r.view.target, r.view.division) for r in reports
                      if r.view is not None and r.view.target is not None})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    colours = plt.get_cmap("tab10" if len(curves) <= 10 else "tab20" if len(curves) <= 20
                           else "turbo")
    try:
        for i, (label, (_, points)) in enumerate(zip(run_labels([c[0] for c in curves]),
                                                     curves)):
            xs, ys = zip(*points)
            colour = colours(i if len(curves) <= 20 else i / (len(curves) - 1))
            ax.plot([x / 1e6 for x in xs], ys, marker="o", markersize=3, linewidth=1.2,
                    color=colour, label=label)
        for target, division in targets:
            ax.axhline(target, color="black", linestyle="--" if division == "closed" else ":",
                       linewidth=1, label=f"{division} target {target:.3f}")
        ax.set_ylim(*_y_range([y for _, points in curves for _, y in points],
                              [t for t, _ in targets]))
        ax.set_xlabel("samples trained (millions of sequences)")
        ax.set_ylabel("masked-LM eval accuracy (fraction of masked tokens)")
        ax.set_title("BERT eval accuracy per run")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", ncol=2)
        fig.tight_layout()
        _save(fig, out_path)
    finally:
        plt.close(fig)
    return len(curves)


def _save(fig, out_path: str) -> None:
    """Write `fig` to `out_path` through a temporary file beside it, so that a failed write
    leaves no file; PlotError when it cannot be written."""
    folder, name = os.path.split(os.path.abspath(out_path))
    partial = os.path.join(folder, f".{name}.partial{os.path.splitext(name)[1]}")
    try:
        fig.savefig(partial)
        os.replace(partial, out_path)
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise PlotError(f"cannot write the plot to {out_path}: {exc}") from None
