"""Pull-through mirrors for Docker Hub, found where the engine and containerd keep them.

Behind a corporate Hub mirror, ``docker pull`` goes to the mirror and imagekit must too, or
it reaches for the internet the engine is kept away from (or gets rate-limited where the
engine is not). The mirrors, in this order, each taken once:

1. ``--registry-mirror URL`` (repeatable) and ``IMAGEKIT_REGISTRY_MIRRORS`` (comma- or
   space-separated URLs);
2. the engine's ``registry-mirrors`` in ``/etc/docker/daemon.json``
   (``IMAGEKIT_DOCKER_DAEMON_JSON`` names another file);
3. containerd's ``/etc/containerd/certs.d/docker.io/hosts.toml``: its ``[host."URL"]``
   entries with the ``pull`` capability (``IMAGEKIT_CONTAINERD_CERTS_D`` moves the root),
   read as containerd reads them (https://github.com/containerd/containerd/blob/main/docs/hosts.md):
   the URL's path is the API root with ``/v2`` appended unless it ends so, or taken as it
   is with ``override_path = true`` (a Harbor proxy project, zot's ``/v2/docker.io``);
   ``ca`` (a path or a list) are CAs trusted for that host and ``client`` (a path holding
   certificate and key, or ``[cert, key]`` pairs, or a list of either) its client
   certificates, relative paths from the hosts.toml's folder; ``skip_verify = true`` is
   TLS to that host without verifying its certificate (as ``--insecure HOST``: plain HTTP
   when it does not speak TLS); ``[host."URL".header]`` adds its headers (a string or a
   list of strings each) to every request sent to that mirror, never shown in any output
   (they often carry a token). ``dial_timeout`` is not read: the client's own timeouts hold.

Only reads (GET and HEAD) of docker.io go to a mirror; when a mirror fails (unreachable, an
error, not found) the next is asked and finally registry-1.docker.io, and the client says so
(``log``). Everything served by a mirror is still checked against the digests asked for, so a
mirror can make a command fail, never pass.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from imagekit import jsondoc
from imagekit.errors import InputFileError
from imagekit.files import MAX_INPUT_BYTES, read_regular

MIRRORS_ENV = "IMAGEKIT_REGISTRY_MIRRORS"
DAEMON_JSON_ENV = "IMAGEKIT_DOCKER_DAEMON_JSON"
CONTAINERD_CERTS_D_ENV = "IMAGEKIT_CONTAINERD_CERTS_D"
DEFAULT_DAEMON_JSON = Path("/etc/docker/daemon.json")
DEFAULT_CONTAINERD_CERTS_D = Path("/etc/containerd/certs.d")
HUB = "docker.io"
_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class Mirror:
    """A Hub mirror: its origin, its API root, and the TLS files hosts.toml gives it."""

    origin: httpx.URL  # scheme://host[:port]/
    root: str = "/v2"  # what stands for /v2 in each request's path
    cas: tuple[Path, ...] = ()
    clients: tuple[tuple[Path, Path | None], ...] = ()
    skip_verify: bool = False
    #: hosts.toml's ``header`` table, in its order; kept out of repr (a token, often)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def host(self) -> str:
        return self.origin.netloc.decode("ascii")

    def url(self, path: str) -> httpx.URL:
        """Where ``path`` (``/v2/REPO/manifests/TAG``) is asked of this mirror."""
        rest = path[len("/v2") :] if path.startswith("/v2/") else path
        return self.origin.join(self.root.rstrip("/") + rest)


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


def _parse(text: str) -> httpx.URL | None:
    text = text.strip().rstrip("/")
    if not text:
        return None
    try:
        url = httpx.URL(text if "://" in text else f"https://{text}")
    except httpx.InvalidURL:
        return None
    if url.scheme not in ("http", "https") or not url.host:
        return None
    return url


def _url(text: str) -> httpx.URL | None:
    url = _parse(text)
    return None if url is None else url.copy_with(path="/", query=None, fragment=None)


def _paths(value: object, base: Path) -> list[Path] | None:
    """A path or a list of paths, relative ones from ``base`` (containerd's makeAbsPath);
    None when the value is neither."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        return None
    return [base / item for item in items]  # an absolute item stays itself


def _clients(value: object, base: Path) -> list[tuple[Path, Path | None]] | None:
    """``client``: "cert-and-key.pem", ["a.pem", ...] or [["a.cert", "a.key"], ...]."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        return None
    pairs: list[tuple[Path, Path | None]] = []
    for item in items:
        if isinstance(item, str) and item:
            pairs.append((base / item, None))  # certificate and key in one file
        elif (
            isinstance(item, list) and 1 <= len(item) <= 2
            and all(isinstance(i, str) for i in item) and item[0]
        ):  # fmt: skip
            key = item[1] if len(item) == 2 and item[1] else None
            pairs.append((base / item[0], base / key if key else None))
        else:
            return None
    return pairs


def _mirror(url_text: str, entry: dict[str, object], base: Path) -> Mirror | None:
    """One ``[host."URL"]`` entry as containerd reads it, or None when it is malformed
    (containerd refuses such a file; here that host is left out)."""
    url = _parse(url_text)
    if url is None:
        return None
    path = url.path.rstrip("/")
    if entry.get("override_path") is not True and not path.endswith("/v2"):
        path += "/v2"
    cas = _paths(entry["ca"], base) if "ca" in entry else []
    clients = _clients(entry["client"], base) if "client" in entry else []
    headers = _headers(entry["header"]) if "header" in entry else []
    skip_verify = entry.get("skip_verify", False)
    if cas is None or clients is None or headers is None or not isinstance(skip_verify, bool):
        return None
    origin = url.copy_with(path="/", query=None, fragment=None)
    return Mirror(origin, path or "/", tuple(cas), tuple(clients), skip_verify, tuple(headers))


def _headers(value: object) -> list[tuple[str, str]] | None:
    """``header``: a table of names to a string or a list of strings (each value sent, as
    containerd adds them); None when it is anything else."""
    if not isinstance(value, dict):
        return None
    pairs: list[tuple[str, str]] = []
    for name, values in value.items():
        items = [values] if isinstance(values, str) else values
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            return None
        pairs += [(str(name), item) for item in items]
    return pairs


def _from_daemon_json(path: Path) -> list[str]:
    try:
        document = jsondoc.loads(read_regular(path, "daemon.json"), limit=MAX_INPUT_BYTES)
    except (OSError, ValueError, InputFileError):
        return []  # absent or unreadable: the engine would not start with a broken one
    mirrors = document.get("registry-mirrors") if isinstance(document, dict) else None
    return [m for m in mirrors if isinstance(m, str)] if isinstance(mirrors, list) else []


def _from_hosts_toml(path: Path) -> list[Mirror]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []
    hosts = document.get("host")
    found: list[Mirror] = []
    if isinstance(hosts, dict):
        for url, entry in hosts.items():
            if not isinstance(entry, dict):
                continue
            capabilities = entry.get("capabilities")
            if capabilities is None or (isinstance(capabilities, list) and "pull" in capabilities):
                mirror = _mirror(url, entry, path.parent)
                if mirror is not None:
                    found.append(mirror)
    return found


def hub_mirrors(explicit: Iterable[str] = ()) -> tuple[Mirror, ...]:
    """The mirrors to try for docker.io, first to last, without duplicates."""
    daemon = Path(os.environ.get(DAEMON_JSON_ENV) or DEFAULT_DAEMON_JSON)
    certs_d = Path(os.environ.get(CONTAINERD_CERTS_D_ENV) or DEFAULT_CONTAINERD_CERTS_D)
    candidates: list[Mirror] = []
    for text in (
        *explicit,
        *_process,
        *_SPLIT.split(os.environ.get(MIRRORS_ENV, "")),
        *_from_daemon_json(daemon),
    ):
        url = _url(text)
        if url is not None:
            candidates.append(Mirror(url))
    candidates += _from_hosts_toml(certs_d / HUB / "hosts.toml")
    seen: dict[tuple[str, str], Mirror] = {}
    for mirror in candidates:
        if mirror.origin.host not in ("registry-1.docker.io", "docker.io"):
            seen.setdefault((str(mirror.origin), mirror.root), mirror)
    return tuple(seen.values())
