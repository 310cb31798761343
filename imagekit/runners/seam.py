"""The runner seam: what every place that runs a probe (or pulls its image) answers to.

A stage says what to run (:class:`RunSpec`: the image by ID or digest, argv, env, mounts,
devices, network, limits) and hands it to a place:

- this host's processes (imagekit.runners.host: the Python given, the process tree killed
  whole on the limit);
- a container through the engine (imagekit.runners.engine: locked down, the devices, CDI
  names and shared memory it is given, named so imagekit removes it itself);
- a Kubernetes pod (imagekit.cluster.runner.PodPlace over PodRunner: submitted, waited for
  with a deadline and the scheduler's or kubelet's reasons, its log read bounded, its
  ``status.imageID`` the image the runtime ran, deleted).

Each place answers :class:`Runner` for the spec it takes (this host and the engine take a
:class:`RunSpec`; a cluster takes the pod document the stage rendered from the same facts:
the probe's ConfigMap volume, the Job's template): ``submit`` starts a run and gives its
:class:`Run` handle, which is waited for with a deadline (what it ended as, with
``timed_out`` when the deadline came first: what that proves is the stage's to decide),
gives its logs (bounded), the image ID the runtime ran, and is cleaned up (idempotent).
What a run ended as is the place's own typed record (a process's ``ProcessRun``, a pod's
``PodState``), so a stage reads what its place knows and nothing is squeezed into a common
denominator.

The places that pull an image so that a run, or the final pull, can use it answer
:class:`Puller`: pulled by reference, and the image ID that runtime holds it as.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from imagekit.runtime.container import Mount

__all__ = [
    "Devices",
    "Ended",
    "Held",
    "Limits",
    "Mount",
    "Puller",
    "Run",
    "RunSpec",
    "Runner",
    "run_to_end",
]


@dataclass(frozen=True)
class Devices:
    """What hardware a run is given: GPUs as the engine's ``--gpus`` takes them (``all``,
    a count, ``device=0,1``) or as CDI names (``nvidia.com/gpu=all``), and the shared
    memory NCCL's transport wants. The default gives none."""

    gpus: str | None = None
    cdi: tuple[str, ...] = ()
    shm_size: str | None = None


@dataclass(frozen=True)
class Limits:
    """What a run may use: CPUs, memory, and small writable scratch folders (path, size)
    over a read-only root filesystem."""

    cpus: float | None = None
    memory: str | None = None
    scratch: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunSpec:
    """What to run, the same for every place; each place takes what applies to it.

    ``argv`` is the whole command, its program first (in an image the program replaces the
    image's entrypoint). ``image`` is what runs it, by the engine's image ID or by digest,
    never a tag; None on this host. ``shown`` is the command as the evidence shows it
    (without a long spec or a local path), ``stage`` names the run (``imagekit-STAGE-…``),
    ``output`` prefixes its evidence files (``probe-stdout.raw``).
    """

    argv: tuple[str, ...]
    stage: str
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: Devices = field(default_factory=Devices)
    network: str = "none"
    limits: Limits = field(default_factory=Limits)
    label: str = "io.imagekit.run=1"
    shown: tuple[str, ...] | None = None
    output: str = "probe"


class Ended(Protocol):
    """What a run ended as, in its place's own terms; every one says whether its deadline
    came first."""

    @property
    def timed_out(self) -> bool: ...


End = TypeVar("End", bound=Ended, covariant=True)
Spec = TypeVar("Spec", contravariant=True)


class Run(Protocol[End]):
    """One run, submitted: waited for, its logs, the image it ran, cleaned up."""

    @property
    def name(self) -> str:
        """How the place names it (the container's name, namespace/pod, the pid)."""
        ...

    def wait(self, deadline_s: float) -> End:
        """Until it ends, or ``deadline_s`` seconds pass (then ``timed_out``)."""
        ...

    def logs(self) -> str:
        """What it printed, as far as the place keeps it (bounded)."""
        ...

    def image_id(self) -> str | None:
        """The image the runtime ran, as that runtime names it (None on this host)."""
        ...

    def cleanup(self) -> None:
        """Remove what the run left (the container, the pod); again is harmless."""
        ...


class Runner(Protocol[Spec, End]):
    """A place that runs: ``submit`` starts the run ``spec`` describes, its output kept in
    ``run_dir``."""

    @property
    def where(self) -> str:
        """The place, in words (the engine, this host, the cluster's namespace)."""
        ...

    def submit(self, spec: Spec, run_dir: Path) -> Run[End]: ...


class Held(Protocol):
    """An image as a runtime holds it after a pull."""

    @property
    def image_id(self) -> str: ...


Pulled = TypeVar("Pulled", bound=Held, covariant=True)


class Puller(Protocol[Pulled]):
    """A place that pulls: the image by reference, and what that runtime holds it as."""

    def pull(self, reference: str, *, registry: str | None = None) -> Pulled: ...


def run_to_end(runner: Runner[Spec, End], spec: Spec, run_dir: Path, deadline_s: float) -> End:
    """Submit SPEC to RUNNER, wait for its end or the deadline, clean up whatever happens."""
    run = runner.submit(spec, run_dir)
    try:
        return run.wait(deadline_s)
    finally:
        run.cleanup()
