"""Evidence: the raw logs and JSON reports every stage leaves behind.

A run's folder is created new (never reused), so a later success can never overwrite an
earlier failure's evidence. Files are hashed as written, so the ledger can record the sha256
of the exact bytes and `ledger verify` can later tell whether they changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagekit.errors import CouldNotFinish
from imagekit.refs import Digest

_SAFE = str.maketrans({"/": "_", ":": "_", "@": "_", " ": "_"})


def safe_name(text: str) -> str:
    """A reference or digest made usable as one folder name (no separators, no '..')."""
    name = text.translate(_SAFE).strip(".")
    return name or "_"


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _cannot_write(path: Path, exc: OSError) -> CouldNotFinish:
    return CouldNotFinish(
        f"cannot write the evidence {path}: {exc.strerror or exc}",
        hint="free disk space (or fix permissions) where the evidence goes, then run it again"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT)
        else "check the evidence folder's permissions (IMAGEKIT_ROOT moves it)",
    )


def new_run_dir(base: Path, *parts: str) -> Path:
    """A fresh folder base/parts.../<UTC time>-<random>; it did not exist before this call."""
    parent = base.joinpath(*(safe_name(p) for p in parts))
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(parent, exc) from exc
    for _ in range(8):
        candidate = parent / f"{utc_stamp()}-{secrets.token_hex(3)}"
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise _cannot_write(candidate, exc) from exc
        return candidate
    raise RuntimeError(f"could not create a new evidence folder under {parent}")


def write_bytes(path: Path, data: bytes) -> Digest:
    """Write data to a new file (refusing to overwrite one) and return its sha256.

    A write that fails part-way (a full disk: ENOSPC) removes the file it began, so no empty
    or cut evidence is left for a record to name, and is CouldNotFinish (exit 3)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cannot_write(path.parent, exc) from exc
    fh = path.open("xb")  # FileExistsError stays: overwriting evidence is a bug
    try:
        with fh:
            fh.write(data)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise _cannot_write(path, exc) from exc
    return Digest.of_bytes(data)


def write_json(path: Path, document: Any) -> Digest:
    """Write a JSON document (sorted keys, 2-space indent, trailing newline) to a new file."""
    data = (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    return write_bytes(path, data)


def file_digest(path: Path) -> Digest:
    """The sha256 of a file, read in chunks."""
    hasher = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            hasher.update(chunk)
    return Digest.from_hasher(hasher)
