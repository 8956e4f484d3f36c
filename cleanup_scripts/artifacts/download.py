"""Fetch the benchmark's official inputs and verify each md5 before it takes its name.

    python -m cleanup_scripts.artifacts.download --output_dir=DIR [--artifacts=config,vocab]
        [--source=r2|url] [--url NAME=URL ...] [--base_url=URL] [--from_dir=DIR]
        [--r2_downloader=PATH] [--decompress] [--retries=3] [--list]

Writes the reference's layout: `DIR/bert_config.json`, `DIR/vocab.txt`, `DIR/tf1_ckpt/…`,
`DIR/tf2_ckpt/…`, the dump (`--decompress` adds its `.xml`) and `DIR/results/`. Files come from
the MLCommons R2 bucket (`r2`, the default; behind a login, through its official downloader),
or a folder that downloader filled (`--from_dir`); `--url NAME=URL` and `--base_url` override
it per file (`transfer.fetch`).
"""
from __future__ import annotations

import argparse
import bz2
import time
from pathlib import Path
from typing import Iterator, Mapping

from tqdm import tqdm

from benchmark.errors import exit_on_user_error
from benchmark.files import InputError, ensure_dir, size_words
from cleanup_scripts.artifacts import checksums
from cleanup_scripts.artifacts import r2, verified, write_checked
from cleanup_scripts.artifacts.transfer import CHUNK_SIZE, fetch
from cleanup_scripts.pipeline.runner import StageSummary, report

DUMP_BZ2 = "enwiki-20200101-pages-articles-multistream.xml.bz2"
DUMP_XML = DUMP_BZ2.removesuffix(".bz2")
DEFAULT_ARTIFACTS = "config,vocab"


def artifact_groups(known: Mapping[str, checksums.Artifact] | None = None
                    ) -> dict[str, list[str]]:
    """Short names for sets of artifacts (`--artifacts=vocab,tf1_ckpt`); `all` is every input,
    `results` the results/ files `checksums/` knows (from R2: the whole official folder)."""
    known = checksums.known_artifacts() if known is None else known
    groups = {
        "config": ["bert_config.json"],
        "vocab": ["vocab.txt"],
        "tf1_ckpt": [path for path in known if path.startswith("tf1_ckpt/")],
        "tf2_ckpt": [path for path in known if path.startswith("tf2_ckpt/")],
        "dump": [DUMP_BZ2],
        "results": [path for path, a in known.items() if a.group == "results"],
    }
    groups["all"] = (groups["config"] + groups["vocab"] + groups["tf1_ckpt"]
                     + groups["tf2_ckpt"] + groups["dump"])
    return groups


def resolve_names(names: list[str], known: Mapping[str, checksums.Artifact] | None = None
                  ) -> list[str]:
    """Expand artifact paths and group names into artifact paths (in order, no repeats)."""
    known = checksums.known_artifacts() if known is None else known
    groups = artifact_groups(known)
    paths: list[str] = []
    for name in names:
        members = groups.get(name, [name] if name in known else None)
        if members is None:
            raise InputError(f"{name}: unknown artifact (known: {', '.join(groups)}, "
                             f"or a path such as tf1_ckpt/model.ckpt-28252.index)")
        paths.extend(path for path in members if path not in paths)
    return paths


def source_url(path: str, urls: dict[str, str], base_url: str | None) -> str:
    """Where to fetch artifact `path` other than the bucket: its --url, else BASE/path."""
    if path in urls:
        return urls[path]
    if base_url:
        return base_url.rstrip("/") + "/" + path
    raise InputError(f"{path}: no default source; give --url {path}=URL or --base_url")


def decompress_bz2(source: str | Path, dest: str | Path, expected_md5: str | None = None
                   ) -> str:
    """Stream-decompress a (multi-stream) .bz2 file to `dest`; return the output's md5.

    `dest` takes its name only complete and, if `expected_md5` is given, with it. A truncated,
    empty or non-bzip2 `source` is a one-line InputError and leaves no `dest`.
    """
    source = Path(source)
    try:
        size = source.stat().st_size
        handle = open(source, "rb")
    except OSError as err:
        raise InputError(f"{source}: cannot read ({err.strerror})") from err
    if size == 0:
        handle.close()
        raise InputError(f"{source}: empty file, not bzip2 data")

    def chunks(reader: bz2.BZ2File) -> Iterator[bytes]:
        try:
            yield from iter(lambda: reader.read(CHUNK_SIZE), b"")
        except EOFError as err:
            raise InputError(f"{source}: truncated bzip2 data (it ends before the "
                             f"end-of-stream marker)") from err
        except OSError as err:
            raise InputError(f"{source}: not valid bzip2 data ({err})") from err

    with tqdm.wrapattr(handle, "read", total=size, desc=f"bunzip2 {source.name}", leave=False,
                       disable=None) as counted, bz2.BZ2File(counted) as reader:
        return write_checked(chunks(reader), Path(dest), expected_md5,
                             f"decompressed from {source}")


def _parse_urls(pairs: list[str], known: Mapping[str, checksums.Artifact]) -> dict[str, str]:
    """{artifact path: URL} of the `--url NAME=URL` flags."""
    urls: dict[str, str] = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not url:
            raise InputError(f"--url {pair}: expected NAME=URL")
        paths = resolve_names([name], known)
        if len(paths) != 1:
            raise InputError(f"--url {pair}: {name} names {len(paths)} files; give one path")
        urls[paths[0]] = url
    return urls


def _total_words(paths: list[str], known: Mapping[str, checksums.Artifact]) -> str:
    """The bytes of artifacts `paths` together, in words ("size unknown" if one is)."""
    sizes = [known[path].size for path in paths]
    return "size unknown" if None in sizes else size_words(sum(sizes))


def _group_sizes() -> str:
    """Each artifact group with its download size, for the help text."""
    known = checksums.known_artifacts()
    sizes = {group: _total_words(paths, known) for group, paths in artifact_groups(known).items()}
    sizes["results"] = "the official results/ folder, 500 parts and the eval set, size unknown"
    return "; ".join(f"{group}: {words}" for group, words in sizes.items())


def _plan(paths: list[str], results: bool, known: Mapping[str, checksums.Artifact]) -> str:
    """The line printed before a download starts: how many files and how many bytes."""
    listed = [path for path in paths if not (results and path.startswith("results/"))]
    sized = [path for path in listed if known[path].size is not None]
    unknown = len(listed) - len(sized)
    more = (f" (+ {unknown} of unpublished size)" if unknown else "") + (
        " and the results/ folder (size not published)" if results else "")
    return f"downloading {len(listed)} file(s), {_total_words(sized, known)}{more}"


def _parser() -> argparse.ArgumentParser:
    """The command line's flags."""
    parser = argparse.ArgumentParser(
        prog="python -m cleanup_scripts.artifacts.download",
        description="Download the MLPerf BERT inputs and verify their official md5s.")
    parser.add_argument("--output_dir", required=True, help="Where the files are placed.")
    parser.add_argument("--artifacts", default=DEFAULT_ARTIFACTS,
                        help=f"Comma-separated paths or groups ({_group_sizes()}); default "
                        f"{DEFAULT_ARTIFACTS}, as make download; all = config, vocab, both "
                        f"checkpoints and the dump.")
    parser.add_argument("--source", choices=("r2", "url"), default="r2",
                        help="Where artifacts without --url/--base_url come from: the MLCommons "
                        "R2 bucket (default; it holds every file of the reference's old Google "
                        "Drive ids), or nowhere (url: every artifact needs --url or --base_url).")
    parser.add_argument("--url", action="append", default=[], metavar="NAME=URL",
                        help="Source of one artifact (http(s)://, file:// or a path); repeatable.")
    parser.add_argument("--base_url", default=None,
                        help="Fetch every artifact without --url from BASE_URL/<its path>.")
    parser.add_argument("--r2_downloader", default=None, metavar="PATH",
                        help=f"The official {r2.R2_DOWNLOADER} (mlcommons/r2-downloader) to get "
                        f"the R2 files with (it logs in); by default the one on PATH is run "
                        f"when the bucket asks for a login.")
    parser.add_argument("--from_dir", default=None, metavar="DIR",
                        help=f"Take the R2 files from a folder {r2.R2_DOWNLOADER} filled (its "
                        f"-d, or the folder holding its input_files/ and processed_dataset/) "
                        f"instead of downloading them.")
    parser.add_argument("--r2_metadata", default=r2.R2_METADATA_URL, metavar="URL",
                        help="Where the bucket's <dataset>.uri/.md5 metadata files are "
                        "(default: %(default)s).")
    parser.add_argument("--checksums_dir", default=None, metavar="DIR",
                        help="md5 tables to verify against, in the format of checksums/ "
                        "(default: the official ones in checksums/).")
    parser.add_argument("--decompress", action="store_true",
                        help="Also write the dump's .xml (streamed, md5-verified).")
    parser.add_argument("--retries", type=int, default=3,
                        help="Retries per file after a transient failure (each resumes).")
    parser.add_argument("--list", action="store_true",
                        help="Print each selected artifact and its source, then exit.")
    return parser


def _print_sources(sources: dict[str, str], request: r2.R2Request, args: argparse.Namespace
                   ) -> None:
    """`--list`: one line per artifact, its path and where it would come from."""
    origin = {name: args.from_dir or r2.dataset_uri(args.r2_metadata, name)
              for name in (r2.R2_INPUTS, r2.R2_PROCESSED)}
    lines = [f"{path}\t{url}" for path, url in sources.items()]
    lines += [f"{path}\t{origin[r2.R2_INPUTS]}" for path in request.inputs]
    if request.any_results:
        lines += [f"results/{name}\t{origin[r2.R2_PROCESSED]}"
                  for name in (["*"] if request.results is None else request.results)]
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    """CLI: download, verify and place the selected official artifacts."""
    args = _parser().parse_args(argv)
    if args.retries < 0:
        raise InputError(f"--retries={args.retries}: must be 0 or more")
    started = time.time()
    known = (checksums.known_artifacts(Path(args.checksums_dir)) if args.checksums_dir
             else checksums.known_artifacts())
    names = [name for name in args.artifacts.split(",") if name]
    paths = resolve_names(names, known)
    urls = _parse_urls(args.url, known)
    for flag, value in (("--from_dir", args.from_dir), ("--r2_downloader", args.r2_downloader)):
        if value and args.source != "r2":
            raise InputError(f"{flag} is for the R2 bucket; it does not go with "
                             f"--source={args.source}")
    from_r2 = [path for path in paths
               if args.source == "r2" and path not in urls and not args.base_url]
    sources = {path: source_url(path, urls, args.base_url)
               for path in paths if path not in from_r2}
    request = r2.r2_request(from_r2, names, known)
    if args.list:
        return _print_sources(sources, request, args)
    print(_plan(paths, request.any_results, known), flush=True)
    output_dir = ensure_dir(args.output_dir)
    for path, url in sources.items():
        fetch(url, output_dir / path, known[path].md5, known[path].size, retries=args.retries)
        print(f"ok  {path}")
    placed = [output_dir / path for path in sources]
    if request.datasets():
        placed += r2.r2_download(request, known, output_dir, args.r2_metadata, args.from_dir,
                                 args.retries, args.r2_downloader)
    count, total = len(placed), sum(path.stat().st_size for path in placed)
    if args.decompress and DUMP_BZ2 in paths:
        xml = known[DUMP_XML]
        if not verified(output_dir / DUMP_XML, xml.md5, xml.size):
            decompress_bz2(output_dir / DUMP_BZ2, output_dir / DUMP_XML, xml.md5)
        print(f"ok  {DUMP_XML}")
        count += 1
    report(StageSummary("download", count, count, total, started))


if __name__ == "__main__":
    exit_on_user_error(main)
