"""A container through the engine as a place to run, and the engine as a place that pulls.

The run is locked down as imagekit.runtime.container's defaults lock it (every capability
dropped, no-new-privileges, a read-only root filesystem, ``--pull never``, named so that
imagekit removes it itself); it gets the network, devices (``--gpus``, CDI names, shared
memory), mounts, scratch tmpfs and limits its spec gives, and nothing else. The spec's
program replaces the image's entrypoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit import progress
from imagekit.runners.host import Started
from imagekit.runners.seam import RunSpec
from imagekit.runtime.container import ContainerSpec, start_container
from imagekit.runtime.engine import Engine, engine_errors


def container_spec(spec: RunSpec) -> ContainerSpec:
    """The engine's container for SPEC (its image by the engine's ID or by digest)."""
    if spec.image is None:
        raise ValueError("a container runs an image: the spec names none")
    program, *args = spec.argv
    return ContainerSpec(
        image=spec.image,
        argv=tuple(args),
        entrypoint=program,
        label=spec.label,
        network=spec.network,
        gpus=spec.devices.gpus,
        cdi_devices=spec.devices.cdi,
        shm_size=spec.devices.shm_size,
        env=spec.env,
        mounts=spec.mounts,
        tmpfs=spec.limits.scratch,
        cpus=spec.limits.cpus,
        memory=spec.limits.memory,
    )


@dataclass(frozen=True)
class EnginePulled:
    """An image as the engine holds it after a pull: its image ID (what it means depends on
    the image store), RepoDigests, platform and tags."""

    image_id: str
    repo_digests: tuple[str, ...]
    os: str | None
    architecture: str | None
    repo_tags: tuple[str, ...]


class EngineRunner:
    """Containers of the engine whose client is at ``client`` (and, to pull, the engine)."""

    def __init__(self, client: str, engine: Engine | None = None) -> None:
        self.client, self.engine = client, engine

    @classmethod
    def of(cls, engine: Engine) -> EngineRunner:
        return cls(engine.client_path, engine)

    @property
    def where(self) -> str:
        return f"the engine through {self.client}"

    def submit(self, spec: RunSpec, run_dir: Path) -> Started:
        bounded = start_container(
            self.client,
            container_spec(spec),
            run_dir,
            stage=spec.stage,
            shown=spec.shown,
            stream_prefix=spec.output,
        )
        assert bounded.container is not None  # noqa: S101 - start_container names it
        return Started(bounded, spec.image, bounded.container)

    def pull(self, reference: str, *, registry: str | None = None) -> EnginePulled:
        """Pull REFERENCE through the engine (its own credentials, its own store) and read
        back what it holds; the engine's refusal as imagekit's error."""
        if self.engine is None:
            raise ValueError("pulling needs the engine, not only its client")
        client = self.engine.client
        with (
            engine_errors(f"pulling {reference}", registry=registry),
            progress.current().waiting(f"pulling {reference} into the engine"),
        ):
            client.image.pull(reference, quiet=True)
        with engine_errors(f"inspecting {reference}"):
            image = client.image.inspect(reference)
        return EnginePulled(
            image_id=str(image.id),
            repo_digests=tuple(str(d) for d in (image.repo_digests or ())),
            os=image.os,
            architecture=image.architecture,
            repo_tags=tuple(str(t) for t in (image.repo_tags or ())),
        )
