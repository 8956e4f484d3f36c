"""The data bench's own arithmetic and inputs (the side-by-side run needs the reference)."""
from __future__ import annotations

import re

import pytest

from benchmark.files import InputError
from cleanup_scripts.create_pretraining_data import write_pretraining_data
from cleanup_scripts.records.pretraining_features import count_records
from devtools import bench_data as bench
from devtools.bench_data import Measurement


def test_projection_is_limited_by_memory_per_core():
    # 2,600 MB per part with 4 GB per core: 32 cores hold 50 parts' worth, so all 32 run;
    # 20 GB per part: only 6 at once on 32 cores.
    rows = bench.projection_rows("x", lambda cores: 0.0, text_cpu_s_per_mb=0.0,
                                 extracted_mb=0.0, part_cpu_s_per_mb=10.0,
                                 part_rss_mb=20_480.0, memory_gb=4.0)
    cells = rows[0].strip("|").split("|")
    assert [c.strip() for c in cells[:6]] == ["x", "32", "0.00", "0.00", "6", "120"]
    waves = -(-bench.OFFICIAL_PARTS // 6)
    assert float(cells[6]) == pytest.approx(waves * bench.OFFICIAL_PART_MB * 10.0 / 3600, abs=0.01)


EXTRACTION = {"xml_mb": 10.0, "bz2_mb": 2.5, "bunzip2": Measurement(1, 0.25, 10),
              "reference": (Measurement(40, 40.0, 30), ""), "ours": (Measurement(4, 4.0, 90), ""),
              "ours-bz2": (Measurement(5, 5.0, 90), ""),
              "ours-bz2-all": (Measurement(3, 5.5, 90), "")}


def test_extraction_projection_uses_the_official_dump_sizes():
    hours = bench.extraction_hours(EXTRACTION)
    xml_mb, bz2_mb = 75_163.254305, 17_751.214669  # checksums/sizes.tsv
    assert hours["ours"](64) == pytest.approx(xml_mb * 0.5 / 64 / 3600)
    # The reference: bunzip2 on one core (0.1 CPU-s per compressed MB), then 4 CPU-s per MB
    # over its 63 extraction processes.
    assert hours["reference"](64) == pytest.approx(bz2_mb * 0.1 / 3600 + xml_mb * 4.0 / 63 / 3600)


def test_projection_adds_text_stages_spread_over_all_cores():
    text = {"input_mb": 30.0, "parts_mb": 20.0, "reference": (Measurement(9, 9.0, 45), ""),
            "ours-1": (Measurement(1, 1.0, 45), "")}
    pre = {"sizes_mb": [10.0, 20.0],
           "reference": ([Measurement(20, 20.0, 1000), Measurement(40, 40.0, 1800)], ""),
           "ours": ([Measurement(2, 2.0, 80), Measurement(4, 4.0, 90)], "")}
    lines = bench.projection_lines(EXTRACTION, text, pre, memory_gb_per_core=4.0)
    ours_32 = next(line for line in lines if line.startswith("| ours") and "| 32 |" in line)
    cells = [c.strip() for c in ours_32.strip("|").split("|")]
    extracted_mb = bench.OFFICIAL_PARTS * bench.OFFICIAL_PART_MB * 1.5
    assert float(cells[2]) == pytest.approx(bench.extraction_hours(EXTRACTION)["ours"](32),
                                            abs=0.01)
    assert float(cells[3]) == pytest.approx(extracted_mb * (1.0 / 30.0) / 32 / 3600, abs=0.01)
    assert float(cells[7]) == pytest.approx(float(cells[2]) + float(cells[3]) + float(cells[6]),
                                            abs=0.011)
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


def test_extraction_bench_runs_the_original_beside_ours_with_identical_text(tmp_path):
    """The original WikiExtractor 2.75 (its own main and process_dump) and ours, measured."""
    result = bench.bench_extraction(bench.SAMPLE_DUMP, 1, tmp_path / "extract", None)
    sides = ("reference", "ours", "ours-bz2", "ours-bz2-all")
    assert len({result[side][1] for side in sides}) == 1
    assert all(result[side][0].cpu_s > 0 for side in sides)
    assert result["xml_mb"] == pytest.approx(6.09, abs=0.01)
    lines = bench.extraction_report_lines(result, 1)
    assert lines[0].startswith("Extraction: text identical on all sides.")


# ---- packing (ours only: the reference has no packer) -------------------------------------------

def test_packing_projection_fits_start_up_and_memory_and_spreads_parts_over_cores():
    pack = {"sizes_mb": [100.0, 200.0], "sequences": [40_000, 80_000], "rows": [30_000, 60_000],
            "measured": [Measurement(6, 6.0, 1000), Measurement(8, 8.0, 1200)]}
    # 4 CPU-s start-up + 0.02 CPU-s per MB; 1,200 MB + 2 MB per MB: 2,260 MB for 730 MB.
    assert bench.fitted_cpu_s(pack["sizes_mb"], pack["measured"]) == pytest.approx((4.0, 0.02))
    lines = bench.packing_projection_lines(pack, memory_gb_per_core=1.0)
    assert "2.21 GB for a 730 MB part" in lines[0]
    row_32 = next(line for line in lines if line.startswith("| 32 |"))
    parallel = 32 * 1024 // 2260  # 14 parts at once in 32 GB
    waves = -(-bench.OFFICIAL_PARTS // parallel)
    assert [cell.strip() for cell in row_32.strip("|").split("|")] == [
        "32", str(parallel), f"{parallel * 2260 / 1024:.0f}",
        f"{(4.0 + waves * 730 * 0.02) / 3600:.2f}"]  # one start-up per worker


def test_tfrecord_part_is_the_text_parts_and_a_missing_one_is_one_line(tmp_path):
    part = tmp_path / "results" / "part-00000-of-00500"
    missing = tmp_path / "tfrecords" / "part-00000-of-00500"
    with pytest.raises(InputError, match=re.escape(f"{missing}: no such TFRecord part; run "
                                                   "make preprocess first")):
        bench.main(["--pack_only", f"--part={part}"])
    with pytest.raises(InputError, match="--reference_dir: give the reference's"):
        bench.main(["--reference_dir=", "--text_only"])


def test_packing_bench_runs_the_packer_alone_and_reports_it(sample_results_dir, tmp_path):
    source = tmp_path / "tfrecords" / "part-00000-of-00500"
    source.parent.mkdir()
    write_pretraining_data([str(sample_results_dir / source.name)], [str(source)],
                           dupe_factor=1)
    records = count_records(source)
    output = tmp_path / "pack.md"
    bench.main(["--pack_only", f"--part={tmp_path / 'results' / source.name}",
                "--pack_copies=1", f"--output={output}"])
    report = output.read_text()
    assert "the reference has no packer" in report
    rows = [line for line in report.splitlines() if line.startswith("| pack, ")]
    assert [row.split("|")[4].strip() for row in rows] == [f"{records:,}", f"{2 * records:,}"]
    assert all(float(row.split("|")[9]) > 0 for row in rows)  # peak RSS MB
    assert "| 64 | " in report and "bounded by the largest input file" in report
