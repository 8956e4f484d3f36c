"""Small real corpora for pipeline tests, built deterministically from committed Wikipedia text."""
from __future__ import annotations

import random
from pathlib import Path

from cleanup_scripts.cleanup_file import strip_doc_markup
from cleanup_scripts.text.clean import clean_bytes

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WIKI_EXTRACTED_DIR = FIXTURES / "wiki-extracted"


def cleaned_bytes(extracted: Path) -> bytes:
    """An extracted file after cleanup_file and clean (the reference's `.2` file)."""
    with open(extracted, encoding="utf-8") as handle:
        stripped = "".join(strip_doc_markup(handle.readlines()))
    return clean_bytes(stripped.encode("utf-8"))


def cleaned_articles() -> list[str]:
    """The articles of the committed extracted files after cleanup and clean, in order."""
    text = "".join(cleaned_bytes(path).decode("utf-8")
                   for path in sorted(WIKI_EXTRACTED_DIR.glob("wiki_??")))
    return [article for article in text.split("\n\n") if article.strip()]


def build_text_tree(root: Path, num_files: int = 12, suffix: str = ".3", seed: int = 7) -> str:
    """Write `num_files` files of whole articles as root/text/XX/wiki_NN + suffix.

    Each also gets an "original" file root/text/XX/wiki_NN of a pseudo-random size (20-200 kB;
    its bytes are never read, only its size, as the gather stage uses it). Returns the glob of
    the originals, in the reference's `--data` form.
    """
    rng = random.Random(seed)
    articles = cleaned_articles()
    cuts = sorted(rng.sample(range(1, len(articles)), num_files - 1))
    bounds = [0, *cuts, len(articles)]
    for index in range(num_files):
        folder = root / "text" / ("AA", "AB")[index * 2 // num_files]
        folder.mkdir(parents=True, exist_ok=True)
        original = folder / f"wiki_{index:02d}"
        original.write_bytes(b"x" * rng.randint(20_000, 200_000))
        body = "\n\n".join(articles[bounds[index]:bounds[index + 1]]) + "\n\n"
        (folder / f"wiki_{index:02d}{suffix}").write_text(body, encoding="utf-8")
    return str(root / "text" / "*" / "wiki_??")
