"""The ledger file opened and locked: a regular file or nothing, an exclusive lock to append
and a shared one to read, and one holder a path within this process.

Apart from appending (store.py) and reading (readback.py), which both open the file this
way: how the file is held is said once, below both.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imagekit.errors import CouldNotFinish, UsageError

_FILE_TYPES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _not_a_file(path: Path, mode: int) -> UsageError:
    what = _FILE_TYPES.get(stat.S_IFMT(mode), "something else")
    return UsageError(
        f"the ledger {path} is not a regular file ({what})",
        hint="point IMAGEKIT_LEDGER / --ledger at a JSON-lines file (manifests/ledger.jsonl)",
    )


def open_ledger(path: Path, flags: int) -> int:
    """An fd on the ledger file, refusing at once anything that is not a regular file.

    ``O_NONBLOCK`` makes opening a FIFO return instead of waiting for a writer; the type is
    then checked on the open descriptor (not on the name, which could change in between),
    so a FIFO, a directory or /dev/zero is bad input before a single byte is read.
    """
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except IsADirectoryError as exc:
        raise _not_a_file(path, stat.S_IFDIR) from exc
    except OSError as exc:
        raise CouldNotFinish(
            f"cannot open the ledger {path}: {exc.strerror}",
            hint="check the path (IMAGEKIT_LEDGER / --ledger) and its permissions",
        ) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_file(path, mode)
    os.set_blocking(fd, True)
    return fd


@contextmanager
def locked(path: Path, flags: int, *, shared: bool = False) -> Iterator[int]:
    """An fd on the ledger holding a flock (exclusive unless ``shared``) until the block ends.

    Inside :func:`holding` of the same ledger, the fd it holds (exclusively) is handed out
    instead: a second flock on another fd of the same file would wait for the first forever.
    """
    held = _held.get(_key(path))
    if held is not None:
        yield held
        return
    if flags & os.O_CREAT:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_ledger(path, flags)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the flock


#: Ledgers held exclusively (:func:`holding`), by the holding thread and the resolved path:
#: another thread's append takes its own flock, so it waits for the holder as a process does.
_held: dict[tuple[int, Path], int] = {}


def _key(path: Path) -> tuple[int, Path]:
    return threading.get_ident(), path.resolve()


@contextmanager
def holding(path: Path) -> Iterator[None]:
    """Hold the ledger's exclusive lock across several reads and appends, so a
    read-compare-append (``ledger sync --from``: which records does it lack?) is one step:
    a second sync waits, then finds the first one's records already there. Every read and
    append inside the block uses the held fd."""
    with locked(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        key = _key(path)
        _held[key] = fd
        try:
            yield
        finally:
            del _held[key]
