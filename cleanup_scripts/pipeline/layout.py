"""Where `make preprocess` puts every file, relative to its output directory."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.files import check_output_tree


@dataclass(frozen=True)
class DatasetLayout:
    """The output tree of the pipeline.

    text/XX/wiki_NN        extracted articles (the reference's layout)
    work/cleaned/...       after cleanup_file + clean.sh      (the reference's .2 files)
    work/sentences/...     one sentence per line              (.3)
    work/train/...         training articles only             (.4)
    results/               part-XXXXX-of-00500, eval.txt, eval.md5
    tfrecords/             part-XXXXX-of-00500, eval_intermediate, eval_10k
    tfrecords_packed/      part-XXXXX-of-00500, eval_10k packed (only with --pack)
    manifest.tsv           path, bytes and md5 of every output
    .state/                the lock, each stage's markers, the ledgers (`ledger`)
    download/              a dump given as a URL

    OUT itself may be a link (to another disk); nothing the pipeline makes inside may be one
    (`check_outputs`).
    """

    root: Path

    @property
    def download_dir(self) -> Path:
        return self.root / "download"

    @property
    def text_dir(self) -> Path:
        return self.root / "text"

    def work_dir(self, stage: str) -> Path:
        """Intermediate files of `stage` (cleaned, sentences or train), mirroring text/."""
        return self.root / "work" / stage

    @property
    def results_dir(self) -> Path:
        return self.root / "results"

    @property
    def tfrecord_dir(self) -> Path:
        return self.root / "tfrecords"

    @property
    def packed_dir(self) -> Path:
        return self.root / "tfrecords_packed"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.tsv"

    @property
    def state_dir(self) -> Path:
        return self.root / ".state"

    @property
    def manifest_record(self) -> Path:
        """The size, mtime and md5 of manifest.tsv as the manifest stage wrote it (`ledger`)."""
        return self.state_dir / "manifest.record"

    @property
    def results_md5s(self) -> Path:
        """The ledger of the md5s of the --results_text files (absent for a dump)."""
        return self.state_dir / "import_results.md5s"

    def check_outputs(self) -> None:
        """RefusedOutput, one line naming it, for a link or a file of the wrong kind where the
        pipeline writes, locks or deletes: its folders (or a link to a folder anywhere inside
        them), `.state`'s files, manifest.tsv (`benchmark.files.check_output_tree`). Only
        lstat() and scandir: run before anything is written."""
        folders = [self.state_dir, self.download_dir, self.text_dir, self.root / "work",
                   self.results_dir, self.tfrecord_dir, self.packed_dir]
        check_output_tree(self.root, files=[self.manifest.name],
                          folders=[str(folder.relative_to(self.root)) for folder in folders],
                          links=[f"{self.state_dir.name}/*"])

    def extracted_files(self) -> list[Path]:
        """The extracted files in the reference's order (sorted `text/*/wiki_??`)."""
        return sorted(self.text_dir.glob("*/wiki_??"), key=str)

    def mirror(self, extracted: Path, stage: str) -> Path:
        """The path of `extracted`'s counterpart in the work directory of `stage`."""
        return self.work_dir(stage) / extracted.relative_to(self.text_dir)

    def mirrors(self, stage: str) -> list[Path]:
        """The counterparts of every extracted file in the work directory of `stage`."""
        return [self.mirror(extracted, stage) for extracted in self.extracted_files()]

    def tfrecord_sources(self) -> list[tuple[Path, Path]]:
        """(text, TFRecord) pairs: each part of results/ and eval.txt (to eval_intermediate)."""
        texts = sorted(self.results_dir.glob("part-*")) + [self.results_dir / "eval.txt"]
        return [(text, self.tfrecord_dir / ("eval_intermediate" if text.name == "eval.txt"
                                            else text.name)) for text in texts]

    def packed_sources(self) -> list[tuple[Path, Path]]:
        """(TFRecord, packed TFRecord) pairs: each training part of tfrecords/, then eval_10k."""
        records = [target for _, target in self.tfrecord_sources()
                   if target.name != "eval_intermediate"] + [self.tfrecord_dir / "eval_10k"]
        return [(record, self.packed_dir / record.name) for record in records]
