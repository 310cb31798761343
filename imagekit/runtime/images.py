"""An image the engine will run, found locally or pulled by digest.

REF is resolved first: a local image ID or tag is used as it is; anything else is a registry
reference, pulled by digest. A tag is resolved through the registry to the digest it names at
that moment (the resolution is kept: tag, digest, time) and that digest is pulled, so what
runs is content, never whatever the tag points at when the engine gets to it. The audit and
the GPU preflight both run images this way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from imagekit import progress
from imagekit.errors import CouldNotFinish, ReferenceFormatError, UsageError
from imagekit.refs import DOCKER_HUB, Digest, Platform, Reference, is_digest, parse_reference
from imagekit.registry.client import RegistryClient
from imagekit.runtime.engine import Engine, engine_errors


@dataclass(frozen=True)
class EngineImage:
    """The image a stage runs: its engine ID and what names and digests it is known by."""

    requested: str
    image_id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    reference: Reference | None
    pulled: bool
    platform: Platform | None = None  # what the engine says the image is built for
    # Set when REF was a registry tag: "tag X resolved to DIGEST at TIME" (UTC).
    resolved_tag: str | None = None
    resolved_at: str | None = None
    pulled_platform: str | None = None  # the os/arch asked of an index when it was pulled

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


def _looks_like_image_id(ref: str) -> bool:
    hexpart = ref.removeprefix("sha256:")
    return len(hexpart) >= 12 and all(c in "0123456789abcdef" for c in hexpart)


def _resolve_tag(reference: Reference) -> tuple[Reference, str]:
    """The digest a registry tag names right now, and when it was asked (UTC)."""
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with RegistryClient() as registry:
        _, _, digest = registry.get_manifest(reference, reference.identifier)
    return reference.pinned_only(digest), at


def resolve_image(engine: Engine, ref: str, platform: str | None = None) -> EngineImage:
    """Find REF locally, or pull it by digest (a tag is resolved through its registry first).

    ``platform`` (os/arch) picks the image of an index to pull, for an image of another
    architecture than the engine's (run under qemu's binfmt handlers).
    """
    client = engine.client
    with engine_errors(f"looking up {ref} in the local engine"):
        local = client.image.exists(ref)
    reference: Reference | None = None
    pulled = False
    resolved_tag: str | None = None
    resolved_at: str | None = None
    if not local:
        try:
            reference = parse_reference(ref)
        except ReferenceFormatError as exc:
            raise UsageError(
                f"{ref!r} is not a local image and not a registry reference",
                hint="give a local image ID or tag, or REGISTRY/REPO@sha256:DIGEST",
            ) from exc
        if not reference.pinned:
            resolved_tag = str(reference)
            reference, resolved_at = _resolve_tag(reference)
        pinned = str(reference.pinned_only())
        from python_on_whales.exceptions import DockerException  # loaded with the engine

        try:
            with progress.current().waiting(f"pulling {pinned} into the engine"):
                client.image.pull(pinned, quiet=True, platform=platform)
        except DockerException as exc:
            detail = str(exc.stderr or exc)
            if "no matching manifest" in detail:
                raise CouldNotFinish(
                    f"{pinned} has no image for {platform or 'the engine platform'}",
                    hint="name the platform to pull: imagekit audit REF --platform OS/ARCH "
                    "(or --plan NAME, whose base platform is used)",
                ) from exc
            with engine_errors(f"pulling {pinned}", registry=reference.registry):
                raise
        pulled = True
        ref = pinned
    elif not _looks_like_image_id(ref):
        try:
            reference = parse_reference(ref)
        except ReferenceFormatError:
            reference = None  # a name the engine knows but refs cannot parse: keep the ID
    with engine_errors(f"inspecting {ref}"):
        image = client.image.inspect(ref)
    own_platform = None
    if image.os and image.architecture:
        own_platform = Platform(
            str(image.os), str(image.architecture), getattr(image, "variant", None)
        )
    return EngineImage(
        requested=ref,
        image_id=str(image.id),
        repo_tags=tuple(image.repo_tags or ()),
        repo_digests=tuple(image.repo_digests or ()),
        reference=reference,
        pulled=pulled,
        platform=own_platform,
        resolved_tag=resolved_tag,
        resolved_at=resolved_at,
        pulled_platform=platform if pulled else None,
    )
