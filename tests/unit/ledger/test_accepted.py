"""Which image of a plan the ledger accepts for a night to compare with."""

from __future__ import annotations

from imagekit.ledger import append_record, read_records
from imagekit.ledger.accepted import accepted_image, is_candidate_build
from imagekit.workspace import Workspace

DIGEST = "sha256:" + "b" * 64


def record(ws: Workspace, kind: str, status: str, plan: str = "demo", **images: str) -> None:
    append_record(ws, kind, plan=plan, images=images, status=status, scope="test")


def test_baseline_prefers_the_verified_final_pull(ws: Workspace) -> None:
    record(ws, "audit", "CPU_PASS_GPU_CLI_DEFERRED", image="imagekit/demo:1")
    record(ws, "push", "pushed", image="imagekit/demo:1", pushed=f"r/imagekit/demo@{DIGEST}")
    record(ws, "final-pull", "verified", image=f"m/imagekit/demo@{DIGEST}")
    record(ws, "audit", "CPU_CHECK_INCOMPLETE", image="imagekit/demo:2")  # after: not its audit
    record(ws, "final-pull", "mismatch", image=f"m/imagekit/demo@{'sha256:' + 'c' * 64}")
    record(ws, "final-pull", "verified", plan="other", image=f"m/other@{DIGEST}")
    baseline = accepted_image(read_records(ws.ledger_path), "demo")
    assert baseline is not None
    assert baseline.reference == f"m/imagekit/demo@{DIGEST}"
    assert baseline.record_kind == "final-pull" and baseline.record_seq == 3
    assert baseline.audit_status == "CPU_PASS_GPU_CLI_DEFERRED"


def test_baseline_falls_back_to_the_last_push(ws: Workspace) -> None:
    record(ws, "push", "pushed", image="imagekit/demo:1", pushed=f"r/imagekit/demo@{DIGEST}")
    baseline = accepted_image(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.record_kind == "push"
    assert baseline.audit_status is None


def test_no_baseline(ws: Workspace) -> None:
    record(ws, "build", "built", image="imagekit/demo:1")
    assert accepted_image(read_records(ws.ledger_path), "demo") is None


def test_baseline_skips_records_without_a_pullable_reference(ws: Workspace) -> None:
    record(ws, "final-pull", "verified", image=f"m/imagekit/demo@{DIGEST}")
    # `ledger record-pod` style: a bare image ID, nothing a registry can serve
    record(ws, "final-pull", "verified", image="sha256:" + "d" * 64)
    baseline = accepted_image(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.reference == f"m/imagekit/demo@{DIGEST}"


def test_a_nights_candidate_push_is_never_the_baseline(ws: Workspace) -> None:
    record(ws, "push", "pushed", image="r/imagekit/demo:v1", pushed=f"r/imagekit/demo@{DIGEST}")
    other = "sha256:" + "c" * 64
    # the registry builder records the candidate's push; its tag says what it is
    record(
        ws, "push", "pushed", image="r/imagekit/demo:nightly-20261203T032300Z-ab12cd",
        pushed=f"r/imagekit/demo@{other}",
    )  # fmt: skip
    baseline = accepted_image(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.reference == f"r/imagekit/demo@{DIGEST}"


def test_a_nights_candidate_build_is_known_by_its_mark_or_its_tag(ws: Workspace) -> None:
    """The night marks its build record; one written before the mark is known by the
    engine's candidate tag. A build by digest without the mark is an ordinary build."""
    tag = "nightly-20261203T032300Z-ab12cd"
    for image, details in (
        (f"r/imagekit/demo@{DIGEST}", {"candidate": tag}),
        (f"imagekit/demo:{tag}", {}),
        (f"r/imagekit/demo@{DIGEST}", {}),
        ("imagekit/demo:1", {}),
        (f"localhost:5000/imagekit/demo@{DIGEST}", {}),
    ):
        append_record(
            ws, "build", plan="demo", images={"image": image}, status="built", scope="test",
            details=details,
        )  # fmt: skip
    marked = [is_candidate_build(r) for r in read_records(ws.ledger_path)]
    assert marked == [True, True, False, False, False]
