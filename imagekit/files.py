"""The files a user names (keys, policies, plans, ledger pieces, TLS files), opened so that
no path can stall imagekit or exhaust its memory.

A path is input like any other. ``/dev/zero`` read to its end never ends, a FIFO opened for
reading waits for a writer forever, a folder or a socket is no document, and a 38 MB YAML
file cost PyYAML 2 GB and a minute. So every file a user names goes through here:

- it is opened with ``O_NONBLOCK`` (opening a FIFO then returns at once instead of waiting
  for a writer) and ``O_NOCTTY`` (a terminal named by mistake never becomes imagekit's);
- symbolic links are followed, as every tool follows them for a file given by name, and the
  type is taken from ``fstat`` of the descriptor opened, never from the name alone (which can
  be swapped between a check and the open); a name that is not a regular file is refused
  before a byte is read, saying what it is (a FIFO, a character device, a folder) and, when
  the name is a link, where it points;
- what is read is capped: a file larger than the cap is refused from its size, and reading
  stops at the cap plus one byte, so a file that grows while it is read is refused too.

The cap, :data:`MAX_INPUT_BYTES`, is 1 MiB: the largest plan in this repository is 2.8 KB, a
policy a few hundred bytes, so 1 MiB is hundreds of times what a real one needs, while what
PyYAML spends on it stays small. PyYAML costs about 50 bytes of memory per byte of YAML and
1.5 s per MB (the 38 MB policy: 1.9 GB, about a minute); a policy just under 1 MiB loads
in 1.9 s, the whole process peaking at 82 MB. A caller may ask a smaller cap (a PEM key:
64 KiB) or a larger one (a CA bundle, which may carry a few hundred certificates).

A name that does not exist or may not be read raises the ``OSError`` the system gave, so each
caller keeps its own words for "no such plan file" or "cannot read the key file".
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from imagekit.errors import InputFileError

#: What a plan or policy file may hold (see the module's docstring for why 1 MiB).
MAX_INPUT_BYTES = 1 << 20
_CHUNK = 64 << 10
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def size_text(count: int) -> str:
    """A cap in words: ``1 MiB``, ``64 KiB``, ``10 bytes``."""
    if count >= 1 << 20 and count % (1 << 20) == 0:
        return f"{count >> 20} MiB"
    if count >= 1 << 10 and count % (1 << 10) == 0:
        return f"{count >> 10} KiB"
    return f"{count} bytes"


def _through_link(path: Path) -> str:
    """`` (a symbolic link to T)`` when the name itself is a link, else nothing."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return f" (a symbolic link to {os.readlink(path)})"
    except OSError:
        pass
    return ""


def _not_regular(path: Path, what: str, mode: int) -> InputFileError:
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return InputFileError(
        f"{path}: the {what} is {kind}{_through_link(path)}, not a regular file",
        path=str(path),
        hint=f"give the path of the {what} itself",
    )


def open_regular(path: Path, what: str) -> int:
    """A blocking, read-only descriptor on ``path``, which must be a regular file.

    ``what`` names the file in the refusal ("policy file", "ledger piece"). Raises
    InputFileError (exit 2) for anything else, the ``OSError`` of ``os.stat`` or
    ``os.open`` for a name that does not exist or may not be opened.
    """
    # Refused from its name first (opening a device can act on it: a tape rewinds), and
    # from the descriptor after, in case the name was swapped in between.
    named = os.stat(path).st_mode
    if not stat.S_ISREG(named):
        raise _not_regular(path, what, named)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, what, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, what: str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (see the module).

    Raises InputFileError (exit 2) for a file that is not regular or is larger than
    ``limit``, the ``OSError`` of opening or reading it otherwise.
    """
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise _too_large(path, what, limit, f"{size} bytes")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_large(path, what, limit, f"more than {size_text(limit)} (it grew)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_large(path: Path, what: str, limit: int, found: str) -> InputFileError:
    return InputFileError(
        f"{path}: the {what} is {found}, more than the {size_text(limit)} imagekit reads of one",
        path=str(path),
        hint=f"give the {what} itself; no real one comes near {size_text(limit)}",
    )


__all__ = ["MAX_INPUT_BYTES", "open_regular", "read_bounded", "read_regular", "size_text"]


def read_bounded(path: Path, what: str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """:func:`read_regular` for callers with no words of their own for a name that cannot be
    opened: that too is one line of bad input (exit 2) naming ``what`` and the path."""
    try:
        return read_regular(path, what, limit=limit)
    except OSError as exc:
        raise InputFileError(
            f"{what} {path}: cannot read it ({exc.strerror})",
            path=str(path),
            hint="give the path of an existing file",
        ) from None
