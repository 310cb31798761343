"""The judges on the same documents: Kyverno's CLI running the docs' ClusterPolicy and the
policy-controller's tester running the docs' ClusterImagePolicy (a cluster's admission
decision), `cosign verify-attestation` with the docs' CUE policy, and `imagekit verify` with
its default policy (docs/ATTESTATIONS.md, "The judges").

Each case asserts that they agree, or the exact difference the docs state:
- the gate decides on the newest audit, the other three on every audit: a passing re-audit
  after a failed one is accepted by the gate alone, a failing re-audit after a pass is
  refused by all four;
- the gate follows imagekit's signed mirror binding, the others cannot: a content-identical
  mirror with no audit of its own digest is accepted by the gate alone, until its own digest
  is audited;
- cosign without a policy checks signatures and the predicate type, not the verdict; the
  policy-controller with one authority admits on any passing audit (why the docs' policy has
  two).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.attest.keys import KeyPairFiles, generate_key_pair
from imagekit.cli import main
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.mirror import MIRROR_V1
from imagekit.mirror import MirrorOptions, mirror
from imagekit.refs import Reference, parse_reference
from imagekit.workspace import Workspace
from tests.support.admission import (
    KyvernoVerdict,
    PolicyControllerVerdict,
    doc_block,
    docs_image_policy,
    docs_policy,
    kyverno_apply,
    policy_tester,
)
from tests.support.gate import audit_predicate, edit_payload, rewrite_att, sign_onto
from tests.support.gotools import cosign_verify_attestation, run_tool
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.registries import RunningRegistry, start_registry
from tests.support.tls import make_server_certificate

pytestmark = pytest.mark.integration

FAILED = "CPU_CHECK_INCOMPLETE"


@dataclass(frozen=True)
class Verdicts:
    """What each judge said of one image reference."""

    kyverno: KyvernoVerdict
    tester: PolicyControllerVerdict  # the policy-controller's, on the docs' ClusterImagePolicy
    cosign: bool  # cosign verify-attestation --policy (the docs' CUE): every audit passed
    cosign_signature: bool  # cosign verify-attestation, no policy: a signed audit is there
    gate: bool  # imagekit verify, default policy: the newest audit passed
    gate_document: dict[str, Any]

    @property
    def all_accept(self) -> bool:
        return self.kyverno.admitted and self.tester.admitted and self.cosign and self.gate

    @property
    def all_refuse(self) -> bool:
        return not (self.kyverno.admitted or self.tester.admitted or self.cosign or self.gate)

    @property
    def only_the_gate_accepts(self) -> bool:
        return self.gate and not (self.kyverno.admitted or self.tester.admitted or self.cosign)


@pytest.fixture
def judge(registry: RunningRegistry, tmp_path: Path) -> Callable[[str, KeyPairFiles], Verdicts]:
    """``judge(REF, PAIR)``: the four judges on REF with PAIR's public key."""
    cue = tmp_path / "imagekit-audit.cue"
    cue.write_text(doc_block("cue", "predicate:"))
    runs = iter(range(1000))

    def run(reference: str, pair: KeyPairFiles) -> Verdicts:
        workdir = tmp_path / f"judges-{next(runs)}"
        kyverno = kyverno_apply(docs_policy(f"{registry.host}/*", pair.public), reference, workdir)
        tester = policy_tester(
            docs_image_policy(f"{registry.host}/**", pair.public), reference, workdir
        )
        with_policy = run_tool(
            "cosign", "verify-attestation", "--key", str(pair.public), "--insecure-ignore-tlog",
            "--allow-http-registry", "--type", AUDIT_V1, "--policy", str(cue), reference,
        )  # fmt: skip
        signature = cosign_verify_attestation(reference, pair.public, AUDIT_V1)
        gate = CliRunner().invoke(main, ["verify", "--json", reference, "--key", str(pair.public)])
        assert gate.exit_code in (0, 1), gate.output
        return Verdicts(
            kyverno,
            tester,
            with_policy.returncode == 0,
            signature.returncode == 0,
            gate.exit_code == 0,
            json.loads(gate.stdout),
        )

    return run


def _image(make_image: Callable[[str], Pushed], repo: str) -> Reference:
    return parse_reference(make_image(repo).reference)


def test_all_accept_a_passing_audit_and_its_identical_copy(
    make_image: Callable[[str], Pushed],
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
    registry: RunningRegistry,
    workspace: Workspace,
) -> None:
    image = _image(make_image, "kyverno/ok")
    sign_onto(image, pair, audit_predicate())
    verdicts = judge(str(image), pair)
    assert verdicts.all_accept, verdicts
    assert "verified image attestations for " in verdicts.kyverno.message, verdicts
    # `imagekit mirror --copy`: the same digest elsewhere, the attestations carried with it
    copied = mirror(
        str(image),
        f"{registry.host}/kyverno/copy:v1",
        options=MirrorOptions(copy=True, sign_key=pair.private),
        workspace=workspace,
    )
    assert str(copied.verdict) == "identical"
    verdicts = judge(f"{registry.host}/kyverno/copy@{image.digest}", pair)
    assert verdicts.all_accept, verdicts
    # a Pod naming a tag: Kyverno resolves it to the digest (mutateDigest) and judges that
    verdicts = judge(f"{registry.host}/kyverno/copy:v1", pair)
    assert verdicts.all_accept, verdicts


def test_all_refuse_an_image_with_no_attestation_and_another_key_s(
    make_image: Callable[[str], Pushed],
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
    tmp_path: Path,
) -> None:
    bare = _image(make_image, "kyverno/bare")
    verdicts = judge(str(bare), pair)
    assert verdicts.all_refuse and not verdicts.cosign_signature, verdicts
    assert verdicts.kyverno.result == "fail", verdicts.kyverno.output
    assert "no matching attestations" in verdicts.kyverno.message, verdicts.kyverno.message
    assert "no audit attestation" in verdicts.gate_document["requirements"][0]["why"]
    other = generate_key_pair(tmp_path / "other")
    image = _image(make_image, "kyverno/other-key")
    sign_onto(image, other, audit_predicate())
    verdicts = judge(str(image), pair)
    assert verdicts.all_refuse and not verdicts.cosign_signature, verdicts
    assert verdicts.kyverno.result == "fail", verdicts.kyverno.output
    assert "accepted signatures do not match threshold" in verdicts.kyverno.message
    assert verdicts.gate_document["skipped"][0]["reason"] == "not signed by any of the keys given"
    assert judge(str(image), other).all_accept  # the signer's own key: all accept


def test_all_refuse_a_failing_audit_and_cosign_alone_checks_only_the_signature(
    make_image: Callable[[str], Pushed],
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
) -> None:
    image = _image(make_image, "kyverno/failing")
    sign_onto(image, pair, audit_predicate(FAILED))
    verdicts = judge(str(image), pair)
    assert verdicts.all_refuse, verdicts
    assert verdicts.kyverno.result == "fail", verdicts.kyverno.output
    assert "attestation checks failed" in verdicts.kyverno.message, verdicts.kyverno.message
    assert f"status {FAILED}" in verdicts.gate_document["requirements"][0]["why"]
    # cosign without --policy: the signature and the type are good, the verdict is not read
    assert verdicts.cosign_signature


def test_all_refuse_a_tampered_envelope_and_a_moved_attestation(
    make_image: Callable[[str], Pushed],
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
    registry: RunningRegistry,
) -> None:
    image = _image(make_image, "kyverno/tampered")
    assert image.digest is not None
    sign_onto(image, pair, audit_predicate(FAILED))
    rewrite_att(
        registry,
        image,
        image.digest,
        edit_payload(
            lambda p: p.replace(f'"status":"{FAILED}"'.encode(), b'"status":"CPU_PASS"', 1)
        ),
    )
    verdicts = judge(str(image), pair)
    assert verdicts.all_refuse and not verdicts.cosign_signature, verdicts
    assert "accepted signatures do not match threshold" in verdicts.kyverno.message
    assert "not signed by any of the keys" in verdicts.gate_document["skipped"][0]["reason"]
    # a passing audit of another image, its .att manifest put under this image's tag: the
    # signature holds, the subject names the other image
    audited = _image(make_image, "kyverno/moved")
    moved = _image(make_image, "kyverno/moved")
    assert moved.digest is not None
    sign_onto(audited, pair, audit_predicate())
    rewrite_att(registry, audited, moved.digest, lambda data: data)
    verdicts = judge(str(moved), pair)
    assert verdicts.all_refuse and not verdicts.cosign_signature, verdicts
    assert "no matching subject digest found" in verdicts.kyverno.message
    assert "not about this image" in verdicts.gate_document["skipped"][0]["reason"]


def test_a_passing_re_audit_after_a_failed_one_is_accepted_by_the_gate_alone(
    make_image: Callable[[str], Pushed],
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
) -> None:
    """The documented difference: the gate decides on the newest audit; Kyverno, cosign's
    policy and the policy-controller's require every audit signed by the key to pass."""
    image = _image(make_image, "kyverno/reaudit")
    sign_onto(image, pair, audit_predicate(FAILED, age=timedelta(hours=1)))
    sign_onto(image, pair, audit_predicate())
    verdicts = judge(str(image), pair)
    assert verdicts.only_the_gate_accepts, verdicts
    assert verdicts.kyverno.result == "fail" and "attestation checks failed" in (
        verdicts.kyverno.message
    ), verdicts.kyverno.output
    assert "failed evaluating cue policy for ClusterImagePolicy" in verdicts.tester.output
    assert verdicts.cosign_signature


def test_a_failing_re_audit_after_a_pass_is_refused_by_all(
    make_image: Callable[[str], Pushed],
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
    registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    """The other side of the difference: where the newest audit failed, the two rules agree.
    And why the docs' ClusterImagePolicy has two authorities: the one finding passing audits
    alone admits the image, since an authority is met by any one attestation."""
    image = _image(make_image, "kyverno/regressed")
    sign_onto(image, pair, audit_predicate(age=timedelta(hours=1)))
    assert judge(str(image), pair).all_accept
    sign_onto(image, pair, audit_predicate(FAILED))
    verdicts = judge(str(image), pair)
    assert verdicts.all_refuse, verdicts
    assert "the newest audit" in verdicts.gate_document["requirements"][0]["why"]
    one_authority = docs_image_policy(f"{registry.host}/**", pair.public)
    one_authority["spec"]["authorities"] = one_authority["spec"]["authorities"][:1]
    del one_authority["spec"]["policy"]
    assert one_authority["spec"]["authorities"][0]["name"] == "passed"
    lax = policy_tester(one_authority, str(image), tmp_path / "one-authority")
    assert lax.admitted, lax.output


MEMBERS = [M("app/model.txt", data=b"weights, not really " * 2000)]


def test_a_content_identical_mirror_is_accepted_by_the_gate_alone_until_its_digest_is_audited(
    judge: Callable[[str, KeyPairFiles], Verdicts],
    pair: KeyPairFiles,
    registry: RunningRegistry,
    workspace: Workspace,
) -> None:
    """The documented difference: the gate follows imagekit's signed mirror binding to the
    source's audit; the others ask about the digest the Pod names, which has no audit of its
    own. An audit signed on the mirror's own digest satisfies all four."""
    with Writer(registry.host) as writer:
        source = writer.image("kyverno/src", "v1", [Blob.gzip(MEMBERS)])
        recompressed = writer.image(
            "kyverno/mirror", "v1", [Blob.zstd(MEMBERS)], config_bytes=source.config
        )
    sign_onto(parse_reference(source.reference), pair, audit_predicate())
    assert judge(source.reference, pair).all_accept
    report = mirror(
        source.reference,
        recompressed.reference,
        options=MirrorOptions(sign_key=pair.private),
        workspace=workspace,
    )
    assert str(report.verdict) == "content-identical"
    verdicts = judge(recompressed.reference, pair)
    assert verdicts.only_the_gate_accepts and not verdicts.cosign_signature, verdicts
    assert "through a signed mirror binding" in verdicts.gate_document["scope"]
    assert verdicts.kyverno.result == "fail", verdicts.kyverno.output
    assert "not found for predicate type" in verdicts.kyverno.message  # Kyverno's "attestions"
    # cosign verifies the binding itself; it does not follow it
    binding = cosign_verify_attestation(recompressed.reference, pair.public, MIRROR_V1)
    assert binding.returncode == 0, binding.stderr
    # the mirror's own digest audited (as `imagekit audit MIRROR@DIGEST --sign-key` signs it)
    sign_onto(parse_reference(recompressed.reference), pair, audit_predicate())
    verdicts = judge(recompressed.reference, pair)
    assert verdicts.all_accept, verdicts


def test_the_cluster_judges_trust_a_private_ca_through_ssl_cert_file(
    make_image: Callable[[str], Pushed],
    pair: KeyPairFiles,
    registry: RunningRegistry,
    tmp_path: Path,
) -> None:
    """The session registry's storage served over HTTPS with a private CA: Kyverno and the
    policy-controller accept the image with the CA in SSL_CERT_FILE; Kyverno cannot reach it
    without."""
    image = _image(make_image, "kyverno/tls")
    sign_onto(image, pair, audit_predicate())
    certificate = make_server_certificate(tmp_path / "tls")
    secure = start_registry(tmp_path / "secure", tls=certificate, storage_of=registry.storage)
    try:
        reference = f"{secure.host}/{image.repository}@{image.digest}"
        policy = docs_policy(f"{secure.host}/*", pair.public)
        trusted = kyverno_apply(policy, reference, tmp_path / "ca", ca_bundle=certificate.ca_path)
        assert trusted.admitted, trusted.output
        image_policy = docs_image_policy(f"{secure.host}/**", pair.public)
        tester = policy_tester(
            image_policy, reference, tmp_path / "ca-tester", ca_bundle=certificate.ca_path
        )
        assert tester.admitted, tester.output
        untrusted = kyverno_apply(policy, reference, tmp_path / "no-ca")
        # the handshake fails (no CA trusts the certificate), and on loopback Kyverno then
        # tries plain HTTP, which the HTTPS registry refuses
        assert not untrusted.admitted and untrusted.result == "fail", untrusted.output
        assert "HTTP request to an HTTPS server" in untrusted.message, untrusted.output
    finally:
        secure.stop()
