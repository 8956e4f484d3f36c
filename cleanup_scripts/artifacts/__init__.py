"""The benchmark's artifacts on the network and on disk: the GCS client (`storage`), official
downloads (`download`), bucket uploads (`upload`) and md5 checks of a folder or a bucket copy
(`verify`, `verify_dir`, `verify_bucket`). The tables of official md5s and sizes, and where
each artifact may sit, are `cleanup_scripts.checksums`.

`python -m cleanup_scripts.download|upload|verify|storage` run these modules' `main`.
"""


class Retryable(Exception):
    """A transient failure of one network request (connection error, HTTP 5xx or 429, a transfer
    cut short): the caller waits and tries again, resuming where it stopped."""


def shown(text: object) -> str:
    """`text` as an error line may carry it: unchanged when printable, else its repr (line
    breaks, escape sequences and other control characters escaped), so nothing a server, a
    bucket or a file sent reaches the terminal raw."""
    text = str(text)
    return text if text.isprintable() else repr(text)
