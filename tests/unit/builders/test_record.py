"""imagekit/builders/record.py: a night's candidate says so in its own build record; the
provenance is signed before the records, attached only after them, and a refused one ends
the build after them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from imagekit.attest.attach import AttestOutcome, Prepared
from imagekit.builders.built import PlanBuild
from imagekit.builders.record import record_build, sign_then_record
from imagekit.errors import NotAttested, RecordRefused
from imagekit.ledger import BuildDetails, read_records
from imagekit.ledger.accepted import is_candidate_build
from imagekit.plans.load import load_named_plan
from imagekit.registry import RegistryClient
from imagekit.workspace import Workspace

DIGEST = "sha256:" + "e" * 64
TAG = "nightly-20261203T032300Z-ab12cd"


def test_a_build_recorded_for_a_nights_candidate_is_marked_and_no_other(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Pushed by digest (as a BuildKit daemon pushes), the image names no candidate tag: only
    the mark ``record_build`` is given tells the night's build from an accepted one."""
    loaded = load_named_plan(workspace, "demo")
    image = f"127.0.0.1:1/team/demo@{DIGEST}"
    log = tmp_path / "build.log"
    log.write_text("built\n")

    for candidate in (None, TAG, None, None):
        record_build(
            workspace, loaded, image, scope="test", evidence=log,
            details=BuildDetails(image_id=DIGEST, builder="buildkit"), candidate=candidate,
        )  # fmt: skip
    records = read_records(workspace.ledger_path)
    assert [r.info.candidate for r in records] == [None, TAG, None, None]
    assert [is_candidate_build(r) for r in records] == [False, True, False, False]


@dataclass(frozen=True)
class _Built(PlanBuild):
    """A builder's result as sign_then_record sees it: the shared fields and a ledger."""

    ledger: tuple[int, ...] = ()


def _built(tmp_path: Path) -> _Built:
    return _Built(
        plan="demo", plan_sha256="0" * 64, base="b", builder="test",
        evidence_dir=tmp_path, log=tmp_path / "build.log",
    )  # fmt: skip


@dataclass(frozen=True)
class _Signed(Prepared):
    """A signed provenance that notes when it is attached, and whose registry refuses it."""

    seen: list[str] = field(default_factory=list)

    def attach(self, client: RegistryClient | None = None) -> AttestOutcome:
        self.seen.append("attach")
        return AttestOutcome(None, "the registry said 403")


def _signed(seen: list[str]) -> _Signed:
    return _Signed(None, (), "t", b"{}", "k", seen=seen)


def test_the_provenance_is_signed_before_the_records_and_attached_after_them(
    tmp_path: Path,
) -> None:
    seen: list[str] = []
    signed = _signed(seen)

    def attest(built: _Built) -> Prepared:
        seen.append("sign")
        assert built.ledger == ()
        return signed

    def record(built: _Built) -> _Built:
        seen.append(f"record naming {built.attestation_value}")
        return replace(built, ledger=(7, 8))

    with pytest.raises(NotAttested) as caught:
        sign_then_record(_built(tmp_path), attest=attest, record=record)
    assert seen == ["sign", f"record naming {signed.envelope_digest}", "attach"]
    assert str(signed.envelope_digest).startswith("sha256:")
    # exit 3 only after the records: the error carries the recorded result
    kept = caught.value.result
    assert isinstance(kept, _Built) and kept.ledger == (7, 8) and kept.signed is signed
    assert kept.attestation == AttestOutcome(None, "the registry said 403")
    assert caught.value.exit_code == 3


def test_a_refused_ledger_carries_the_signed_result_and_nothing_is_attached(
    tmp_path: Path,
) -> None:
    seen: list[str] = []
    signed = _signed(seen)

    def record(built: _Built) -> _Built:
        raise RecordRefused("refused", hint="h", ledger="l", problem="torn line")

    with pytest.raises(RecordRefused) as caught:
        sign_then_record(_built(tmp_path), attest=lambda _: signed, record=record)
    kept = caught.value.result
    assert isinstance(kept, _Built) and kept.signed is signed and kept.ledger == ()
    assert kept.attestation is None and seen == []


def test_without_a_key_nothing_is_signed_and_the_records_are_kept(tmp_path: Path) -> None:
    done = sign_then_record(
        _built(tmp_path), attest=None, record=lambda built: replace(built, ledger=(3,))
    )
    assert done.attestation is None and done.ledger == (3,)
