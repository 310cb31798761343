"""Which image of a plan the ledger stands behind, read from the records alone.

Two readers ask, and both ask here, so the rules live once:

- the lock (imagekit.ledger.lockfile) shows a plan's current image: its newest build that is
  not a night's candidate (for a plan of several platforms, the build record of each platform
  of its newest index) and the push of that build (``CurrentBuild``, fed the plan's records in
  ledger order);
- a night (imagekit.flows.nightly) compares its candidate with the accepted image: the
  newest verified final pull of the plan (the image a complete pipeline pulled at its end),
  failing that its newest push, each with a reference a registry can serve, and the audit
  recorded before it (``accepted_image``).

What the two share, and what is defined only here: a night's candidate is proposed, never
accepted, neither its build (marked so by the night, or built under a ``nightly-`` tag:
``is_candidate_build``) nor its push (under a ``nightly-`` tag: ``is_candidate_push``); the
names an image goes by in other records (its tag, image ID, pushed reference, digests:
``identifiers``) and when a record is about one of them (``concerns``); which build records
make one build of several platforms.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from imagekit.errors import ImagekitError
from imagekit.ledger.readback import Entry
from imagekit.ledger.record import BuildDetails, LedgerRecord, PushDetails
from imagekit.refs import parse_reference

#: The tag every night's candidate is pushed under; such pushes are never accepted.
CANDIDATE_TAG_PREFIX = "nightly-"


def _candidate_tag(reference: str) -> bool:
    """Whether a reference is tagged as a night's candidate (``repo:nightly-...``)."""
    name = reference.partition("@")[0]
    return name.rpartition("/")[2].rpartition(":")[2].startswith(CANDIDATE_TAG_PREFIX)


def is_candidate_push(record: LedgerRecord) -> bool:
    """A push of a night's candidate (tagged ``nightly-...``): proposed, never accepted."""
    return _candidate_tag(record.images.get("image", ""))


def is_candidate_build(record: LedgerRecord) -> bool:
    """A build of a night's candidate: proposed, never the plan's current image.

    The night marks its build record (BuildDetails.candidate), whichever builder made it: a
    BuildKit daemon pushes by digest only and the registry builder names its build by digest,
    so only the engine's record says it by its tag. A record written before the mark existed
    is known by that tag (``imagekit/PLAN:nightly-...``).
    """
    info: BuildDetails = record.info
    return info.candidate is not None or _candidate_tag(record.images.get("image", ""))


def pullable(text: str | None) -> bool:
    """A reference pinned by digest that a registry can serve (a pod's bare image ID is not)."""
    if not text or "/" not in text:
        return False
    try:
        return parse_reference(text).pinned
    except ImagekitError:
        return False


def identifiers(*values: Any) -> set[str]:
    """The names given, and the digest of each ``name@digest`` among them."""
    found: set[str] = set()
    for value in values:
        if isinstance(value, str) and value:
            found.add(value)
            if "@" in value:
                found.add(value.rpartition("@")[2])
    return found


def concerns(record: LedgerRecord, ids: set[str]) -> bool:
    """Whether a record is about the image known by any of these identifiers."""
    texts = record.identifiers()
    digests = {i for i in ids if i.startswith("sha256:")}
    names = ids - digests
    return any(text in names or any(d in text for d in digests) for text in texts)


@dataclass(frozen=True)
class AcceptedImage:
    """The image a night compares with, and the audit status it was accepted with."""

    reference: str
    record_seq: int
    record_kind: str
    audit_status: str | None


def accepted_image(records: list[LedgerRecord], plan: str) -> AcceptedImage | None:
    """The newest verified final pull of the plan, else its newest push; with its audit."""
    accepted: LedgerRecord | None = None
    for kind, status, role in (("final-pull", "verified", "image"), ("push", "pushed", "pushed")):
        accepted = next(
            (
                r
                for r in reversed(records)
                if r.plan == plan
                and r.kind == kind
                and r.status == status
                and pullable(r.images.get(role))
                and not (kind == "push" and is_candidate_push(r))
            ),
            None,
        )
        if accepted is not None:
            reference = accepted.images[role]
            break
    if accepted is None:
        return None
    audit = next(
        (
            r.status
            for r in reversed(records)
            if r.plan == plan and r.kind == "audit" and r.seq < accepted.seq
        ),
        None,
    )
    return AcceptedImage(reference, accepted.seq, accepted.kind, audit)


def index_of(entry: Entry) -> str | None:
    """The index a build record's image was pushed in (a plan of several platforms)."""
    info: BuildDetails = entry.record.info
    return info.index_digest


def platform_builds(builds: Iterable[Entry], newest: Entry) -> list[Entry]:
    """The build records of the newest build's index, one a platform (the newest of each),
    in the order they were recorded; [] for a build of one image."""
    index = index_of(newest)
    if index is None:
        return []
    by_platform: dict[str | None, Entry] = {}
    for entry in builds:
        if index_of(entry) == index:
            info: BuildDetails = entry.record.info
            by_platform.pop(info.platform, None)
            by_platform[info.platform] = entry
    return list(by_platform.values())


@dataclass
class CurrentBuild:
    """A plan's current image as the lock shows it, fed the plan's records in ledger order:
    its newest build that is not a night's candidate (``is_candidate_build``) and the push of
    that build; for a build of several platforms, the build record of each (one index) and the
    index's push."""

    build: Entry | None = None
    push: Entry | None = None
    platforms: list[Entry] = field(default_factory=list)

    def feed(self, entry: Entry) -> None:
        rec = entry.record
        if rec.kind == "build" and is_candidate_build(rec):
            return  # a night's candidate: proposed, never the current image
        if rec.kind == "push" and is_candidate_push(rec):
            return  # its push (the registry builder's, tagged nightly-...)
        if rec.kind == "build":
            index = index_of(entry)
            if index is None:
                self.platforms = []
            elif self.platforms and index_of(self.platforms[0]) == index:
                self.platforms = platform_builds([*self.platforms, entry], entry)
            else:
                self.platforms = [entry]
            self.build, self.push = entry, None
        elif rec.kind == "push" and self.platforms and rec.status == "pushed":
            index_push: PushDetails = rec.info
            if index_push.index_digest == index_of(self.platforms[0]):
                self.push = entry
        elif rec.kind == "push" and self.build is not None and rec.status == "pushed":
            built: BuildDetails = self.build.record.info
            ids = identifiers(built.image_id, self.build.record.images.get("image"))
            info: PushDetails = rec.info
            if concerns(rec, ids) or info.config_digest == built.image_id:
                self.push = entry
