"""`make bench` (data pipeline): our stages against the reference scripts, side by side.

    python -m devtools.bench_data --reference_dir=PATH/retired_benchmarks/bert/cleanup_scripts \\
        [--dump=SAMPLE.xml.bz2] [--dump_copies=4] \\
        [--text_dir=build/dataset/text] [--text_copies=8] [--text_only] \\
        [--part=build/dataset/results/part-00000-of-00500] [--part_copies=8] \\
        [--tfrecord_part=build/dataset/tfrecords/part-00000-of-00500] [--pack_copies=16] \\
        [--pack_only] [--output=build/bench/preprocess.md]

Both sides run as separate processes on the same inputs and flags on this machine; each is
measured from outside (wall seconds, CPU seconds, peak RSS from wait4). Outputs are compared
(text byte for byte, TFRecords by their decoded records) before a ratio is reported. The
reference's scripts are not part of this project: pass the folder of a checkout of the
MLCommons training repository. The text stages run on `--text_copies` copies of the extracted
files (as further XX/wiki_NN files), so that the cost per MB, not process start-up, dominates;
a copy repeats words that our sentence splitter has already memoised, which makes the later
copies somewhat cheaper for us than new text would be. The reference's TF1 scripts run under
`tensorflow.compat.v1`, and its sentence segmentation uses the installed NLTK with our vendored
Punkt parameters (so it is NLTK 3.10's speed, not 3.4.5's) unless `--reference_python` names
one with NLTK 3.4.5. Extraction is timed on `--dump_copies` copies of a dump's pages: the
reference's WikiExtractor 2.75 as the reference ran it (its own `main` and `process_dump` on the
plain XML, through `cleanup_scripts.text.wikiextractor_275` on this Python, or the original file
under `--extractor_python`, e.g. a Python 3.7), against ours on the same XML and on the same pages
as a multistream bz2 (decompression included), one process each, then ours on every core. Ends with
a projection of the whole `make preprocess DUMP=` of the official dump on larger machines.

Packing (`pack_pretraining_data`, which the reference lacks, so ours alone): the packer CLI
with one worker on `--pack_copies` and twice as many concatenated copies of `--tfrecord_part`
(by default the TFRecords of `--part`), measured from outside like the rest, and projected to
the 500 official parts on 32, 64 and 96 cores. `--pack_only` runs this bench alone (no
reference needed).
"""
from __future__ import annotations

import argparse
import bz2
import datetime
import glob
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmark import constants
from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, atomic_output, ensure_dir
from cleanup_scripts import PUNKT_ENGLISH_DIR, SAMPLE_DUMP, VOCAB_FILE
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.records.pretraining_features import count_records
from cleanup_scripts.records.tfrecord_digest import tfrecord_digest
from cleanup_scripts.text import dump_chunks, wikiextractor_275

PRETRAINING_FLAGS = ("--do_lower_case=True", f"--max_seq_length={constants.MAX_SEQ_LENGTH}",
                     f"--max_predictions_per_seq={constants.MAX_PREDICTIONS_PER_SEQ}",
                     f"--masked_lm_prob={constants.MASKED_LM_PROB}",
                     f"--random_seed={constants.PRETRAINING_RANDOM_SEED}",
                     f"--dupe_factor={constants.DUPE_FACTOR}")
# Runs a reference TF1 script with `tensorflow` bound to `tensorflow.compat.v1`.
_TF1_LAUNCHER = """import os, runpy, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow.compat.v1 as tf
sys.modules["tensorflow"] = tf
sys.path.insert(0, os.path.dirname(sys.argv[1]))
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""
# Runs WikiExtractor 2.75's own `main` (and so its own serial `process_dump`) on this Python,
# its clock fixed as ours is: argv[1] is the date, the rest its command line.
_ORIGINAL_EXTRACTOR = """import datetime, sys
from cleanup_scripts.text import wikiextractor_275
from cleanup_scripts.text.extract import PinnedClock
script = wikiextractor_275.load()
script.time = PinnedClock(datetime.datetime.fromisoformat(sys.argv[1]))
sys.argv = ["WikiExtractor.py"] + sys.argv[2:]
script.main()
"""
# The same for the original file under another Python (argv[1] the date, argv[2] the file).
_ORIGINAL_FILE_EXTRACTOR = """import runpy, sys, time
when = time.strptime(sys.argv[1], "%Y-%m-%d")
real = time.strftime
time.strftime = lambda fmt, t=None: real(fmt, when if t is None else t)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
# The reference decompresses the dump before extracting it (dataset.md: "downloaded and
# uncompressed"): one process, as bunzip2 does.
_BUNZIP2 = """import bz2, shutil, sys
with bz2.open(sys.argv[1]) as source, open("/dev/null", "wb") as sink:
    shutil.copyfileobj(source, sink, 1 << 20)
"""
PROJECTION_CORES = (32, 64, 96)
OFFICIAL_DUMP = "enwiki-20200101-pages-articles-multistream.xml"
OFFICIAL_PARTS = constants.GATHER_NUM_OUTPUTS
OFFICIAL_PART_MB = 27.0
# The official training TFRecords: 500 parts, 365 GB, 156.7 M sequences (~313,000 per part).
OFFICIAL_TFRECORD_MB = 365_000.0
OFFICIAL_SEQUENCES = 156.7e6


@dataclass
class Measurement:
    """One process tree's cost: wall and CPU seconds, and the peak RSS of its largest process."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float


def measure(commands: list[list[str]], cwd: str, env: dict | None = None) -> Measurement:
    """Run `commands` one after another; sum wall and CPU time, keep the largest peak RSS."""
    wall = cpu = peak = 0.0
    for command in commands:
        with tempfile.TemporaryFile() as stderr:
            started = time.perf_counter()
            process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                       stderr=stderr)
            _, status, usage = os.wait4(process.pid, 0)
            wall += time.perf_counter() - started
            if os.waitstatus_to_exitcode(status) != 0:
                stderr.seek(0)
                tail = stderr.read().decode(errors="replace")[-2000:]
                raise InputError(f"{' '.join(command[:3])}: failed:\n{tail}")
        cpu += usage.ru_utime + usage.ru_stime
        peak = max(peak, usage.ru_maxrss / 1024.0)
    return Measurement(wall, cpu, peak)


def tree_digest(root: Path, names: list[str]) -> str:
    """md5 over the bytes of `names` (relative to `root`), in order."""
    digest = hashlib.md5()
    for name in names:
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def copy_text_tree(text_dir: Path, target: Path, copies: int) -> list[str]:
    """Copy the extracted files of `text_dir` (XX/wiki_NN) `copies` times to target/text.

    Copy k > 0 of folder XX is named XX-k. Returns the written names relative to target/text,
    sorted.
    """
    names = sorted(str(Path(p).relative_to(text_dir))
                   for p in glob.glob(str(text_dir / "*" / "wiki_??")))
    if not names:
        raise InputError(f"{text_dir}: no extracted files (XX/wiki_NN); run make preprocess")
    written = []
    for copy in range(copies):
        for name in names:
            folder, leaf = name.split(os.sep)
            copied = Path(folder if copy == 0 else f"{folder}-{copy}") / leaf
            (target / "text" / copied).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(text_dir / name, target / "text" / copied)
            written.append(str(copied))
    return sorted(written)


def copied_dump(dump: Path, copies: int) -> bytes:
    """The XML of `dump` (.xml or .xml.bz2) with its pages `copies` times over, header and
    closing tag once."""
    data = dump.read_bytes()
    xml = bz2.decompress(data) if dump.suffix == ".bz2" else data
    header, pages, footer = dump_chunks.split_pages(xml)
    return header + b"".join(pages) * copies + footer


def bench_extraction(dump: Path, copies: int, work: Path, extractor_python: str | None
                     ) -> dict:
    """WikiExtractor 2.75 as the reference ran it vs ours, on `copies` copies of `dump`'s pages.

    Returns {"xml_mb", "bz2_mb": input sizes, "bunzip2": Measurement of decompressing the bz2
    form in one process (the reference extracts uncompressed XML), side: (Measurement, md5 of
    its output files)} for the sides "reference", "ours", "ours-bz2" (one process each) and
    "ours-bz2-all" (every core).
    """
    work.mkdir(parents=True)
    xml = copied_dump(dump, copies)
    xml_path, bz2_path = work / "dump.xml", work / "dump-multistream.xml.bz2"
    xml_path.write_bytes(xml)
    bz2_path.write_bytes(dump_chunks.multistream(xml, 100))
    date = constants.DUMP_DATE
    if extractor_python:
        original = [extractor_python, "-c", _ORIGINAL_FILE_EXTRACTOR, date,
                    str(wikiextractor_275.installed_script())]
    else:
        original = [sys.executable, "-c", _ORIGINAL_EXTRACTOR, date]
    ours = [sys.executable, "-m", "cleanup_scripts.text.extract", f"--date={date}"]
    commands = {
        "reference": original + [str(xml_path), "-o", "reference", "-q", "--processes", "1"],
        "ours": ours + [f"--input={xml_path}", "--output_dir=ours", "--processes=1"],
        "ours-bz2": ours + [f"--input={bz2_path}", "--output_dir=ours-bz2", "--processes=1"],
        "ours-bz2-all": ours + [f"--input={bz2_path}", "--output_dir=ours-bz2-all",
                                f"--processes={os.cpu_count()}"]}
    results: dict = {"xml_mb": len(xml) / 1e6, "bz2_mb": bz2_path.stat().st_size / 1e6}
    for side, command in commands.items():
        measured = measure([command], str(work))
        names = sorted(str(p.relative_to(work / side)) for p in (work / side).rglob("wiki_*"))
        results[side] = (measured, tree_digest(work / side, names))
    results["bunzip2"] = measure([[sys.executable, "-c", _BUNZIP2, str(bz2_path)]], str(work))
    return results


def reference_nltk_data(work: Path) -> str:
    """An NLTK data folder holding our vendored English Punkt tables for the reference."""
    folder = work / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    shutil.copytree(PUNKT_ENGLISH_DIR, folder)
    return str(work / "nltk_data")


def bench_text_stages(reference_dir: Path, text_dir: Path, work: Path, num_test_articles: int,
                      block_size: float, reference_python: str, reference_nltk: str | None,
                      copies: int) -> dict:
    """Reference cleanup→gather chain vs our process_wiki, one worker each, then ours on 2,
    on `copies` copies of the extracted files of `text_dir`.

    Returns {"input_mb": MB of extracted text, "parts_mb": MB of training parts made from it,
    side: (Measurement, md5 of its results/)}.
    """
    results = {}
    for side in ("reference", "ours-1", "ours-2"):
        root = work / side
        names = copy_text_tree(text_dir, root, copies)
        (root / "results").mkdir()
        pattern = "text/*/wiki_??"
        if side == "reference":
            env = dict(os.environ, NLTK_DATA=reference_nltk or reference_nltk_data(root))
            commands = [[reference_python, str(reference_dir / "cleanup_file.py"),
                         f"--data={pattern}", "--output_suffix=.1", "--nworker=1"]]
            commands += [["bash", str(reference_dir / "clean.sh"), f"text/{n}.1", f"text/{n}.2"]
                         for n in names]
            commands += [
                [reference_python, str(reference_dir / "do_sentence_segmentation.py"),
                 f"--data={pattern}", "--input_suffix=.2", "--output_suffix=.3", "--nworker=1"],
                [reference_python, str(reference_dir / "seperate_test_set.py"), f"--data={pattern}",
                 "--input_suffix=.3", "--output_suffix=.4", "--nworker=1",
                 f"--num_test_articles={num_test_articles}", "--test_output=results/eval"],
                [reference_python, str(reference_dir / "do_gather.py"), f"--data={pattern}",
                 "--input_suffix=.4", f"--block_size={block_size}", "--out_dir=results"]]
        else:
            env = None
            commands = [[sys.executable, "-m", "cleanup_scripts.process_wiki", pattern,
                         f"--num_test_articles={num_test_articles}", f"--block_size={block_size}",
                         "--results_dir=results", f"--nworker={side[-1]}"]]
        measured = measure(commands, str(root), env)
        outputs = sorted(p.name for p in (root / "results").iterdir())
        results[side] = (measured, tree_digest(root / "results", outputs))
    input_mb = sum(p.stat().st_size for p in (work / "ours-1" / "text").rglob("wiki_??")) / 1e6
    parts_mb = sum(p.stat().st_size for p in (work / "ours-1" / "results").glob("part-*")) / 1e6
    return {"input_mb": input_mb, "parts_mb": parts_mb, **results}


def bench_pretraining(reference_dir: Path, part: Path, copies: int, work: Path) -> dict:
    """Reference create_pretraining_data vs ours on `copies` and `2 * copies` concatenated
    copies of `part` (two sizes, so memory can be projected as fixed + per-MB cost).

    Returns {"sizes_mb": [small, large], side: ([Measurement small, large], digest of large)}.
    Every process is measured before any output is decoded: a child inherits the peak RSS of
    the process that starts it, so this one must stay small while it measures.
    """
    launcher = work / "tf1_launcher.py"
    launcher.write_text(_TF1_LAUNCHER)
    sources = []
    text = part.read_bytes()
    for count in (copies, 2 * copies):
        source = work / f"part-x{count}.txt"
        source.write_bytes(text * count)
        sources.append(source)
    measured: dict[str, list[Measurement]] = {"reference": [], "ours": []}
    for source in sources:
        for side in measured:
            flags = [f"--input_file={source}", f"--output_file={work / side}-{source.stem}",
                     f"--vocab_file={VOCAB_FILE}", *PRETRAINING_FLAGS]
            command = ([sys.executable, str(launcher),
                        str(reference_dir / "create_pretraining_data.py"), *flags]
                       if side == "reference" else
                       [sys.executable, "-m", "cleanup_scripts.create_pretraining_data", *flags])
            measured[side].append(measure([command], str(work)))
    results: dict = {"sizes_mb": [source.stat().st_size / 1e6 for source in sources]}
    for side, measurements in measured.items():
        results[side] = (measurements, tfrecord_digest(work / f"{side}-{sources[-1].stem}"))
    return results


def bench_packing(tfrecord_part: Path, copies: int, work: Path) -> dict:
    """Our packer (`pack_pretraining_data --nworker=1`) on `copies` and `2 * copies`
    concatenated copies of `tfrecord_part`. With one worker the packer works in its own
    process (a spawned worker would be counted too: wait4 includes waited-for children), so
    the peak RSS measured is the worker's.

    Returns {"sizes_mb": [small, large] input MB, "sequences": [small, large] records in,
    "rows": [small, large] packed rows out, "measured": [Measurement small, large]}. Each
    input is written one copy at a time: this process stays small while it measures.
    """
    data = tfrecord_part.read_bytes()
    records = count_records(tfrecord_part)
    results: dict = {"sizes_mb": [], "sequences": [], "rows": [], "measured": []}
    for count in (copies, 2 * copies):
        source, output = work / f"tfrecords-x{count}", work / f"packed-x{count}"
        with open(source, "wb") as out:
            for _ in range(count):
                out.write(data)
        command = [sys.executable, "-m", "cleanup_scripts.pack_pretraining_data",
                   f"--input_file={source}", f"--output_file={output}",
                   f"--max_seq_length={constants.MAX_SEQ_LENGTH}",
                   f"--max_predictions_per_seq={constants.MAX_PREDICTIONS_PER_SEQ}",
                   "--nworker=1"]
        results["measured"].append(measure([command], str(work)))
        results["sizes_mb"].append(len(data) * count / 1e6)
        results["sequences"].append(records * count)
        results["rows"].append(count_records(output))
    return results


def fitted_cpu_s(sizes_mb: list[float], measurements: list[Measurement]
                 ) -> tuple[float, float]:
    """(start-up CPU seconds, CPU seconds per MB) through two runs of measured sizes."""
    (small, large), (low, high) = sizes_mb, measurements
    per_mb = max(0.0, (high.cpu_s - low.cpu_s) / (large - small))
    return max(0.0, low.cpu_s - per_mb * small), per_mb


def project_rss_mb(sizes_mb: list[float], measurements: list[Measurement], part_mb: float
                   ) -> float:
    """Peak RSS of a `part_mb` part from two measured sizes: fixed cost + cost per MB."""
    (small, large), (low, high) = sizes_mb, measurements
    per_mb = max(0.0, (high.peak_rss_mb - low.peak_rss_mb) / (large - small))
    return high.peak_rss_mb + per_mb * (part_mb - large)


def side_row(stage: str, name: str, input_mb: float, m: Measurement) -> str:
    """A markdown row with one side's figures."""
    return (f"| {stage} | {name} | {input_mb:.1f} | {m.wall_s:.1f} | {m.cpu_s:.1f} | "
            f"{input_mb / m.cpu_s:.3f} | {m.peak_rss_mb:.0f} |")


def ratio_rows(stage: str, input_mb: float, reference: Measurement, ours: Measurement) -> list[str]:
    """Markdown rows: each side's figures and reference/ours ratios."""
    return [side_row(stage, "reference", input_mb, reference),
            side_row(stage, "ours", input_mb, ours),
            f"| {stage} | **ratio ref/ours** | | {reference.wall_s / ours.wall_s:.1f}x | "
            f"{reference.cpu_s / ours.cpu_s:.1f}x | {reference.cpu_s / ours.cpu_s:.1f}x | "
            f"1/{reference.peak_rss_mb / ours.peak_rss_mb:.1f} |"]


def projection_rows(label: str, extract_hours, text_cpu_s_per_mb: float, extracted_mb: float,
                    part_cpu_s_per_mb: float, part_rss_mb: float, memory_gb: float
                    ) -> list[str]:
    """Projected wall hours for the official dataset on each of PROJECTION_CORES cores.

    Extraction: `extract_hours(cores)`. Text stages: `extracted_mb` of extracted text at
    `text_cpu_s_per_mb`, spread over every core. create_pretraining_data: OFFICIAL_PARTS
    parts of OFFICIAL_PART_MB at `part_cpu_s_per_mb`, one part per core while memory allows
    (`memory_gb` per core, `part_rss_mb` per part).
    """
    rows = []
    for cores in PROJECTION_CORES:
        extract_h = extract_hours(cores)
        text_hours = extracted_mb * text_cpu_s_per_mb / cores / 3600
        parallel = max(1, min(cores, int(memory_gb * cores * 1024 // max(part_rss_mb, 1.0))))
        waves = -(-OFFICIAL_PARTS // parallel)
        part_hours = waves * OFFICIAL_PART_MB * part_cpu_s_per_mb / 3600
        rows.append(f"| {label} | {cores} | {extract_h:.2f} | {text_hours:.2f} | {parallel} | "
                    f"{parallel * part_rss_mb / 1024:.0f} | {part_hours:.2f} | "
                    f"{extract_h + text_hours + part_hours:.2f} |")
    return rows


def extraction_hours(extraction: dict) -> dict:
    """{side: function(cores) -> hours} extracting the official dump, from the measured CPU
    seconds per MB: ours on the multistream bz2 (decompression included) over every core; the
    reference decompressing the bz2 in one process, then extracting the XML with its cores - 1
    extraction processes (its single reading process is not modelled, which favours it)."""
    sizes = {artifact.path: artifact.size for artifact in checksums.known_artifacts().values()}
    xml_mb, bz2_mb = sizes[OFFICIAL_DUMP] / 1e6, sizes[OFFICIAL_DUMP + ".bz2"] / 1e6
    ours_per_mb = extraction["ours-bz2"][0].cpu_s / extraction["xml_mb"]
    reference_per_mb = extraction["reference"][0].cpu_s / extraction["xml_mb"]
    bunzip2_h = bz2_mb * extraction["bunzip2"].cpu_s / extraction["bz2_mb"] / 3600
    return {"ours": lambda cores: xml_mb * ours_per_mb / cores / 3600,
            "reference": lambda cores: bunzip2_h + xml_mb * reference_per_mb /
            max(1, cores - 1) / 3600}


def projection_lines(extraction: dict, text: dict, pre: dict, memory_gb_per_core: float
                     ) -> list[str]:
    """Markdown: the whole `make preprocess DUMP=` of the official dump (extraction, the text
    stages, then create_pretraining_data for every part) projected from the measured CPU
    seconds per MB and peak RSS of both sides."""
    extracted_mb = OFFICIAL_PARTS * OFFICIAL_PART_MB * text["input_mb"] / text["parts_mb"]
    large_mb = pre["sizes_mb"][-1]
    hours = extraction_hours(extraction)
    lines = [
        f"## Projection: the official dump to all {OFFICIAL_PARTS} parts of "
        f"{OFFICIAL_PART_MB:.0f} MB", "",
        f"Extraction of {OFFICIAL_DUMP} (see `extraction_hours`); text stages on "
        f"{extracted_mb / 1000:.1f} GB of extracted text (the measured ratio of extracted text "
        "to parts), spread over all cores; then create_pretraining_data one part per core while "
        f"{memory_gb_per_core:.0f} GB per core allows, a part's peak RSS being the fixed plus "
        f"per-MB cost fitted to runs on {pre['sizes_mb'][0]:.1f} and {large_mb:.1f} MB.", "",
        "| side | cores | extract h | text stages h | parts at once | their memory GB | "
        "create_pretraining_data h | total h |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, text_side in (("reference", "reference"), ("ours", "ours-1")):
        measured = pre[label][0]
        part_rss = project_rss_mb(pre["sizes_mb"], measured, OFFICIAL_PART_MB)
        lines += projection_rows(f"{label} ({part_rss / 1024:.2f} GB per part)", hours[label],
                                 text[text_side][0].cpu_s / text["input_mb"], extracted_mb,
                                 measured[-1].cpu_s / large_mb, part_rss, memory_gb_per_core)
    return lines


def packing_report_lines(pack: dict, copies: int, memory_gb_per_core: float) -> list[str]:
    """Markdown for packing: the measured rows (ours only), then the projection to the 500
    official parts, memory per worker bounded by the largest input file."""
    rows = []
    for count, size_mb, sequences, m in zip((copies, 2 * copies), pack["sizes_mb"],
                                            pack["sequences"], pack["measured"]):
        rows.append(f"| pack, {count} x the part | ours, 1 worker | {size_mb:.1f} | "
                    f"{sequences:,} | {m.wall_s:.1f} | {m.cpu_s:.1f} | {size_mb / m.cpu_s:.2f} | "
                    f"{sequences / m.cpu_s:,.0f} | {m.peak_rss_mb:.0f} |")
    return [
        "Packing (`pack_pretraining_data --nworker=1`; the reference has no packer, so no "
        f"reference column): {pack['sequences'][-1]:,} sequences -> {pack['rows'][-1]:,} rows "
        f"({pack['sequences'][-1] / pack['rows'][-1]:.3f} per row).", "",
        "| stage | side | input MB | sequences | wall s | CPU s | MB/s per core | "
        "sequences/s per core | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|", *rows, "",
        *packing_projection_lines(pack, memory_gb_per_core)]


def packing_projection_lines(pack: dict, memory_gb_per_core: float) -> list[str]:
    """Markdown: packing the official TFRecords (OFFICIAL_PARTS parts, OFFICIAL_TFRECORD_MB)
    on each of PROJECTION_CORES cores: start-up and CPU seconds per MB, and a worker's peak
    RSS, fitted to the two measured sizes; one part per core while `memory_gb_per_core`
    allows."""
    part_mb = OFFICIAL_TFRECORD_MB / OFFICIAL_PARTS
    start_cpu, cpu_per_mb = fitted_cpu_s(pack["sizes_mb"], pack["measured"])
    part_rss = project_rss_mb(pack["sizes_mb"], pack["measured"], part_mb)
    lines = [
        f"Projection: packing all {OFFICIAL_PARTS} official parts "
        f"({OFFICIAL_TFRECORD_MB / 1000:.0f} GB of TFRecords, "
        f"{OFFICIAL_SEQUENCES / 1e6:.1f} M sequences; {part_mb:.0f} MB and about "
        f"{OFFICIAL_SEQUENCES / OFFICIAL_PARTS:,.0f} sequences per part), CPU time only (the "
        "two reads of the inputs and the writes are not modelled), fitted to the two runs: "
        f"{start_cpu:.1f} CPU-s of start-up (TensorFlow's import, once per worker), "
        f"then {cpu_per_mb:.4f} CPU-s per MB ({1 / max(cpu_per_mb, 1e-9):.0f} MB/s per core). "
        "Memory per worker is bounded by the largest input file, never by the data set: a "
        "worker holds one file's sequences as token arrays (about 0.4 GB for a 313,000-record "
        "part) besides TensorFlow's import and its parsing buffers; the fixed plus per-MB "
        f"peak RSS of the two runs gives {part_rss / 1024:.2f} GB for a {part_mb:.0f} MB part. "
        f"{memory_gb_per_core:.0f} GB per core assumed.", "",
        "| cores | parts at once | their memory GB | pack h |", "|---:|---:|---:|---:|"]
    for cores in PROJECTION_CORES:
        parallel = max(1, min(cores, int(memory_gb_per_core * cores * 1024 // part_rss)))
        waves = -(-OFFICIAL_PARTS // parallel)
        hours = (start_cpu + waves * part_mb * cpu_per_mb) / 3600  # one pool, both passes
        lines.append(f"| {cores} | {parallel} | {parallel * part_rss / 1024:.0f} | "
                     f"{hours:.2f} |")
    return lines + [""]


def extraction_report_lines(extraction: dict, copies: int) -> list[str]:
    """Markdown for extraction: identity of the outputs, the table, our scaling."""
    digests = {extraction[side][1] for side in ("reference", "ours", "ours-bz2", "ours-bz2-all")}
    if len(digests) != 1:
        raise InputError("extract: our text differs from WikiExtractor 2.75's")
    xml_mb = extraction["xml_mb"]
    one, every = extraction["ours-bz2"][0], extraction["ours-bz2-all"][0]
    return [
        f"Extraction: text identical on all sides. Input: {copies} copies of the dump's pages, "
        f"{xml_mb:.1f} MB of XML ({extraction['bz2_mb']:.1f} MB as multistream bz2).", "",
        "| stage | side | input MB | wall s | CPU s | MB per CPU-s | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|",
        *ratio_rows("extract (XML)", xml_mb, extraction["reference"][0],
                    extraction["ours"][0]),
        side_row("extract (multistream bz2)", "ours", xml_mb, one),
        side_row("extract (multistream bz2)", f"ours, {os.cpu_count()} processes", xml_mb,
                 every),
        side_row("bunzip2 (the reference's first step)", "reference", xml_mb,
                 extraction["bunzip2"]), "",
        f"Scaling of our extraction from 1 to {os.cpu_count()} processes: "
        f"{one.wall_s / every.wall_s:.2f}x wall.", ""]


def text_report_lines(text: dict, copies: int) -> list[str]:
    """Markdown for the text stages: identity of the outputs, the table, our 1-to-2 scaling."""
    if text["ours-1"][1] != text["ours-2"][1]:
        raise InputError("text stages: our results differ between 1 and 2 workers")
    note = ("Text outputs identical on both sides." if text["ours-1"][1] ==
            text["reference"][1] else
            "Text outputs differ: the reference's segmentation ran under an NLTK other than "
            "3.4.5 (pass --reference_python with NLTK 3.4.5 for identical output).")
    one, two = text["ours-1"][0], text["ours-2"][0]
    return [
        f"{note} Input: {copies} copies of the extracted files, {text['input_mb']:.1f} MB.", "",
        "| stage | side | input MB | wall s | CPU s | MB per CPU-s | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|",
        *ratio_rows("clean+segment+separate+gather", text["input_mb"], text["reference"][0],
                    one),
        side_row("clean+segment+separate+gather", "ours, 2 workers", text["input_mb"], two), "",
        f"Scaling of our text stages from 1 to 2 workers: {one.wall_s / two.wall_s:.2f}x wall "
        f"(the reference and ours above: 1 worker each).", ""]


def pretraining_report_lines(pre: dict) -> list[str]:
    """Markdown for create_pretraining_data: identity of the records and the table."""
    if pre["ours"][1] != pre["reference"][1]:
        raise InputError("create_pretraining_data: our records differ from the reference's")
    ref_pre, ours_pre = pre["reference"][0][-1], pre["ours"][0][-1]
    large_mb = pre["sizes_mb"][-1]
    return [
        "TFRecords identical record for record.", "",
        "| stage | side | input MB | wall s | CPU s | MB per CPU-s | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|",
        *ratio_rows("create_pretraining_data", large_mb, ref_pre, ours_pre), ""]


def argument_parser() -> argparse.ArgumentParser:
    """The bench's flags."""
    parser = argparse.ArgumentParser(description="Data pipeline bench, ours vs the reference.")
    parser.add_argument("--reference_dir", default=None,
                        help="The reference's cleanup_scripts folder (from mlcommons/training); "
                             "needed unless --pack_only.")
    parser.add_argument("--reference_python", default=sys.executable,
                        help="Python for the reference's text scripts; one with NLTK 3.4.5 "
                             "(the dataset's version) makes their output identical to ours.")
    parser.add_argument("--reference_nltk_data", default=None,
                        help="NLTK_DATA for the reference (default: our Punkt tables in "
                             "punkt_tab form, which NLTK 3.10 reads).")
    parser.add_argument("--dump", default=str(SAMPLE_DUMP),
                        help="A dump (.xml or .xml.bz2) whose pages the extraction bench uses.")
    parser.add_argument("--dump_copies", type=int, default=4,
                        help="Copies of --dump's pages that extraction runs on.")
    parser.add_argument("--extractor_python", default=None,
                        help="Run the reference's WikiExtractor.py file under this Python "
                             "(e.g. a 3.7) instead of through our loader on this one.")
    parser.add_argument("--text_dir", default="build/dataset/text", help="Extracted text.")
    parser.add_argument("--text_copies", type=int, default=8,
                        help="Copies of --text_dir's files that the text stages run on.")
    parser.add_argument("--text_only", action="store_true",
                        help="Bench the text stages only (no create_pretraining_data, no "
                             "packing).")
    parser.add_argument("--part", default="build/dataset/results/part-00000-of-00500",
                        help="A text part for create_pretraining_data.")
    parser.add_argument("--part_copies", type=int, default=8,
                        help="Copies of --part concatenated into the pretraining input.")
    parser.add_argument("--tfrecord_part", default=None,
                        help="A TFRecord part for the packer (default: --part's, PART/../"
                             "tfrecords/NAME).")
    parser.add_argument("--pack_copies", type=int, default=16,
                        help="Copies of --tfrecord_part concatenated into the packer's input "
                             "(it also runs on twice as many).")
    parser.add_argument("--pack_only", action="store_true",
                        help="Bench the packer only (no reference needed).")
    parser.add_argument("--num_test_articles", type=int, default=20)
    parser.add_argument("--block_size", type=float, default=1.5)
    parser.add_argument("--memory_gb_per_core", type=float, default=4.0,
                        help="Memory per core assumed by the projection.")
    parser.add_argument("--output", default="build/bench/preprocess.md")
    return parser


def tfrecord_part_of(args: argparse.Namespace) -> Path:
    """The TFRecord part the packer runs on: --tfrecord_part, else the one --part became."""
    if args.tfrecord_part:
        return Path(args.tfrecord_part)
    part = Path(args.part)
    return part.parent.parent / "tfrecords" / part.name


def check_args(args: argparse.Namespace) -> None:
    """InputError (one line) for a missing input or a copy count below 1."""
    if args.text_copies < 1 or args.dump_copies < 1 or args.pack_copies < 1:
        raise InputError("--text_copies, --dump_copies and --pack_copies must be at least 1")
    if not (args.text_only or tfrecord_part_of(args).is_file()):
        raise InputError(f"{tfrecord_part_of(args)}: no such TFRecord part; run make "
                         "preprocess first")
    if args.pack_only:
        return
    if not args.reference_dir:
        raise InputError("--reference_dir: give the reference's cleanup_scripts folder (from "
                         "mlcommons/training), or --pack_only")
    if not (Path(args.reference_dir) / "create_pretraining_data.py").is_file():
        raise InputError(f"{args.reference_dir}: no create_pretraining_data.py (the "
                         "reference's cleanup_scripts folder is needed)")
    if not args.text_only and not Path(args.part).is_file():
        raise InputError(f"{args.part}: no such text part; run make preprocess first")


def report_lines(args: argparse.Namespace, work: Path) -> list[str]:
    """Run the benches `args` ask for in the scratch folder `work`; the report's markdown."""
    lines = [
        f"# Data pipeline bench, {datetime.date.today()} on {platform.node()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()})", ""]
    if not args.pack_only:
        reference_dir = Path(args.reference_dir)
        extraction = bench_extraction(Path(args.dump), args.dump_copies, work / "extract",
                                      args.extractor_python)
        text = bench_text_stages(reference_dir, Path(args.text_dir), work / "text",
                                 args.num_test_articles, args.block_size,
                                 args.reference_python, args.reference_nltk_data,
                                 args.text_copies)
        lines += [*extraction_report_lines(extraction, args.dump_copies),
                  *text_report_lines(text, args.text_copies)]
        if args.text_only:
            return lines
        pre = bench_pretraining(reference_dir, Path(args.part), args.part_copies, work)
        lines += [*pretraining_report_lines(pre),
                  *projection_lines(extraction, text, pre, args.memory_gb_per_core), ""]
    pack = bench_packing(tfrecord_part_of(args), args.pack_copies, ensure_dir(work / "pack"))
    return lines + packing_report_lines(pack, args.pack_copies, args.memory_gb_per_core)


def main(argv: list[str] | None = None) -> None:
    """CLI: run the benches (the text stages only with --text_only, the packer only with
    --pack_only); write the markdown report to --output and print it."""
    args = argument_parser().parse_args(argv)
    check_args(args)
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        report = "\n".join(report_lines(args, Path(scratch))) + "\n"
    ensure_dir(Path(args.output).parent)
    with atomic_output(args.output) as out:
        out.write(report)
    print(report)


if __name__ == "__main__":
    exit_on_user_error(main)
