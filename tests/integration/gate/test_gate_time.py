"""The newest verdict decides, and "newest" cannot be gamed: times are parsed (a future one,
an unpadded one refused), a tie goes to the worse verdict, a verdict this imagekit cannot
read is not passed over for an older pass, and every verdict ages (30 days by default), so
that deleting the newer failing layer from the mutable .att tag does not bring back an old
pass for long."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from imagekit.attest.cosign_tags import att_tag
from imagekit.attest.keys import KeyPairFiles
from imagekit.refs import Reference, parse_reference
from tests.support.gate import audit_predicate, failing, rfc3339, sign_onto, verify
from tests.support.images import Pushed, Writer
from tests.support.media_types import OCI_MANIFEST
from tests.support.registries import RunningRegistry

AUDIT = "audit status in {CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED}"


@pytest.fixture
def image(make_image: Callable[[str], Pushed]) -> Reference:
    return parse_reference(make_image("gate/time").reference)


def _why(document: dict[str, Any]) -> str:
    reasons = failing(document)
    assert list(reasons) == [AUDIT], reasons
    return reasons[AUDIT]


def test_a_newer_audit_this_imagekit_cannot_read_fails_the_requirement(
    image: Reference, pair: KeyPairFiles
) -> None:
    """A newer audit from a newer imagekit (one field more) is not dropped in favour of the
    older pass: it may say no, so the requirement fails, naming it."""
    sign_onto(image, pair, audit_predicate(age=timedelta(hours=2)))
    newer = {**audit_predicate("CPU_CHECK_INCOMPLETE"), "gpu_checks": []}
    envelope = sign_onto(image, pair, newer)
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 1, document
    why = _why(document)
    assert why.startswith(f"{envelope.short}: a signed audit this imagekit cannot read")
    assert "gpu_checks" in why
    # once a readable verdict is signed after it, that one decides
    sign_onto(image, pair, audit_predicate(age=-timedelta(seconds=2)))
    assert verify(str(image), "--key", str(pair.public))[0] == 0


def test_a_time_ahead_of_the_clock_is_refused_and_passes_nothing(
    image: Reference, pair: KeyPairFiles
) -> None:
    """An audit dated tomorrow would, compared as a string, beat every real audit until
    then: it is refused with its reason, and the real newest (a failure) decides."""
    sign_onto(image, pair, audit_predicate(age=-timedelta(days=1)))
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 1, document
    assert "ahead of this machine's clock: refused" in _why(document)
    sign_onto(image, pair, audit_predicate("CPU_CHECK_INCOMPLETE", age=timedelta(minutes=1)))
    code, document = verify(str(image), "--key", str(pair.public))
    why = _why(document)
    assert code == 1 and "status CPU_CHECK_INCOMPLETE" in why and "refused:" in why


def test_times_are_ordered_parsed_and_an_unpadded_one_is_refused(
    image: Reference, pair: KeyPairFiles
) -> None:
    """The failing audit is the newer one, written with an offset (its clock reads earlier
    than the pass's UTC): parsed, it is the newest. An unpadded time is not RFC 3339."""
    now = datetime.now(UTC)
    sign_onto(image, pair, audit_predicate(at=rfc3339(now - timedelta(hours=2))))
    newer = (now - timedelta(hours=1)).astimezone(timezone(-timedelta(hours=5)))
    sign_onto(image, pair, audit_predicate("CPU_CHECK_INCOMPLETE", at=newer.isoformat()))
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 1 and "status CPU_CHECK_INCOMPLETE" in _why(document), document


def test_an_unpadded_time_refuses_its_attestation(
    make_image: Callable[[str], Pushed], pair: KeyPairFiles
) -> None:
    image = parse_reference(make_image("gate/unpadded").reference)
    sign_onto(image, pair, audit_predicate(at="2026-1-5T10:00:00Z"))
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 1, document
    assert "audited_at: '2026-1-5T10:00:00Z' is not an RFC 3339 time" in _why(document)


def test_a_tie_goes_to_the_worse_verdict_not_the_later_layer(
    image: Reference, pair: KeyPairFiles
) -> None:
    at = rfc3339(datetime.now(UTC) - timedelta(minutes=5))
    sign_onto(image, pair, audit_predicate("CPU_CHECK_INCOMPLETE", at=at))
    sign_onto(image, pair, audit_predicate(at=at))  # the later layer passes
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 1, document
    assert "(of 2 signed at the same time, the worse): status CPU_CHECK_INCOMPLETE" in _why(
        document
    )


def test_a_rollback_by_deleting_the_newer_failing_layer_ages_out(
    image: Reference, pair: KeyPairFiles, registry: RunningRegistry, tmp_path: Path
) -> None:
    """Whoever may push can take the newer failing audit out of the .att tag; the old pass
    left then stands only while it is younger than the maximum age (30 days unless the
    policy says otherwise; `unbounded` lifts it, and it must be said)."""
    assert image.digest is not None
    sign_onto(image, pair, audit_predicate(age=timedelta(days=40)))
    sign_onto(image, pair, audit_predicate("CPU_CHECK_INCOMPLETE", age=timedelta(days=1)))
    assert verify(str(image), "--key", str(pair.public))[0] == 1
    with Writer(registry.host) as writer:  # the rollback: the newer layer deleted
        manifest = json.loads(writer.get_manifest(image.repository, att_tag(image.digest)).content)
        manifest["layers"] = manifest["layers"][:1]
        body = json.dumps(manifest).encode()
        writer.manifest(image.repository, att_tag(image.digest), body, OCI_MANIFEST)
    code, document = verify(str(image), "--key", str(pair.public))
    assert code == 1, document
    assert "older than 30d" in _why(document)
    policy = tmp_path / "forever.yaml"
    policy.write_text("version: 1\naudit:\n  max_age: unbounded\n")
    code, document = verify(str(image), "--key", str(pair.public), "--policy", str(policy))
    assert code == 0, document
    assert "no maximum age" in document["requirements"][0]["why"]
    policy.write_text("version: 1\naudit:\n  max_age: null\n")
    code, _ = verify(str(image), "--key", str(pair.public), "--policy", str(policy))
    assert code == 2


def test_vulnerabilities_alone_have_a_platform_an_age_and_accept_only_clean_or_findings(
    make_image: Callable[[str], Pushed], pair: KeyPairFiles, tmp_path: Path
) -> None:
    image = parse_reference(make_image("gate/vulns").reference)
    policy = tmp_path / "vulns.yaml"
    policy.write_text("version: 1\naudit: null\nvulnerabilities: none\n")
    sign_onto(image, pair, audit_predicate(age=timedelta(days=40)))
    code, document = verify(str(image), "--key", str(pair.public), "--policy", str(policy))
    assert code == 1 and "older than 30d" in failing(document)["vulnerabilities: none"]
    # a scan status that is neither clean nor findings is refused by name, whatever it counts
    sign_onto(image, pair, audit_predicate(scan="mostly-clean"))
    code, document = verify(str(image), "--key", str(pair.public), "--policy", str(policy))
    assert code == 1
    assert "the scan was mostly-clean" in failing(document)["vulnerabilities: none"]
    sign_onto(image, pair, audit_predicate(age=-timedelta(seconds=2)))
    code, document = verify(str(image), "--key", str(pair.public), "--policy", str(policy))
    assert code == 0, document
    # its own platform: an amd64 audit is no arm64 scan
    policy.write_text(
        "version: 1\naudit: null\nvulnerabilities:\n  findings: none\n  platform: linux/arm64\n"
    )
    code, document = verify(str(image), "--key", str(pair.public), "--policy", str(policy))
    assert code == 1
    assert "platform linux/amd64" in failing(document)["vulnerabilities: none on linux/arm64"]
