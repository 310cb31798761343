"""`imagekit verify` decides from the registry alone, as cosign does: what both accept, and
every tamper case (a payload byte changed, the subject swapped, another key's signature,
the .att tag deleted, an attestation moved onto another image) refused by both."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.attest.attach import attest
from imagekit.attest.cosign_tags import att_tag
from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.attest.signer import KeyFileSigner
from imagekit.cli import main
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.registry import RegistryClient
from tests.support.gate import audit_predicate, edit_payload, rewrite_att, sign_onto, verify
from tests.support.gotools import cosign_verify_attestation
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.media_types import OCI_MANIFEST
from tests.support.registries import RunningRegistry


@dataclass(frozen=True)
class Gate:
    """What each test here starts from: new images in the session's registry (which a test
    may tamper with, as anyone with push rights could), key A that cosign and the gate are
    given, key B that signs what must not be trusted."""

    registry: RunningRegistry
    make_image: Callable[[str], Pushed]
    a: KeyPairFiles
    b: KeyPairFiles

    def image(self, repo: str) -> tuple[Reference, Digest]:
        """A new image in REPO, by digest, and that digest."""
        image = parse_reference(self.make_image(repo).reference)
        assert image.digest is not None
        return image, image.digest

    def attested(self, repo: str, predicate: dict[str, Any]) -> tuple[Reference, Digest]:
        """A new image in REPO with PREDICATE (an audit) attested on it, signed by key A."""
        image, digest = self.image(repo)
        sign_onto(image, self.a, predicate)
        return image, digest


@pytest.fixture
def gate(registry: RunningRegistry, make_image: Callable[[str], Pushed], tmp_path: Path) -> Gate:
    return Gate(
        registry, make_image, generate_key_pair(tmp_path / "a"), generate_key_pair(tmp_path / "b")
    )


def _both_refuse(image: Reference, public: Path) -> dict[str, Any]:
    cosign = cosign_verify_attestation(str(image), public, AUDIT_V1)
    assert cosign.returncode != 0, cosign.stdout
    code, document = verify(str(image), "--key", str(public))
    assert code == 1, document
    assert document["ok"] is False
    return document


def test_both_accept_a_passing_audit_and_imagekit_names_what_it_proved(gate: Gate) -> None:
    a, b = gate.a, gate.b
    image, _ = gate.attested("gate/ok", audit_predicate())
    assert cosign_verify_attestation(str(image), a.public, AUDIT_V1).returncode == 0
    code, document = verify(str(image), "--key", str(b.public), "--key", str(a.public))
    assert code == 0, document
    assert document["requirements"][0]["held"] is True
    assert "registry alone" in document["scope"]
    assert document["attestations"][0]["key"] == str(a.public)


def test_a_failing_audit_an_old_one_and_a_policy_name_every_requirement(
    gate: Gate, tmp_path: Path
) -> None:
    a = gate.a
    image, _ = gate.attested(
        "gate/policy", audit_predicate("CPU_CHECK_INCOMPLETE", age=timedelta(days=10))
    )
    code, document = verify(str(image), "--key", str(a.public))
    assert code == 1 and "status CPU_CHECK_INCOMPLETE" in document["requirements"][0]["why"]
    sign_onto(image, a, audit_predicate(findings=2, fixable=1, age=timedelta(days=3)))
    sign_onto(
        image,
        a,
        {
            "buildDefinition": {
                "externalParameters": {"plan": {"name": "demo"}},
                "resolvedDependencies": [{"digest": {"sha256": "ab" * 32}}],
            }
        },
        SLSA_PROVENANCE_V1,
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\naudit:\n  status: [CPU_PASS]\n  max_age: 1d\n"
        "vulnerabilities: none-fixable\nprovenance:\n  plan: demo\n  base: sha256:"
        + "ab" * 32
        + "\n"
    )
    code, document = verify(str(image), "--key", str(a.public), "--policy", str(policy))
    assert code == 1
    assert [r["held"] for r in document["requirements"]] == [False, False, True], document
    assert "older than 1d" in document["requirements"][0]["why"]
    assert "2 finding(s), 1 fixable" in document["requirements"][1]["why"]
    policy.write_text(
        "version: 1\naudit:\n  status: [CPU_PASS]\n  max_age: 7d\nprovenance:\n  plan: demo\n"
    )
    assert verify(str(image), "--key", str(a.public), "--policy", str(policy))[0] == 0
    policy.write_text("version: 1\naudit:\n  statuz: [CPU_PASS]\n")
    result = CliRunner().invoke(
        main, ["verify", str(image), "--key", str(a.public), "--policy", str(policy)]
    )
    assert result.exit_code == 2 and "policy.yaml: audit.statuz" in result.stderr


def test_a_payload_byte_changed_is_refused_by_both(gate: Gate) -> None:
    image, digest = gate.attested("gate/byte", audit_predicate("CPU_CHECK_INCOMPLETE"))
    rewrite_att(
        gate.registry,
        image,
        digest,
        edit_payload(
            lambda p: p.replace(b"CPU_CHECK_INCOMPLETE", b"CPU_PASS_CHECK_INCOMPL", 1).replace(
                b'"status":"CPU_PASS_CHECK_INCOMPL"', b'"status":"CPU_PASS"        ', 1
            )
        ),
    )
    document = _both_refuse(image, gate.a.public)
    assert "not signed by any of the keys" in document["skipped"][0]["reason"]


def test_a_swapped_subject_is_refused_by_both(gate: Gate) -> None:
    other, other_digest = gate.attested("gate/swap", audit_predicate())
    image, digest = gate.image("gate/swap")
    # the other image's passing statement, its subject swapped for this image's digest
    theirs, ours = other_digest.hex.encode(), digest.hex.encode()
    rewrite_att(gate.registry, other, digest, edit_payload(lambda p: p.replace(theirs, ours)))
    document = _both_refuse(image, gate.a.public)
    assert "not signed by any of the keys" in document["skipped"][0]["reason"]


def test_another_key_s_signature_is_refused_by_both(gate: Gate) -> None:
    image, _ = gate.image("gate/key")
    sign_onto(image, gate.b, audit_predicate())
    document = _both_refuse(image, gate.a.public)
    assert document["skipped"][0]["reason"] == "not signed by any of the keys given"


def test_a_deleted_att_tag_is_refused_by_both(gate: Gate) -> None:
    image, digest = gate.attested("gate/deleted", audit_predicate())
    assert verify(str(image), "--key", str(gate.a.public))[0] == 0
    with Writer(gate.registry.host) as writer:
        answer = writer.get_manifest(image.repository, att_tag(digest))
        deleted = writer.http.delete(
            f"/v2/{image.repository}/manifests/{answer.headers['Docker-Content-Digest']}"
        )
        assert deleted.status_code == 202
    document = _both_refuse(image, gate.a.public)
    assert "no audit attestation" in document["requirements"][0]["why"]


def test_an_attestation_moved_onto_another_image_is_refused_by_both(gate: Gate) -> None:
    audited, _ = gate.attested("gate/moved", audit_predicate())
    image, digest = gate.image("gate/moved")
    rewrite_att(gate.registry, audited, digest, lambda data: data)  # the same signed bytes
    document = _both_refuse(image, gate.a.public)
    assert "not about this image" in document["skipped"][0]["reason"]


def test_bad_input_and_an_unreachable_registry(pair: KeyPairFiles) -> None:
    result = CliRunner().invoke(
        main, ["verify", "127.0.0.1:1/x@sha256:" + "a" * 64, "--key", str(pair.private)]
    )
    assert result.exit_code == 2 and "is a private key" in result.stderr
    result = CliRunner().invoke(
        main, ["verify", "127.0.0.1:1/x@sha256:" + "a" * 64, "--key", str(pair.public)]
    )
    assert result.exit_code == 3, result.output


def test_a_layer_that_is_not_a_dsse_envelope_is_skipped_and_named(gate: Gate) -> None:
    image, digest = gate.attested("gate/junk", audit_predicate("CPU_CHECK_INCOMPLETE"))
    repo = image.repository
    junk = b'{"status":"CPU_PASS","note":"unsigned, not an envelope"}'
    with Writer(gate.registry.host) as writer:
        manifest = json.loads(writer.get_manifest(repo, att_tag(digest)).content)
        manifest["layers"].append(
            {
                "mediaType": "application/vnd.dsse.envelope.v1+json",
                "digest": writer.blob(repo, junk),
                "size": len(junk),
                "annotations": {"predicateType": AUDIT_V1},
            }
        )
        writer.manifest(repo, att_tag(digest), json.dumps(manifest).encode(), OCI_MANIFEST)
    code, document = verify(str(image), "--key", str(gate.a.public))
    assert code == 1  # the one signed audit says CPU_CHECK_INCOMPLETE; the junk is not trusted
    assert [s["reason"] for s in document["skipped"]] == [
        "not a DSSE envelope (payload: Field required)"
    ]
    assert document["skipped"][0]["layer"] == manifest["layers"][-1]["digest"]


def test_an_index_is_attested_on_both_digests_and_verified_by_either(gate: Gate) -> None:
    """Subjects: the platform's manifest digest and the index digest. cosign (which asks
    about the digest REF names: the index) accepts either; imagekit verify accepts the
    amd64 image, and not the index, whose arm64 image nobody audited."""
    from imagekit.attest.attach import attest_reference

    a, registry = gate.a, gate.registry
    with Writer(registry.host) as writer:
        amd64 = writer.image("gate/index", "amd64", [Blob.gzip([M("x", data=b"amd64")])])
        arm64 = writer.image(
            "gate/index", "arm64", [Blob.gzip([M("x", data=b"arm64")])], arch="arm64"
        )
        index = writer.index(
            "gate/index", "multi", [(amd64, "linux/amd64"), (arm64, "linux/arm64")]
        )
    outcome = attest_reference(
        KeyFileSigner.from_file(a.private), parse_reference(index), AUDIT_V1, audit_predicate()
    )
    assert outcome.attestation is not None
    index_digest = index.split("@")[1]
    assert {str(s) for s in outcome.attestation.subjects} == {amd64.digest, index_digest}
    for reference in (index, amd64.reference, f"{registry.host}/gate/index:multi"):
        assert cosign_verify_attestation(reference, a.public, AUDIT_V1).returncode == 0, reference
    assert verify(amd64.reference, "--key", str(a.public))[0] == 0
    for reference in (index, f"{registry.host}/gate/index:multi"):
        code, document = verify(reference, "--key", str(a.public))
        assert code == 1, reference
        assert [r["requirement"].split(":")[0] for r in document["requirements"]
                if not r["held"]] == ["linux/arm64"]  # fmt: skip
    # the other platform's manifest was not attested
    assert verify(arm64.reference, "--key", str(a.public))[0] == 1


def test_an_index_holds_only_when_each_of_its_images_does(gate: Gate, tmp_path: Path) -> None:
    """An audit of the amd64 image that names the index too (as `imagekit audit IDX
    --platform linux/amd64` signs it) is no audit of the arm64 image: the index is refused,
    naming arm64, until arm64 has its own; a policy that names its audit platform holds the
    index to that platform's image alone."""
    a = gate.a
    with Writer(gate.registry.host) as writer:
        images = {
            arch: writer.image(
                "gate/index", f"v-{arch}", [Blob.gzip([M(f"{arch}.txt", data=arch.encode())])],
                arch=arch,
            )
            for arch in ("amd64", "arm64")
        }  # fmt: skip
        index = parse_reference(
            writer.index("gate/index", "v", [(images[x], f"linux/{x}") for x in images])
        )
    amd64, arm64 = (parse_reference(images[x].reference) for x in ("amd64", "arm64"))
    assert index.digest is not None and amd64.digest is not None and arm64.digest is not None
    signer = KeyFileSigner.from_file(a.private)
    with RegistryClient() as client:
        attest(client, amd64, [amd64.digest, index.digest], AUDIT_V1, audit_predicate(), signer)
    code, refused = verify(str(index), "--key", str(a.public))
    assert code == 1, refused
    assert refused["platforms"] == ["linux/amd64", "linux/arm64"]
    held = {r["requirement"]: r["held"] for r in refused["requirements"]}
    assert held == {
        "linux/amd64: audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED}": True,
        "linux/arm64: audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED}": False,
    }, refused["requirements"]
    assert "each of its images held to the policy" in refused["scope"]
    # A policy for amd64 clusters: the index is held to its amd64 image.
    policy = tmp_path / "amd64.yaml"
    policy.write_text("version: 1\naudit:\n  status: [CPU_PASS]\n  platform: linux/amd64\n")
    code, amd64_only = verify(str(index), "--key", str(a.public), "--policy", str(policy))
    assert code == 0, amd64_only
    assert amd64_only["platforms"] == ["linux/amd64"]
    # arm64 audited too (its own manifest only): the index holds.
    arm64_audit = {**audit_predicate(), "platform": "linux/arm64"}
    with RegistryClient() as client:
        attest(client, arm64, [arm64.digest], AUDIT_V1, arm64_audit, signer)
    code, accepted = verify(str(index), "--key", str(a.public))
    assert code == 0, accepted
    assert all(r["held"] for r in accepted["requirements"]) and len(accepted["requirements"]) == 2
