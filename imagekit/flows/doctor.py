"""A preflight before a long build: find the reasons it cannot work while they are cheap to see.

A serving deployment's preflight (the MiniMax-H3 on DGX Spark write-up that h3-spark comes
from) checks architecture, memory and model files before a nine-minute cold start, because
finding out afterwards wastes the nine minutes. A 10-30 GB image build has the same shape, so
before one starts we check: the engine answers; BuildKit is reachable (buildx, or a client that
builds through the engine's BuildKit); the disk holds the base with headroom; the host can run
the plan's platform (natively, or through an installed qemu binfmt handler); every registry the
plan touches answers and accepts our credentials (the base is resolved, which proves pull
access); and the CA bundle that RUN steps mount exists.

One line a check. Fail-closed: a check that could not be made is a "no", never an "ok"; a
check that does not apply (no plan given, no pip step) says "skip" and why.
"""

from __future__ import annotations

import os
import platform as host_platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from imagekit.builders.context import CA_ENV, DEFAULT_CA_BUNDLE
from imagekit.errors import ImagekitError
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan
from imagekit.plans.steps import PipInstall
from imagekit.progress import plural
from imagekit.refs import Platform, parse_reference, repository_for
from imagekit.registry.client import RegistryClient
from imagekit.runtime.engine import DockerEngine
from imagekit.workspace import Workspace


class PreflightStatus(StrEnum):
    OK = "ok"
    NO = "no"
    SKIP = "skip"


# The members under short names, for the checks below.
OK, NO, SKIP = PreflightStatus
GiB = 1 << 30
# A gzip'd rootfs layer inflates about 2.7-fold (measured on a Debian rootfs layer: 280 MB of
# gzip became 756 MB of tar); the engine
# holds the download and the extracted layer at once, then the build adds its own layers.
# So: compressed x (1 download + 3 extracted) + 2 GiB for the build's layers and evidence.
HEADROOM_FACTOR = 4.0
HEADROOM_FIXED = 2 * GiB
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# uname -m -> OCI architecture, and OCI architecture -> the name qemu's binfmt handler uses.
_UNAME_TO_OCI = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "i686": "386",
    "i386": "386",
}
_OCI_TO_QEMU = {
    "amd64": "x86_64",
    "arm64": "aarch64",
    "arm": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "386": "i386",
}


@dataclass(frozen=True)
class PreflightCheck:
    name: str
    status: PreflightStatus
    detail: str
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class DoctorReport:
    plan: str | None
    checks: tuple[PreflightCheck, ...]
    evidence: Path | None = None  # where a flow kept the report (the doctor writes none)

    # A preflight appends no record.
    ledger_seqs: ClassVar[tuple[int, ...]] = ()

    @property
    def ok(self) -> bool:
        return all(c.status != NO for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def failed(self) -> tuple[PreflightCheck, ...]:
        return tuple(c for c in self.checks if c.status == NO)

    def lines(self) -> list[str]:
        width = max((len(c.name) for c in self.checks), default=0)
        out = []
        for c in self.checks:
            out.append(f"{c.status.upper():4} {c.name:<{width}}  {c.detail}")
            if c.status == NO and c.hint:
                out.append(f"     {'':<{width}}  hint: {c.hint}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
        }


@dataclass(frozen=True)
class HostFacts:
    """What the checks read from the host; a seam so unit tests can describe other hosts."""

    machine: str = field(default_factory=host_platform.machine)
    binfmt_dir: Path = BINFMT_DIR
    # The same bundle the build mounts: $IMAGEKIT_PIP_CA, else the host's
    # (imagekit.builders.buildkit).
    ca_bundle: Path = field(
        default_factory=lambda: Path(os.environ.get(CA_ENV) or DEFAULT_CA_BUNDLE)
    )
    disk_usage: Callable[[str], Any] = shutil.disk_usage


def host_architecture(machine: str) -> str:
    return _UNAME_TO_OCI.get(machine, machine)


def check_engine() -> tuple[PreflightCheck, DockerEngine | None]:
    """The engine answers `docker info`; returns the Engine for the checks that need it."""
    from imagekit.runtime.engine import connect

    try:
        engine = connect()
    except ImagekitError as exc:
        return PreflightCheck("engine", NO, exc.message, exc.hint), None
    return (
        PreflightCheck(
            "engine",
            OK,
            f"Docker {engine.server_version}, {engine.storage_driver}, "
            f"{engine.image_store} image store, client {engine.client_path}",
        ),
        engine,
    )


def check_buildkit(engine: DockerEngine | None) -> PreflightCheck:
    """Build an empty Dockerfile through BuildKit to the local exporter: proves a session works.

    `--output` exists only with BuildKit, so a legacy builder cannot pass this by accident;
    nothing is added to the engine's images.
    """
    if engine is None:
        return PreflightCheck(
            "buildkit", NO, "not checked: the engine did not answer", "start the engine"
        )
    argv = [engine.client_path]
    argv += ["buildx", "build"] if engine.has_buildx else ["build"]
    if engine.has_buildx and engine.buildx_builder:
        argv += ["--builder", engine.buildx_builder]  # the builder a build would use
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    with tempfile.TemporaryDirectory(prefix="imagekit-doctor-") as tmp:
        argv += ["--output", f"type=local,dest={tmp}/out", "-"]
        try:
            result = subprocess.run(  # noqa: S603 - fixed argv, no shell
                argv,
                input=b"FROM scratch\n",
                capture_output=True,
                timeout=120,
                env=env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return PreflightCheck("buildkit", NO, f"the BuildKit probe did not run: {exc}")
    how = "buildx" if engine.has_buildx else "DOCKER_BUILDKIT=1 legacy client"
    if result.returncode != 0:
        last = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
        return PreflightCheck(
            "buildkit",
            NO,
            f"a BuildKit build through {how} failed: {last[-1] if last else 'no output'}",
            "install the buildx plugin, or Debian's docker.io client (/usr/bin/docker); "
            "set IMAGEKIT_DOCKER_CLIENT to pick a client",
        )
    return PreflightCheck("buildkit", OK, f"BuildKit answers through {how} ({engine.client_path})")


def check_ca_bundle(plan: LoadedPlan | None, facts: HostFacts) -> PreflightCheck:
    """The host CA bundle RUN steps mount (pip behind an intercepting proxy needs it).

    Only its presence and shape are checked; its contents are never printed.
    """
    needs = plan is None or any(isinstance(s, PipInstall) for s in plan.plan.steps)
    path = facts.ca_bundle
    try:
        head = path.read_bytes()[: 1 << 20]
    except OSError as exc:
        status = NO if needs else SKIP
        return PreflightCheck(
            "ca-bundle",
            status,
            f"{path} cannot be read ({exc.strerror})"
            + ("" if needs else "; the plan has no RUN step that needs it"),
            f"install ca-certificates or point {CA_ENV} at your CA bundle",
        )
    if b"BEGIN CERTIFICATE" not in head:
        return PreflightCheck(
            "ca-bundle",
            NO if needs else SKIP,
            f"{path} holds no PEM certificate",
            f"point {CA_ENV} at a PEM bundle",
        )
    return PreflightCheck("ca-bundle", OK, f"{path} is a PEM bundle (mounted into RUN steps only)")


def check_platform(plan: LoadedPlan | None, facts: HostFacts) -> PreflightCheck:
    """Whether this host runs each platform the plan builds (natively or under qemu-user);
    a plan of several platforms says no when any one of them cannot run here."""
    host = host_architecture(facts.machine)
    if plan is None:
        return PreflightCheck("platform", SKIP, f"host is linux/{host}; no plan given to compare")
    checks = [_check_one_platform(want, host, facts) for want in plan.platforms]
    failed = [c for c in checks if c.status == NO]
    if failed:
        return PreflightCheck("platform", NO, "; ".join(c.detail for c in failed), failed[0].hint)
    return PreflightCheck("platform", OK, "; ".join(c.detail for c in checks))


def _check_one_platform(want: Platform, host: str, facts: HostFacts) -> PreflightCheck:
    if want.architecture == host:
        return PreflightCheck("platform", OK, f"host linux/{host} runs {want} natively")
    qemu = _OCI_TO_QEMU.get(want.architecture, want.architecture)
    handler = facts.binfmt_dir / f"qemu-{qemu}"
    try:
        text = handler.read_text()
    except OSError:
        return PreflightCheck(
            "platform",
            NO,
            f"the plan wants {want} but the host is linux/{host}, and no qemu-{qemu} binfmt "
            "handler is registered",
            "install qemu-user-static and binfmt-support (or `docker run --privileged "
            "tonistiigi/binfmt --install all` where images can be pulled), or build on a "
            f"{want.architecture} host",
        )
    if not text.startswith("enabled"):
        return PreflightCheck(
            "platform", NO, f"{handler} is registered but disabled", f"echo 1 > {handler}"
        )
    return PreflightCheck(
        "platform",
        OK,
        f"the plan wants {want} on a linux/{host} host: emulated through {handler.name} "
        "(slow: expect builds several times longer)",
    )


def _docker_root(engine: DockerEngine | None) -> str | None:
    from imagekit.runtime.engine import engine_errors

    if engine is None:
        return None
    try:
        with engine_errors("asking the engine for its root folder"):
            info = engine.client.system.info()
    except ImagekitError:
        return None
    root = getattr(info, "docker_root_dir", None)
    return str(root) if root else None


def check_disk(
    root: str | None, base_bytes: int | None, base_error: str | None, facts: HostFacts
) -> PreflightCheck:
    """Free space where the engine keeps layers, against the base's size with headroom."""
    if root is None:
        return PreflightCheck(
            "disk",
            NO,
            "not checked: the engine's root folder is unknown",
            "start the engine so `docker info` names its DockerRootDir",
        )
    try:
        usage = facts.disk_usage(root)
    except OSError as exc:
        return PreflightCheck(
            "disk",
            NO,
            f"cannot measure {root}: {exc.strerror}",
            "run doctor on the engine's host (a remote engine's disk cannot be measured here)",
        )
    free = int(usage.free)
    if base_bytes is None:
        if base_error is not None:
            return PreflightCheck(
                "disk",
                NO,
                f"{_gib(free)} free under {root}; base size unknown: {base_error}",
                "make the base reachable first (see the base check)",
            )
        return PreflightCheck(
            "disk", SKIP, f"{_gib(free)} free under {root}; no plan to size against"
        )
    need = int(base_bytes * HEADROOM_FACTOR) + HEADROOM_FIXED
    detail = (
        f"{_gib(free)} free under {root}; the base is {_gib(base_bytes)} compressed, "
        f"{_gib(need)} needed ({HEADROOM_FACTOR:g}x + {_gib(HEADROOM_FIXED)} headroom)"
    )
    if free < need:
        return PreflightCheck(
            "disk",
            NO,
            detail,
            "free space: remove images you no longer need (`docker image ls`), or move the "
            "engine's data-root",
        )
    return PreflightCheck("disk", OK, detail)


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def check_registry(client: RegistryClient, host: str, role: str) -> PreflightCheck:
    try:
        client.ping(host)
    except ImagekitError as exc:
        return PreflightCheck(f"registry {role}", NO, f"{host}: {exc.message}", exc.hint)
    return PreflightCheck(
        f"registry {role}", OK, f"{host} answers /v2/ and accepts our credentials"
    )


def check_push_access(client: RegistryClient, repository: str, role: str) -> PreflightCheck:
    """Open an upload session in the repository and cancel it: proves push rights, writes nothing.

    ``/v2/`` accepting our credentials says nothing about push rights on one repository (a
    token registry answers /v2/ to anyone); the upload session is the first step of a real push.
    """
    ref = parse_reference(repository)
    name = f"push access {role}"
    try:
        response = client.request(
            "POST", ref, "blobs/uploads/", scope_actions=("pull", "push"), content=b""
        )
        location = response.headers.get("Location")
        if not location:
            return PreflightCheck(name, NO, f"{ref.name}: the upload answer has no Location header")
        client.request(
            "DELETE",
            ref,
            location,  # absolute path or full URL; request() keeps auth to the origin
            scope_actions=("pull", "push"),
            allow_status=(404, 405),
        )
    except ImagekitError as exc:
        return PreflightCheck(name, NO, f"{ref.name}: {exc.message}", exc.hint)
    return PreflightCheck(
        name, OK, f"{ref.name} accepts an upload from us (session opened and cancelled)"
    )


def check_base(
    client: RegistryClient, plan: LoadedPlan
) -> tuple[PreflightCheck, int | None, str | None]:
    """Resolve the pinned base for each platform the plan builds: proves pull access and
    sizes it (the sum over its platforms' images)."""
    total = 0
    found: list[str] = []
    for platform in plan.platforms:
        try:
            resolved = client.resolve(plan.base, platform)
        except ImagekitError as exc:
            return (
                PreflightCheck("base", NO, f"{plan.base}: {exc.message}", exc.hint),
                None,
                exc.message,
            )
        total += resolved.compressed_layer_bytes
        found.append(
            f"for {platform}: {plural(len(resolved.layers), 'layer')}, "
            f"{_gib(resolved.compressed_layer_bytes)} compressed"
        )
    return (
        PreflightCheck("base", OK, f"{plan.base} resolves " + "; ".join(found)),
        total,
        None,
    )


def _registry_host(text: str) -> str:
    """A registry given as host[:port] or as a reference prefix (host/repo)."""
    return parse_reference(text).registry if "/" in text else text


def run_doctor(
    workspace: Workspace,
    plan_name: str | None = None,
    *,
    registries: Sequence[tuple[str, str]] = (),
    base_override: str | None = None,
    client: RegistryClient | None = None,
    facts: HostFacts | None = None,
) -> DoctorReport:
    """Run every preflight check.

    ``registries`` are (role, target) pairs beyond the base's registry, each target a registry
    host or a repository prefix as `imagekit pipeline --registry/--mirror` take them; with a
    plan, push access is checked on the very repository the plan would be pushed to.
    """
    facts = facts or HostFacts()
    plan: LoadedPlan | None = None
    if plan_name is not None:
        plan = load_named_plan(workspace, plan_name, base_override=base_override)
    checks: list[PreflightCheck] = []
    engine_check, engine = check_engine()
    checks.append(engine_check)
    checks.append(check_buildkit(engine))
    owned = client is None
    # Two attempts, not five: a preflight should say "unreachable" quickly.
    client = client or RegistryClient(max_attempts=2)
    try:
        base_bytes: int | None = None
        base_error: str | None = None
        if plan is not None:
            checks.append(check_registry(client, plan.base.registry, "base"))
            base_check, base_bytes, base_error = check_base(client, plan)
            checks.append(base_check)
        for role, text in registries:
            checks.append(check_registry(client, _registry_host(text), role))
            if checks[-1].status == OK and (plan_name is not None or "/" in text):
                # The repository the pipeline will push this plan to.
                target = repository_for(text, plan_name) if plan_name is not None else text
                checks.append(check_push_access(client, target, role))
    finally:
        if owned:
            client.close()
    checks.append(check_disk(_docker_root(engine), base_bytes, base_error, facts))
    checks.append(check_platform(plan, facts))
    checks.append(check_ca_bundle(plan, facts))
    return DoctorReport(plan_name, tuple(checks))
