"""Olympic score, the runs table in each format, and the plot."""
from __future__ import annotations

import math

import pytest

from benchmark import summary
from benchmark.log_check import check_log
from tests.benchmark import gallery


def test_olympic_score_drops_fastest_and_slowest():
    minutes = [50, 40, 60, 55, 45, 52, 48, 51, 49, 100]
    score = summary.olympic_score(minutes, [True] * 10)
    kept = sorted(minutes)[1:-1]
    assert score.minutes == pytest.approx(sum(kept) / 8) and score.counted == 8


def test_one_failed_run_is_the_dropped_slowest_two_are_no_score():
    minutes = [50.0] * 10
    one = summary.olympic_score(minutes, [False] + [True] * 9)
    assert one.minutes == pytest.approx(50.0)
    two = summary.olympic_score(minutes, [False, False] + [True] * 8)
    assert two.minutes is None and "2 of 10" in two.note


def test_too_few_runs_have_no_score():
    assert summary.olympic_score([1.0, 2.0], [True, True]).minutes is None
    assert summary.olympic_score([math.nan] * 3, [True] * 3).minutes is None


def reports():
    return [check_log(str(gallery.LOGS / name)) for name in
            ("valid/closed_bs256.txt", "broken/target-never-reached.txt", "broken/empty-file.txt")]


def test_table_columns_and_scoring():
    table = summary.runs_table(reports())
    assert list(table.columns) == summary.COLUMNS
    assert table["scored"].tolist() == [True, False, False]
    assert table["samples_to_converge"].iloc[0] == 2_700_000
    assert table["status"].tolist() == ["success", "aborted", "no run_stop"]
    assert table["minutes"].iloc[0] == pytest.approx(52.41, abs=0.01)


@pytest.mark.parametrize("fmt, marker", [("text", "samples_to_converge"),
                                         ("csv", "run,status,minutes"),
                                         ("markdown", "|---|")])
def test_table_formats(fmt, marker):
    assert marker in summary.render_table(summary.runs_table(reports()), fmt)


def test_plot_is_written(tmp_path):
    out = tmp_path / "accuracy.png"
    summary.plot_runs(reports(), str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_draws_each_runs_own_target(tmp_path, monkeypatch):
    """Closed runs: 0.720; an open run: the target_accuracy its log names (the demo's 0.10)."""
    import matplotlib.axes
    drawn = []
    real = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda ax, y, **kw: drawn.append((y, kw.get("label"))) or real(ax, y, **kw))
    text = (gallery.LOGS / gallery.OPEN).read_text()
    lines = text.splitlines()
    at = gallery.find(lines, "seed")
    lines.insert(at, gallery.render({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME",
                                     "key": "target_accuracy", "value": 0.10, "metadata": {}}))
    open_log = tmp_path / "open.txt"
    open_log.write_text("\n".join(lines) + "\n")
    summary.plot_runs(reports() + [check_log(str(open_log))], str(tmp_path / "a.png"))
    assert sorted(drawn) == [(0.1, "open target 0.100"), (0.72, "closed target 0.720")]


def test_plot_without_matplotlib_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setattr(summary, "plot_available", lambda: "--plot needs matplotlib, which "
                                                           "is not installed in this environment")
    with pytest.raises(summary.PlotError, match="needs matplotlib"):
        summary.plot_runs(reports(), str(tmp_path / "x.png"))


def test_unwritable_plot_is_a_plot_error(tmp_path):
    with pytest.raises(summary.PlotError):
        summary.plot_runs(reports(), str(tmp_path / "x.unknown-format"))
