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


def test_legend_labels_name_system_and_run_and_never_repeat():
    assert summary.run_labels(["t/results/sysA/bert/result_1.txt",
                               "t/results/sysB/bert/result_1.txt"]) == \
        ["sysA/result_1.txt", "sysB/result_1.txt"]
    assert summary.run_labels(["build/train/demo/mlperf.log", "build/smoke/train/mlperf.log"]) \
        == ["demo/mlperf.log", "train/mlperf.log"]
    labels = summary.run_labels(["build/train/demo/mlperf.log", "build/smoke/x/mlperf.log",
                                 "a/x/mlperf.log", "run.txt", "run.txt"])
    assert labels == ["demo/mlperf.log", "smoke/x/mlperf.log", "a/x/mlperf.log", "run.txt (1)",
                      "run.txt (2)"]


def test_plot_of_two_systems_has_distinct_labels_and_colours_and_shows_the_target(
        tmp_path, monkeypatch):
    import matplotlib.axes
    drawn, limits = [], []
    real_plot, real_ylim = matplotlib.axes.Axes.plot, matplotlib.axes.Axes.set_ylim
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda ax, *a, **kw: drawn.append(
        (kw["label"], kw["color"])) or real_plot(ax, *a, **kw))
    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylim", lambda ax, *a, **kw: (
        limits.append(a) if a and not kw else None) or real_ylim(ax, *a, **kw))
    valid = gallery.LOGS / "valid" / "closed_bs256.txt"
    paths = []
    for system in ("sysA", "sysB"):
        for run in (1, 2):
            path = tmp_path / "results" / system / "bert" / f"result_{run}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(valid.read_bytes())
            paths.append(str(path))
    out = tmp_path / "acc.png"
    assert summary.plot_runs([check_log(p) for p in paths], str(out)) == 4
    assert [label for label, _ in drawn] == ["sysA/result_1.txt", "sysA/result_2.txt",
                                            "sysB/result_1.txt", "sysB/result_2.txt"]
    assert len({colour for _, colour in drawn}) == 4
    [(bottom, top)] = limits
    assert 0.6 <= bottom < 0.70 and 0.72 < top <= 0.75  # the approach to 0.720 fills the plot
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_with_nothing_to_draw_is_one_line_and_writes_no_file(tmp_path):
    out = tmp_path / "acc.png"
    with pytest.raises(summary.PlotError, match="nothing to plot"):
        summary.plot_runs([check_log(str(gallery.LOGS / "broken" / "empty-file.txt"))],
                          str(out))
    assert list(tmp_path.iterdir()) == []
