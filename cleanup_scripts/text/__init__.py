"""The text stages, in data-flow order: the dump cut into page-aligned chunks (`dump_chunks`),
the chunks' XML to extracted articles by the reference's own WikiExtractor (`extract`, which
loads it through `wikiextractor_275`), the reference's `clean.sh` filters (`clean`), and the
articles split into sentences as NLTK 3.4.5 split them (`sentence_splitter`).

The reference's script names that run these stages one at a time (`process_wiki`,
`cleanup_file`, `do_sentence_segmentation`, ...) stay directly in `cleanup_scripts`.
"""
