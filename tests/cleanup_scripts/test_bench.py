"""The data bench's own arithmetic and inputs (the side-by-side run needs the reference)."""
from __future__ import annotations

import pytest

from cleanup_scripts import bench
from cleanup_scripts.bench import Measurement
from cleanup_scripts.fileio import InputError


def test_projection_is_limited_by_memory_per_core():
    # 2,600 MB per part with 4 GB per core: 32 cores hold 50 parts' worth, so all 32 run;
    # 20 GB per part: only 6 at once on 32 cores.
    rows = bench.projection_rows("x", text_cpu_s_per_mb=0.0, extracted_mb=0.0,
                                 part_cpu_s_per_mb=10.0, part_rss_mb=20_480.0, memory_gb=4.0)
    cells = rows[0].strip("|").split("|")
    assert [c.strip() for c in cells[:5]] == ["x", "32", "0.00", "6", "120"]
    waves = -(-bench.OFFICIAL_PARTS // 6)
    assert float(cells[5]) == pytest.approx(waves * bench.OFFICIAL_PART_MB * 10.0 / 3600, abs=0.01)


def test_projection_adds_text_stages_spread_over_all_cores():
    text = {"input_mb": 30.0, "parts_mb": 20.0, "reference": (Measurement(9, 9.0, 45), ""),
            "ours-1": (Measurement(1, 1.0, 45), "")}
    pre = {"sizes_mb": [10.0, 20.0],
           "reference": ([Measurement(20, 20.0, 1000), Measurement(40, 40.0, 1800)], ""),
           "ours": ([Measurement(2, 2.0, 80), Measurement(4, 4.0, 90)], "")}
    lines = bench.projection_lines(text, pre, memory_gb_per_core=4.0)
    ours_32 = next(line for line in lines if line.startswith("| ours") and "| 32 |" in line)
    cells = [c.strip() for c in ours_32.strip("|").split("|")]
    extracted_mb = bench.OFFICIAL_PARTS * bench.OFFICIAL_PART_MB * 1.5
    assert float(cells[2]) == pytest.approx(extracted_mb * (1.0 / 30.0) / 32 / 3600, abs=0.01)
    assert float(cells[6]) == pytest.approx(float(cells[2]) + float(cells[5]), abs=0.011)
    # The reference's part: 1,800 MB at 20 MB plus 80 MB per MB more: 2,360 MB.
    assert "reference (2.30 GB per part)" in "\n".join(lines)


def test_text_tree_is_copied_under_distinct_names(tmp_path):
    source = tmp_path / "text"
    (source / "AA").mkdir(parents=True)
    (source / "AA" / "wiki_00").write_text("a\n")
    (source / "AA" / "wiki_01").write_text("b\n")
    names = bench.copy_text_tree(source, tmp_path / "out", copies=3)
    assert names == ["AA-1/wiki_00", "AA-1/wiki_01", "AA-2/wiki_00", "AA-2/wiki_01",
                     "AA/wiki_00", "AA/wiki_01"]
    assert (tmp_path / "out" / "text" / "AA-2" / "wiki_01").read_text() == "b\n"


def test_missing_reference_folder_is_one_line_error(tmp_path):
    with pytest.raises(InputError, match="no create_pretraining_data.py"):
        bench.main([f"--reference_dir={tmp_path}", "--text_only"])
