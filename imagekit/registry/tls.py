"""TLS to registries: one story for every command, the one Docker tells.

- The system trust store (and SSL_CERT_FILE/SSL_CERT_DIR) always; never certifi's bundle,
  which lacks the CA of a TLS-intercepting proxy that users have in the system store.
- ``--ca-file PATH`` (``IMAGEKIT_CA_FILE``): one more CA bundle, for every registry.
- Docker's ``/etc/docker/certs.d/HOST[:PORT]/`` (``IMAGEKIT_CERTS_D`` moves the root): every
  ``*.crt`` in it is a CA for that host, every ``NAME.cert`` with its ``NAME.key`` a client
  certificate (https://docs.docker.com/engine/security/certificates/). A loopback host with
  such a folder is spoken to over HTTPS; without one, over plain HTTP, as before.
- containerd's hosts.toml ``ca`` and ``client`` for a Hub mirror (imagekit.registry.mirrors):
  more CAs and client certificates for that mirror's host (:meth:`TLSSettings.with_host_files`).
- ``--insecure HOST`` (``IMAGEKIT_INSECURE_REGISTRIES``, comma- or space-separated) means
  what Docker's ``insecure-registries`` means: TLS without verifying the certificate, and
  plain HTTP when the host does not speak TLS at all. Credentials never go to a plain-HTTP
  token realm unless its host is loopback or insecure (imagekit.registry.auth).

The settings are per process: the CLI sets them once from its options
(:func:`use_settings`), and every RegistryClient made while they are set uses them, so that
build, pull, audit, mirror, inspect, nightly and plans bump reach a registry the same way.
"""

from __future__ import annotations

import os
import re
import ssl
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from imagekit.errors import RegistryTLSError

CERTS_D_ENV = "IMAGEKIT_CERTS_D"
INSECURE_ENV = "IMAGEKIT_INSECURE_REGISTRIES"
CA_FILE_ENV = "IMAGEKIT_CA_FILE"
DEFAULT_CERTS_D = Path("/etc/docker/certs.d")
_SPLIT = re.compile(r"[\s,]+")
HostFiles = tuple[tuple[Path, ...], tuple[tuple[Path, Path | None], ...]]


def _hosts(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v for value in values for v in _SPLIT.split(value.strip()) if v)


@dataclass(frozen=True)
class TLSSettings:
    """How to reach registries over TLS; :meth:`from_env` adds the environment's."""

    insecure: frozenset[str] = frozenset()
    ca_file: Path | None = None
    certs_dir: Path = DEFAULT_CERTS_D
    # host -> (CA files, (certificate, key or None) pairs) from a mirror's hosts.toml entry
    host_files: Mapping[str, HostFiles] = field(default_factory=dict)
    _contexts: dict[tuple[str, bool], ssl.SSLContext] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, compare=False, repr=False
    )

    @classmethod
    def from_env(cls, *, insecure: Iterable[str] = (), ca_file: Path | None = None) -> TLSSettings:
        """These settings, the process's (:func:`use_settings`) and the environment's."""
        base = _process
        env_ca = os.environ.get(CA_FILE_ENV)
        return cls(
            insecure=_hosts([*insecure, os.environ.get(INSECURE_ENV, "")]) | base.insecure,
            ca_file=ca_file or base.ca_file or (Path(env_ca) if env_ca else None),
            certs_dir=Path(os.environ.get(CERTS_D_ENV) or base.certs_dir),
        )

    def with_host_files(self, files: Mapping[str, HostFiles]) -> TLSSettings:
        """These settings, with more CAs and client certificates for some hosts."""
        if not files:
            return self
        return replace(self, host_files={**self.host_files, **files})

    def host_dir(self, host: str) -> Path | None:
        """certs.d/HOST[:PORT] when it is a folder (Docker names them so, port included)."""
        if not host or "/" in host or host.startswith("."):
            return None
        folder = self.certs_dir / host
        return folder if folder.is_dir() else None

    def context(self, host: str, *, verify: bool = True) -> ssl.SSLContext:
        """The client context for ``host``: its CAs and client certificate; without
        verification for an insecure host. Built once per host."""
        key = (host, verify)
        with self._lock:
            if key not in self._contexts:
                self._contexts[key] = self._build(host, verify)
            return self._contexts[key]

    def _build(self, host: str, verify: bool) -> ssl.SSLContext:
        context = ssl.create_default_context()
        try:
            if self.ca_file is not None:
                context.load_verify_locations(cafile=str(self.ca_file))
            folder = self.host_dir(host)
            if folder is not None:
                for ca in sorted(folder.glob("*.crt")):
                    context.load_verify_locations(cafile=str(ca))
                for cert in sorted(folder.glob("*.cert")):
                    key = cert.with_suffix(".key")
                    if not key.is_file():
                        raise RegistryTLSError(
                            f"{host}: client certificate {cert.name} in {folder} has no "
                            f"{key.name} beside it",
                            registry=host,
                            hint="put the certificate's key next to it, as Docker expects",
                        )
                    context.load_cert_chain(str(cert), str(key))
            cas, clients = self.host_files.get(host, ((), ()))
            for ca in cas:
                context.load_verify_locations(cafile=str(ca))
            for pem, pem_key in clients:  # no key: it is in the certificate's file
                context.load_cert_chain(str(pem), str(pem_key) if pem_key else None)
        except (OSError, ssl.SSLError) as exc:
            raise RegistryTLSError(
                f"{host}: cannot load TLS files: {exc}",
                registry=host,
                hint="check --ca-file and the files in "
                f"{self.certs_dir}/{host}/ (ca.crt, client.cert, client.key)",
            ) from exc
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def trust_hint(self, host: str) -> str:
        """What to do about a certificate that could not be verified."""
        return (
            f"trust the registry's CA (the system trust store, --ca-file PATH or "
            f"{self.certs_dir}/{host}/ca.crt; ${CERTS_D_ENV} moves that folder), or skip "
            f"verification with --insecure {host}"
        )


_process = TLSSettings()


@contextmanager
def use_settings(*, insecure: Iterable[str] = (), ca_file: Path | None = None) -> Iterator[None]:
    """Make these the process's settings while the block runs (the CLI does, per command)."""
    global _process
    before = _process
    _process = replace(before, insecure=before.insecure | _hosts(insecure),
                       ca_file=ca_file or before.ca_file)  # fmt: skip
    try:
        yield
    finally:
        _process = before
