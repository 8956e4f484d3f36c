"""Safe file access, the one home for every layer: atomic outputs, output folders, input
discovery, locks, md5 hashing, and the one-line errors they raise.

`atomic_output` writes beside the final name and renames only on success; `ensure_dir` makes an
output folder or says in one line why it cannot; `md5_file` hashes a file in 1 MiB chunks.
For outputs: `check_output_tree` refuses, before a run writes, a symbolic link or a file of the
wrong kind where it writes, locks or deletes inside its output folder; `check_output`,
`open_output` and `replace_output` refuse one at open or rename time (never following a link,
never replacing a FIFO or a device), and `refuse_outputs_over_inputs` an output that is an input.
For input made by others: `open_regular`/`read_regular` read only regular files up to a size
limit (never a FIFO or a device), `link_outside` tells a link leaving a tree, `resolve_inside`
checks a path a record names (relative, inside its tree, a regular file; its text alone:
`relative_path_problem`), `walk_files`
walks to a bounded depth without recursion, `scratch_dir` makes a temporary folder that a later
run removes if its process died. `expand_inputs` turns a glob into the sorted input files a stage
reads (each a regular file: `require_regular_file`, `refuse_special_file`); `exclusive_lock`
lets one process at a time write into a folder.
`InputError` (a `UserError`) names the file or folder at fault; `DiskFullError` says the disk
filled up while writing it.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import fnmatch
import glob
import hashlib
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Iterable, Iterator

from benchmark.errors import UserError, printable

CHUNK_SIZE = 1 << 20
# md5_file shows a progress bar (on a terminal) for files larger than this.
_PROGRESS_MIN_BYTES = 256 << 20


class InputError(UserError, ValueError):
    """A problem with a user's input or output path (a file, a pattern, a record); its message
    is one line naming the file. The one such class of every layer."""


class DiskFullError(InputError):
    """A write failed for want of space: no space left on the device, the disk quota reached,
    or a file larger than the file system (or the process's RLIMIT_FSIZE) allows."""


_DISK_FULL = {errno.ENOSPC: "no space left on device",
              errno.EDQUOT: "no space left on device (disk quota exceeded)",
              errno.EFBIG: "no space left on device (file too large)"}


def disk_full(path: str | os.PathLike, err: OSError) -> DiskFullError | None:
    """The one-line DiskFullError naming `path` if `err` says the disk is full, else None."""
    problem = _DISK_FULL.get(err.errno)
    return None if problem is None else DiskFullError(f"{path}: {problem}")


def temporary_name(path: str | os.PathLike) -> Path:
    """The hidden name beside `path` that a stage writes before renaming to `path`."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial-{os.getpid()}")


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of `path` (`temporary_name`'s `.NAME.partial-PID`, regular files
    beside it) that a process which no longer runs left behind (kill -9); nothing else, and
    never a live writer's. Returns the files removed."""
    path = Path(path)
    prefix = f".{path.name}.partial-"
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        pid = entry.name[len(prefix):]
        if not entry.name.startswith(prefix) or not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary file beside `path`; rename it to `path` only if the block succeeds.

    A crash or an exception leaves no file under the final name (and removes the temporary).
    Text modes default to UTF-8. The temporary is created anew, never through a link
    (`create_new`), and `path` is never a link or a special file replaced (`check_output`,
    RefusedOutput, before the temporary is made and again before the rename). Raises
    InputError when the directory cannot be written, and DiskFullError (naming `path`) when
    the disk fills up while it is written.
    """
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    check_output(path)
    tmp = temporary_name(path)
    try:
        handle = create_new(tmp, mode, **open_kwargs)
    except OSError as err:
        raise disk_full(path, err) or InputError(
            f"{path}: cannot write output ({err.strerror})") from err
    try:
        with handle:
            yield handle
        replace_output(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        full = disk_full(path, err) if isinstance(err, OSError) else None
        if full is not None:
            raise full from err
        raise


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create directory `path` (and parents) if needed; InputError if it cannot be made."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise disk_full(path, err) or InputError(
            f"{path}: cannot create output directory ({err.strerror})") from err
    if not os.access(path, os.W_OK):
        raise InputError(f"{path}: output directory is not writable")
    return path


def md5_file(path: str | os.PathLike, progress: bool | None = None) -> str:
    """The md5 hex digest of a file, read in 1 MiB chunks.

    `progress`: True/False forces a byte progress bar on/off; None shows one on a terminal
    for big files. Raises OSError if the file cannot be read.
    """
    from tqdm import tqdm  # here, so that the module needs only the standard library

    digest = hashlib.md5()
    buffer = bytearray(CHUNK_SIZE)
    view = memoryview(buffer)
    size = os.path.getsize(path)
    if progress is None:  # tqdm's None: shown only on a terminal
        disable = None if size >= _PROGRESS_MIN_BYTES else True
    else:
        disable = not progress
    with open(path, "rb") as handle, tqdm(total=size, unit="B", unit_scale=True, leave=False,
                                           desc=f"md5 {Path(path).name}", disable=disable) as bar:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            bar.update(count)
    return digest.hexdigest()


def verify_file(path: str | os.PathLike, expected_md5: str) -> bool:
    """True when `path` exists and its md5 equals `expected_md5` (case-insensitive)."""
    try:
        return md5_file(path) == expected_md5.lower()
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# Reading files someone else made (the checker's input): regular files only, bounded sizes,
# bounded depth, never a link out of the tree.

class RefusedFile(InputError):
    """A file that is not read: not a regular file, over a size limit, a link leaving its tree.
    `reason` is the one-line why, without the path (the message names it)."""

    def __init__(self, path: str | os.PathLike, reason: str, too_large: bool = False) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason
        self.too_large = too_large


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a stat mode is, in words ("a regular file", "a folder", "a FIFO", "a character
    device" (/dev/zero), ...): the one wording of every layer's "is not a regular file"."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def size_words(count: int) -> str:
    """A byte count for a message: "3,000,000,000 bytes (2.8 GiB)"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count:,} bytes ({count / (1 << shift):.1f} {unit})"
    return f"{count:,} bytes"


def refuse_special_file(path: str | os.PathLike) -> None:
    """InputError "<path>: is not a regular file (a FIFO)" if `path` is a device, FIFO or
    socket; nothing for a regular file, a folder or a missing path (the caller's open() names
    those). Only stat()ed: a FIFO cannot block this, nor /dev/zero feed it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"{printable(path)}: is not a regular file ({file_kind(mode)})")


def require_regular_file(path: str | os.PathLike, what: str = "input file") -> None:
    """InputError naming `path` unless it is a regular file (or a link to one): "does not
    exist", "is a directory", or "is not a regular file (a FIFO)" for a device, FIFO or
    socket. Only stat()ed, never opened: a FIFO cannot block this, nor /dev/zero feed it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{printable(path)}: {what} does not exist") from None
    except OSError as err:
        raise InputError(f"{printable(path)}: cannot read {what} ({err.strerror})") from err
    if stat.S_ISDIR(mode):
        article = "an" if what[:1] in "aeiou" else "a"
        raise InputError(f"{printable(path)}: is a directory, not {article} {what}")
    if not stat.S_ISREG(mode):
        raise InputError(f"{printable(path)}: is not a regular file ({file_kind(mode)})")


def expand_inputs(pattern: str, suffix: str = "") -> list[str]:
    """Return the sorted paths matching a glob `pattern` (with `~` expanded).

    Raises InputError when nothing matches, or when `match + suffix`, the file a
    reference-style stage reads, is missing or no regular file (`require_regular_file`).
    """
    paths = sorted(glob.glob(os.path.expanduser(pattern)))
    if not paths:
        raise InputError(f"{printable(pattern)}: no input files match")
    for path in paths:
        require_regular_file(path + suffix)
    return paths


def open_regular(path: str | os.PathLike, limit: int) -> IO[bytes]:
    """Open `path` for reading in binary if it is a regular file of at most `limit` bytes.

    Checked with os.stat before opening (a FIFO, a device or a socket is never opened), then
    opened with O_NONBLOCK and checked again on the open descriptor (a file swapped in between
    is refused too). Raises RefusedFile (one line) or OSError (missing, no permission).
    """
    def check(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(path, f"is {file_kind(info.st_mode)}, not a regular file; "
                                    "not read")
        if info.st_size > limit:
            raise RefusedFile(path, f"is {size_words(info.st_size)}, over the limit of "
                                    f"{size_words(limit)}; not read", too_large=True)
    check(os.stat(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        check(os.fstat(fd))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of regular file `path` if it holds at most `limit` (see `open_regular`; a
    file that grows past the limit while read is refused as well)."""
    with open_regular(path, limit) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise RefusedFile(path, f"is over the limit of {size_words(limit)}; not read",
                          too_large=True)
    return data


def link_outside(path: str | os.PathLike, root: str | os.PathLike) -> str | None:
    """Where `path` leads if it is (or passes through) a symbolic link resolving outside
    `root`; None when it stays inside (or is no link)."""
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
        return None
    return real


def relative_path_problem(relative: str) -> str | None:
    """Why `relative`, a path a record names, is not a `/`-separated relative path of printable
    characters without an empty, `.` or `..` component ("is an absolute path", ...); None when
    it is one. Only the text is judged: nothing is looked up."""
    if relative.startswith("/"):
        return "is an absolute path"
    if any(part in ("", ".", "..") for part in relative.split("/")) or not relative.isprintable():
        return "is not a plain relative path (a '..', '.' or empty component, or a control " \
               "character)"
    return None


def resolve_inside(root: str | os.PathLike, relative: str, where: str) -> Path:
    """`root/relative` for a path that a record names (a line of a `.state` file, a
    `manifest.tsv` row, an object name, an artifact's place): the one check of every such path.

    `relative` must be a `/`-separated relative path of printable characters without an empty,
    `.` or `..` component; after following links it must stay inside `root` (also resolved);
    and where something is there, it must be a regular file. A path with nothing there is
    returned as it is (the caller says "missing"). Otherwise InputError, one line naming
    `where` (the file and line of the record) and the path, and nothing is read: the file it
    leads to is never opened, and its content never quoted.
    """
    shown = f"'{printable(relative)}'"
    reason = relative_path_problem(relative)
    if reason is None:
        path = Path(root).joinpath(*relative.split("/"))
        outside = link_outside(path, root)
        if outside is not None:
            reason = f"leads outside {printable(root)} (a link to {printable(outside)})"
        else:
            try:
                mode = os.stat(path).st_mode
            except FileNotFoundError:
                return path
            except OSError as err:
                raise InputError(f"{where}: {shown}: cannot be read ({err.strerror})") from err
            if stat.S_ISREG(mode):
                return path
            reason = f"is {file_kind(mode)}, not a regular file"
    raise InputError(f"{where}: {shown} {reason}; not read")


def walk_files(root: str | os.PathLike, max_depth: int) -> Iterator[tuple[Path, int]]:
    """(file path, depth) for every non-directory entry under `root` at most `max_depth`
    folders down, without recursion and without entering linked folders; folders deeper
    than `max_depth` are not entered."""
    pending = [(Path(root), 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if depth < max_depth:
                    pending.append((Path(entry.path), depth + 1))
            else:
                yield Path(entry.path), depth


# --------------------------------------------------------------------------------------------
# Writing into output folders: never through a link planted there, never over a FIFO, a device
# or an input. The folder a user names may itself be a link; what a run makes inside may not.

class RefusedOutput(InputError):
    """An output that is not written: a symbolic link, a special file or an input where it
    would go. The message is one line naming the path."""


_OPEN_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def output_problem(path: str | os.PathLike, folder: bool = False,
                   appended: bool = False) -> str | None:
    """Why `path` cannot be written as an output (a regular file, or a folder when `folder`),
    without the path: "is a symbolic link (to X); ..." or "is a FIFO, not a regular file; ...";
    None when nothing is there or it is of the right kind. With `appended`, a character device
    is of the right kind too: appending to /dev/null, /dev/full or a terminal replaces nothing.
    Only lstat()ed, never followed."""
    try:
        info = os.lstat(path)
    except OSError:
        return None  # nothing there (or no way there): the write itself says why
    if stat.S_ISLNK(info.st_mode):
        try:
            target = printable(os.readlink(path))
        except OSError:
            target = "?"
        return (f"is a symbolic link (to {target}); outputs are never written through a link: "
                "remove it or name another path")
    if (stat.S_ISDIR if folder else stat.S_ISREG)(info.st_mode) or (
            appended and stat.S_ISCHR(info.st_mode)):
        return None
    return (f"is {file_kind(info.st_mode)}, not {'a folder' if folder else 'a regular file'}; "
            "an output never replaces it: remove it or name another path")


def check_output(path: str | os.PathLike, folder: bool = False, appended: bool = False) -> None:
    """RefusedOutput naming `path` when something is there that an output must not replace or
    write through (`output_problem`); nothing when it is absent or of the right kind."""
    problem = output_problem(path, folder, appended)
    if problem is not None:
        raise RefusedOutput(f"{printable(path)}: {problem}")


def check_output_tree(root: str | os.PathLike, files: Iterable[str] = (),
                      folders: Iterable[str] = (), links: Iterable[str] = ()) -> None:
    """Before a run writes into the output folder `root`: RefusedOutput naming the first
    entry it would write, lock, append to or delete through a link, or that is of the wrong
    kind. `files`: paths relative to `root`, each absent or a regular file; `folders`: each
    no link, with no link to a folder anywhere inside (walked without following links; a file
    where a folder goes is left to the write, which names it); `links`: `folder/pattern` globs
    of entries that must not be links. `root` itself may be a link (a user's choice); only
    lstat() and scandir, nothing is opened."""
    root = Path(root)
    for relative in files:
        check_output(root / relative)
    for relative in folders:
        if os.path.islink(root / relative):
            check_output(root / relative, folder=True)
        _refuse_folder_links(root / relative)
    for pattern in links:
        parent, _, glob = pattern.rpartition("/")
        with contextlib.suppress(OSError):
            for entry in sorted(os.scandir(root / parent), key=lambda e: e.name):
                if fnmatch.fnmatchcase(entry.name, glob) and entry.is_symlink():
                    check_output(entry.path)


def _refuse_folder_links(folder: Path) -> None:
    """RefusedOutput for the first link to a folder under `folder` (any depth; links are not
    followed, so the walk stays inside)."""
    pending = [folder]
    while pending:
        try:
            entries = sorted(os.scandir(pending.pop()), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                if os.path.isdir(entry.path):
                    check_output(entry.path, folder=True)
            elif entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))


def open_output(path: str | os.PathLike, append: bool = False, mode: int = 0o644) -> int:
    """A descriptor of the regular file `path` for writing, created (with `mode`) if absent:
    appending when `append` (then a character device such as /dev/null will do), else
    read-write from its start, nothing truncated. Never through a link (O_NOFOLLOW) nor on a
    FIFO or another device (O_NONBLOCK, then fstat): RefusedOutput naming it; OSError for any
    other failure."""
    check_output(path, appended=append)
    access = os.O_WRONLY | os.O_APPEND if append else os.O_RDWR
    try:
        fd = os.open(path, access | os.O_CREAT | os.O_NONBLOCK | _OPEN_FLAGS, mode)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO):  # a link or a FIFO swapped in since
            check_output(path, appended=append)
        raise
    try:
        info = os.fstat(fd)
        if not (stat.S_ISREG(info.st_mode) or (append and stat.S_ISCHR(info.st_mode))):
            raise RefusedOutput(f"{printable(path)}: is {file_kind(info.st_mode)}, not a "
                                "regular file; an output never replaces it")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _holder(descriptor: int) -> str:
    """The holder line a lock file opened as `descriptor` keeps (waiting up to a second for
    a holder that has just taken the lock to write it)."""
    for _ in range(20):
        line = os.pread(descriptor, 4096, 0).decode(errors="replace")
        if line.endswith("\n"):
            return line.strip()
        time.sleep(0.05)
    return "holder unknown"


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, directory: str | os.PathLike, what: str
                   ) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created if needed) for the block.

    The lock guards `directory` for one `what` (e.g. "preprocess") at a time. It is a
    `flock` lock: the OS releases it when the holder and every process forked from it have
    ended, however they ended (kill -9 included). The file keeps its last holder's pid, host
    and start time. If another process holds it, InputError says who, and nothing is written;
    a link or a special file at `path` is RefusedOutput naming it (never followed nor opened).
    """
    try:
        descriptor = open_output(path)
    except OSError as err:
        raise InputError(f"{path}: cannot open lock file ({err.strerror})") from err
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{directory}: another {what} is writing into this directory "
                             f"({_holder(descriptor)}); wait for it to end or stop it") from None
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        line = f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n"
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, line.encode(), 0)
        except OSError as err:
            raise disk_full(path, err) or InputError(
                f"{path}: cannot write lock file ({err.strerror})") from err
        yield
    finally:
        os.close(descriptor)


def create_new(path: str | os.PathLike, mode: str = "wb", **open_kwargs) -> IO:
    """`path` created anew and opened with `mode` ("w", "wb", ...): whatever was there (a
    stale temporary of a reused pid, a planted link: the link, not its target) is removed
    first, and the file is made with O_EXCL and O_NOFOLLOW, so nothing is written through a
    link or into a file another holds. Raises OSError."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    access = os.O_RDWR if "+" in mode else os.O_WRONLY
    fd = os.open(path, access | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o666)
    try:
        return os.fdopen(fd, mode, **open_kwargs)
    except BaseException:
        os.close(fd)
        raise


def replace_output(temporary: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename the finished `temporary` to `path` unless `path` became a link or a special file
    (`check_output`: RefusedOutput, the temporary left for the caller to remove)."""
    check_output(path)
    os.replace(temporary, path)


@contextlib.contextmanager
def naming(flag: str) -> Iterator[None]:
    """Put `flag` (a flag, or a flag and its value) before the message of an InputError raised
    in the block, which names the file or the amount and the problem: "<flag>: <message>",
    the error's class kept. The command line's edge names its flags; the layers below know
    none."""
    try:
        yield
    except InputError as err:
        err.args = (f"{flag}: {err}",)
        raise


def refuse_outputs_over_inputs(inputs: Iterable[str], outputs: Iterable[str]) -> None:
    """RefusedOutput "OUTPUT: is the input X (the same file); ..." when one of `outputs` is one
    of `inputs`: the same path once links are resolved, or the same file (device and inode)
    through a hard link."""
    inputs = list(inputs)
    by_path = {os.path.realpath(path): path for path in inputs}
    by_inode = {}
    for path in inputs:
        with contextlib.suppress(OSError):
            info = os.stat(path)
            by_inode.setdefault((info.st_dev, info.st_ino), path)
    for output in outputs:
        same = by_path.get(os.path.realpath(output))
        if same is None:
            with contextlib.suppress(OSError):
                info = os.stat(output)
                same = by_inode.get((info.st_dev, info.st_ino))
        if same is not None:
            raise RefusedOutput(f"{printable(output)}: is the input {printable(same)} "
                                "(the same file); writing it would replace that input")


STALE_AFTER_S = 3600  # a scratch folder of a dead pid untouched this long is removed
_swept: set[tuple[str, str]] = set()


def scratch_dir(prefix: str) -> "tempfile.TemporaryDirectory[str]":
    """A temporary folder `<tmp>/<prefix>-<pid>-<random>` that is removed when done. The first
    one of a process removes the folders of the same prefix left behind by processes that are
    gone (kill -9), once untouched for STALE_AFTER_S (a /tmp shared with another pid namespace
    cannot lose a live one)."""
    base = tempfile.gettempdir()
    if (prefix, base) not in _swept:
        _swept.add((prefix, base))
        remove_stale_scratch(prefix, base)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}-{os.getpid()}-")


def remove_stale_scratch(prefix: str, base: str | None = None,
                         older_than_s: float = STALE_AFTER_S) -> list[str]:
    """Remove `<base>/<prefix>-<pid>-*` folders of ours whose process no longer runs and that
    were not modified for `older_than_s`; returns them."""
    base = base or tempfile.gettempdir()
    now = time.time()
    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(f"{prefix}-"):
            continue
        pid = entry.name[len(prefix) + 1:].split("-", 1)[0]
        try:
            info = entry.stat(follow_symlinks=False)
            if not pid.isdigit() or not entry.is_dir(follow_symlinks=False) \
                    or info.st_uid != os.getuid() or now - info.st_mtime < older_than_s \
                    or _alive(int(pid)):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (EPERM: it exists, under another user)."""
    if pid <= 0:
        return True  # not a pid of ours: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
