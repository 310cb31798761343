"""A registry with its own CA that the real Docker engine verifies, and the engine's trust in it.

The engine counts every registry whose name resolves into 127.0.0.0/8 as insecure (its default
``insecure-registries``, shown by ``docker info``), and for an insecure registry it skips
verification and never reads ``/etc/docker/certs.d``: a TLS registry on ``localhost:PORT`` or
``127.0.0.1:PORT`` proves nothing about the engine's trust. ``::1`` is loopback too, but not
in that range, so a name that resolves to ``::1`` only is a registry the engine verifies, as
it verifies any on-premise registry. The name goes into ``/etc/hosts`` (the engine and the
tests resolve through it) while the tests run, and only that line is removed afterwards.

The CA goes into the engine's own ``/etc/docker/certs.d/HOST:PORT/ca.crt``, the folder
imagekit's client reads by default too, and is removed afterwards whatever happened.
"""

from __future__ import annotations

import fcntl
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imagekit.runtime.engine import ENGINE_CERTS_D

HOSTS_FILE = Path("/etc/hosts")
#: Go's resolver (the engine's) keeps /etc/hosts for 5 s before it looks at it again.
GO_HOSTS_CACHE_S = 5.5
#: Loopback the engine does not count as insecure (its default range is 127.0.0.0/8).
SECURE_LOOPBACK = "::1"


def new_name() -> str:
    """A host name of its own for one session (``.test`` is reserved for tests, RFC 2606)."""
    return f"imagekit-tls-{secrets.token_hex(4)}.test"


@contextmanager
def _hosts_locked() -> Iterator[None]:
    with (HOSTS_FILE.parent / ".imagekit-hosts.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def hosts_entry(name: str, address: str = SECURE_LOOPBACK) -> Iterator[str]:
    """``name`` resolves to ``address`` (through /etc/hosts) while the block runs."""
    line = f"{address} {name}  # imagekit tests\n"
    with _hosts_locked():
        text = HOSTS_FILE.read_text()
        HOSTS_FILE.write_text(text + ("" if not text or text.endswith("\n") else "\n") + line)
    time.sleep(GO_HOSTS_CACHE_S)  # until the engine reads the file again and knows the name
    try:
        yield name
    finally:
        with _hosts_locked():
            kept = [ln for ln in HOSTS_FILE.read_text().splitlines(True) if ln != line]
            HOSTS_FILE.write_text("".join(kept))


@contextmanager
def engine_trusts(host: str, ca: Path) -> Iterator[Path]:
    """The engine's certs.d folder for ``host`` holds ``ca`` as ca.crt while the block runs."""
    folder = ENGINE_CERTS_D / host
    folder.mkdir(parents=True, exist_ok=False)  # never take over a folder someone else made
    try:
        shutil.copyfile(ca, folder / "ca.crt")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
