"""Push an image the engine built, and record the push.

``imagekit build --push`` and the pipeline's push stage (which pushes only what its audit
passed) both go through here, so a push is recorded the same way whoever made it. The
registry builder pushes its own blobs (imagekit.builders.assemble) and only shares
:func:`check_push_repo`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from imagekit.attest.attach import AttestOutcome, Prepared
from imagekit.attest.seal import sign_record_attach
from imagekit.builders.record import record_push
from imagekit.errors import RegistryError, UsageError
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.runtime.engine import (
    Engine,
    connect,
    docker_error_text,
    engine_errors,
    engine_tls_error,
)
from imagekit.workspace import Workspace


def check_push_repo(repo: str) -> Reference:
    ref = parse_reference(repo)
    if ref.tag is not None or ref.digest is not None:
        raise UsageError(
            f"--push takes a repository without tag or digest, got {repo!r}",
            hint="e.g. --push 127.0.0.1:5000/team/image; the build's tag is reused",
        )
    return ref


def push_image(engine: Engine, tag: str, repo: str, log_path: Path) -> tuple[str, str]:
    """Tag the image into REPO, push it, and return (repo@digest, manifest digest)."""
    from python_on_whales.exceptions import DockerException

    ref = check_push_repo(repo)
    remote = f"{repo}:{tag.rpartition(':')[2]}"
    with engine_errors(f"tagging {tag} as {remote}"):
        engine.client.image.tag(tag, remote)
    try:
        engine.client.image.push(remote, quiet=True)
    except DockerException as exc:
        tls = engine_tls_error(docker_error_text(exc), ref.registry)
        if tls is not None:
            raise tls from exc
        raise RegistryError(
            f"pushing {remote} failed: {docker_error_text(exc)}",
            registry=ref.registry,
            repository=ref.repository,
            hint="check the registry answers and the engine's credentials for it",
        ) from exc
    with engine_errors(f"inspecting {remote} after the push"):
        repo_digests = engine.client.image.inspect(remote).repo_digests or []
    for item in repo_digests:
        name, _, digest = item.partition("@")
        if parse_reference(name).name == ref.name:
            manifest = str(Digest(digest))
            with log_path.open("a", encoding="utf-8") as fh:
                fh.write(f"imagekit: pushed {remote} as {ref.name}@{manifest}\n")
            return f"{ref.name}@{manifest}", manifest
    raise RegistryError(
        f"the engine pushed {remote} but reported no digest for {ref.name}",
        registry=ref.registry,
        repository=ref.repository,
    )


@dataclass(frozen=True)
class PushResult:
    """An engine image pushed and recorded (a push that fails raises)."""

    tag: str
    pushed: str  # repo@manifest digest
    manifest_digest: str
    log: Path
    seq: int
    #: what was signed onto the pushed digest, by PushDetails field (with a signing key)
    attestations: Mapping[str, AttestOutcome] = field(default_factory=dict)

    ok: ClassVar[bool] = True
    exit_code: ClassVar[int] = 0

    @property
    def evidence(self) -> Path:
        return self.log

    @property
    def ledger_seqs(self) -> tuple[int, ...]:
        return (self.seq,)

    def to_json(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "pushed": self.pushed,
            "manifest_digest": self.manifest_digest,
            "log": str(self.log),
            "ledger_seq": self.seq,
            **(
                {"attestations": {k: o.to_json() for k, o in self.attestations.items()}}
                if self.attestations
                else {}
            ),
        }


@dataclass(frozen=True)
class PushRequest:
    """One push of an engine-built image: its tag, the repository it goes to, the log it
    writes, the plan and image ID its record names, and what it signs for the pushed digest
    (``attest``, given repo@digest: the envelopes prepared, attaching nothing; None: no key)."""

    tag: str
    repo: str
    log_path: Path
    plan: str
    image_id: str
    attest: Callable[[str], Mapping[str, Prepared]] | None = None


def push_and_record(
    workspace: Workspace,
    engine: Engine,
    tag: str,
    repo: str,
    log_path: Path,
    *,
    plan: str,
    image_id: str,
    attest: Callable[[str], Mapping[str, Prepared]] | None = None,
) -> PushResult:
    """The push stage as a call of its own (its :func:`run`, kept for the callers that name
    it), through ENGINE."""
    request = PushRequest(tag, repo, log_path, plan, image_id, attest)
    return run(workspace, request, engine=engine)


def run(workspace: Workspace, request: PushRequest, *, engine: Engine | None = None) -> PushResult:
    """Push a built image and append its push record.

    The pipeline's push stage (which pushes only what its audit passed) runs this, and
    ``imagekit build --push`` the same two steps (push_image, record_push), so a push is
    recorded the same way whoever made it. ``attest`` (given the pushed repo@digest) signs
    what is known of the image for that digest, attaching nothing; the record names each
    envelope, and only then are they attached (a record the ledger refuses attaches none).
    One the registry did not store is NotAttested (exit 3) once the record is kept.
    """
    tag, log_path = request.tag, request.log_path
    pushed, manifest = push_image(engine or connect(), tag, request.repo, log_path)
    signed = request.attest(pushed) if request.attest is not None else {}
    keys = tuple(signed)

    def record(result: PushResult, prepared: Sequence[Prepared]) -> PushResult:
        seq = record_push(
            workspace, tag, pushed, manifest, log_path, plan=request.plan,
            image_id=request.image_id,
            attestations={key: p.ledger_value for key, p in zip(keys, prepared, strict=True)},
        )  # fmt: skip
        return replace(result, seq=seq)

    return sign_record_attach(
        PushResult(tag, pushed, manifest, log_path, seq=0),  # its seq once recorded
        sign=lambda _: tuple(signed.values()),
        record=record,
        attached=lambda result, outcomes: replace(
            result, attestations=dict(zip(keys, outcomes, strict=True))
        ),
        keeping=None,  # the push is in its log; a refused record carries no result
    )
