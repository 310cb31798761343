"""Adding to what a tag holds, never replacing what another writer put there.

Cosign's ``sha256-<hex>.att``/``.sig`` tags and the OCI referrers fallback tag
(``sha256-<hex>``) are documents that several writers extend: a CI runner's audit, a build
host's provenance, a mirror's verification. The distribution API has no compare-and-swap
on a tag (a PUT replaces; distribution 2.8 ignores If-Match), so each writer:

1. puts its blobs first (so what follows is quick);
2. reads the tag (its digest and bytes), merges its own entry into that document;
3. checks with a HEAD that the tag has not moved since, and PUTs the merged document;
4. waits a short random moment, re-reads the tag, and when its entry is not there (another
   writer replaced the document in between) goes back to 2 with what is there now.

Two writers at once both end up in the tag: the one whose PUT was replaced sees it at step 4
and merges again. The remaining race (a PUT landing inside another writer's few-millisecond
window between its HEAD and its PUT, after that writer's re-read) is narrowed by the wait
of step 4 and named here rather than hidden.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from imagekit import jsondoc
from imagekit.errors import RegistryError, RegistryNotFound
from imagekit.refs import Digest, Reference
from imagekit.registry.blob_upload import BlobSource
from imagekit.registry.client import RegistryClient
from imagekit.registry.manifest import ACCEPT
from imagekit.registry.transport import MAX_MANIFEST_BYTES
from imagekit.registry.upload import push_blobs, push_manifest


@dataclass(frozen=True)
class TagDocument:
    body: bytes
    media_type: str
    digest: Digest

    def parsed(self) -> Any:
        """The document's JSON, through the bounded reader (the client vetted these bytes
        when it fetched them; a document refused there never gets here)."""
        return jsondoc.loads(self.body, limit=MAX_MANIFEST_BYTES)


@dataclass(frozen=True)
class Merged:
    """The document to put: its bytes and media type."""

    body: bytes
    media_type: str


@dataclass(frozen=True)
class TagUpdate:
    digest: Digest  # what the tag holds once our entry is in it
    attempts: int
    already_there: bool


def read_tag(
    client: RegistryClient, repo: Reference, tag: str, accept: Sequence[str] = ACCEPT
) -> TagDocument | None:
    """What TAG holds now, or None when the registry has no such tag."""
    try:
        body, media_type, digest = client.get_manifest(repo, tag, accept=accept)
    except RegistryNotFound:
        return None
    return TagDocument(body, media_type, digest)


def _head(client: RegistryClient, repo: Reference, tag: str) -> Digest | None:
    try:
        return client.head_manifest(repo, tag).digest
    except RegistryNotFound:
        return None


def update_tag(
    client: RegistryClient,
    repo: Reference,
    tag: str,
    *,
    blobs: Sequence[BlobSource],
    merge: Callable[[TagDocument | None], Merged],
    holds: Callable[[TagDocument], bool],
    attempts: int = 10,
    settle_s: float = 0.1,
) -> TagUpdate:
    """Add an entry to TAG: ``merge`` makes the new document from the current one (None when
    the tag is new), ``holds`` says whether a document has our entry. Raises RegistryError
    when the tag kept moving for every attempt."""
    push_blobs(client, repo, blobs)
    for attempt in range(1, attempts + 1):
        current = read_tag(client, repo, tag)
        if current is not None and holds(current):
            return TagUpdate(current.digest, attempt, already_there=attempt == 1)
        merged = merge(current)
        if _head(client, repo, tag) != (current.digest if current else None):
            continue  # moved while we merged: merge into what is there now
        push_manifest(client, repo, merged.body, merged.media_type, (), tag=tag)
        # Let a writer that read the tag before our PUT land its own, then look.
        time.sleep(settle_s * (0.5 + random.random()))  # noqa: S311 - jitter, not a secret
        after = read_tag(client, repo, tag)
        if after is not None and holds(after):
            return TagUpdate(after.digest, attempt, already_there=False)
    raise RegistryError(
        f"{repo.name}:{tag} kept changing under {attempts} attempts to add to it",
        registry=repo.registry,
        repository=repo.repository,
        hint="other writers are updating the same tag; run the command again",
    )
