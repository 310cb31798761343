"""Reading a file a user named: a regular file, read with a bound, never blocked on.

Key, policy, plan and ledger-piece paths come from the command line, so each may be anything:
``/dev/zero`` (read until the kernel kills the reader), a FIFO nobody writes to (an open
that waits forever), a directory, a file of gigabytes. Every such path is read here: opened
without blocking and without following a FIFO's wait, checked on the descriptor itself
(``fstat`` after ``open``: what was opened is what is judged, whatever the path pointed at a
moment before), refused unless it is a regular file once links are followed, and read up to
a cap that is far above any real file of its kind. Each refusal is a UsageError (exit 2)
naming the path and what it is.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from imagekit.errors import UsageError

MiB = 1 << 20
#: Keys, policies and plans are a few KiB; a few MiB is far above any real one.
DEFAULT_LIMIT = 4 * MiB


def _what(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bounded(path: Path, what: str, *, limit: int = DEFAULT_LIMIT) -> bytes:
    """The bytes of the regular file PATH (WHAT names it in messages: ``--policy``), at most
    LIMIT of them; UsageError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise UsageError(
            f"{what} {path}: cannot read it ({exc.strerror})",
            hint="give the path of an existing file",
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(
                f"{what} {path} is {_what(info.st_mode)}, not a regular file",
                hint="give the path of a file (links are followed)",
            )
        if info.st_size > limit:
            raise UsageError(
                f"{what} {path} is {info.st_size} bytes, over the {limit // MiB} MiB this "
                "file can be",
                hint="give the right file; nothing of this kind is that large",
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = os.read(fd, min(MiB, limit + 1 - size))
            except OSError as exc:
                raise UsageError(f"{what} {path}: cannot read it ({exc.strerror})") from None
            if not chunk:
                break
            size += len(chunk)
            if size > limit:  # it grew while being read
                raise UsageError(f"{what} {path} holds more than {limit // MiB} MiB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
