"""The local Docker engine, reached through python-on-whales, and its one error boundary.

The docker client first on PATH may lack buildx (a 28.x client without the plugin refuses
BuildKit for `docker build`), while Debian's 20.10 client at /usr/bin/docker builds through
the engine's BuildKit with DOCKER_BUILDKIT=1. So the client is chosen here once: the first
client that has buildx, else a client that can do a BuildKit legacy build. $IMAGEKIT_DOCKER_BUILDX=0
chooses the legacy client even where buildx is installed (a broken plugin; the tests, which
exercise both paths). A build through buildx names its builder: the docker-driver builder of
the client's current context (buildx names it after the context), the engine the base was
pulled into, whatever `docker buildx use` or $BUILDX_BUILDER selected for other work.
Every python-on-whales exception is translated here: to EngineUnavailable, or, for a registry
whose TLS the engine could not verify or that refused its certificate, to RegistryTLSError
saying how the engine is made to trust it (:func:`engine_tls_error`).
python-on-whales is imported only when the engine is used (it costs a command that never
touches the engine, such as a registry build, some 0.3 s of start-up).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from imagekit.errors import EngineUnavailable, RegistryTLSError
from imagekit.refs import Platform

if TYPE_CHECKING:
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException


START_HINT = (
    "start the engine: `scripts/setup-host.sh` (or as root: "
    "`dockerd --bridge=none --iptables=false --ip-masq=false &`), then check `docker info`"
)
_FALLBACK_CLIENTS = ("/usr/bin/docker",)
#: Where the engine (and so imagekit's own client, by default) finds a registry's CA and
#: client certificate; dockerd reads ``HOST:PORT/`` in it afresh on every pull and push.
ENGINE_CERTS_D = Path("/etc/docker/certs.d")
# What the engine's Go TLS stack says about a certificate it could not verify
# ("x509: certificate signed by unknown authority", "x509: certificate is valid for A,
# not B") or a handshake the registry refused ("remote error: tls: bad certificate").
_TLS_UNVERIFIED = re.compile(r"x509: [^\"\n]*")
# A registry the engine counts as secure that answers in plain HTTP.
_PLAIN_HTTP = re.compile(
    r"server gave HTTP response to HTTPS client|first record does not look like a TLS handshake"
)
_TLS_REFUSED = re.compile(r"(?:remote error: )?tls: [^\"\n]*")
BUILDX_ENV = "IMAGEKIT_DOCKER_BUILDX"
_OFF = ("0", "off", "no", "false")


class DockerEngine(Protocol):
    """What the stages and flows read of a connected engine (``Engine`` is the real one)."""

    @property
    def client(self) -> DockerClient: ...

    @property
    def client_path(self) -> str: ...

    @property
    def has_buildx(self) -> bool: ...

    @property
    def buildx_builder(self) -> str | None: ...

    @property
    def server_version(self) -> str: ...

    @property
    def storage_driver(self) -> str: ...

    @property
    def image_store(self) -> str: ...


def docker_error_text(exc: DockerException) -> str:
    """The last line the docker client printed about a failure (what a user needs to see)."""
    detail = (exc.stderr or exc.stdout or str(exc)).strip().splitlines()
    return detail[-1] if detail else str(exc)


@dataclass(frozen=True)
class Engine:
    """A connected engine: the client to call and whether it has buildx."""

    client: DockerClient
    client_path: str
    has_buildx: bool
    server_version: str
    storage_driver: str
    # "containerd" when the engine's image store is containerd's (image IDs are manifest
    # digests there), "classic" otherwise (image IDs are config digests).
    image_store: str
    # The engine's own buildx builder (docker driver), named after the current context; None
    # when builds go through the legacy client.
    buildx_builder: str | None = None


def _has_buildx(path: str) -> bool:
    try:
        result = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [path, "buildx", "version"], capture_output=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def buildx_wanted() -> bool:
    """False where $IMAGEKIT_DOCKER_BUILDX turns buildx off (0, off, no, false)."""
    return os.environ.get(BUILDX_ENV, "").strip().lower() not in _OFF


def _context_name(path: str) -> str:
    """The client's current context; buildx's docker-driver builder for it has its name."""
    try:
        result = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [path, "context", "inspect", "--format", "{{.Name}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineUnavailable(f"asking {path} for its context failed: {exc}") from exc
    name = result.stdout.strip()
    if result.returncode != 0 or not name:
        detail = (result.stderr.strip().splitlines() or ["no name printed"])[-1]
        raise EngineUnavailable(
            f"asking {path} for its current context failed: {detail}",
            hint="check `docker context ls`; $DOCKER_CONTEXT must name an existing context",
        )
    return name


def _candidate_clients() -> list[str]:
    seen: list[str] = []
    override = os.environ.get("IMAGEKIT_DOCKER_CLIENT")
    if override:
        if not os.path.exists(override) and shutil.which(override) is None:
            raise EngineUnavailable(
                f"the docker client {override} (IMAGEKIT_DOCKER_CLIENT) does not exist",
                hint="point IMAGEKIT_DOCKER_CLIENT at a docker client, or unset it",
            )
        return [override]
    first = shutil.which("docker")
    for path in (first, *_FALLBACK_CLIENTS):
        if path and os.path.exists(path) and path not in seen:
            seen.append(path)
    return seen


def buildx_client() -> str:
    """A docker client with buildx, found without asking any engine (a remote builder needs
    none); EngineUnavailable when no client here has buildx."""
    found = next((c for c in _candidate_clients() if _has_buildx(c)), None)
    if found is None:
        raise EngineUnavailable(
            "no docker client here has the buildx plugin",
            hint="run scripts/setup-host.sh (it links docker-buildx into ~/.docker/cli-plugins)",
        )
    return found


def engine_tls_error(text: str, registry: str) -> RegistryTLSError | None:
    """The engine's failure to reach ``registry`` over TLS, said as imagekit's own client
    says it (one line naming the registry, a hint saying what to do), or None for any
    other failure.

    The hint names what the engine reads, not imagekit's options: the engine knows nothing
    of ``--ca-file`` or ``$IMAGEKIT_CERTS_D``, only its own ``/etc/docker/certs.d`` (which
    imagekit's client reads too unless told otherwise) and its ``insecure-registries``.
    """
    folder = f"{ENGINE_CERTS_D}/{registry}/"
    unverified = _TLS_UNVERIFIED.search(text)
    if unverified is not None:
        return RegistryTLSError(
            f"{registry}: the Docker engine could not verify the TLS certificate of "
            f"{registry} ({unverified.group(0).strip()})",
            registry=registry,
            hint=f"put the registry's CA in {folder}ca.crt (the engine reads it on each "
            "pull, no restart; imagekit reads it too; --ca-file is imagekit's alone), or add "
            f"{registry} to the engine's insecure-registries (/etc/docker/daemon.json, then "
            "restart the engine)",
        )
    plain = _PLAIN_HTTP.search(text)
    if plain is not None:
        return RegistryTLSError(
            f"{registry}: the Docker engine spoke TLS to {registry}, which answered in plain "
            f"HTTP ({plain.group(0)})",
            registry=registry,
            hint=f"serve the registry over TLS, or add {registry} to the engine's "
            "insecure-registries (/etc/docker/daemon.json, then restart the engine) and "
            f"pass --insecure {registry} to imagekit",
        )
    refused = _TLS_REFUSED.search(text)
    if refused is not None:
        return RegistryTLSError(
            f"{registry}: the TLS handshake between the Docker engine and {registry} failed "
            f"({refused.group(0).strip()})",
            registry=registry,
            hint=f"it may want a client certificate: put client.cert and client.key in "
            f"{folder} (the engine reads them on each pull); check its ca.crt there too",
        )
    return None


@contextmanager
def engine_errors(action: str, *, registry: str | None = None) -> Iterator[None]:
    """Translate python-on-whales failures into EngineUnavailable naming the action, or,
    when the action talks to ``registry``, a TLS failure into RegistryTLSError."""
    from python_on_whales.exceptions import DockerException

    try:
        yield
    except DockerException as exc:
        text = docker_error_text(exc)
        tls = engine_tls_error(text, registry) if registry else None
        if tls is not None:
            raise tls from exc
        raise EngineUnavailable(f"{action} failed: {text}", hint=START_HINT) from exc


@cache
def connect() -> Engine:
    """Find a client, check the engine answers, and report how builds will run."""
    from python_on_whales import DockerClient

    clients = _candidate_clients()
    if not clients:
        raise EngineUnavailable("no docker client found on PATH", hint=START_HINT)
    chosen = next((c for c in clients if _has_buildx(c)), None) if buildx_wanted() else None
    has_buildx = chosen is not None
    if chosen is None:
        # Prefer Debian's client: it can drive BuildKit without buildx.
        chosen = next((c for c in clients if c in _FALLBACK_CLIENTS), clients[0])
    client = DockerClient(client_call=[chosen])
    with engine_errors("asking the Docker engine for `docker info`"):
        info = client.system.info()
    driver_status = dict(info.driver_status or [])
    store = "containerd" if "io.containerd.snapshotter" in str(driver_status) else "classic"
    return Engine(
        client=client,
        client_path=chosen,
        has_buildx=has_buildx,
        server_version=str(info.server_version),
        storage_driver=str(info.driver),
        image_store=store,
        buildx_builder=_context_name(chosen) if has_buildx else None,
    )


# os.uname().machine -> the OCI architecture an engine runs natively.
_HOST_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
                       "s390x": "s390x", "riscv64": "riscv64"}  # fmt: skip
# OCI architecture -> the name of qemu-user's binfmt_misc handler for it.
_QEMU_HANDLERS = {"amd64": "qemu-x86_64", "arm64": "qemu-aarch64", "arm": "qemu-arm",
                  "ppc64le": "qemu-ppc64le", "s390x": "qemu-s390x", "riscv64": "qemu-riscv64",
                  "386": "qemu-i386", "mips64le": "qemu-mips64el"}  # fmt: skip
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


@dataclass(frozen=True)
class Execution:
    """Whether this host's engine can run an image of a platform, and how.

    ``how`` is ``native``, ``emulated`` (a qemu-user binfmt_misc handler registered with the
    F flag, so the kernel opens the emulator for processes inside containers too) or
    ``impossible``; ``note`` is what every status of such a run carries in its scope.
    """

    platform: str
    how: str
    emulator: str | None
    reason: str

    @property
    def runs(self) -> bool:
        return self.how != "impossible"

    @property
    def note(self) -> str:
        if self.how == "emulated":
            return f"emulated ({self.emulator})"
        if self.how == "native":
            return f"native ({self.platform})"
        return f"NOT RUN: {self.reason}"


def host_architecture() -> str:
    machine = os.uname().machine
    return _HOST_ARCHITECTURES.get(machine, machine)


def execution_for(platform: Platform, *, binfmt_dir: Path = BINFMT_DIR) -> Execution:
    """How an image of ``platform`` would run here: natively, emulated, or not at all."""
    name = str(platform)
    host = host_architecture()
    if platform.os != "linux":
        return Execution(name, "impossible", None, f"{platform.os} images do not run on Linux")
    if platform.architecture == host or (host == "amd64" and platform.architecture == "386"):
        return Execution(name, "native", None, f"the host is linux/{host}")
    handler = _QEMU_HANDLERS.get(platform.architecture)
    if handler is None:
        return Execution(name, "impossible", None, f"no emulator is known for {name}")
    path = binfmt_dir / handler
    try:
        status = (binfmt_dir / "status").read_text().strip()
        text = path.read_text()
    except OSError:
        return Execution(
            name,
            "impossible",
            handler,
            f"the host is linux/{host} and no {handler} binfmt_misc handler is registered "
            "(install qemu-user-static and binfmt-support; scripts/setup-host.sh does)",
        )
    lines = text.splitlines()
    flags = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("flags:")), "")
    if status != "enabled" or not lines or lines[0].strip() != "enabled":
        return Execution(name, "impossible", handler, f"the {handler} handler is disabled")
    if "F" not in flags:
        return Execution(
            name,
            "impossible",
            handler,
            f"the {handler} handler lacks the F flag, so it cannot run inside containers",
        )
    return Execution(name, "emulated", handler, f"the host is linux/{host}")
