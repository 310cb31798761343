"""Running the probe: inside the image under audit (locked down), or against this host.

In a container the probe gets nothing it does not need to read the environment: no network,
no GPU (CUDA_VISIBLE_DEVICES empty, NVIDIA_VISIBLE_DEVICES=void), the Hugging Face libraries
told to stay offline, CPU and memory limits, every capability dropped, no-new-privileges, a
read-only root filesystem with small tmpfs mounts for /tmp and HOME, the image's entrypoint
replaced by its own python3, and the probe bind-mounted read-only. ``--rm`` leaves nothing.

REF is resolved first: a local image ID or tag is used as it is; anything else must be a
registry reference pinned by digest, and is pulled by that digest (never by a movable tag).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from python_on_whales.exceptions import DockerException

from imagekit.engine import Engine, docker_error_text, engine_errors
from imagekit.errors import CouldNotFinish, ReferenceFormatError, UsageError
from imagekit.refs import DOCKER_HUB, Digest, Platform, Reference, is_digest, parse_reference

PROBE_IN_CONTAINER = "/imagekit-probe/probe.py"
HOME_IN_CONTAINER = "/imagekit-home"


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


def resolve_image(engine: Engine, ref: str) -> EngineImage:
    """Find REF locally, or pull it by digest; a tag that is not local is refused."""
    client = engine.client
    with engine_errors(f"looking up {ref} in the local engine"):
        local = client.image.exists(ref)
    reference: Reference | None = None
    pulled = False
    if not local:
        try:
            reference = parse_reference(ref)
        except ReferenceFormatError as exc:
            raise UsageError(
                f"{ref!r} is not a local image and not a registry reference",
                hint="give a local image ID or tag, or REGISTRY/REPO@sha256:DIGEST",
            ) from exc
        if not reference.pinned:
            raise UsageError(
                f"{ref} is not in the local engine and is not pinned by digest",
                hint="audit REGISTRY/REPO@sha256:... (what `imagekit inspect REF` prints), "
                "or pull the tag yourself first",
            )
        pinned = str(reference.pinned_only())
        with engine_errors(f"pulling {pinned}"):
            client.image.pull(pinned, quiet=True)
        pulled = True
        ref = pinned
    elif not _looks_like_image_id(ref):
        try:
            reference = parse_reference(ref)
        except ReferenceFormatError:
            reference = None  # a name the engine knows but refs cannot parse: keep the ID
    with engine_errors(f"inspecting {ref}"):
        image = client.image.inspect(ref)
    platform = None
    if image.os and image.architecture:
        platform = Platform(str(image.os), str(image.architecture), getattr(image, "variant", None))
    return EngineImage(
        requested=ref,
        image_id=str(image.id),
        repo_tags=tuple(image.repo_tags or ()),
        repo_digests=tuple(image.repo_digests or ()),
        reference=reference,
        pulled=pulled,
        platform=platform,
    )


@dataclass(frozen=True)
class ProbeRun:
    """The probe's raw output and how it ran (the command is kept for the evidence)."""

    stdout: str
    stderr: str
    command: tuple[str, ...]


def container_options(limits: Limits, probe: Path) -> dict[str, Any]:
    """The python-on-whales run() options that lock the audit container down."""
    return {
        "remove": True,
        "networks": ["none"],
        "envs": {
            "CUDA_VISIBLE_DEVICES": "",
            "NVIDIA_VISIBLE_DEVICES": "void",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HOME": HOME_IN_CONTAINER,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
        },
        "cpus": limits.cpus,
        "memory": limits.memory,
        "cap_drop": ["ALL"],
        "security_options": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": [f"/tmp:size={limits.tmp_size}", f"{HOME_IN_CONTAINER}:size={limits.home_size}"],  # noqa: S108 - the container's /tmp
        "entrypoint": "python3",
        "volumes": [(str(probe), PROBE_IN_CONTAINER, "ro")],
        "pull": "never",
    }


def run_in_container(
    engine: Engine, image: EngineImage, spec: dict[str, Any], limits: Limits | None = None
) -> ProbeRun:
    """Run the probe in the image; CouldNotFinish when the container itself did not run."""
    limits = limits or Limits()
    args = [PROBE_IN_CONTAINER, "--spec-json", json.dumps(spec, sort_keys=True)]
    with _probe_path() as probe:
        options = container_options(limits, probe)
        shown = (
            "docker", "run", "--rm", "--network", "none", "--cpus", str(limits.cpus),
            "--memory", limits.memory, "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--read-only",
            "--tmpfs", options["tmpfs"][0], "--tmpfs", options["tmpfs"][1],
            *(x for k, v in sorted(options["envs"].items()) for x in ("-e", f"{k}={v}")),
            "-v", f"probe.py:{PROBE_IN_CONTAINER}:ro", "--entrypoint", "python3",
            image.image_id, PROBE_IN_CONTAINER, "--spec-json", "SPEC",
        )  # fmt: skip
        try:
            output = engine.client.run(image.image_id, args, **options)
        except DockerException as exc:
            raise CouldNotFinish(
                f"the audit container for {image.requested} did not run: {docker_error_text(exc)}",
                hint="the image needs python3 (3.8+) on its PATH; `docker info` must answer",
            ) from exc
    return ProbeRun(stdout=str(output), stderr="", command=shown)


def run_on_host(spec: dict[str, Any], *, timeout_s: float = 3600.0) -> ProbeRun:
    """Run the probe against this interpreter (``--host``): no container, GPU queried."""
    with _probe_path() as probe:
        argv = [sys.executable, str(probe), "--host", "--spec-json", json.dumps(spec)]
        try:
            proc = subprocess.run(  # noqa: S603 - fixed argv, no shell
                argv, capture_output=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise CouldNotFinish(f"the host probe did not finish within {timeout_s:.0f}s") from exc
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:]
        raise CouldNotFinish(f"the host probe exited {proc.returncode}: {' '.join(tail)}")
    return ProbeRun(
        stdout=proc.stdout.decode("utf-8", errors="replace"),
        stderr=proc.stderr.decode("utf-8", errors="replace"),
        command=("python3", "probe.py", "--host", "--spec-json", "SPEC"),
    )
