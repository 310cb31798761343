"""Running the probe: inside the image under audit (locked down), or against this host.

In a container the probe gets nothing it does not need to read the environment: no network,
no GPU (CUDA_VISIBLE_DEVICES empty, NVIDIA_VISIBLE_DEVICES=void), the Hugging Face libraries
told to stay offline, CPU and memory limits, every capability dropped, no-new-privileges, a
read-only root filesystem with small tmpfs mounts for /tmp and HOME, the image's entrypoint
replaced by its own python3, and the probe bind-mounted read-only. ``--rm`` leaves nothing,
and the container is named, so that on the wall-clock limit (``timeout_s``), SIGINT or SIGTERM
imagekit kills and removes it itself. What it prints is read with a bound and streamed to
the evidence folder (imagekit.audit.output).

REF is resolved by imagekit.runtime.images (a tag through its registry, then pulled by
digest), so what is audited is content. The pinned form stays the one to use: a tag can move
between two runs.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from imagekit import progress
from imagekit.audit.report import (
    CheckResult,
    CheckStatus,
    PlatformInfo,
    ProbeReport,
    PythonInfo,
    parse_probe_output,
)
from imagekit.errors import (
    AuditTimeout,
    CouldNotFinish,
    ImagekitError,
)
from imagekit.runners.engine import EngineRunner, container_spec
from imagekit.runners.host import HostRunner, kill_group
from imagekit.runners.seam import Limits as RunLimits
from imagekit.runners.seam import Mount, RunSpec, run_to_end
from imagekit.runtime.container import ContainerSpec, ProcessRun
from imagekit.runtime.container import container_argv as runtime_container_argv
from imagekit.runtime.engine import DockerEngine
from imagekit.runtime.images import EngineImage
from imagekit.runtime.output import TAIL_CAP, MiB

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


@contextmanager
def _probe_path() -> Iterator[Path]:
    """The probe file shipped as package data, as a real path the engine can bind-mount."""
    with resources.as_file(resources.files("imagekit.audit").joinpath("probe.py")) as path:
        yield path


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
ENVIRONMENT = _ENVS  # the probe's environment, wherever it runs (a cluster's pod too)


def audit_run(limits: Limits, probe: Path, image_id: str, spec_json: str) -> RunSpec:
    """The audit's run: locked down, no network, no GPU, the probe mounted read-only."""
    return RunSpec(
        image=image_id,
        argv=("python3", PROBE_IN_CONTAINER, "--spec-json", spec_json),
        stage="audit",
        label="io.imagekit.audit=1",
        network="none",
        env=_ENVS,
        mounts=(Mount(probe, PROBE_IN_CONTAINER),),
        limits=RunLimits(
            cpus=limits.cpus,
            memory=limits.memory,
            scratch=(
                ("/tmp", limits.tmp_size),  # noqa: S108 - the container's /tmp
                (HOME_IN_CONTAINER, limits.home_size),
            ),
        ),
    )


def audit_container(limits: Limits, probe: Path, image_id: str, spec_json: str) -> ContainerSpec:
    """The audit's container, as the engine runs it."""
    return container_spec(audit_run(limits, probe, image_id, spec_json))


def container_argv(
    client: str, limits: Limits, probe: Path, image_id: str, name: str, spec_json: str
) -> list[str]:
    """The ``docker run`` that locks the audit container down (named, so it can be removed)."""
    return runtime_container_argv(client, audit_container(limits, probe, image_id, spec_json), name)


def run_in_container(
    engine: DockerEngine,
    image: EngineImage,
    spec: dict[str, Any],
    limits: Limits | None = None,
    *,
    run_dir: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ProcessRun:
    """Run the probe in the image, its output streamed into ``run_dir``.

    The whole run has a wall-clock limit (AuditTimeout, exit 3); on that limit, on SIGINT
    and on SIGTERM the container is killed and removed before anything else happens.
    """
    limits = limits or Limits()
    with _probe_path() as probe:
        run = audit_run(limits, probe, image.image_id, json.dumps(spec, sort_keys=True))
        container = container_spec(run)
        shown = ["docker", *runtime_container_argv("docker", container, "NAME")[1:-1], "SPEC"]
        shown[shown.index(f"{probe}:{PROBE_IN_CONTAINER}:ro")] = f"probe.py:{PROBE_IN_CONTAINER}:ro"
        with progress.current().waiting(f"running the probe in {image.requested}"):
            ended = run_to_end(
                EngineRunner(engine.client_path),
                replace(run, shown=tuple(shown)),
                run_dir,
                timeout_s,
            )
    return _within_limit(ended, f"the audit of {image.requested}", timeout_s, run_dir)


def run_on_host(
    spec: dict[str, Any], *, run_dir: Path, timeout_s: float = DEFAULT_TIMEOUT_S
) -> ProcessRun:
    """Run the probe against this interpreter (``--host``): no container, GPU queried.

    The probe leads its own process group; its checks run in groups of their own and end
    at their own timeouts, so the limit kills the probe's group alone."""
    with _probe_path() as probe:
        run = RunSpec(
            argv=(sys.executable, str(probe), "--host", "--spec-json", json.dumps(spec)),
            stage="audit",
            shown=("python3", "probe.py", "--host", "--spec-json", "SPEC"),
        )
        ended = run_to_end(HostRunner(stop=kill_group), run, run_dir, timeout_s)
    return _within_limit(ended, "the host audit", timeout_s, run_dir)


def _within_limit(run: ProcessRun, what: str, timeout_s: float, run_dir: Path) -> ProcessRun:
    """A run that reached its wall-clock limit decides nothing: AuditTimeout (exit 3)."""
    if run.timed_out:
        raise AuditTimeout(
            f"{what} did not finish within {timeout_s:g} s: the probe was killed and its "
            f"container removed; no status was decided (raw output kept in {run_dir})",
            timeout_s=timeout_s,
            evidence=run_dir,
            hint="raise --timeout if the image is slow to import; a hang is kept in the evidence",
        )
    return run


def read_report(run: ProcessRun, target: str, run_dir: Path) -> tuple[ProbeReport, str | None]:
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
        missing = no_interpreter(run, target)
        if missing is not None:
            return missing, f"the image has no {PROBE_INTERPRETER}: the probe did not run"
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


#: What the probe runs under in the image; an image without it gets a verdict naming it.
PROBE_INTERPRETER = "python3"
# runc's words, in docker run's stderr, for an entrypoint the image lacks.
_NOT_FOUND = re.compile(r'exec: "([^"]+)": executable file not found[^\n:]*')


def no_interpreter(run: ProcessRun, target: str) -> ProbeReport | None:
    """A report of one failed check when the container did not start because the image has
    no ``python3`` (runc: ``exec: "python3": executable file not found in $PATH``): a fact
    about the image, so a verdict (CPU_CHECK_INCOMPLETE, recorded, exit 1) naming the
    missing interpreter, never "could not finish". None for any other failure."""
    if run.exit_code not in _DID_NOT_START:
        return None
    said = _NOT_FOUND.search(run.stderr.text())
    if said is None or said.group(1) != PROBE_INTERPRETER:
        return None
    cause = said.group(0)
    check = CheckResult(
        name=PROBE_INTERPRETER,
        kind="interpreter",
        status=CheckStatus.FAIL,
        reason=(
            f"{target} has no {PROBE_INTERPRETER} on its PATH ({cause}), so no check could run "
            f"in it; `imagekit sbom {target}` lists its packages without running it"
        ),
        proves=f"the image has the {PROBE_INTERPRETER} (3.8+) the probe runs under",
        command=list(run.command),
        exit_code=run.exit_code,
        stdout=run.stdout.text(),
        stderr=run.stderr.text(),
        stdout_bytes=run.stdout.total,
        stderr_bytes=run.stderr.total,
        output_capped=bool(run.stdout.cut or run.stderr.cut),
        output_notes=[],
        duration_s=run.seconds,
    )
    return ProbeReport(
        probe_version=0,
        mode="container",
        profile=None,
        python=PythonInfo(version="", implementation="", executable=""),
        platform=PlatformInfo(machine="", system=""),
        environment={},
        output_cap_bytes=0,
        duration_s=run.seconds,
        checks=[check],
    )


# docker run's own exit codes: the daemon failed (125), the command could not be run (126)
# or was not found (127); https://docs.docker.com/engine/containers/run/#exit-status
_DID_NOT_START = (125, 126, 127)
