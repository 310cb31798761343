"""The index of a build of several platforms: composed from the manifests the engine pushed,
and read back from the registry, a manifest and its config for each platform of the plan.

Apart from the flow (platforms.py): what the index holds is the registry's to say, and
both builders (a BuildKit daemon, the engine a platform at a time) read it back alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagekit.builders.assemble.check import AssertionRun
from imagekit.builders.assemble.config import dump
from imagekit.builders.platforms_run import PlatformsRun
from imagekit.errors import CouldNotFinish
from imagekit.evidence import write_bytes
from imagekit.refs import Digest, Platform
from imagekit.registry import RegistryClient
from imagekit.registry.manifest import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    OCI_INDEX,
    Descriptor,
    ImageIndex,
    ImageManifest,
    parse_config,
    parse_manifest,
)
from imagekit.registry.resolve import select_platform
from imagekit.registry.upload import push_manifest


@dataclass(frozen=True)
class PlatformImage:
    """One platform's image in the index: its manifest, config and assertion run."""

    platform: str  # as the plan lists it
    manifest_digest: str
    media_type: str
    size: int
    config_digest: str
    pushed: str  # repo@manifest digest
    assertions: AssertionRun

    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "pushed": self.pushed,
            "manifest_digest": self.manifest_digest,
            "media_type": self.media_type,
            "size": self.size,
            "image_id": self.config_digest,
            "assertions": self.assertions.to_json(),
        }


def push_index(
    run: PlatformsRun, client: RegistryClient, pushed: list[tuple[Platform, Digest]]
) -> Digest:
    """An index of the pushed manifests, each entry's platform read from its own config."""
    entries: list[dict[str, Any]] = []
    types: set[str] = set()
    for _, digest in pushed:
        body, media_type, _ = client.get_manifest(run.repo, digest)
        manifest = _manifest(run, body, media_type, digest)
        config = parse_config(
            client.fetch_blob(run.repo, Descriptor.from_model(manifest.config)),
            registry=run.repo.registry,
            repository=run.repo.repository,
            digest=str(manifest.config.digest),
        )
        platform = config.platform()
        entry_platform = {"architecture": platform.architecture, "os": platform.os}
        if platform.variant:
            entry_platform["variant"] = platform.variant
        types.add(media_type)
        entries.append(
            {"mediaType": media_type, "digest": str(digest), "size": len(body),
             "platform": entry_platform}
        )  # fmt: skip
    index_type = DOCKER_MANIFEST_LIST if types == {DOCKER_MANIFEST} else OCI_INDEX
    document = dump({"schemaVersion": 2, "mediaType": index_type, "manifests": entries})
    push_manifest(client, run.repo, document, index_type, [], tag=None, log=run.say)
    digest = Digest.of_bytes(document)
    write_bytes(run.run_dir / "index.json", document)
    run.say(f"pushed the index {run.repo}@{digest} ({index_type})")
    return digest


def _manifest(
    run: PlatformsRun, body: bytes, media_type: str, digest: Digest | str
) -> ImageManifest:
    parsed = parse_manifest(
        body, media_type, registry=run.repo.registry, repository=run.repo.repository,
        digest=str(digest),
    )  # fmt: skip
    if not isinstance(parsed, ImageManifest):
        raise CouldNotFinish(f"{run.repo}@{digest} is an index where an image was expected")
    return parsed


@dataclass(frozen=True)
class Child:
    """One plan platform's entry of the pushed index, with its manifest's config digest."""

    platform: Platform
    digest: str
    media_type: str
    size: int
    config: str


@dataclass(frozen=True)
class Children:
    media_type: str  # the index's
    entries: tuple[Child, ...]


def read_children(run: PlatformsRun, client: RegistryClient, index_digest: str) -> Children:
    """Each plan platform's manifest in the pushed index, read back from the registry."""
    body, media_type, digest = client.get_manifest(run.repo, index_digest)
    parsed = parse_manifest(
        body, media_type, registry=run.repo.registry, repository=run.repo.repository,
        digest=str(digest),
    )  # fmt: skip
    if not isinstance(parsed, ImageIndex):
        raise CouldNotFinish(
            f"{run.repo}@{index_digest} is a single image, not an index of "
            f"{len(run.loaded.platforms)} platforms"
        )
    entries: list[Child] = []
    for platform in run.loaded.platforms:
        child = select_platform(
            parsed, platform, where=f"{run.repo}@{index_digest}", registry=run.repo.registry,
            repository=run.repo.repository, digest=index_digest,
        )  # fmt: skip
        child_body, child_type, _ = client.get_manifest(run.repo, child.digest)
        manifest = _manifest(run, child_body, child_type, child.digest)
        entries.append(
            Child(platform, str(child.digest), child_type, child.size, str(manifest.config.digest))
        )
        run.say(f"{platform}: {run.repo}@{child.digest} in the index")
    return Children(media_type, tuple(entries))
