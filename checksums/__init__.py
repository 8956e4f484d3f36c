"""The official md5 manifests and sizes of the benchmark's artifacts, as package data (this
folder's `*.md5` and `sizes.tsv`; README.md says what each holds).
`cleanup_scripts.artifacts.checksums` reads them; `md5sum -c` reads them without any code."""
from pathlib import Path

CHECKSUMS_DIR = Path(__file__).resolve().parent
