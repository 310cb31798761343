"""The plan's assertions, run in an image the registry builder pushed, through the engine.

The engine path runs the assertions as the build's last step. An image assembled through the
registry never was in an engine, so here the engine pulls it from the registry by digest
(this pulls the base's layers too: the assertions, like an audit, need the whole image; the
build itself never does) and runs the same checker the engine path bind-mounts (imagekit's
own file, imagekit/plans/assert_checker.py, with the plan's checks as the JSON `imagekit
render` commits) in a container with no network.

An image of another architecture runs under qemu-user when the host registered its binfmt
handler, and every status then says "emulated (qemu-aarch64)"; where it can run neither
natively nor emulated the assertions are NOT RUN, which is never a pass.

The container runs through imagekit.runtime.container, as the audit's does: named and
labelled, its output read with a bound into the run's folder, and on the wall-clock limit,
SIGINT or SIGTERM killed and removed (a killed ``docker run`` client alone leaves its
container running). It keeps what the engine path's step gets: no network, no device, a
writable root and the engine's default capabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from imagekit.errors import BuildFailed, CouldNotFinish
from imagekit.evidence import write_bytes
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import (
    ASSERT_CHECKER,
    ASSERT_FAIL_MARKER,
    ASSERT_MOUNT,
    ASSERT_MOUNTS,
    ASSERT_SPEC,
    ASSERT_SPEC_MOUNT,
    CheckerOutput,
    assertion_checker,
    assertion_spec,
)
from imagekit.refs import Digest, Platform, Reference
from imagekit.runtime.container import (
    ContainerSpec,
    Mount,
    container_argv,
    run_container,
)
from imagekit.runtime.engine import Engine, Execution, engine_errors, execution_for

TIMEOUT_S = 3600.0
# `docker run` itself failed (125), or could not start the command (126, 127).
_DOCKER_OWN = (125, 126, 127)
LABEL = "io.imagekit.assertions=1"


@dataclass(frozen=True)
class AssertionRun:
    """What became of the plan's assertions: passed, failed, NOT RUN, or none to run."""

    status: str  # passed, failed, NOT RUN, none
    scope: str
    execution: Execution | None
    passed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    log: Path | None = None
    image: str | None = None  # what the engine pulled (and keeps, for an audit)
    #: the sha256 of the checker that ran (imagekit's, staged from the package), so a record
    #: pins the exact program that said passed, as a Dockerfile build's rendered map does
    checker_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "scope": self.scope,
            "execution": self.execution.how if self.execution else None,
            "emulator": self.execution.emulator if self.execution else None,
            "passed": list(self.passed),
            "failed": list(self.failed),
            "log": str(self.log) if self.log else None,
            "engine_image": self.image,
            "checker_sha256": self.checker_sha256,
        }


def not_run(reason: str, execution: Execution | None = None) -> AssertionRun:
    return AssertionRun("NOT RUN", f"the plan's assertions were NOT RUN: {reason}", execution)


#: what to do about assertions NOT RUN in an image of a platform this host cannot run
RUN_WHERE_HINT = (
    "run it where the engine can run this platform (qemu-user-static and binfmt-support for "
    "another architecture)"
)


def rejection(run: AssertionRun) -> tuple[str, str] | None:
    """Why a pushed image whose assertions came to ``run`` is not accepted, as its rejected
    build's reason and message: they failed, or they were NOT RUN, which is never a pass.
    None when they passed, or the plan has none. Every builder that asserts a pushed image
    (a BuildKit daemon, several platforms, the registry builder) says it this way."""
    if run.status == "failed":
        return "assertion-failed", "assertions rejected the build: " + "; ".join(run.failed)
    if run.status == "NOT RUN":
        return "assertions-not-run", run.scope
    return None


def assertions_failed(said: str, run: AssertionRun, *, log: Path, hint: str) -> BuildFailed:
    """The build rejected by its failed assertions (exit 1): ``said`` is the message, the last
    lines are the checker's failures, the log its own (else the build's)."""
    return BuildFailed(
        said,
        step="assertions",
        last_lines=[f"{ASSERT_FAIL_MARKER} {f}" for f in run.failed],
        log=run.log or log,
        reason="assertion-failed",
        hint=hint,
    )


def run_assertions(
    loaded: LoadedPlan,
    image: Reference,
    platform: Platform,
    run_dir: Path,
    *,
    engine: Engine | None,
    connect: Callable[[], Engine],
    log: Callable[[str], None],
) -> AssertionRun:
    """Pull ``image`` (pinned) into the engine and run the plan's assertions in it."""
    assertions = loaded.plan.assertions
    if assertions.empty:
        return AssertionRun("none", "the plan has no assertions", None)
    execution = execution_for(platform)
    if not execution.runs:
        return not_run(execution.reason, execution)
    engine = engine or connect()
    checker = assertion_checker()
    checker_sha256 = Digest.of_bytes(checker).hex
    files = ((ASSERT_CHECKER, checker), (ASSERT_SPEC, assertion_spec(assertions)))
    for name, data in files:
        write_bytes(run_dir / name, data)
    pinned = str(image)
    log(f"assertions: pulling {pinned} ({platform}) into the engine, {execution.note}")
    with engine_errors(f"pulling {pinned} for the assertions", registry=image.registry):
        engine.client.image.pull(pinned, quiet=True, platform=str(platform))
    container = ContainerSpec(
        image=pinned,
        argv=(ASSERT_MOUNT, ASSERT_SPEC_MOUNT),
        entrypoint="python3",
        label=LABEL,
        network="none",
        mounts=tuple(Mount((run_dir / name).resolve(), target) for name, target in ASSERT_MOUNTS),
        read_only=False,  # as the engine path's build step: the checks may write
        drop_capabilities=False,
        platform=str(platform),
    )
    # The command as the evidence shows it: no name of this run's, no path of this machine.
    mounted = replace(
        container, mounts=tuple(Mount(Path(n), target) for n, target in ASSERT_MOUNTS)
    )
    shown = ("docker", *container_argv("docker", mounted, "NAME")[1:])
    try:
        run = run_container(
            engine.client_path, container, run_dir, TIMEOUT_S, stage="assertions",
            shown=shown, stream_prefix="assertions",
        )  # fmt: skip
    except OSError as exc:
        raise CouldNotFinish(f"running the docker client failed: {exc}") from exc
    if run.timed_out:
        raise CouldNotFinish(
            f"the assertions did not finish within {TIMEOUT_S:.0f} s: their container was "
            f"killed and removed (raw output kept in {run_dir})"
        )
    # What the runner kept in memory (the last 32 MiB a stream; the verdict is the last line).
    stdout, stderr = run.stdout.text(), run.stderr.text()
    log_path = run_dir / "assertions.log"
    header = f"# {execution.note}: docker run --rm --network none --platform {platform} ... \n"
    write_bytes(log_path, (header + stdout + stderr).encode())
    for line in stdout.splitlines():
        log(f"assertions: {line}")
    output = CheckerOutput.read(stdout)
    passed, failed = output.passed, output.failed
    where = f"in {pinned}, {execution.note}"
    if run.exit_code in _DOCKER_OWN and not passed and not failed:
        detail = (stderr.strip().splitlines() or [f"exit {run.exit_code}"])[-1]
        raise CouldNotFinish(
            f"the assertion container did not run ({execution.note}): {detail}",
            hint="the image needs python3 on its PATH; `docker info` must answer",
        )
    if run.exit_code == 0 and not failed and output.finished:
        return AssertionRun(
            "passed",
            f"the plan's {len(passed)} assertions passed {where}",
            execution,
            passed,
            (),
            log_path,
            pinned,
            checker_sha256,
        )
    if not failed:
        failed = (f"the checker exited {run.exit_code} without a verdict",)
    return AssertionRun(
        "failed",
        f"{len(failed)} of the plan's assertions failed {where}",
        execution,
        passed,
        failed,
        log_path,
        pinned,
        checker_sha256,
    )
