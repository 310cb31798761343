"""What a plan's base tag serves upstream now, held against the digest the plan pins.

A plan pins its base by digest and keeps the tag the digest was found under
(``base.found_as``). Upstream moves that tag: a rebuilt official image, a security fix, a
new CUDA point release. Nothing in the plan changes when that happens, so nobody notices;
here the base's registry is asked what the tag serves now, in the base's own repository.

The question starts with one HEAD request: the registry's ``Docker-Content-Digest`` names
the document it would serve for the tag, an index staying an index (the digest a user would
pin, as the registry serves it). A manifest digest other than the pin is ``moved`` from that
answer alone (the candidate built on it fetches that digest, checked). Anything else is read
with a GET of the tag and hashed: "nothing moved" decides that a night builds nothing, so it
is never HEAD's word alone, and a GET whose bytes hash to another digest than HEAD named (a
converting proxy, a registry bug, a lie) is a no (:class:`~imagekit.errors.DigestMismatch`,
exit 1) naming both. A plan may pin one platform's manifest of a multi-platform tag; then
the index read decides, by that platform's entry, whether the image the plan builds on moved.
A plan of several platforms pins the index: a served index of another digest is held
against the pinned one platform by platform, and is ``current`` when each of the plan's
platforms has the same manifest in both (the index moved for other platforms only).

The answers are ``current``, ``moved`` (with the digest to pin now) or ``gone`` (the
registry answers 404 for the tag: a vanished tag is a no, never a pass). A registry that
cannot be reached raises, and the caller says "could not finish" (exit 3); one that answered
with content that is wrong (an index without the plan's platform) raises a CheckFailed (1).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from imagekit.errors import DigestMismatch, RegistryNotFound, UsageError
from imagekit.plans.model import LoadedPlan
from imagekit.refs import Digest, Reference
from imagekit.registry import (
    INDEX_TYPES,
    MANIFEST_TYPES,
    ImageIndex,
    RegistryClient,
    select_platform,
)
from imagekit.registry.manifest import parse_index
from imagekit.registry.resolve import platforms_read


class TagState(StrEnum):
    """What the tag serves, against the pin."""

    CURRENT = "current"  # the pinned digest (or an index whose platform entry is the pin)
    MOVED = "moved"  # another digest: ``UpstreamTag.served`` is what to pin now
    GONE = "gone"  # the registry has nothing under the tag (HTTP 404)


@dataclass(frozen=True)
class UpstreamTag:
    """One plan's base tag as its registry answered, when, and against which pin."""

    plan: str
    tag: str
    repository: str  # registry/repository the tag was asked in (the base's own)
    pinned: Digest
    state: TagState
    resolved_at: str  # UTC, when the registry answered
    served: Digest | None  # what the tag serves, as the registry serves it; None when gone
    media_type: str | None
    detail: str
    #: the pinned platform's manifest inside a served index (when the plan pins that form)
    platform_manifest: Digest | None = None

    @property
    def tag_reference(self) -> str:
        return f"{self.repository}:{self.tag}"

    @property
    def moved(self) -> bool:
        return self.state is TagState.MOVED

    def new_base(self) -> Reference:
        """``repository@served``: the base to build a candidate on (only when moved)."""
        if self.served is None:
            raise UsageError(f"{self.tag_reference} serves nothing: there is no new base")
        registry, _, repository = self.repository.partition("/")
        return Reference(registry, repository, None, self.served)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "tag": self.tag,
            "repository": self.repository,
            "pinned": str(self.pinned),
            "state": self.state,
            "served": str(self.served) if self.served else None,
            "media_type": self.media_type,
            "platform_manifest": str(self.platform_manifest) if self.platform_manifest else None,
            "resolved_at": self.resolved_at,
            "detail": self.detail,
        }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def watch_tag(client: RegistryClient, loaded: LoadedPlan) -> UpstreamTag:
    """Ask the base's registry what ``base.found_as`` serves now.

    The tag is looked up in the repository of the base the plan was loaded with (its own,
    or the override's). Raises UsageError for a plan without ``found_as`` and the registry
    errors of :meth:`RegistryClient.head_manifest` other than a 404, which is ``gone``.
    """
    tag = loaded.plan.base.found_as
    if tag is None:
        raise UsageError(
            f"plan {loaded.name} has no base.found_as: there is no tag to watch",
            hint="add found_as: TAG under base (the tag the digest was found under), "
            "or name the digest yourself with --to",
        )
    base = loaded.base
    pinned = base.digest
    assert pinned is not None  # noqa: S101 - LoadedPlan.base is always pinned
    where = Reference(base.registry, base.repository, tag)

    def answer(state: TagState, served: Digest | None, media_type: str | None, detail: str,
               platform_manifest: Digest | None = None) -> UpstreamTag:  # fmt: skip
        return UpstreamTag(
            loaded.name, tag, base.name, pinned, state, _now(), served, media_type, detail,
            platform_manifest,
        )  # fmt: skip

    try:
        head = client.head_manifest(where, tag)
    except RegistryNotFound as exc:
        return answer(
            TagState.GONE, None, None, f"{where} answers 404: the tag is gone ({exc.message})"
        )
    # Another digest named by a manifest's HEAD: moved. Nothing is trusted from that answer
    # but the digest, and the candidate built on it fetches that digest, checked.
    if head.media_type in MANIFEST_TYPES and head.digest != pinned:
        return answer(
            TagState.MOVED,
            head.digest,
            head.media_type,
            f"{where} moved: it serves {head.digest}; the plan pins {pinned}",
        )
    # "Nothing moved" decides that a night builds nothing, so it is never HEAD's word alone:
    # the tag's own bytes are fetched and hashed (a converting proxy, a registry bug or a lie
    # can make HEAD name a digest the GET does not serve). An index is read the same way.
    try:
        body, media_type, served = client.get_manifest(where, tag)
    except RegistryNotFound as exc:
        return answer(
            TagState.GONE,
            None,
            None,
            f"{where} answers 404 to a GET although its HEAD named {head.digest}: the tag is "
            f"gone ({exc.message})",
        )
    if served != head.digest:
        raise DigestMismatch(
            f"{where}: HEAD names {head.digest}, but a GET of the same tag serves bytes that "
            f"hash to {served}: the registry's answers disagree, so whether the tag moved "
            "from the pin is not known",
            expected=str(head.digest),
            actual=str(served),
            registry=base.registry,
            repository=base.repository,
            hint="a proxy in between may convert manifests; ask the registry directly, and "
            "pin what `imagekit inspect` reads from the bytes",
        )
    if served == pinned:
        return answer(
            TagState.CURRENT,
            served,
            media_type,
            f"{where} serves the pin (HEAD, and confirmed by the bytes of a GET)",
        )
    if media_type in INDEX_TYPES:
        index = parse_index(body, media_type, base, str(served))
        if loaded.multi_platform:
            moved = _platforms_moved(client, loaded, index, str(where), str(served))
            if not moved:
                return answer(
                    TagState.CURRENT,
                    served,
                    media_type,
                    f"{where} serves the index {served}, whose "
                    f"{', '.join(map(str, loaded.platforms))} manifests are the pinned index's "
                    "(the index moved for other platforms only)",
                )
            return answer(
                TagState.MOVED,
                served,
                media_type,
                f"{where} moved: it serves the index {served} ({'; '.join(moved)}); the plan "
                f"pins {pinned}",
            )
        entry = select_platform(
            index, loaded.platform, where=str(where), registry=base.registry,
            repository=base.repository, digest=str(served),
            platform_of=platforms_read(client, base),
        )  # fmt: skip
        if entry.digest == pinned:
            return answer(
                TagState.CURRENT,
                served,
                media_type,
                f"{where} serves the index {served}, whose {loaded.platform} manifest is the "
                "pin (the index moved for other platforms only)",
                entry.digest,
            )
        return answer(
            TagState.MOVED,
            served,
            media_type,
            f"{where} moved: it serves the index {served} ({loaded.platform}: "
            f"{entry.digest}); the plan pins {pinned}",
            entry.digest,
        )
    return answer(
        TagState.MOVED,
        served,
        media_type,
        f"{where} moved: it serves {served}; the plan pins {pinned}",
    )


def _platforms_moved(
    client: RegistryClient, loaded: LoadedPlan, served: ImageIndex, where: str, digest: str
) -> list[str]:
    """Each of the plan's platforms whose manifest in SERVED is not the pinned index's, as
    ``os/arch: old -> new``. The pinned index is read by its digest (checked); a pin that is
    no index has moved for every platform."""
    base = loaded.base
    body, media_type, pinned = client.get_manifest(base, str(base.digest))
    old: ImageIndex | None = None
    if media_type in INDEX_TYPES:
        old = parse_index(body, media_type, base, str(pinned))
    moved = []
    read = platforms_read(client, base)
    for platform in loaded.platforms:
        new = select_platform(
            served, platform, where=where, registry=base.registry,
            repository=base.repository, digest=digest, platform_of=read,
        )  # fmt: skip
        before = (
            select_platform(
                old,
                platform,
                where=str(base),
                registry=base.registry,
                repository=base.repository,
                digest=str(pinned),
                platform_of=read,
            ).digest  # fmt: skip
            if old is not None
            else None
        )
        if new.digest != before:
            moved.append(f"{platform}: {before or 'no index'} -> {new.digest}")
    return moved
