"""Layer tars built byte for byte in memory, for the tests of what a layer holds and of
what changed between two images' layers."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence

from imagekit.image.members import LayerScan, scan_layer

# (path, content or None for a directory, options)
Member = tuple[str, bytes | None, dict[str, object]]


def make_tar(members: Sequence[Member]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, opts in members:
            info = tarfile.TarInfo(name)
            info.mtime = int(opts.get("mtime", 1_700_000_000))  # type: ignore[call-overload]
            info.mode = int(opts.get("mode", 0o644 if data is not None else 0o755))  # type: ignore[call-overload]
            if "symlink" in opts:
                info.type = tarfile.SYMTYPE
                info.linkname = str(opts["symlink"])
                tar.addfile(info)
            elif "hardlink" in opts:
                info.type = tarfile.LNKTYPE
                info.linkname = str(opts["hardlink"])
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def f(name: str, data: bytes, **opts: object) -> Member:
    return (name, data, opts)


def d(name: str, **opts: object) -> Member:
    return (name, None, opts)


def scan(members: Sequence[Member]) -> LayerScan:
    """The scan of a layer of MEMBERS."""
    return scan_layer(io.BytesIO(make_tar(members)))
