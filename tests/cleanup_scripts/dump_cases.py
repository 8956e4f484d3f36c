"""Dumps for the extraction tests, built from the vendored real dump slice.

Python 3.7-compatible code (as `cleanup_scripts.text.dump_chunks` is): the same functions build the
inputs that the original WikiExtractor 2.75 is run on under Python 3.7 to make the reference md5s
(tests/fixtures/wikiextractor-2.75/make_md5s.py) and the inputs our extraction is tested on.
Multistream dumps are made with `cleanup_scripts.text.dump_chunks.multistream`.
"""
import bz2
import re

from cleanup_scripts.text.dump_chunks import split_pages

PAGE_ID = re.compile(rb"(<page>\s*<title>[^<]*</title>\s*<ns>[^<]*</ns>\s*<id>)(\d+)(</id>)")


def _renumbered(page, offset):
    return PAGE_ID.sub(lambda m: m.group(1) + str(int(m.group(2)) + offset).encode() +
                       m.group(3), page, count=1)


def many_pages(xml, copies):
    """The slice's pages `copies` times over (page ids renumbered per copy), each page written
    twice in a row in the first copy (WikiExtractor keeps only the first of two consecutive
    pages with one id), and one article of the first articles' text joined (1 MB of wikitext,
    larger than a 200K output file)."""
    header, pages, footer = split_pages(xml)
    out = [header]
    for copy in range(copies):
        for page in pages:
            page = _renumbered(page, copy * 10000000)
            out.append(page + page if copy == 0 else page)
    texts = [re.search(rb"<text[^>]*>(.*?)</text>", page, re.S) for page in pages]
    articles = [text.group(1) for text in texts
                if text and b"#REDIRECT" not in text.group(1)[:20]]
    body = b""
    for article in articles:
        if len(body) >= 1000000:
            break
        body += article + b"\n\n"
    out.append(b"  <page>\n    <title>Everything</title>\n    <ns>0</ns>\n    <id>99999999</id>\n"
               b"    <revision>\n      <id>1</id>\n      <text xml:space=\"preserve\">" + body +
               b"</text>\n    </revision>\n  </page>\n")
    out.append(footer)
    return b"".join(out)


def blockwise_bz2(xml, block):
    """`xml` as a parallel compressor (pbzip2, lbzip2) writes it: a bz2 stream per `block`
    bytes, cut anywhere (streams split pages and lines)."""
    return b"".join(bz2.compress(xml[i:i + block]) for i in range(0, len(xml), block))
