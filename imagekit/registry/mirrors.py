"""Pull-through mirrors for Docker Hub, found where the engine and containerd keep them.

Behind a corporate Hub mirror, ``docker pull`` goes to the mirror and imagekit must too, or
it reaches for the internet the engine is kept away from (or gets rate-limited where the
engine is not). The mirrors, in this order, each taken once:

1. ``--registry-mirror URL`` (repeatable) and ``IMAGEKIT_REGISTRY_MIRRORS`` (comma- or
   space-separated URLs);
2. the engine's ``registry-mirrors`` in ``/etc/docker/daemon.json``
   (``IMAGEKIT_DOCKER_DAEMON_JSON`` names another file);
3. containerd's ``/etc/containerd/certs.d/docker.io/hosts.toml``: its ``[host."URL"]``
   entries with the ``pull`` capability (``IMAGEKIT_CONTAINERD_CERTS_D`` moves the root).

Only reads (GET and HEAD) of docker.io go to a mirror; when a mirror fails (unreachable, an
error, not found) the next is asked and finally registry-1.docker.io, and the client says so
(``log``). Everything served by a mirror is still checked against the digests asked for, so a
mirror can make a command fail, never pass.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

MIRRORS_ENV = "IMAGEKIT_REGISTRY_MIRRORS"
DAEMON_JSON_ENV = "IMAGEKIT_DOCKER_DAEMON_JSON"
CONTAINERD_CERTS_D_ENV = "IMAGEKIT_CONTAINERD_CERTS_D"
DEFAULT_DAEMON_JSON = Path("/etc/docker/daemon.json")
DEFAULT_CONTAINERD_CERTS_D = Path("/etc/containerd/certs.d")
HUB = "docker.io"
_SPLIT = re.compile(r"[\s,]+")

_process: tuple[str, ...] = ()
_say: Callable[[str], None] | None = None


@contextmanager
def use_mirrors(urls: Iterable[str], say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Add ``urls`` to the process's Hub mirrors while the block runs, and say where reads
    went through ``say`` (the CLI does both, saying on stderr)."""
    global _process, _say
    before = (_process, _say)
    _process, _say = (*before[0], *urls), say or before[1]
    try:
        yield
    finally:
        _process, _say = before


def mirrors_log() -> Callable[[str], None] | None:
    """Where a client made now says which mirror served it (the process's choice)."""
    return _say


def _url(text: str) -> httpx.URL | None:
    text = text.strip().rstrip("/")
    if not text:
        return None
    try:
        url = httpx.URL(text if "://" in text else f"https://{text}")
    except httpx.InvalidURL:
        return None
    if url.scheme not in ("http", "https") or not url.host:
        return None
    return url.copy_with(path="/", query=None, fragment=None)


def _from_daemon_json(path: Path) -> list[str]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # absent or unreadable: the engine would not start with a broken one
    mirrors = document.get("registry-mirrors") if isinstance(document, dict) else None
    return [m for m in mirrors if isinstance(m, str)] if isinstance(mirrors, list) else []


def _from_hosts_toml(path: Path) -> list[str]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []
    hosts = document.get("host")
    found: list[str] = []
    if isinstance(hosts, dict):
        for url, entry in hosts.items():
            capabilities = entry.get("capabilities") if isinstance(entry, dict) else None
            if capabilities is None or (isinstance(capabilities, list) and "pull" in capabilities):
                found.append(url)
    return found


def hub_mirrors(explicit: Iterable[str] = ()) -> tuple[httpx.URL, ...]:
    """The mirrors to try for docker.io, first to last, without duplicates."""
    daemon = Path(os.environ.get(DAEMON_JSON_ENV) or DEFAULT_DAEMON_JSON)
    certs_d = Path(os.environ.get(CONTAINERD_CERTS_D_ENV) or DEFAULT_CONTAINERD_CERTS_D)
    candidates = [
        *explicit,
        *_process,
        *_SPLIT.split(os.environ.get(MIRRORS_ENV, "")),
        *_from_daemon_json(daemon),
        *_from_hosts_toml(certs_d / HUB / "hosts.toml"),
    ]
    seen: dict[str, httpx.URL] = {}
    for text in candidates:
        url = _url(text)
        if url is not None and url.host not in ("registry-1.docker.io", "docker.io"):
            seen.setdefault(str(url), url)
    return tuple(seen.values())
