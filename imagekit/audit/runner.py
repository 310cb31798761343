"""Running the probe: inside the image under audit (locked down), or against this host.

In a container the probe gets nothing it does not need to read the environment: no network,
no GPU (CUDA_VISIBLE_DEVICES empty, NVIDIA_VISIBLE_DEVICES=void), the Hugging Face libraries
told to stay offline, CPU and memory limits, every capability dropped, no-new-privileges, a
read-only root filesystem with small tmpfs mounts for /tmp and HOME, the image's entrypoint
replaced by its own python3, and the probe bind-mounted read-only. ``--rm`` leaves nothing,
and the container is named, so that on the wall-clock limit (``timeout_s``), SIGINT or SIGTERM
imagekit kills and removes it itself. What it prints is read with a bound and streamed to
the evidence folder (imagekit.audit.output).

REF is resolved first: a local image ID or tag is used as it is; anything else is a registry
reference, pulled by digest. A tag is resolved through the registry to the digest it names at
that moment (the resolution is kept: tag, digest, time) and that digest is pulled, so what is
audited is content, never whatever the tag points at when the engine gets to it. The pinned
form stays the one to use: a tag can move between two runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from imagekit.audit.output import TAIL_CAP, Capture, Kept, MiB
from imagekit.audit.report import ProbeReport, parse_probe_output
from imagekit.errors import (
    AuditTimeout,
    CouldNotFinish,
    ImagekitError,
    ReferenceFormatError,
    UsageError,
)
from imagekit.evidence import write_json
from imagekit.interrupt import interrupted
from imagekit.refs import DOCKER_HUB, Digest, Platform, Reference, is_digest, parse_reference
from imagekit.registry.client import RegistryClient
from imagekit.runtime.engine import DockerEngine, Engine, engine_errors

PROBE_IN_CONTAINER = "/imagekit-probe/probe.py"
HOME_IN_CONTAINER = "/imagekit-home"
# The whole probe run's wall-clock limit: every check has its own (120 s by default, 600 s
# for RECORD hashing) and they run side by side, so an hour is generous; but finite, since
# an image's python3 can block forever outside any check.
DEFAULT_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Limits:
    """What the audit container may use; generous enough for `import torch` and pip."""

    cpus: float = 2.0
    memory: str = "4g"
    tmp_size: str = "256m"
    home_size: str = "64m"


@dataclass(frozen=True)
class EngineImage:
    """The image an audit runs: its engine ID and what names and digests it is known by."""

    requested: str
    image_id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    reference: Reference | None
    pulled: bool
    platform: Platform | None = None  # what the engine says the image is built for
    # Set when REF was a registry tag: "tag X resolved to DIGEST at TIME" (UTC).
    resolved_tag: str | None = None
    resolved_at: str | None = None
    pulled_platform: str | None = None  # the os/arch asked of an index when it was pulled

    @property
    def manifest_digest(self) -> Digest | None:
        """The manifest digest: the one REF pinned, else the first the engine recorded."""
        if self.reference is not None and self.reference.digest is not None:
            return self.reference.digest
        for item in self.repo_digests:
            _, _, digest = item.partition("@")
            if is_digest(digest):
                return Digest(digest)
        return None

    @property
    def name(self) -> str:
        """A name for the evidence folder: the repository, else ``image``."""
        if self.reference is not None:
            if self.reference.registry == DOCKER_HUB and not self.pulled:
                # A local tag: keep the name as typed, not the docker.io form refs gives it.
                return self.reference.repository.removeprefix("library/")
            return self.reference.name
        for tag in self.repo_tags:
            return tag.rpartition(":")[0] or tag
        return "image"


@contextmanager
def _probe_path() -> Iterator[Path]:
    """The probe file shipped as package data, as a real path the engine can bind-mount."""
    with resources.as_file(resources.files("imagekit.audit").joinpath("probe.py")) as path:
        yield path


def _looks_like_image_id(ref: str) -> bool:
    hexpart = ref.removeprefix("sha256:")
    return len(hexpart) >= 12 and all(c in "0123456789abcdef" for c in hexpart)


def _resolve_tag(reference: Reference) -> tuple[Reference, str]:
    """The digest a registry tag names right now, and when it was asked (UTC)."""
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with RegistryClient() as registry:
        _, _, digest = registry.get_manifest(reference, reference.identifier)
    return reference.pinned_only(digest), at


def resolve_image(engine: Engine, ref: str, platform: str | None = None) -> EngineImage:
    """Find REF locally, or pull it by digest (a tag is resolved through its registry first).

    ``platform`` (os/arch) picks the image of an index to pull, for an image of another
    architecture than the engine's (run under qemu's binfmt handlers).
    """
    client = engine.client
    with engine_errors(f"looking up {ref} in the local engine"):
        local = client.image.exists(ref)
    reference: Reference | None = None
    pulled = False
    resolved_tag: str | None = None
    resolved_at: str | None = None
    if not local:
        try:
            reference = parse_reference(ref)
        except ReferenceFormatError as exc:
            raise UsageError(
                f"{ref!r} is not a local image and not a registry reference",
                hint="give a local image ID or tag, or REGISTRY/REPO@sha256:DIGEST",
            ) from exc
        if not reference.pinned:
            resolved_tag = str(reference)
            reference, resolved_at = _resolve_tag(reference)
        pinned = str(reference.pinned_only())
        from python_on_whales.exceptions import DockerException  # loaded with the engine

        try:
            client.image.pull(pinned, quiet=True, platform=platform)
        except DockerException as exc:
            detail = str(exc.stderr or exc)
            if "no matching manifest" in detail:
                raise CouldNotFinish(
                    f"{pinned} has no image for {platform or 'the engine platform'}",
                    hint="name the platform to pull: imagekit audit REF --platform OS/ARCH "
                    "(or --plan NAME, whose base platform is used)",
                ) from exc
            with engine_errors(f"pulling {pinned}", registry=reference.registry):
                raise
        pulled = True
        ref = pinned
    elif not _looks_like_image_id(ref):
        try:
            reference = parse_reference(ref)
        except ReferenceFormatError:
            reference = None  # a name the engine knows but refs cannot parse: keep the ID
    with engine_errors(f"inspecting {ref}"):
        image = client.image.inspect(ref)
    own_platform = None
    if image.os and image.architecture:
        own_platform = Platform(
            str(image.os), str(image.architecture), getattr(image, "variant", None)
        )
    return EngineImage(
        requested=ref,
        image_id=str(image.id),
        repo_tags=tuple(image.repo_tags or ()),
        repo_digests=tuple(image.repo_digests or ()),
        reference=reference,
        pulled=pulled,
        platform=own_platform,
        resolved_tag=resolved_tag,
        resolved_at=resolved_at,
        pulled_platform=platform if pulled else None,
    )


@dataclass(frozen=True)
class ProbeRun:
    """How the probe ran and what was kept of its output (streamed to the evidence folder)."""

    command: tuple[str, ...]
    exit_code: int
    seconds: float
    stdout: Kept
    stderr: Kept

    def to_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "exit_code": self.exit_code,
            "seconds": self.seconds,
            "stdout": self.stdout.to_json(),
            "stderr": self.stderr.to_json(),
        }


_ENVS = {
    "CUDA_VISIBLE_DEVICES": "",
    "NVIDIA_VISIBLE_DEVICES": "void",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HOME": HOME_IN_CONTAINER,
    "PYTHONDONTWRITEBYTECODE": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
}


def container_argv(
    client: str, limits: Limits, probe: Path, image_id: str, name: str, spec_json: str
) -> list[str]:
    """The ``docker run`` that locks the audit container down (named, so it can be removed)."""
    return [
        client, "run", "--rm", "--name", name, "--label", "io.imagekit.audit=1",
        "--network", "none", "--cpus", str(limits.cpus), "--memory", limits.memory,
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
        "--tmpfs", f"/tmp:size={limits.tmp_size}",  # noqa: S108 - the container's /tmp
        "--tmpfs", f"{HOME_IN_CONTAINER}:size={limits.home_size}",
        *(x for k, v in sorted(_ENVS.items()) for x in ("-e", f"{k}={v}")),
        "-v", f"{probe}:{PROBE_IN_CONTAINER}:ro", "--pull", "never", "--entrypoint", "python3",
        image_id, PROBE_IN_CONTAINER, "--spec-json", spec_json,
    ]  # fmt: skip


def _remove_container(client: str, name: str) -> None:
    """Kill and remove the named container, also one the engine was still creating."""
    deadline = time.monotonic() + 15
    while True:
        subprocess.run(  # noqa: S603 - the engine's client, fixed arguments
            [client, "rm", "-f", name], capture_output=True, timeout=60, check=False
        )
        gone = subprocess.run(  # noqa: S603
            [client, "container", "inspect", name], capture_output=True, timeout=60, check=False
        )
        if gone.returncode != 0 or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def run_in_container(
    engine: DockerEngine,
    image: EngineImage,
    spec: dict[str, Any],
    limits: Limits | None = None,
    *,
    run_dir: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ProbeRun:
    """Run the probe in the image, its output streamed into ``run_dir``.

    The whole run has a wall-clock limit (AuditTimeout, exit 3); on that limit, on SIGINT
    and on SIGTERM the container is killed and removed before anything else happens.
    """
    limits = limits or Limits()
    name = f"imagekit-audit-{secrets.token_hex(6)}"
    client = engine.client_path
    with _probe_path() as probe:
        argv = container_argv(
            client, limits, probe, image.image_id, name, json.dumps(spec, sort_keys=True)
        )
        shown = ["docker", *argv[1:-1], "SPEC"]
        shown[shown.index(f"{probe}:{PROBE_IN_CONTAINER}:ro")] = f"probe.py:{PROBE_IN_CONTAINER}:ro"

        def stop(proc: subprocess.Popen[bytes]) -> None:
            # The client first, so that it cannot start a container after the removal.
            proc.kill()
            _remove_container(client, name)

        return _run_bounded(
            argv,
            tuple(shown),
            run_dir,
            timeout_s,
            what=f"the audit of {image.requested}",
            stop=stop,
        )


def run_on_host(
    spec: dict[str, Any], *, run_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ProbeRun:
    """Run the probe against this interpreter (``--host``): no container, GPU queried."""
    with _probe_path() as probe:
        argv = [sys.executable, str(probe), "--host", "--spec-json", json.dumps(spec)]

        def stop(proc: subprocess.Popen[bytes]) -> None:
            # The probe leads its own process group; its checks run in groups of their own
            # and end at their own timeouts.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        return _run_bounded(
            argv,
            ("python3", "probe.py", "--host", "--spec-json", "SPEC"),
            run_dir,
            timeout_s,
            what="the host audit",
            stop=stop,
        )


def _run_bounded(
    argv: list[str],
    shown: tuple[str, ...],
    run_dir: Path,
    timeout_s: float,
    *,
    what: str,
    stop: Callable[[subprocess.Popen[bytes]], None],
) -> ProbeRun:
    """Run argv with its output captured into run_dir; stop it on the limit or an interrupt.

    It runs in a session of its own, so a Ctrl-C reaches imagekit alone, which then stops
    it in order (the client, then the container) instead of racing it.
    """
    started = time.monotonic()
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 - PIPE
    out = Capture(proc.stdout, run_dir / "probe-stdout.raw")
    err = Capture(proc.stderr, run_dir / "probe-stderr.raw")

    def collect(state: str) -> ProbeRun:
        run = ProbeRun(
            command=shown,
            exit_code=proc.wait(),
            seconds=round(time.monotonic() - started, 3),
            stdout=out.finish(),
            stderr=err.finish(),
        )
        write_json(run_dir / "probe-run.json", {**run.to_json(), "ended": state})
        return run

    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(proc)
        run = collect("killed at the wall-clock limit")
        raise AuditTimeout(
            f"{what} did not finish within {timeout_s:g} s: the probe was killed and its "
            f"container removed; no status was decided (raw output kept in {run_dir})",
            timeout_s=timeout_s,
            evidence=run_dir,
            hint="raise --timeout if the image is slow to import; a hang is kept in the evidence",
        ) from None
    except KeyboardInterrupt as exc:
        stop(proc)
        run = collect("stopped by an interrupt")
        summary = (
            f"the probe was stopped before it printed a report ({run.stdout.total} bytes of "
            "output kept)"
        )
        raise interrupted(exc).keeping(
            {"summary": summary, "stdout_bytes": run.stdout.total}, run_dir
        ) from None
    return collect("exited")


def read_report(run: ProbeRun, target: str, run_dir: Path) -> tuple[ProbeReport, str | None]:
    """The probe's report and a note on how python3 ended; CouldNotFinish when none parses.

    The report decides, whatever the exit code: python3 may crash at shutdown after the
    probe printed a whole report. Without a report the failure is one line, the raw output
    stays in the evidence folder.
    """
    kept = f"raw output kept in {run_dir}"
    if run.stdout.report_cut:
        raise CouldNotFinish(
            f"the probe's report for {target} is longer than the last {TAIL_CAP // MiB} MiB "
            f"of its {run.stdout.total} bytes of output that are read back ({kept})",
            hint="the image printed far more than the probe does; look at the raw output",
        )
    try:
        report = parse_probe_output(run.stdout.last_line() or "")
    except ImagekitError as exc:
        said = run.stderr.last_words()
        if run.exit_code in _DID_NOT_START:
            message = f"the audit container for {target} did not run: {said}"
        elif run.exit_code != 0:
            message = f"python3 in {target} exited {run.exit_code} without a report: {said}"
        else:
            message = f"{exc.message} for {target}"
        raise CouldNotFinish(
            f"{message} ({kept})",
            hint=exc.hint
            if run.exit_code == 0
            else "the image needs python3 (3.8+) on its PATH; `docker info` must answer",
        ) from exc
    if run.exit_code != 0:
        return report, f"python3 exited {run.exit_code} after printing a report"
    return report, None


# docker run's own exit codes: the daemon failed (125), the command could not be run (126)
# or was not found (127); https://docs.docker.com/engine/containers/run/#exit-status
_DID_NOT_START = (125, 126, 127)
