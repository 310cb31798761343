"""One writer per blob and registry in this process: a lock held while making sure a
registry holds a blob (checking, mounting, uploading).

Apart from the copy (imagekit.registry.upload) because it holds across every copy, push and
attestation of the process at once, not within one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from imagekit.refs import Digest
from imagekit.registry.transport import api_host


@dataclass
class _WriteGuard:
    """The lock of one (registry, blob) being written, and how many threads hold or want it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


_write_guards: dict[tuple[str, str], _WriteGuard] = {}
_write_guards_lock = threading.Lock()


@contextmanager
def blob_write(registry: str, digest: Digest) -> Iterator[None]:
    """Hold while making sure REGISTRY holds the blob DIGEST (checking, mounting, uploading):
    one thread of this process at a time per registry and blob.

    Registries do not take two commits of one blob at once well. Distribution's filesystem
    storage rewrites the repository's link file for the blob on every commit (truncate, then
    write); a manifest PUT that reads that link in between finds no digest in it and is
    refused ``DIGEST_INVALID`` ("provided digest did not match uploaded content"), and Nexus
    refuses the second commit itself (``BLOB_UPLOAD_INVALID``). imagekit has several writers
    of one blob at once where they share it: an attestation's envelope is a layer of each
    subject's cosign tag and of each subject's referrer, written side by side. Behind this
    guard the second writer finds the blob there and writes nothing. Other processes
    writing the same blob are not held back (nothing here can see them); a manifest PUT
    refused so is sent once more (imagekit.registry.session).
    """
    key = (api_host(registry), str(digest))
    with _write_guards_lock:
        guard = _write_guards.setdefault(key, _WriteGuard())
        guard.users += 1
    try:
        with guard.lock:
            yield
    finally:
        with _write_guards_lock:
            guard.users -= 1
            if guard.users == 0:
                del _write_guards[key]
