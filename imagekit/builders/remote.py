"""Build a plan on a BuildKit daemon of its own (``--buildkit ADDR``), with no engine on the path.

A team whose builds outgrow one machine points imagekit at a buildkitd (a farm, a buildx
remote or kubernetes builder's daemon). The rendered Dockerfile is the engine path's, so the
overlay guards and the plan's assertions run inside the build there too; BuildKit then pushes
the image by digest to ``--push REPO`` (there is no engine to load it into). Because the
daemon is someone else's machine, the plan's assertions run once more in the pushed image,
exactly as the registry builder's do (imagekit.builders.assemble.check: native, emulated under
qemu-user, or NOT RUN, which is never a pass), and only then is the build recorded.

The client is ``buildctl`` (built by scripts/setup-host.sh into .tools/bin, or on PATH). The
daemon is asked ``debug workers`` first, so one that does not answer is exit 3 naming its
address before anything is staged. TLS material (--buildkit-ca/-cert/-key) goes to buildctl
as files; the package index URL and the CA bundle travel as secrets, as on the engine path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from imagekit import jsondoc
from imagekit.attest.attach import Prepared
from imagekit.attest.signer import Signer
from imagekit.builders.assemble.check import (
    RUN_WHERE_HINT,
    AssertionRun,
    assertions_failed,
    rejection,
    run_assertions,
)
from imagekit.builders.buildkit import reject_failed_build
from imagekit.builders.built import ConfigNamed, PushedByDigest, RenderedBuild
from imagekit.builders.context import PipSecrets, Tee, new_build_dir, staged
from imagekit.builders.options import BuildOptions
from imagekit.builders.push import check_push_repo
from imagekit.builders.record import (
    assertion_details,
    read_base_details,
    record_build,
    record_rejected,
    rendered_build_details,
    sign_then_record,
)
from imagekit.errors import CouldNotFinish, InputFileError, UsageError
from imagekit.files import read_regular
from imagekit.ledger import RejectedBuildDetails
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import Rendered, render
from imagekit.provenance import prepare_build, rendered_facts, signer_for
from imagekit.refs import parse_reference
from imagekit.runtime.engine import buildx_client, connect
from imagekit.workspace import Workspace

BUILDCTL_ENV = "IMAGEKIT_BUILDCTL"
PROBE_TIMEOUT_S = 30.0
_SCHEMES = ("tcp://", "unix://")
#: A CA bundle may carry a few hundred certificates (the system's is some 200 KB).
_MAX_TLS_FILE = 4 << 20
#: buildctl's --metadata-file names a few digests and descriptors.
_MAX_METADATA = 1 << 20


@dataclass(frozen=True)
class RemoteResult(ConfigNamed, PushedByDigest, RenderedBuild):
    address: str
    pushed: str
    manifest_digest: str
    config_digest: str
    assertions: AssertionRun
    ledger: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.plan_json(),
            "buildkit": self.address,
            "pushed": self.pushed,
            "manifest_digest": self.manifest_digest,
            "image_id": self.config_digest,
            "assertions": self.assertions.to_json(),
            **self.evidence_json(),
            **self.records_json(),
        }


def buildctl_binary() -> str:
    """$IMAGEKIT_BUILDCTL, the project's .tools/bin/buildctl, or buildctl on PATH."""
    if os.environ.get(BUILDCTL_ENV):
        return os.environ[BUILDCTL_ENV]
    tools = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "buildctl"
    if tools.exists():
        return str(tools)
    found = shutil.which("buildctl")
    if found is None:
        raise UsageError(
            "--buildkit needs buildctl, and none was found",
            hint=f"run scripts/setup-host.sh (it builds .tools/bin/buildctl) or set {BUILDCTL_ENV}",
        )
    return found


def buildx_base(name: str) -> list[str]:
    """``docker buildx build --builder NAME``; a builder buildx does not know is exit 2."""
    client = buildx_client()
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [client, "buildx", "inspect", name],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CouldNotFinish(f"`docker buildx inspect {name}` did not answer") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise UsageError(
            f"--buildx-builder {name!r}: {last}",
            hint="list the builders with `docker buildx ls`; create one with "
            "`docker buildx create --name NAME --driver remote tcp://HOST:PORT`",
        )
    return [client, "buildx", "build", "--builder", name]


def buildctl_base(options: BuildOptions) -> list[str]:
    """buildctl with the daemon's address and TLS files; bad input is exit 2.

    The address and the files are checked here, not left to buildctl: what buildctl says of a
    malformed address or a CA that is no certificate reads as a daemon that did not answer
    (exit 3), where the mistake is the option's (exit 2, naming it).
    """
    address = check_address(options.buildkit or "")
    argv = [buildctl_binary(), "--addr", address]
    for flag, option, path, kind in (
        ("--tlscacert", "--buildkit-ca", options.buildkit_ca, "certificate"),
        ("--tlscert", "--buildkit-cert", options.buildkit_cert, "certificate"),
        ("--tlskey", "--buildkit-key", options.buildkit_key, "private key"),
    ):
        if path is not None:
            _check_tls_file(option, path, kind)
            argv += [flag, str(path)]
    return argv


def check_address(address: str) -> str:
    """``address`` when it is one buildctl can dial: tcp://HOST:PORT (a port 1-65535, an
    IPv6 host in brackets) or unix:///PATH; otherwise UsageError naming --buildkit."""

    def refused(why: str) -> UsageError:
        return UsageError(
            f"--buildkit {address!r} is not a BuildKit address{why}",
            hint="give tcp://HOST:PORT or unix:///path/to/buildkitd.sock",
        )

    if not address.startswith(_SCHEMES):
        raise refused("")
    if address.startswith("unix://"):
        if not address.removeprefix("unix://").startswith("/"):
            raise refused(": a unix address names the socket's absolute path")
        return address
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"
        raise refused(f": {exc}") from None
    if not parts.hostname:
        raise refused(": no host")
    if port is None or port == 0:
        raise refused(": no port" if port is None else ": port 0")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise refused(": a tcp address is tcp://HOST:PORT and nothing more")
    return address


def _check_tls_file(option: str, path: Path, kind: str) -> None:
    """A TLS file buildctl is given: a regular file holding a PEM ``kind`` (exit 2 if not)."""
    try:
        data = read_regular(path, f"{option} file", limit=_MAX_TLS_FILE)
    except FileNotFoundError:
        raise UsageError(f"{option} {path} is not a file") from None
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot read it ({exc.strerror})") from None
    try:
        if kind == "certificate":
            x509.load_pem_x509_certificates(data)
        else:
            serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        unencrypted = "" if kind == "certificate" else " (buildctl reads unencrypted keys only)"
        raise UsageError(
            f"{option} {path} is not a PEM {kind}{unencrypted}",
            hint="give the PEM files the daemon's TLS was set up with (see docs/buildkit.md)",
        ) from None


def probe(base: list[str], address: str) -> str:
    """The daemon's workers, or CouldNotFinish (exit 3) naming the address."""
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [*base, "debug", "workers"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CouldNotFinish(
            f"the BuildKit daemon at {address} did not answer within {PROBE_TIMEOUT_S:.0f} s",
            hint="check the address and that buildkitd runs there",
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise CouldNotFinish(
            f"the BuildKit daemon at {address} did not answer: {last}",
            hint="check the address, that buildkitd runs there, and the TLS files",
        )
    return done.stdout


def check_daemon_choice(options: BuildOptions) -> bool:
    """Whether the options name a BuildKit of the build's own; exit 2 for two of them, or a
    cache reference that is malformed or has neither (every builder and the night ask here)."""
    if not options.remote:
        if options.cache_ref is not None:
            raise UsageError(
                "--cache-ref is an option of --buildkit and --buildx-builder builds",
                hint="add --buildkit ADDR or --buildx-builder NAME, or drop --cache-ref",
            )
        return False
    if options.buildkit is not None and options.buildx_builder is not None:
        raise UsageError("--buildkit and --buildx-builder name two builders; give one")
    if options.cache_ref is not None:
        parse_reference(options.cache_ref)  # a malformed reference is exit 2 here
    return True


@dataclass(frozen=True)
class Daemon:
    """The BuildKit a build runs on: a buildkitd by its address (``--buildkit``, through
    buildctl) or a buildx builder by its name (``--buildx-builder``)."""

    builder: str  # buildkit or buildx
    address: str  # the daemon's address, or the buildx builder's name
    argv: list[str]  # the client's command, before the build's own arguments
    workers: str | None = None  # `buildctl debug workers`; a buildx builder is not asked

    @property
    def buildx(self) -> bool:
        return self.builder == "buildx"

    @property
    def where(self) -> str:
        if self.buildx:
            return f"the buildx builder {self.address}"
        return f"the BuildKit daemon at {self.address}"

    def version(self) -> dict[str, str]:
        """How the build's provenance names it: the builder, and where it is."""
        return {
            "builder": self.builder,
            "buildx_builder" if self.buildx else "buildkit": self.address,
        }


def connect_daemon(options: BuildOptions) -> Daemon:
    """The BuildKit the options name, asked before anything is staged: an unknown buildx
    builder or a malformed address or TLS file is exit 2, a buildkitd that does not answer
    exit 3 naming it."""
    if options.buildx_builder is not None:
        return Daemon("buildx", options.buildx_builder, buildx_base(options.buildx_builder))
    address = options.buildkit or ""
    argv = buildctl_base(options)
    return Daemon("buildkit", address, argv, probe(argv, address))


def build_remote(
    workspace: Workspace,
    name: str,
    options: BuildOptions,
    *,
    echo: TextIO | None = None,
) -> RemoteResult:
    """Build ``name`` on the daemon at ``options.buildkit``, push by digest, assert, record."""
    echo = echo or sys.stderr
    if options.push is None:
        raise UsageError(
            "--buildkit needs --push REPO: the image goes from BuildKit to a registry, "
            "there is no engine to load it into",
            hint="add --push REGISTRY/REPO",
        )
    check_daemon_choice(options)
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    loaded.platform  # noqa: B018 - one image: a plan of several platforms is refused (exit 2)
    repo = check_push_repo(options.push)
    signer = signer_for(options.sign_key, options.push)  # refused before the build
    rendered = render(loaded)
    pip = PipSecrets.of(options)
    daemon = connect_daemon(options)
    run_dir = new_build_dir(workspace, loaded, rendered)
    log_path = run_dir / "build.log"
    with log_path.open("x", encoding="utf-8") as log_file:
        tee = Tee(log_file, echo)
        tee.write(
            f"imagekit: building plan {loaded.name} (plan sha256:{loaded.digest.hex}) on "
            f"{loaded.base} with {daemon.where}, pushing to {repo}\n"
        )
        metadata = run_on_daemon(
            daemon, rendered, loaded, str(repo), pip, options, tee, workspace, log_path
        )
    manifest = str(metadata["containerimage.digest"])
    config = str(metadata.get("containerimage.config.digest", ""))
    pushed = f"{repo}@{manifest}"
    with log_path.open("a", encoding="utf-8") as log_file:
        tee = Tee(log_file, echo)
        tee.write(f"imagekit: BuildKit pushed {pushed}\n")
        # Its own folder: the rendered checker the build mounted is already in run_dir.
        assertions = run_assertions(
            loaded,
            parse_reference(pushed),
            loaded.platform,
            run_dir / "assertions",
            engine=None,
            connect=connect,
            log=lambda text: tee.write(text + "\n"),
        )
        tee.write(f"imagekit: assertions {assertions.status}: {assertions.scope}\n")
    details = assertion_details(workspace, assertions)
    if refused := rejection(assertions):
        reason, message = refused
        record_rejected(
            workspace,
            loaded,
            RejectedBuildDetails(
                reason=reason,
                step="assertions",
                message=message,
                manifest_digest=manifest,
                assertions=details,
            ),
            log_path=log_path,
            image=pushed,
        )
        if assertions.status == "failed":
            raise assertions_failed(
                f"build of {loaded.name} rejected: {message}",
                assertions,
                log=log_path,
                hint=f"{pushed} stays in the registry by digest, untagged",
            )
        raise CouldNotFinish(
            f"build of {loaded.name}: {message}; {pushed} was pushed by digest only",
            hint=RUN_WHERE_HINT,
        )
    result = RemoteResult(
        plan=loaded.name,
        plan_sha256=loaded.digest.hex,
        base=str(loaded.base),
        builder=daemon.builder,
        address=daemon.address,
        pushed=pushed,
        manifest_digest=manifest,
        config_digest=config,
        assertions=assertions,
        evidence_dir=run_dir,
        log=log_path,
        dockerfile_sha256=rendered.digest.hex,
    )

    def attest(built: RemoteResult, signer: Signer) -> Prepared:
        facts = rendered_facts("buildkit", rendered, daemon.version(), config_digest=config)
        return prepare_build(
            signer, loaded, facts, pushed=built.pushed, log=log_path, run_id=run_dir.name
        )

    def record(built: RemoteResult) -> RemoteResult:
        seq = record_build(
            workspace,
            loaded,
            pushed,
            scope=(
                f"built from plan {loaded.name} (sha256:{loaded.digest.hex}) on {daemon.where}, "
                "which ran the overlay guards and the assertions inside "
                f"the build; pushed by digest; {assertions.scope}; nothing was run on a GPU"
            ),
            evidence=log_path,
            details=rendered_build_details(
                loaded,
                rendered,
                daemon.builder,
                read_base_details(loaded, None),
                image_id=config or None,
                manifest_digest=manifest,
                assertions=details,
                attestation=built.attestation_value,
            ),
            candidate=options.candidate,
        )
        return replace(built, ledger=(seq,))

    # the image is accepted: its provenance signed, its record naming it, then attached
    return sign_then_record(
        result, attest=partial(attest, signer=signer) if signer else None, record=record
    )


def run_on_daemon(
    daemon: Daemon,
    rendered: Rendered,
    loaded: LoadedPlan,
    repo: str,
    pip: PipSecrets,
    options: BuildOptions,
    tee: Tee,
    workspace: Workspace,
    log_path: Path,
) -> dict[str, Any]:
    """buildctl build (or buildx build): push by digest, keep the log; a failed step is a
    rejected build. Every platform the plan lists, in one build: a plan of several
    (imagekit.builders.platforms) is one index pushed by digest."""
    from python_on_whales.exceptions import DockerException

    with staged(rendered, pip) as context:
        metadata_file = context.folder / "metadata.json"
        platforms = ",".join(loaded.plan.base.targets)
        output = f"type=image,name={repo},push=true,push-by-digest=true"
        secrets = [f"--secret={secret}" for secret in context.secrets]
        cmd = [*daemon.argv]
        if daemon.buildx:
            # No attestations: the digest pushed is then the image's own manifest, as with
            # buildctl (buildx adds a provenance manifest and an index by default).
            cmd += ["--progress=plain", "--network=host", "--allow=network.host"]
            cmd += [f"--platform={platforms}", "--provenance=false", "--sbom=false"]
            cmd += [f"--metadata-file={metadata_file}", f"--output={output}", *secrets]
        else:
            cmd += ["build", "--progress=plain", "--frontend=dockerfile.v0"]
            cmd += [f"--local=context={context.context}", f"--local=dockerfile={context.context}"]
            cmd += [f"--opt=platform={platforms}", "--opt=force-network-mode=host"]
            cmd += ["--allow=network.host", f"--metadata-file={metadata_file}"]
            cmd += [f"--output={output}", *secrets]
        if options.cache_ref is not None:
            cache = f"type=registry,ref={options.cache_ref}"
            if daemon.buildx:
                cmd += [f"--cache-from={cache}", f"--cache-to={cache},mode=max"]
            else:
                cmd += [f"--import-cache={cache}", f"--export-cache={cache},mode=max"]
        if options.no_cache:
            cmd.append("--no-cache")
        if daemon.buildx:
            cmd.append(str(context.context))
        try:
            tee.stream(cmd)
        except DockerException as exc:
            reject_failed_build(workspace, loaded, tee, log_path, repo, exc)
        except OSError as exc:
            raise CouldNotFinish(f"running buildctl failed: {exc}") from exc
        try:
            metadata = jsondoc.loads(
                read_regular(metadata_file, "buildctl metadata file", limit=_MAX_METADATA),
                limit=_MAX_METADATA,
            )
        except (OSError, InputFileError, jsondoc.JsonRefused) as exc:
            raise CouldNotFinish(f"buildctl's metadata file cannot be read: {exc}") from None
        if not isinstance(metadata, dict):
            raise CouldNotFinish("buildctl's metadata file is not a JSON object")
        return metadata
