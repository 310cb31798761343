"""Running a process under a wall-clock limit, in a container of the engine or on this host.

Two stages run code that the image under test chooses: the audit's probe (no network, no GPU)
and the GPU preflight (the node's GPUs, the shared memory NCCL needs, no network). Both need
the same things from a run: a container that gets exactly the devices and network it is
given and nothing else, a name so that imagekit can kill and remove it itself, output read
with a bound and streamed to the evidence folder (imagekit.runtime.output), a wall-clock
limit, and on that limit, SIGINT or SIGTERM the container killed and removed (or, on the
host, every process of the run killed) before anything else happens. What the run proved is
the caller's to decide: a run that hit its limit comes back with ``timed_out`` set, and the
audit turns that into AuditTimeout while the GPU preflight turns it into its INCOMPLETE.
A run is started (:class:`Bounded`, :func:`start_container`) and then waited for, which is
how the runner seam (imagekit.runners) hands it out as a run to submit and wait for.

GPUs are asked for as the engine's ``--gpus`` takes them (``all``, a count, or
``device=0,1``: the NVIDIA container toolkit must be installed and registered with the
engine) or as CDI device names (``nvidia.com/gpu=all``, ``--device``: engines that have CDI
turned on). An engine without either refuses the run at once, and :func:`gpu_refusal` keeps
what the engine said.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.evidence import write_json
from imagekit.interrupt import interrupted
from imagekit.runtime.output import Capture, Kept


@dataclass(frozen=True)
class ProcessRun:
    """How a bounded run went and what was kept of its output (in the evidence folder)."""

    command: tuple[str, ...]
    exit_code: int
    seconds: float
    stdout: Kept
    stderr: Kept
    timed_out: bool = False
    container: str | None = None  # the container's name, where the run was one

    def to_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "exit_code": self.exit_code,
            "seconds": self.seconds,
            "stdout": self.stdout.to_json(),
            "stderr": self.stderr.to_json(),
            **({"timed_out": True} if self.timed_out else {}),
            **({"container": self.container} if self.container else {}),
        }


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = True

    def option(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class ContainerSpec:
    """What one container may use. The defaults lock it down: no network, no device, no
    capability, a read-only root filesystem; a caller widens only what its stage needs."""

    image: str  # the engine's image ID: what runs is what was resolved, never a tag
    argv: tuple[str, ...]
    entrypoint: str | None = None
    label: str = "io.imagekit.run=1"
    network: str = "none"
    gpus: str | None = None  # --gpus VALUE: all, a count, device=0,1
    cdi_devices: tuple[str, ...] = ()  # --device NAME: nvidia.com/gpu=all
    shm_size: str | None = None  # NCCL's shared-memory transport wants more than 64 MiB
    ipc: str | None = None
    ulimits: tuple[str, ...] = ()  # memlock=-1 for NCCL's pinned buffers
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    tmpfs: tuple[tuple[str, str], ...] = ()  # (path, size)
    cpus: float | None = None
    memory: str | None = None
    read_only: bool = True
    drop_capabilities: bool = True
    platform: str | None = None


def container_argv(client: str, spec: ContainerSpec, name: str) -> list[str]:
    """The ``docker run`` for SPEC, named so that it can be removed."""
    argv = [client, "run", "--rm", "--name", name, "--label", spec.label]
    argv += ["--network", spec.network]
    if spec.cpus is not None:
        argv += ["--cpus", f"{spec.cpus:g}"]
    if spec.memory is not None:
        argv += ["--memory", spec.memory]
    if spec.drop_capabilities:
        argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if spec.read_only:
        argv.append("--read-only")
    for path, size in spec.tmpfs:
        argv += ["--tmpfs", f"{path}:size={size}"]
    if spec.gpus is not None:
        argv += ["--gpus", spec.gpus]
    for device in spec.cdi_devices:
        argv += ["--device", device]
    if spec.shm_size is not None:
        argv += ["--shm-size", spec.shm_size]
    if spec.ipc is not None:
        argv += ["--ipc", spec.ipc]
    for ulimit in spec.ulimits:
        argv += ["--ulimit", ulimit]
    for key, value in sorted(spec.env.items()):
        argv += ["-e", f"{key}={value}"]
    for mount in spec.mounts:
        argv += ["-v", mount.option()]
    if spec.platform is not None:
        argv += ["--platform", spec.platform]
    argv += ["--pull", "never"]
    if spec.entrypoint is not None:
        argv += ["--entrypoint", spec.entrypoint]
    return [*argv, spec.image, *spec.argv]


def new_name(stage: str) -> str:
    return f"imagekit-{stage}-{secrets.token_hex(6)}"


def remove_container(client: str, name: str) -> None:
    """Kill and remove the named container, also one the engine was still creating."""
    deadline = time.monotonic() + 60  # a loaded engine can take this long to let it go
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


def start_container(
    client: str,
    spec: ContainerSpec,
    run_dir: Path,
    *,
    stage: str,
    shown: tuple[str, ...] | None = None,
    stream_prefix: str = "probe",
) -> Bounded:
    """Start SPEC's container, named, its output captured into ``run_dir``; on the limit,
    SIGINT and SIGTERM it is killed and removed before anything else happens."""
    name = new_name(stage)
    argv = container_argv(client, spec, name)

    def stop(proc: subprocess.Popen[bytes]) -> None:
        # The client first, so that it cannot start a container after the removal.
        proc.kill()
        remove_container(client, name)

    return Bounded(
        argv, shown or tuple(argv), run_dir, stop=stop, stream_prefix=stream_prefix, container=name
    )


def run_container(
    client: str,
    spec: ContainerSpec,
    run_dir: Path,
    timeout_s: float,
    *,
    stage: str,
    shown: tuple[str, ...] | None = None,
    stream_prefix: str = "probe",
) -> ProcessRun:
    """Run SPEC's container to its end or TIMEOUT_S (see :func:`start_container`)."""
    started = start_container(
        client, spec, run_dir, stage=stage, shown=shown, stream_prefix=stream_prefix
    )
    return started.wait(timeout_s)


def process_tree(pid: int) -> list[int]:
    """PID and every process descended from it, read from /proc (children before parents)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces; the ppid follows it
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []

    def walk(node: int) -> None:
        for child in parents.get(node, []):
            walk(child)
        found.append(node)

    walk(pid)
    return found


def kill_tree(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """End a host run and everything it started: its process group first (SIGTERM, then
    SIGKILL after GRACE_S), then any descendant that left the group (a launcher that starts
    its workers in sessions of their own), found through /proc before anything is killed."""
    descendants = process_tree(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    descendants += [p for p in process_tree(proc.pid) if p not in descendants]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in descendants:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


class Bounded:
    """A started run: its output read into the evidence folder until :meth:`wait` ends it.

    It runs in a session of its own, so a Ctrl-C reaches imagekit alone, which then stops
    it in order (the client, then the container; or the whole process tree) instead of
    racing it.
    """

    def __init__(
        self,
        argv: list[str],
        shown: tuple[str, ...],
        run_dir: Path,
        *,
        stop: Callable[[subprocess.Popen[bytes]], None],
        stream_prefix: str = "probe",
        env: Mapping[str, str] | None = None,
        container: str | None = None,
    ) -> None:
        self._shown, self._run_dir, self._stop = shown, run_dir, stop
        self._prefix, self.container = stream_prefix, container
        self._started = time.monotonic()
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None  # noqa: S101
        self._out = Capture(self._proc.stdout, run_dir / f"{stream_prefix}-stdout.raw")
        self._err = Capture(self._proc.stderr, run_dir / f"{stream_prefix}-stderr.raw")
        self.ended: ProcessRun | None = None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _collect(self, state: str, timed_out: bool = False) -> ProcessRun:
        proc = self._proc
        run = ProcessRun(
            command=self._shown,
            exit_code=proc.wait(),
            seconds=round(time.monotonic() - self._started, 3),
            stdout=self._out.finish(),
            stderr=self._err.finish(),
            timed_out=timed_out,
            container=self.container,
        )
        write_json(self._run_dir / f"{self._prefix}-run.json", {**run.to_json(), "ended": state})
        self.ended = run
        return run

    def wait(self, timeout_s: float) -> ProcessRun:
        """Until it exits or TIMEOUT_S pass: on the limit it is stopped and comes back with
        ``timed_out``; on an interrupt it is stopped and Interrupted is raised keeping what
        was read."""
        if self.ended is not None:
            return self.ended
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._stop(self._proc)
            return self._collect("killed at the wall-clock limit", timed_out=True)
        except KeyboardInterrupt as exc:
            self._stop(self._proc)
            run = self._collect("stopped by an interrupt")
            summary = (
                f"the run was stopped before it finished ({run.stdout.total} bytes of output kept)"
            )
            raise interrupted(exc).keeping(
                {"summary": summary, "stdout_bytes": run.stdout.total}, self._run_dir
            ) from None
        return self._collect("exited")

    def stop(self) -> None:
        """Stop it now, if it still runs (a caller that gives up on it), and keep what it
        printed; a run already waited for is left as it ended."""
        if self.ended is not None:
            return
        if self._proc.poll() is None:
            self._stop(self._proc)
            self._collect("stopped by its caller")
        else:
            self._collect("exited")


# What an engine says when it is asked for GPUs it cannot give (Docker 20.10 to 28).
# Seen here: `--gpus` without the NVIDIA container toolkit (20.10 and 28.x engines alike):
# 'could not select device driver "" with capabilities: [[gpu]]'; a CDI name on an engine
# without CDI: 'could not select device driver "cdi"' (28.x client), 'nvidia.com/gpu=all is
# not an absolute path' (20.10 client, which takes --device as a host path). The rest are
# the toolkit's and CDI's own refusals on hosts that have them (not produced here).
_NO_GPU_RUNTIME = re.compile(
    r"could not select device driver|is not an absolute path"
    r"|unresolvable CDI devices|CDI device injection failed|unknown device"
    r"|nvidia-container-cli|no CDI specification|CDI is not enabled",
    re.IGNORECASE,
)


def gpu_refusal(run: ProcessRun) -> str | None:
    """What the engine said when it refused a run's GPU request (no NVIDIA runtime, no CDI
    spec, no such device), or None when the run did not fail that way. The engine's exit
    codes 125-127 mean the container never started: docs.docker.com/engine/containers/run."""
    if run.exit_code not in (125, 126, 127):
        return None
    for line in reversed(run.stderr.tail.decode("utf-8", errors="replace").splitlines()):
        if _NO_GPU_RUNTIME.search(line):
            said = line.strip().removeprefix("docker: ")
            return said if len(said) <= 400 else said[:397] + "..."
    return None
