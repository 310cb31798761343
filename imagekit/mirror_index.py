"""An index mirrored: every platform a runtime could select, in SRC's index or DST's,
paired by platform and verified as one image is (imagekit.mirror_layers); an entry without
a pair, or whose image cannot be told, is a mismatch naming it. The index's verdict is the
worst of its platforms'.
"""

from __future__ import annotations

from dataclasses import replace

from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.mirror_layers import uncompared, verify_images
from imagekit.mirror_report import MirrorOptions, MirrorReport
from imagekit.refs import Reference
from imagekit.registry import Descriptor, RegistryClient, ResolvedImage
from imagekit.registry.resolve import IndexImage, index_images, is_attestation, platforms_read

# The verdict an index gets from its platforms' verdicts: the first of these any one has.
_WORST_FIRST = (
    Verdict.ERROR,
    Verdict.MISMATCH,
    Verdict.CONFIG_DIFFERS,
    Verdict.CONTENT_IDENTICAL,
    Verdict.IDENTICAL,
)


def _selectable(client: RegistryClient, ref: Reference, image: ResolvedImage) -> list[IndexImage]:
    """The entries of IMAGE's index a runtime could select (an entry without a platform read
    from its config), or IMAGE itself where it is one manifest."""
    if image.index_digest is None:
        alone = Descriptor(
            image.manifest_media_type, image.manifest_digest, len(image.manifest_bytes)
        )
        return [IndexImage(alone, image.platform)]
    return index_images(image.index_manifests, platforms_read(client, ref))


def _paired(
    sources: list[IndexImage], destinations: list[IndexImage]
) -> tuple[list[tuple[IndexImage, IndexImage]], list[IndexImage], list[IndexImage]]:
    """SRC's and DST's entries paired by platform (normalised, in each index's order: the
    first amd64 of SRC with the first of DST, the second with the second), and those of
    either side left without a pair."""
    left = [d for d in destinations if d.platform is not None and d.unreadable is None]
    pairs: list[tuple[IndexImage, IndexImage]] = []
    alone: list[IndexImage] = []
    for entry in sources:
        if entry.platform is None or entry.unreadable is not None:
            continue
        platform = entry.platform
        match = next((d for d in left if d.platform and d.platform.same(platform)), None)
        if match is None:
            alone.append(entry)
        else:
            left.remove(match)
            pairs.append((entry, match))
    return pairs, alone, left


def every_platform(
    client: RegistryClient,
    source: tuple[Reference, ResolvedImage],
    destination: tuple[Reference, ResolvedImage],
    first: MirrorReport,
    options: MirrorOptions,
) -> MirrorReport:
    """SRC or DST is an index and no --platform was given: every entry a runtime could
    select, in either index, is verified.

    A copy of an index holds an image a platform; a verdict on the default platform alone
    would say nothing of the others, and an entry hidden from the comparison (one that lists
    no platform, or carries an annotation) is one a node may still run. SRC's and DST's
    entries are paired by platform and each pair verified layer by layer, as the first was;
    an entry of one side with no pair in the other, or one whose image cannot be told, is
    a mismatch naming it. Attestation manifests (unknown/unknown) are not compared, and
    the report says how many each side has.
    """
    (src_ref, first_src), (dst_ref, first_dst) = source, destination
    sources = _selectable(client, src_ref, first_src)
    destinations = _selectable(client, dst_ref, first_dst)
    pairs, src_alone, dst_alone = _paired(sources, destinations)
    reports: list[MirrorReport] = []
    firsts = (first_src.manifest_digest, first_dst.manifest_digest)
    if firsts not in {(s.digest, d.digest) for s, d in pairs}:
        reports.append(first)
    for src_entry, dst_entry in pairs:
        if (src_entry.digest, dst_entry.digest) == firsts:
            reports.append(first)
            continue
        src = _entry(client, src_ref, first_src, src_entry)
        dst = _entry(client, dst_ref, first_dst, dst_entry)
        reports.append(verify_images(client, src, dst, options))
    for side, ref, image, entries in (
        ("SRC", src_ref, first_src, sources),
        ("DST", dst_ref, first_dst, destinations),
    ):
        alone = src_alone if side == "SRC" else dst_alone
        unreadable = [e for e in entries if e.unreadable is not None]
        reports += [_lone(side, ref, image, entry, options) for entry in [*alone, *unreadable]]
    if len(reports) == 1:
        return first
    verdict = next(v for v in _WORST_FIRST if any(r.verdict is v for r in reports))
    attestations = [
        f"{side}'s index lists {n} attestation manifest(s) (unknown/unknown), not compared"
        for side, image in (("SRC", first_src), ("DST", first_dst))
        if (n := sum(1 for d in image.index_manifests if is_attestation(d)))
    ]
    return replace(
        first,
        verdict=verdict,
        message="; ".join(f"{platform_of(r)}: {r.message}" for r in reports),
        config_digest_equal=all(r.config_digest_equal for r in reports),
        compressed_digests_equal=all(r.compressed_digests_equal for r in reports),
        manifest_digest_equal=all(r.manifest_digest_equal for r in reports),
        config_differences=tuple(
            f"{platform_of(r)}: {d}" for r in reports for d in r.config_differences
        ),
        layers=tuple(layer for r in reports for layer in r.layers),
        notes=tuple(dict.fromkeys([*(n for r in reports for n in r.notes), *attestations])),
        platforms=tuple(reports),
    )


def _entry(
    client: RegistryClient, ref: Reference, image: ResolvedImage, entry: IndexImage
) -> ResolvedImage:
    """ENTRY's image: IMAGE itself when it is the one manifest, else resolved in its index."""
    if image.index_digest is None or entry.digest == image.manifest_digest:
        return image
    return client.resolve(ref, entry=entry.digest)


def _lone(
    side: str, ref: Reference, image: ResolvedImage, entry: IndexImage, options: MirrorOptions
) -> MirrorReport:
    """A mismatch for an entry of SIDE's index that has no pair in the other side's, or
    whose image cannot be told: a node could run it, and nothing vouches for it."""
    other = "DST" if side == "SRC" else "SRC"
    if entry.unreadable is not None:
        message = f"{side}'s entry {entry.digest} cannot be compared: {entry.unreadable}"
    else:
        message = f"only in {side}: {entry} (no entry of that platform in {other})"
    resolution = {
        "reference": str(ref),
        "index_digest": str(image.index_digest) if image.index_digest else None,
        "platform": str(entry.platform) if entry.platform else None,
        "manifest_digest": str(entry.digest),
    }
    return uncompared(
        resolution if side == "SRC" else None,
        resolution if side == "DST" else None,
        Verdict.MISMATCH,
        message,
        options,
    )


def platform_of(report: MirrorReport) -> str:
    side = report.destination or report.source or {}
    return str(side.get("platform") or side.get("manifest_digest"))
