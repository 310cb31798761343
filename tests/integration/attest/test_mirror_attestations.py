"""Mirrors carry the proof: `mirror --copy` copies the .att/.sig tags and the referrers with
the image; a content-identical mirror (another manifest digest, the same config and diffIDs)
gets a signed binding to its source, and `imagekit verify MIRROR@DIGEST` accepts it on the
source's attestations through that binding, saying so in its scope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.attest.attach import attest
from imagekit.attest.cosign_tags import attach_signature
from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.attest.signer import KeyFileSigner
from imagekit.cli import main
from imagekit.errors import RecordRefused
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.mirror import MIRROR_V1
from imagekit.mirror import MirrorOptions, mirror
from imagekit.refs import parse_platform, parse_reference
from imagekit.registry import RegistryClient
from imagekit.workspace import Workspace
from tests.support.gate import audit_predicate
from tests.support.gotools import cosign_verify, cosign_verify_attestation, run_tool
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.registries import RunningRegistry
from tests.support.upstream import tags

MEMBERS = [M("app/model.txt", data=b"weights, not really " * 2000)]


@pytest.fixture
def source(registry: RunningRegistry, pair: KeyPairFiles) -> tuple[Pushed, KeyPairFiles]:
    with Writer(registry.host) as writer:
        image = writer.image("mirror/src", "v1", [Blob.gzip(MEMBERS)])
    ref = parse_reference(image.reference)
    assert ref.digest is not None
    signer = KeyFileSigner.from_file(pair.private)
    with RegistryClient() as client:
        attest(client, ref, [ref.digest], AUDIT_V1, audit_predicate(), signer)
        attach_signature(client, ref, ref.digest, signer)
    return image, pair


def _verify(reference: str, public: Path) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(main, ["verify", "--json", reference, "--key", str(public)])
    return result.exit_code, json.loads(result.stdout)


def _failing(document: dict[str, object]) -> list[str]:
    """The requirements `imagekit verify --json` says do not hold, by name."""
    requirements = document["requirements"]
    assert isinstance(requirements, list)
    return [str(r["requirement"]) for r in requirements if not r["held"]]


def _index_refused_for(index: str, public: Path, platform: str) -> dict[str, object]:
    """`imagekit verify INDEX` refuses it (exit 1) for PLATFORM's image alone, which is held
    image by image; the document, for the test's own assertions."""
    code, document = _verify(index, public)
    assert code == 1, document
    assert [name.split(":")[0] for name in _failing(document)] == [platform], document
    return document


def test_mirror_copy_carries_attestations_signatures_and_referrers(
    source: tuple[Pushed, KeyPairFiles], registry: RunningRegistry, workspace: Workspace
) -> None:
    image, pair = source
    report = mirror(
        image.reference,
        f"{registry.host}/mirror/copied:v1",
        options=MirrorOptions(copy=True, sign_key=pair.private),
        workspace=workspace,
    )
    assert str(report.verdict) == "identical"
    assert report.copy is not None
    assert report.copy["attachments"] == {"attestations": 1, "signatures": 1, "referrers": 1}
    copied = f"{registry.host}/mirror/copied@{image.digest}"
    assert cosign_verify_attestation(copied, pair.public, AUDIT_V1).returncode == 0
    assert cosign_verify(copied, pair.public).returncode == 0
    listed = run_tool("oras", "discover", "--plain-http", "--format", "json", copied)
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    found = document.get("referrers") or document.get("manifests") or []
    # the source's audit and the mirror's own binding
    assert len(found) == 2
    code, verdict = _verify(copied, pair.public)
    assert code == 0, verdict
    # the mirror's binding attestation is there too, and the ledger record names it
    assert report.attestation is not None and report.attestation["attested"] is True
    record = json.loads(workspace.ledger_path.read_text().splitlines()[-1])
    assert record["details"]["attestation"] == report.attestation["envelope_digest"]


def test_a_content_identical_mirror_is_verified_through_its_binding(
    source: tuple[Pushed, KeyPairFiles], registry: RunningRegistry, workspace: Workspace
) -> None:
    image, pair = source
    with Writer(registry.host) as writer:
        recompressed = writer.image(
            "mirror/recompressed", "v1", [Blob.zstd(MEMBERS)], config_bytes=image.config
        )
    assert recompressed.digest != image.digest
    mirrored = recompressed.reference
    # before the binding: no attestation on the mirror's digest
    code, before = _verify(mirrored, pair.public)
    assert code == 1, before
    report = mirror(
        image.reference,
        mirrored,
        options=MirrorOptions(sign_key=pair.private),
        workspace=workspace,
    )
    assert str(report.verdict) == "content-identical"
    code, after = _verify(mirrored, pair.public)
    assert code == 0, after
    assert "through a signed mirror binding: content-identical to" in str(after["scope"])
    assert str(after["binding"]).startswith(f"content-identical to {registry.host}/mirror/src@")
    # cosign verifies the binding itself on the mirror's digest
    assert cosign_verify_attestation(mirrored, pair.public, MIRROR_V1).returncode == 0
    # another key's binding does not count
    other = generate_key_pair(workspace.root / "other")
    code, refused = _verify(mirrored, other.public)
    assert code == 1 and refused["binding"] is None


def _two_platform_index(
    writer: Writer, repo: str, members: dict[str, list[M]], *, zstd: bool, configs: dict[str, bytes]
) -> tuple[str, dict[str, Pushed]]:
    """An index of linux/amd64 and linux/arm64 images (gzip or zstd layers of MEMBERS)."""
    images = {}
    for arch, files in members.items():
        layer = Blob.zstd(files) if zstd else Blob.gzip(files)
        images[arch] = writer.image(
            repo, f"v1-{arch}", [layer], arch=arch, config_bytes=configs.get(arch)
        )
    index = writer.index(repo, "v1", [(images[a], f"linux/{a}") for a in images])
    return index, images


def _index_and_recompressed_copy(
    registry: RunningRegistry, name: str, word: bytes
) -> tuple[tuple[str, dict[str, Pushed]], tuple[str, dict[str, Pushed]]]:
    """A two-platform index in mirror/NAME-src (a file of WORD per platform) and a
    content-identical copy in mirror/NAME-dst: the same files and configs, zstd layers, so
    other manifest digests. Each as (index reference, images by architecture)."""
    members = {
        arch: [M(f"app/{arch}.txt", data=(arch.encode() + b" " + word + b" ") * 3000)]
        for arch in ("amd64", "arm64")
    }
    with Writer(registry.host) as writer:
        src = _two_platform_index(writer, f"mirror/{name}-src", members, zstd=False, configs={})
        configs = {arch: image.config for arch, image in src[1].items()}
        dst = _two_platform_index(writer, f"mirror/{name}-dst", members, zstd=True, configs=configs)
    return src, dst


def test_a_content_identical_index_is_bound_whole_and_each_platform_to_its_own_source(
    registry: RunningRegistry, workspace: Workspace, pair: KeyPairFiles
) -> None:
    """A recompressed copy of a two-platform index: one binding names the index and both
    platforms' manifests; `imagekit verify` of each platform's manifest follows the binding
    to that platform's source image (only amd64 was audited: amd64 passes, arm64 does not,
    though the source index's attestations include amd64's audit); cosign accepts the
    binding on each digest."""
    signer = KeyFileSigner.from_file(pair.private)
    (src_index, src), (dst_index, dst) = _index_and_recompressed_copy(registry, "index", b"weights")
    src_ref = parse_reference(src_index)
    assert src_ref.digest is not None and all(dst[a].digest != src[a].digest for a in src)
    with RegistryClient() as client:
        amd64 = parse_reference(src["amd64"].reference)
        assert amd64.digest is not None
        # the audit stage's subjects: the platform's manifest and its index
        attest(client, amd64, [amd64.digest, src_ref.digest], AUDIT_V1, audit_predicate(), signer)
    report = mirror(
        src_index, dst_index, options=MirrorOptions(sign_key=pair.private), workspace=workspace
    )
    assert str(report.verdict) == "content-identical", report.message
    assert report.attestation is not None and report.attestation["attested"] is True
    dst_ref = parse_reference(dst_index)
    assert report.attestation["subjects"] == [
        str(dst_ref.digest),
        dst["amd64"].digest,
        dst["arm64"].digest,
    ]
    code, on_amd64 = _verify(dst["amd64"].reference, pair.public)
    assert code == 0, on_amd64
    assert on_amd64["binding"] == (
        f"content-identical to {registry.host}/mirror/index-src@{src['amd64'].digest} "
        f"(attestation {report.attestation['envelope_digest'][7:19]})"
    )
    code, on_arm64 = _verify(dst["arm64"].reference, pair.public)
    assert code == 1, on_arm64
    assert str(on_arm64["binding"]).startswith(
        f"content-identical to {registry.host}/mirror/index-src@{src['arm64'].digest}"
    )
    # The index is held image by image: arm64's source has no audit, so neither has its copy.
    _index_refused_for(dst_index, pair.public, "linux/arm64")
    arm64 = parse_reference(src["arm64"].reference)
    assert arm64.digest is not None
    with RegistryClient() as client:
        attest(client, arm64, [arm64.digest], AUDIT_V1, audit_predicate(), signer)
    code, on_index = _verify(dst_index, pair.public)
    assert code == 0, on_index
    assert on_index["binding"] == "; ".join(
        f"linux/{arch}: content-identical to {registry.host}/mirror/index-src@"
        f"{src[arch].digest} (attestation {report.attestation['envelope_digest'][7:19]})"
        for arch in ("amd64", "arm64")
    )
    for digest_ref in (dst_index, dst["amd64"].reference, dst["arm64"].reference):
        accepted = cosign_verify_attestation(digest_ref, pair.public, MIRROR_V1)
        assert accepted.returncode == 0, accepted.stderr
    record = json.loads(workspace.ledger_path.read_text().splitlines()[-1])
    assert record["details"]["attestation"] == report.attestation["envelope_digest"]


def test_an_index_one_platform_of_which_differs_is_bound_not_at_all(
    registry: RunningRegistry, workspace: Workspace, pair: KeyPairFiles
) -> None:
    """amd64 identical, arm64 another file: the index is a mismatch and nothing is signed,
    not even amd64's half (before, the first platform's verdict was signed for the index)."""
    same = [M("app/same.txt", data=b"same " * 3000)]
    with Writer(registry.host) as writer:
        src_index, _ = _two_platform_index(
            writer, "mirror/partial-src", {"amd64": same, "arm64": same}, zstd=False, configs={}
        )
        dst_index, _ = _two_platform_index(
            writer,
            "mirror/partial-dst",
            {"amd64": same, "arm64": [M("app/same.txt", data=b"other " * 3000)]},
            zstd=False,
            configs={},
        )
    report = mirror(
        src_index, dst_index, options=MirrorOptions(sign_key=pair.private), workspace=workspace
    )
    assert str(report.verdict) not in ("identical", "content-identical"), report.message
    assert report.attestation is not None and report.attestation["attested"] is False
    assert "binds nothing" in report.attestation["problem"]
    code, refused = _verify(dst_index, pair.public)
    assert code == 1 and refused["binding"] is None


def test_one_platform_of_an_index_is_bound_as_that_image_alone(
    registry: RunningRegistry, workspace: Workspace, pair: KeyPairFiles
) -> None:
    """`mirror --platform linux/arm64` verifies one image of the index: the binding's only
    subject is that image's manifest, so the gate accepts the arm64 copy through it and not
    the index (whose amd64 image nobody verified)."""
    signer = KeyFileSigner.from_file(pair.private)
    (src_index, src), (dst_index, dst) = _index_and_recompressed_copy(registry, "one", b"only")
    src_ref, arm64 = parse_reference(src_index), parse_reference(src["arm64"].reference)
    assert src_ref.digest is not None and arm64.digest is not None
    with RegistryClient() as client:
        attest(client, arm64, [arm64.digest, src_ref.digest], AUDIT_V1, audit_predicate(), signer)
    report = mirror(
        src_index,
        dst_index,
        options=MirrorOptions(sign_key=pair.private, platform=parse_platform("linux/arm64")),
        workspace=workspace,
    )
    assert str(report.verdict) == "content-identical", report.message
    assert report.attestation is not None
    assert report.attestation["subjects"] == [dst["arm64"].digest]
    code, on_arm64 = _verify(dst["arm64"].reference, pair.public)
    assert code == 0, on_arm64
    assert str(on_arm64["binding"]).startswith(
        f"content-identical to {registry.host}/mirror/one-src@{src['arm64'].digest}"
    )
    # The index: its amd64 image has neither an audit nor a binding.
    on_index = _index_refused_for(dst_index, pair.public, "linux/amd64")
    assert "linux/amd64" not in str(on_index["binding"])


def _torn(workspace: Workspace) -> None:
    """A ledger whose last line is torn: it refuses the next record."""
    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_bytes(b'{"seq": 1, "torn')


def test_a_binding_whose_record_is_refused_is_never_attached(
    source: tuple[Pushed, KeyPairFiles], registry: RunningRegistry, workspace: Workspace
) -> None:
    """Sign after record: the ledger refuses the mirror's record (its last line is torn),
    so the signed binding must not reach DST (no .att tag on the mirror's digest)."""
    image, pair = source
    with Writer(registry.host) as writer:
        recompressed = writer.image(
            "mirror/torn", "v1", [Blob.zstd(MEMBERS)], config_bytes=image.config
        )
    _torn(workspace)
    with pytest.raises(RecordRefused) as caught:
        mirror(
            image.reference,
            recompressed.reference,
            options=MirrorOptions(sign_key=pair.private),
            workspace=workspace,
        )
    assert f"sha256-{recompressed.digest.partition(':')[2]}.att" not in tags(
        registry.host, "mirror/torn"
    )
    report = caught.value.result
    assert str(report.verdict) == "content-identical"  # type: ignore[attr-defined]
    assert report.attestation is None  # type: ignore[attr-defined]


def test_an_index_binding_whose_record_is_refused_is_never_attached(
    registry: RunningRegistry, workspace: Workspace, pair: KeyPairFiles
) -> None:
    """The same for an index bound whole: no .att tag on the index or either platform."""
    (src_index, _), (dst_index, dst) = _index_and_recompressed_copy(registry, "torn", b"torn")
    _torn(workspace)
    with pytest.raises(RecordRefused) as caught:
        mirror(
            src_index, dst_index, options=MirrorOptions(sign_key=pair.private), workspace=workspace
        )
    assert str(caught.value.result.verdict) == "content-identical"  # type: ignore[attr-defined]
    held = tags(registry.host, "mirror/torn-dst")
    for digest in (str(parse_reference(dst_index).digest), *(i.digest for i in dst.values())):
        assert f"sha256-{digest.partition(':')[2]}.att" not in held, held
