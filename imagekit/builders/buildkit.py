"""Build a plan on the local engine through BuildKit, keep the log, and record the outcome.

The flow: load and render the plan, make sure the pinned base is in the engine (pulling it by
digest; a registry that cannot be reached ends here with exit 3), put the rendered files (the
Dockerfile, the plan's checks and the checker its last step bind-mounts) and only the overlay
files it names into a temporary build context, build, and write the whole log to
evidence/NAME/<time>-<id>/build.log while streaming it to stderr. A build whose step fails (an
overlay guard, an assertion, a pip install) is a BuildRejected (exit 1) that names the failing
step and its last lines; its log and a ``rejected-build`` ledger record stay.

Two ways into BuildKit, chosen by imagekit.runtime.engine.connect():

- a client with buildx: ``docker buildx build`` on the engine's own docker-driver builder
  (named, never the one `docker buildx use` selected), ``--network=host``, a real secret mount
  (``--secret id=pip_ca,src=BUNDLE``), ``--load`` and ``--iidfile``;
- a client without buildx (Debian's 20.10 client; or $IMAGEKIT_DOCKER_BUILDX=0): ``docker
  build`` with ``DOCKER_BUILDKIT=1``. python-on-whales 0.81's ``legacy_build`` cannot pass
  ``--secret``, ``--progress`` or ``--iidfile`` and, when not quiet, prints the log on stdout
  and looks for the classic builder's "Successfully built" line, which BuildKit never prints.

Both commands are assembled from the client's own ``docker_cmd`` (one list of arguments, the
way in aside) and run by imagekit.builders.context.stream_client: the same client, the same
exception type, and the same secret mount in the same Dockerfile (the bundle is never in the
context). python-on-whales' own streaming helper leaves the client running when the reader
stops; ours stops it (SIGTERM, which makes the client cancel the build), so an interrupted
build leaves no client behind and its temporary context is removed on the way out.

A build that succeeds onto a ledger whose end does not verify keeps its result: the refusal
(RecordRefused) carries it, and nothing is pushed (a push of an unrecorded build would be the
one thing the ledger could not vouch for).

The context, the evidence folder and pip's secrets are staged as every builder of the rendered
Dockerfile stages them (imagekit.builders.context).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, Protocol, TextIO

from imagekit.attest.attach import Prepared
from imagekit.attest.signer import Signer
from imagekit.builders.built import RenderedBuild
from imagekit.builders.context import PipSecrets, Staged, Tee, new_build_dir, staged
from imagekit.builders.options import BuildOptions
from imagekit.builders.push import check_push_repo, push_image
from imagekit.builders.record import (
    read_base_details,
    record_build,
    record_push,
    record_rejected,
    rendered_build_details,
    sign_then_record,
)
from imagekit.errors import (
    BuildFailed,
    EngineUnavailable,
    RecordRefused,
    RegistryError,
)
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.ledger import RejectedBuildDetails
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import (
    ASSERT_FAIL_MARKER,
    BLOCKED_MARKER,
    DRIFT_MARKER,
    PACKAGE_MARKER,
    Rendered,
    render,
)
from imagekit.provenance import (
    BuilderFacts,
    prepare_build,
    rendered_facts,
    signer_for,
)
from imagekit.refs import Reference
from imagekit.registry import RegistryClient
from imagekit.runtime.engine import Engine, connect, docker_error_text, engine_tls_error
from imagekit.workspace import Workspace

LAST_LINES = 15
_STEP_HEADER = re.compile(r"^#(\d+) (\[[^\]]*\] .*)$")
_STEP_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_STEP_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ (.*)$")
_UNREACHABLE = re.compile(
    r"dial tcp|no such host|connection refused|i/o timeout|TLS handshake timeout|"
    r"network is unreachable|server misbehaving|timeout exceeded|context deadline exceeded",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class BuildResult(RenderedBuild):
    image_id: str
    tag: str
    pushed: str | None = None
    manifest_digest: str | None = None
    ledger: list[int] = field(default_factory=list)

    @property
    def runnable(self) -> str:
        """The local tag: the image is in the engine that built it."""
        return self.tag

    def to_json(self) -> dict[str, Any]:
        return {
            **self.plan_json(),
            "image_id": self.image_id,
            "tag": self.tag,
            **self.evidence_json(),
            "pushed": self.pushed,
            "manifest_digest": self.manifest_digest,
            **self.records_json(),
        }


@dataclass(frozen=True)
class _Failure:
    step: str | None
    last_lines: list[str]
    reason: str
    message: str


def analyse_failure(lines: list[str]) -> _Failure:
    """Find the failing step in a BuildKit plain-progress log and say why it failed.

    Plain progress numbers each vertex (``#7 [3/6] RUN ...``), prefixes its output with the
    vertex number and elapsed time (``#7 0.412 text``) and ends a failed one with
    ``#7 ERROR: ...``. The overlay guard and the assertion checker print marker lines.
    """
    headers: dict[str, str] = {}
    failed: str | None = None
    error_text = ""
    for line in lines:
        if m := _STEP_HEADER.match(line):
            headers.setdefault(m.group(1), m.group(2))
        elif m := _STEP_ERROR.match(line):
            failed, error_text = m.group(1), m.group(2)
    step = headers.get(failed) if failed else None
    if failed:
        output = [m.group(2) for line in lines if (m := _STEP_OUTPUT.match(line))]
        own = [
            m.group(2) for line in lines if (m := _STEP_OUTPUT.match(line)) and m.group(1) == failed
        ]
        last = (own or output)[-LAST_LINES:] + [f"ERROR: {error_text}"]
    else:
        last = [line for line in lines if line.strip()][-LAST_LINES:]
    # Only what the steps printed counts: the step headers echo the scripts, markers included.
    printed = [m.group(2) for line in lines if (m := _STEP_OUTPUT.match(line))]
    if step and len(step) > 160:
        step = step[:157] + "..."
    for text in printed:
        if drift := re.fullmatch(rf"{DRIFT_MARKER} (path=\S+ expected=\S+ actual=\S+)", text):
            message = f"overlay guard refused: {drift.group(1)}"
            return _Failure(step, last, "overlay-drift", message)
        if blocked := re.fullmatch(rf"{BLOCKED_MARKER} (path=\S+ resolves=\S+)", text):
            message = (
                f"destination refused: {blocked.group(1)}, under a folder or onto a file the "
                "runtime mounts over in every container"
            )
            return _Failure(step, last, "destination-blocked", message)
    fails = [m.group(1) for t in printed if (m := re.fullmatch(rf"{ASSERT_FAIL_MARKER} (.*)", t))]
    if fails:
        return _Failure(
            step, last, "assertion-failed", "assertions rejected the build: " + "; ".join(fails)
        )
    for text in printed:
        if pkg := re.fullmatch(rf"{PACKAGE_MARKER} (\S+ \S+=.*)", text):
            message = f"package removal refused: {pkg.group(1)}"
            return _Failure(step, last, "system-packages", message)
    if failed:
        return _Failure(step, last, "step-failed", f"build step failed: {error_text}")
    return _Failure(None, last, "build-failed", "the build failed before any step ran")


class LogSink(Protocol):
    def write(self, text: str) -> None: ...


def ensure_base(engine: Engine, base: Reference, platform: str, log: LogSink) -> None:
    """Have the pinned base in the engine; pull it by digest if it is not there yet."""
    from python_on_whales.exceptions import DockerException

    ref = str(base)
    if engine.client.image.exists(ref):
        return
    log.write(f"imagekit: pulling the base {ref} ({platform})\n")
    try:
        engine.client.image.pull(ref, quiet=True, platform=platform)
    except DockerException as exc:
        last = docker_error_text(exc)
        log.write(f"imagekit: pull failed: {last}\n")
        tls = engine_tls_error(last, base.registry)
        if tls is not None:
            raise tls from exc
        if _UNREACHABLE.search(last):
            message = f"the registry {base.registry} could not be reached to pull the base {ref}"
            hint = (
                "pull or load the base into the engine where the registry is reachable "
                "(or mirror it and build with --base MIRROR@sha256:...)"
            )
        else:
            message = f"pulling the base {ref} from {base.registry} failed: {last}"
            hint = "check the reference with `imagekit inspect REF` and the engine's credentials"
        raise RegistryError(
            message,
            registry=base.registry,
            repository=base.repository,
            digest=str(base.digest),
            hint=hint,
        ) from exc


@dataclass(frozen=True)
class _BuildCall:
    """One BuildKit build of a staged context, whichever client runs it."""

    staged: Staged
    tag: str
    platform: str
    no_cache: bool
    tee: Tee
    #: resolve the base in the registry, never from the engine's store (a plan of several
    #: platforms: the classic store holds one platform's image under the base's name)
    pull: bool = False

    def run(self, engine: Engine, way_in: list[str], *, env: dict[str, str]) -> str:
        """The client's build (``way_in``: ``build`` or ``buildx build ... --load``), its
        output into the log; the image ID, from --iidfile."""
        iidfile = self.staged.folder / "iid"
        cmd = [*engine.client.client_config.docker_cmd, *way_in, "--progress=plain"]
        cmd += ["--network=host", f"--platform={self.platform}", f"--iidfile={iidfile}"]
        cmd += ["--tag", self.tag]
        for secret in self.staged.secrets:
            cmd += ["--secret", secret]
        if self.no_cache:
            cmd.append("--no-cache")
        if self.pull:
            cmd.append("--pull")
        cmd.append(str(self.staged.context))
        self.tee.stream([str(c) for c in cmd], env=env)
        return iidfile.read_text().strip()


def _legacy_build(engine: Engine, call: _BuildCall) -> str:
    return call.run(engine, ["build"], env={"DOCKER_BUILDKIT": "1"})


def _buildx_build(engine: Engine, call: _BuildCall) -> str:
    """``docker buildx build`` on the engine's own docker-driver builder, loaded into it.

    The command is assembled here and run by imagekit.builders.context.stream_client, as the
    legacy one is: python-on-whales' ``buildx.build(stream_logs=True)`` leaves the client
    running when imagekit stops (it is only stopped by its next write into a closed pipe), so
    a terminated build went on in the engine, and an identical build started next shared its
    steps and printed none of their output (found on the first real run, buildx 0.38 on the
    20.10 engine's BuildKit 0.8). The image ID comes from --iidfile, as the legacy build's does.
    """
    builder = ["--builder", engine.buildx_builder] if engine.buildx_builder else []
    return call.run(engine, ["buildx", "build", *builder, "--load"], env={})


def build_plan(
    workspace: Workspace,
    name: str,
    options: BuildOptions | None = None,
    *,
    engine: Engine | None = None,
    registry: RegistryClient | None = None,
    echo: TextIO | None = None,
) -> BuildResult:
    """Build one plan and return the image; raise BuildRejected (exit 1) when a step fails.

    ``registry`` describes the base for the record (a client of the caller's, or one made
    for the call).
    """
    options = options or BuildOptions()
    echo = echo or sys.stderr
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    loaded.platform  # noqa: B018 - one image: a plan of several platforms is refused (exit 2)
    if options.push is not None:
        check_push_repo(options.push)
    signer = signer_for(options.sign_key, options.push)  # refused before the build
    rendered = render(loaded)
    pip = PipSecrets.of(options)
    engine = engine or connect()
    run_dir = new_build_dir(workspace, loaded, rendered)
    tag = options.tag or f"imagekit/{loaded.name}:{run_dir.name}"
    log_path = run_dir / "build.log"
    builder = "buildx" if engine.has_buildx else "docker build (BuildKit)"
    with log_path.open("x", encoding="utf-8") as log_file:
        tee = Tee(log_file, echo)
        tee.write(
            f"imagekit: building plan {loaded.name} (plan sha256:{loaded.digest.hex}) "
            f"on {loaded.base} with {builder}, tag {tag}\n"
        )
        ensure_base(engine, loaded.base, loaded.plan.base.platform, tee)
        image_id = _run_build(workspace, loaded, rendered, engine, tag, pip, options, tee, log_path)
    base_details = read_base_details(loaded, registry)
    result = BuildResult(
        plan=loaded.name,
        plan_sha256=loaded.digest.hex,
        base=str(loaded.base),
        builder=builder,
        image_id=image_id,
        tag=tag,
        evidence_dir=run_dir,
        log=log_path,
        dockerfile_sha256=rendered.digest.hex,
    )
    with RecordRefused.keeping(result):
        seq = record_build(
            workspace,
            loaded,
            tag,
            scope=(
                f"built from plan {loaded.name} (sha256:{loaded.digest.hex}); the overlay guards "
                "and the plan's assertions ran inside the build and passed; "
                "nothing was run on a GPU"
            ),
            evidence=log_path,
            details=rendered_build_details(
                loaded, rendered, builder, base_details, image_id=image_id
            ),
            candidate=options.candidate,
        )
    result = replace(result, ledger=[seq])
    if options.push is None:
        return result
    # The push's own log, as the pipeline's push stage keeps it: build.log is the build
    # record's evidence, hashed when recorded, so nothing may be added to it now.
    push_log = run_dir / "push.log"
    push_log.write_text(f"imagekit: pushing {tag} to {options.push}\n", encoding="utf-8")
    pushed, manifest = push_image(engine, tag, options.push, push_log)
    result = replace(result, pushed=pushed, manifest_digest=manifest)

    def attest(built: BuildResult, signer: Signer) -> Prepared:
        facts = _engine_facts(rendered, builder, image_id)
        return prepare_build(
            signer, loaded, facts, pushed=pushed, log=log_path, run_id=run_dir.name
        )

    def record(built: BuildResult) -> BuildResult:
        signed = built.attestation_value
        push_seq = record_push(
            workspace,
            tag,
            pushed,
            manifest,
            push_log,
            plan=loaded.name,
            image_id=image_id,
            attestations={"attestation": signed} if signed is not None else None,
        )
        return replace(built, ledger=[seq, push_seq])

    # pushed: its provenance signed, the push record naming it, then attached
    return sign_then_record(
        result, attest=partial(attest, signer=signer) if signer else None, record=record
    )


def _engine_facts(rendered: Rendered, builder: str, image_id: str) -> BuilderFacts:
    return rendered_facts("engine", rendered, {"builder": builder}, image_id=image_id)


def prepare_built(
    signer: Signer,
    workspace: Workspace,
    built: BuildResult,
    pushed: str,
    *,
    base_override: str | None = None,
) -> Prepared:
    """The provenance of an engine build pushed afterwards (the pipeline pushes only what
    its audit passed), as `build --push` signs it: the plan is loaded and rendered again and
    signed only when both are the bytes the build recorded. Signed, not attached: the push
    record names it first (imagekit.builders.push.push_and_record)."""
    loaded = load_named_plan(workspace, built.plan, base_override=base_override)
    rendered = render(loaded)
    if (loaded.digest.hex, rendered.digest.hex) != (built.plan_sha256, built.dockerfile_sha256):
        why = f"plan {built.plan} or its render changed since the build"
        return Prepared.nothing(SLSA_PROVENANCE_V1, signer.key_id, why)
    return prepare_build(
        signer,
        loaded,
        _engine_facts(rendered, built.builder, built.image_id),
        pushed=pushed,
        log=built.log,
        run_id=built.evidence_dir.name,
    )


def _run_build(
    workspace: Workspace,
    loaded: LoadedPlan,
    rendered: Rendered,
    engine: Engine,
    tag: str,
    pip: PipSecrets,
    options: BuildOptions,
    tee: Tee,
    log_path: Path,
    platform: str | None = None,
) -> str:
    """Run BuildKit; on failure keep the log, record a rejected build and raise.

    ``platform`` is one of a plan of several (imagekit.builders.platforms builds each in turn,
    each resolving the base index in the registry for its platform).
    """
    from python_on_whales.exceptions import DockerException

    how = _buildx_build if engine.has_buildx else _legacy_build
    with staged(rendered, pip) as context:
        try:
            return how(
                engine,
                _BuildCall(
                    context,
                    tag=tag,
                    platform=platform or loaded.plan.base.platform,
                    no_cache=options.no_cache,
                    tee=tee,
                    pull=platform is not None,
                ),
            )
        except DockerException as exc:
            reject_failed_build(workspace, loaded, tee, log_path, tag, exc)
        except OSError as exc:
            raise EngineUnavailable(f"running the docker client failed: {exc}") from exc


def reject_failed_build(
    workspace: Workspace,
    loaded: LoadedPlan,
    tee: Tee,
    log_path: Path,
    image: str,
    exc: Exception,
) -> NoReturn:
    """A BuildKit client exited non-zero: name the failing step, record a rejected build and
    raise BuildFailed (exit 1), or EngineUnavailable (exit 3) when no step ever ran."""
    failure = analyse_failure(tee.lines)
    tee.write(f"imagekit: build rejected ({failure.reason}): {failure.message}\n")
    if failure.step is None and _UNREACHABLE.search("\n".join(tee.lines[-5:])):
        raise EngineUnavailable(
            f"the build could not start: {failure.last_lines[-1]}",
            hint="check that the engine and its BuildKit answer (`docker info`)",
        ) from exc
    try:
        record_rejected(
            workspace,
            loaded,
            RejectedBuildDetails(reason=failure.reason, step=failure.step, message=failure.message),
            log_path=log_path,
            image=image,
        )
        unrecorded = ""
    except RecordRefused as refused:
        unrecorded = f" (not recorded: {refused.problem})"
    raise BuildFailed(
        f"build of {loaded.name} rejected{unrecorded}: {failure.message}",
        step=failure.step,
        last_lines=failure.last_lines,
        log=log_path,
        reason=failure.reason,
        hint="the full log is kept; fix the plan or the base and build again",
    ) from exc
