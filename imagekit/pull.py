"""The final pull: pull an image through the local engine by digest and prove what it holds.

"Pushed" and "copied" say what a registry holds; the question that matters is which image the
target engine actually has. So this stage pulls through the engine (the target's own
credentials, its own store), reads the engine's image ID and RepoDigests, and checks them
against the expected manifest digest and the config digest read from the registry.

Which digest an image ID is depends on the engine's image store: the classic store reports the
config digest, the containerd image store reports the digest the image was pulled by (the
manifest, or the index for a multi-platform image). The store is read from the engine and
recorded, and the matching digest is compared; it is never guessed.

A tag is refused unless the digest it must resolve to is given (``expect_digest``): a tag
checked against nothing would prove nothing. Between resolving a tag at the registry and the
engine pulling it the tag could move; the RepoDigests check catches that as a mismatch.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagekit.engine import Engine, connect, engine_errors
from imagekit.errors import ReferenceFormatError, UsageError
from imagekit.evidence import new_run_dir, write_json
from imagekit.ledger import FinalPullDetails, LedgerRecord, PullCheck, append_record
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.registry import RegistryClient, ResolvedImage
from imagekit.workspace import Workspace

VERIFIED = "verified"
MISMATCH = "mismatch"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: str | None
    actual: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "expected": self.expected, "actual": self.actual}


@dataclass(frozen=True)
class PullResult:
    reference: Reference
    expected_digest: Digest
    manifest_digest: Digest
    config_digest: Digest
    index_digest: Digest | None
    image_id: str
    repo_digests: tuple[str, ...]
    image_store: str
    engine_version: str
    where: str
    checks: tuple[Check, ...]
    evidence: Path | None = None
    record: LedgerRecord | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def status(self) -> str:
        return VERIFIED if self.ok else MISMATCH

    @property
    def scope(self) -> str:
        store = f"Docker {self.engine_version}, {self.image_store} image store"
        if self.ok:
            return (
                f"the engine on {self.where} ({store}) pulled {self.reference.name}@"
                f"{self.expected_digest} and holds image ID {self.image_id}, matching the "
                "registry's manifest and config digests; this proves what that engine holds, "
                "not that the image runs or serves"
            )
        failed = ", ".join(c.name for c in self.checks if not c.ok)
        return (
            f"the engine on {self.where} ({store}) pulled {self.reference} but {failed} did not "
            "match the expected digests: it does not hold the image that was accepted"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": str(self.reference),
            "status": self.status,
            "ok": self.ok,
            "scope": self.scope,
            "expected_digest": str(self.expected_digest),
            "index_digest": str(self.index_digest) if self.index_digest else None,
            "manifest_digest": str(self.manifest_digest),
            "config_digest": str(self.config_digest),
            "image_id": self.image_id,
            "repo_digests": list(self.repo_digests),
            "image_store": self.image_store,
            "engine_version": self.engine_version,
            "where": self.where,
            "checks": [c.to_json() for c in self.checks],
            "evidence": str(self.evidence) if self.evidence else None,
            "record_seq": self.record.seq if self.record else None,
        }


def _target(reference: str, expect_digest: str | None) -> tuple[Reference, Digest]:
    ref = parse_reference(reference)
    expected = Digest(expect_digest) if expect_digest is not None else None
    if ref.digest is None and expected is None:
        raise UsageError(
            f"{reference} is not pinned by digest; a final pull must say which content it expects",
            hint="pull REPO@sha256:..., or pass --expect-digest with the digest the tag must have",
        )
    if ref.digest is not None and expected is not None and ref.digest != expected:
        raise ReferenceFormatError(
            f"{reference} names {ref.digest} but --expect-digest says {expected}",
            hint="give one digest",
        )
    if ref.digest is not None:
        return ref, ref.digest
    assert expected is not None  # noqa: S101 - both None was refused above
    return ref, expected


def _repo_digest_matches(repo_digests: tuple[str, ...], ref: Reference, digest: Digest) -> bool:
    for text in repo_digests:
        try:
            parsed = parse_reference(text)
        except ReferenceFormatError:
            continue
        if parsed.name == ref.name and parsed.digest == digest:
            return True
    return False


def compare(
    *,
    image_store: str,
    ref: Reference,
    expected: Digest,
    pulled_by: Digest,
    config_digest: Digest,
    image_id: str,
    repo_digests: tuple[str, ...],
) -> tuple[Check, ...]:
    """The three checks of a final pull; which digest the image ID must be depends on the store."""
    checks = [
        Check("registry digest", pulled_by == expected, str(expected), str(pulled_by)),
        Check(
            "engine RepoDigests",
            _repo_digest_matches(repo_digests, ref, expected),
            f"{ref.name}@{expected}",
            ", ".join(repo_digests) or None,
        ),
    ]
    if image_store == "containerd":
        # The containerd store names an image by the digest it was pulled by.
        checks.append(
            Check("image ID (containerd store)", image_id == expected, str(expected), image_id)
        )
    elif image_store == "classic":
        # The classic store names an image by its config digest:
        # https://github.com/opencontainers/image-spec/blob/main/config.md#imageid
        checks.append(
            Check(
                "image ID (classic store)", image_id == config_digest, str(config_digest), image_id
            )
        )
    else:
        checks.append(Check(f"image ID ({image_store} store)", False, None, image_id))
    return tuple(checks)


def final_pull(
    workspace: Workspace,
    reference: str,
    *,
    expect_digest: str | None = None,
    record: bool = False,
    plan: str | None = None,
    where: str | None = None,
    engine: Engine | None = None,
    registry: RegistryClient | None = None,
) -> PullResult:
    """Pull through the engine, check image ID and RepoDigests, optionally record the result.

    A mismatch is a result (``ok`` False, a ``mismatch`` record when recording), not an
    exception: the record of a failed final pull is exactly what the ledger must keep.
    """
    ref, expected = _target(reference, expect_digest)
    engine = engine or connect()
    own_client = registry is None
    client = registry or RegistryClient()
    try:
        resolved: ResolvedImage = client.resolve(ref)
    finally:
        if own_client:
            client.close()
    pull_name = str(ref)
    with engine_errors(f"pulling {pull_name}"):
        engine.client.image.pull(pull_name, quiet=True)
    with engine_errors(f"inspecting {pull_name}"):
        image = engine.client.image.inspect(pull_name)
    image_id = str(image.id)
    repo_digests = tuple(str(d) for d in (image.repo_digests or ()))
    checks = compare(
        image_store=engine.image_store,
        ref=ref,
        expected=expected,
        pulled_by=resolved.index_digest or resolved.manifest_digest,
        config_digest=resolved.config_digest,
        image_id=image_id,
        repo_digests=repo_digests,
    )
    result = PullResult(
        reference=ref,
        expected_digest=expected,
        manifest_digest=resolved.manifest_digest,
        config_digest=resolved.config_digest,
        index_digest=resolved.index_digest,
        image_id=image_id,
        repo_digests=repo_digests,
        image_store=engine.image_store,
        engine_version=engine.server_version,
        where=where or socket.gethostname(),
        checks=checks,
    )
    if not record:
        return result
    run_dir = new_run_dir(workspace.evidence_dir, "pull", f"{ref.name}@{expected}")
    evidence = run_dir / "pull.json"
    write_json(
        evidence,
        {
            **result.to_json(),
            "resolved": {
                k: v
                for k, v in resolved.to_json().items()
                if k in ("index_digest", "platform", "manifest_digest", "config_digest")
            },
            "engine": {
                "version": engine.server_version,
                "storage_driver": engine.storage_driver,
                "image_store": engine.image_store,
            },
            "image": {
                "architecture": image.architecture,
                "os": image.os,
                "repo_tags": list(image.repo_tags or ()),
            },
        },
    )
    saved = append_record(
        workspace,
        "final-pull",
        plan=plan,
        images={"image": f"{ref.name}@{expected}"},
        status=result.status,
        scope=result.scope,
        evidence=evidence,
        details=FinalPullDetails(
            source="engine",
            image_id=image_id,
            repo_digests=list(repo_digests),
            engine_version=engine.server_version,
            image_store=engine.image_store,
            expected_manifest_digest=str(expected),
            expected_config_digest=str(resolved.config_digest),
            platform_manifest_digest=str(resolved.manifest_digest),
            where=result.where,
            checks=[PullCheck(**c.to_json()) for c in checks],
        ),
    )
    return replace(result, evidence=evidence, record=saved)
