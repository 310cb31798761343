"""The lock rendered from a ledger: current state per plan, only what concerns that image."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import LedgerBroken
from imagekit.ledger import append_record, verify
from imagekit.ledger.lockfile import NOT_RECORDED, encode_lock, render_lock, write_lock
from imagekit.workspace import Workspace
from tests.support.ledger_chain import write_chain
from tests.unit.ledger.support import Rec, append_all, ledger_lines, peak_bytes

BASE_INDEX = "sha256:" + "1" * 64
BASE_MANIFEST = "sha256:" + "2" * 64
BASE_CONFIG = "sha256:" + "3" * 64
OLD_ID = "sha256:" + "4" * 64
NEW_ID = "sha256:" + "5" * 64
NEW_MANIFEST = "sha256:" + "6" * 64
BASE_REF = f"mirror.example.com/base/sglang@{BASE_MANIFEST}"
PUSHED = f"registry.example.com/serving/sglang@{NEW_MANIFEST}"


BASE = {
    "source_tag": "lmsysorg/sglang:v0.5-cu130",
    "index_digest": BASE_INDEX,
    "platform": "linux/amd64",
    "manifest_digest": BASE_MANIFEST,
    "config_digest": BASE_CONFIG,
    "compressed_layer_bytes": 123456,
    "layer_digests": ["sha256:" + "7" * 64],
}


def _build(image: str, image_id: str) -> Rec:
    return Rec(
        "build",
        "m3",
        {"image": image, "base": BASE_REF},
        "built",
        details={"image_id": image_id, "base": BASE},
    )


HISTORY = (
    # `imagekit mirror` run on its own records no plan.
    Rec(
        "mirror-verify",
        None,
        {"source": "upstream/sglang@" + BASE_INDEX, "destination": BASE_REF},
        "content-identical",
        details={"message": "content-identical: same config, same 1 diffIDs, blobs differ"},
    ),
    _build("m3:old", OLD_ID),
    Rec("audit", "m3", {"image": OLD_ID}, "CPU_PASS", "old"),
    Rec(
        "rejected-build",
        "m3",
        {"base": BASE_REF},
        "rejected",
        details={"reason": "find_spec('nixl') assertion failed after uninstall"},
    ),
    _build("m3:new", NEW_ID),
    Rec(
        "push",
        "m3",
        {"image": "m3:new", "pushed": PUSHED},
        "pushed",
        details={"manifest_digest": NEW_MANIFEST, "config_digest": NEW_ID},
    ),
    Rec("note", "other", {}, "ok", "unrelated plan"),
)


def _history(ws: Workspace) -> None:
    append_all(ws, *HISTORY)


def test_lock_shows_current_image_and_keeps_investigations(ws: Workspace) -> None:
    _history(ws)
    lock = render_lock(ws)
    m3 = lock["images"]["m3"]
    assert m3["upstream_base"] == {"reference": BASE_REF, **BASE}
    assert m3["base_content_verification"]["verdict"] == "content-identical"
    assert "blobs differ" in m3["base_content_verification"]["statement"]
    assert m3["prepared_image"]["manifest_digest"] == NEW_MANIFEST
    assert m3["prepared_image"]["config_digest"] == NEW_ID
    assert m3["prepared_image"]["reference"] == PUSHED
    assert m3["prepared_image"]["build"]["record_seq"] == 5
    # The old build's CPU_PASS is not an audit of the new image.
    assert m3["audit"] == NOT_RECORDED
    assert m3["destination"] == NOT_RECORDED
    assert m3["final_pull"] == NOT_RECORDED
    kinds = [(i["kind"], i["record_seq"]) for i in m3["investigations"]]
    assert kinds == [("build", 2), ("rejected-build", 4)]
    assert "nixl" in m3["investigations"][1]["reason"]
    assert lock["ledger"]["records"] == 7 and lock["ledger"]["head"] == verify(ws).head
    assert set(lock["images"]) == {"m3", "other"}


def test_lock_picks_up_audit_destination_and_final_pull_of_current_image(ws: Workspace) -> None:
    _history(ws)
    final_pull = {"image_store": "classic", "engine_version": "20.10.24", "where": "gpu-node-07"}
    append_all(
        ws,
        Rec("audit", "m3", {"image": PUSHED}, "CPU_PASS_GPU_CLI_DEFERRED", "CPU checks only"),
        Rec(
            "mirror-verify",
            None,
            {"source": PUSHED, "destination": f"cloud.example.com/s@{NEW_MANIFEST}"},
            "identical",
            details={"message": "identical"},
        ),
        Rec("final-pull", "m3", {"image": PUSHED}, "mismatch", "wrong", {"image_id": OLD_ID}),
        Rec(
            "final-pull",
            "m3",
            {"image": PUSHED},
            "verified",
            details={"image_id": NEW_ID, **final_pull},
        ),
        # A plan-less verdict about some other image must not be taken for this plan's.
        Rec(
            "mirror-verify",
            None,
            {"source": "x/y@" + OLD_ID, "destination": "z/y@" + OLD_ID},
            "mismatch",
        ),
    )
    m3 = render_lock(ws)["images"]["m3"]
    assert m3["audit"]["status"] == "CPU_PASS_GPU_CLI_DEFERRED"
    assert m3["destination"]["verdict"] == "identical"
    assert m3["base_content_verification"]["verdict"] == "content-identical"
    assert m3["final_pull"]["status"] == "verified"
    assert m3["final_pull"]["image_id"] == NEW_ID
    assert m3["final_pull"]["where"] == "gpu-node-07"
    assert ("final-pull", 10) in [(i["kind"], i["record_seq"]) for i in m3["investigations"]]


def test_lock_is_deterministic_and_written_atomically(ws: Workspace, tmp_path: Path) -> None:
    _history(ws)
    out = tmp_path / "manifests" / "images.lock.json"
    first = write_lock(ws, out)
    data = out.read_bytes()
    assert data == encode_lock(render_lock(ws))
    write_lock(ws, out)
    assert out.read_bytes() == data
    assert json.loads(data) == first.document
    assert list(out.parent.glob(".*.tmp")) == []
    assert b"T" not in json.dumps(first.document["ledger"]).encode()  # no wall-clock time


def test_lock_names_the_profile_an_audit_ran_with(ws: Workspace) -> None:
    _history(ws)
    scope = "CPU-only checks, no weights loaded, no GPU test"
    Rec(
        "audit", "m3", {"image": PUSHED}, "CPU_CHECK_INCOMPLETE", scope, {"profile": "vllm"}
    ).append(ws)
    audit = render_lock(ws)["images"]["m3"]["audit"]
    assert audit["status"] == "CPU_CHECK_INCOMPLETE"
    assert audit["profile"] == "vllm"


def test_lock_shows_engine_and_containerd_final_pulls_side_by_side(ws: Workspace) -> None:
    _history(ws)
    assert render_lock(ws)["images"]["m3"]["final_pulls"] == {
        "engine": NOT_RECORDED,
        "containerd": NOT_RECORDED,
        "pod": NOT_RECORDED,
    }
    # The containerd pull ran on the node without --plan: it counts because it names the image.
    node = {"kubelet_image_ref": PUSHED}
    for plan, source, store, version, where, extra in (
        ("m3", "engine", "classic", "20.10.24", "build-host", {}),
        (None, "containerd", "containerd-cri", "containerd 1.6.20", "gpu-node-07", node),
    ):
        details = {
            "source": source,
            "image_id": NEW_ID,
            "image_id_means": f"the config digest ({store})",
            "image_store": store,
            "engine_version": version,
            "repo_digests": [PUSHED],
            "where": where,
            **extra,
        }
        Rec("final-pull", plan, {"image": PUSHED}, "verified", details=details).append(ws)
    pulls = render_lock(ws)["images"]["m3"]["final_pulls"]
    assert (
        pulls["engine"]["image_store"] == "classic" and "kubelet_image_ref" not in pulls["engine"]
    )
    assert pulls["engine"]["where"] == "build-host" and pulls["engine"]["record_seq"] == 8
    assert pulls["containerd"]["image_store"] == "containerd-cri"
    assert pulls["containerd"]["kubelet_image_ref"] == PUSHED
    assert pulls["containerd"]["image_id_means"] == "the config digest (containerd-cri)"
    assert pulls["containerd"]["runtime_version"] == "containerd 1.6.20"


@pytest.mark.parametrize("how", ["duplicated", "edited", "malformed", "empty", "evidence"])
def test_a_lock_is_refused_unless_the_ledger_verifies(
    ws: Workspace, tmp_path: Path, how: str
) -> None:
    """A lock states that the ledger verifies: a broken or empty one gets no lock (exit 1)."""
    evidence = tmp_path / "evidence" / "log.txt"
    evidence.parent.mkdir(parents=True)
    evidence.write_text("built\n")
    _history(ws)
    append_record(ws, "note", plan="m3", images={}, status="ok", scope="e", evidence=evidence)
    append_record(ws, "note", plan="m3", images={}, status="ok", scope="last")
    lines = ledger_lines(ws)
    if how == "duplicated":
        lines.insert(3, lines[2])
    elif how == "edited":
        lines[2] = lines[2].replace(b'"scope":"old"', b'"scope":"new"')
    elif how == "malformed":
        lines.insert(2, b"{}\n")
    elif how == "empty":
        lines = []
    else:
        evidence.write_text("built, then edited\n")
    ws.ledger_path.write_bytes(b"".join(lines))
    out = tmp_path / "manifests" / "images.lock.json"
    with pytest.raises(LedgerBroken) as refused:
        write_lock(ws, out)
    assert refused.value.exit_code == 1
    assert "does not verify" in refused.value.message or "empty" in refused.value.message
    assert not out.exists() and list(out.parent.glob(".*.tmp")) == []


FIELD_VERSIONS = {
    "vllm": "0.11.0",
    "torch": "2.9.0",
    "transformers": "4.57.1",
    "flashinfer-python": "0.4.1",
    "av": "16.1.0",
    "decord": None,
    "nixl": None,
    "nixl-cu12": None,
    "nixl-cu13": None,
    "cuda-python": None,
    "cuda-bindings": "12.9.2",
    "cuda-pathfinder": "1.3.0",
    "numpy": "2.2.6",
    "pillow": "11.3.0",
    "setuptools": "80.9.0",
}


def test_lock_gives_prepared_versions_from_the_current_image_s_audit(ws: Workspace) -> None:
    _history(ws)
    assert render_lock(ws)["images"]["m3"]["prepared_versions"] == NOT_RECORDED  # no audit yet
    audit = {"profile": "vllm", "report": {"checks": {"versions": "PASS"}}}
    Rec("audit", "m3", {"image": PUSHED}, "CPU_PASS", "older audit", audit).append(ws)
    # An audit recorded before audits kept versions says nothing about them.
    assert render_lock(ws)["images"]["m3"]["prepared_versions"] == NOT_RECORDED
    audit["report"] = {"checks": {"versions": "PASS"}, "versions": FIELD_VERSIONS}
    Rec("audit", "m3", {"image": PUSHED}, "CPU_PASS", "CPU checks", audit).append(ws)
    older = {"profile": "vllm", "report": {"versions": {**FIELD_VERSIONS, "vllm": "0.1.0"}}}
    Rec("audit", "m3", {"image": OLD_ID}, "CPU_PASS", "earlier build", older).append(ws)
    lock = render_lock(ws)
    versions = lock["images"]["m3"]["prepared_versions"]
    assert versions == FIELD_VERSIONS  # the current image's, not the earlier build's
    assert list(versions) == sorted(FIELD_VERSIONS)
    assert versions["decord"] is None  # looked for, absent: recorded as absent
    assert lock["images"]["m3"]["audit"]["record_seq"] == len(HISTORY) + 2
    assert '"decord": null' in encode_lock(lock).decode()


def test_the_lock_holds_bounded_memory_whatever_the_ledger_length(tmp_path: Path) -> None:
    """A ledger ten times longer whose extra records no section shows must not need ten
    times the memory: the lock keeps what it renders, not the history it read."""
    peaks = []
    for count in (500, 5000):
        ws = Workspace.at(tmp_path / str(count))
        ws.ledger_path.parent.mkdir(parents=True)
        write_chain(ws.ledger_path, records=count)
        lock = write_lock(ws, None)
        assert lock.document["ledger"]["records"] == count
        assert set(lock.plans) == {f"plan-{n}" for n in range(7)}
        peaks.append(peak_bytes(functools.partial(write_lock, ws, None)))
    small, large = peaks
    assert large < small * 2, f"peak {small} bytes for 500 records, {large} for 5000"


INDEX = "sha256:" + "8" * 64
AMD_MANIFEST, AMD_ID = "sha256:" + "9" * 64, "sha256:" + "a" * 64
ARM_MANIFEST, ARM_ID = "sha256:" + "b" * 64, "sha256:" + "c" * 64
REPO = "registry.example.com/serving/demo-two"
ARM_BASE = {**BASE, "platform": "linux/arm64", "manifest_digest": "sha256:" + "d" * 64}


def _platform_build(platform: str, manifest: str, image_id: str, base: dict[str, Any]) -> Rec:
    return Rec(
        "build",
        "two",
        {"image": f"{REPO}@{manifest}", "base": BASE_REF},
        "built",
        details={
            "image_id": image_id,
            "base": base,
            "manifest_digest": manifest,
            "platform": platform,
            "index_digest": INDEX,
        },
    )


def test_lock_of_a_plan_of_several_platforms_shows_each_platform_and_the_index(
    ws: Workspace,
) -> None:
    """Each platform's build and audit, and the index's push: not the last platform only."""
    append_all(
        ws,
        _platform_build("linux/amd64", "sha256:" + "e" * 64, "sha256:" + "f" * 64, BASE),
        _platform_build("linux/amd64", AMD_MANIFEST, AMD_ID, BASE),
        _platform_build("linux/arm64", ARM_MANIFEST, ARM_ID, ARM_BASE),
        Rec(
            "push",
            "two",
            {"image": f"{REPO}@{INDEX}", "pushed": f"{REPO}@{INDEX}"},
            "pushed",
            details={"index_digest": INDEX},
        ),
        Rec("audit", "two", {"image": f"{REPO}@{AMD_MANIFEST}"}, "CPU_PASS", "native"),
        Rec("vulnerability-scan", "two", {"image": f"{REPO}@{AMD_MANIFEST}"}, "clean", "osv"),
        Rec(
            "audit",
            "two",
            {"image": f"{REPO}@{ARM_MANIFEST}"},
            "CPU_PASS_GPU_CLI_DEFERRED",
            "emulated (qemu-aarch64)",
            {"profile": "generic", "report": {"versions": {"av": "9.2.0"}}},
        ),
        Rec(
            "mirror-verify",
            "two",
            {"source": f"{REPO}@{INDEX}", "destination": f"mirror.example.com/demo-two@{INDEX}"},
            "identical",
            details={"message": "linux/amd64: identical; linux/arm64/v8: identical"},
        ),
        Rec(
            "final-pull",
            "two",
            {"image": f"mirror.example.com/demo-two@{INDEX}"},
            "verified",
            details={"image_id": AMD_ID},
        ),  # fmt: skip
    )
    for lock in (render_lock(ws), write_lock(ws, None).document):
        two = lock["images"]["two"]
        prepared = two["prepared_image"]
        assert prepared["index_digest"] == INDEX
        assert prepared["reference"] == f"{REPO}@{INDEX}"
        assert prepared["push"]["record_seq"] == 4
        assert {p: (i["manifest_digest"], i["config_digest"], i["build"]["record_seq"])
                for p, i in prepared["platforms"].items()} == {
            "linux/amd64": (AMD_MANIFEST, AMD_ID, 2),
            "linux/arm64": (ARM_MANIFEST, ARM_ID, 3),
        }  # fmt: skip
        assert prepared["platforms"]["linux/arm64"]["reference"] == f"{REPO}@{ARM_MANIFEST}"
        assert two["upstream_base"]["platforms"]["linux/arm64"]["platform"] == "linux/arm64"
        assert two["upstream_base"]["platforms"]["linux/amd64"] == BASE
        # Each platform's audit is of its own image.
        assert two["audit"]["linux/amd64"]["status"] == "CPU_PASS"
        assert two["audit"]["linux/amd64"]["record_seq"] == 5
        assert two["audit"]["linux/arm64"]["status"] == "CPU_PASS_GPU_CLI_DEFERRED"
        assert two["audit"]["linux/arm64"]["profile"] == "generic"
        assert two["prepared_versions"] == {"linux/amd64": NOT_RECORDED,
                                            "linux/arm64": {"av": "9.2.0"}}  # fmt: skip
        assert two["vulnerability_scan"]["linux/amd64"]["status"] == "clean"
        assert two["vulnerability_scan"]["linux/arm64"] == NOT_RECORDED
        assert two["destination"]["verdict"] == "identical"
        assert two["final_pull"]["status"] == "verified"
        # The first amd64 build of the same index was superseded by the second.
        assert [(i["kind"], i["record_seq"]) for i in two["investigations"]] == [("build", 1)]


def test_a_platform_without_its_audit_is_not_recorded_and_a_later_single_build_replaces_all(
    ws: Workspace,
) -> None:
    append_all(
        ws,
        _platform_build("linux/amd64", AMD_MANIFEST, AMD_ID, BASE),
        _platform_build("linux/arm64", ARM_MANIFEST, ARM_ID, ARM_BASE),
        Rec("audit", "two", {"image": f"{REPO}@{AMD_MANIFEST}"}, "CPU_PASS", "native"),
    )
    two = render_lock(ws)["images"]["two"]
    assert two["prepared_image"]["reference"] is None  # no push of the index recorded
    assert two["audit"]["linux/arm64"] == NOT_RECORDED  # amd64's pass is not arm64's
    Rec(
        "build",
        "two",
        {"image": "two:one", "base": BASE_REF},
        "built",
        details={"image_id": NEW_ID, "base": BASE},
    ).append(ws)
    two = render_lock(ws)["images"]["two"]
    assert (
        two["prepared_image"]["build"]["image_id"] == NEW_ID
        and "platforms" not in two["prepared_image"]
    )
    assert two["audit"] == NOT_RECORDED
    assert [i["record_seq"] for i in two["investigations"]] == [1, 2]


def test_every_failed_stage_is_an_investigation_whatever_its_kind(ws: Workspace) -> None:
    """The lock asks each kind's spec whether a status failed: an incomplete audit, a scan
    that could not answer and a failed GPU preflight are kept as investigations beside a
    final pull's mismatch (before, only the statuses of one closed set were)."""
    _history(ws)
    append_all(
        ws,
        Rec("audit", "m3", {"image": PUSHED}, "CPU_CHECK_INCOMPLETE", "pip check failed"),
        Rec("vulnerability-scan", "m3", {"image": PUSHED}, "unknown", "no database"),
        Rec("gpu-preflight", "m3", {"image": PUSHED}, "GPU_PREFLIGHT_FAIL", "2 GPUs, not 8"),
        Rec("final-pull", "m3", {"image": PUSHED}, "mismatch", "wrong", {"image_id": OLD_ID}),
        Rec("audit", "m3", {"image": PUSHED}, "CPU_PASS", "CPU checks only"),
    )
    m3 = render_lock(ws)["images"]["m3"]
    failed = [(i["kind"], i["status"]) for i in m3["investigations"] if i["kind"] != "build"]
    assert failed == [
        ("rejected-build", "rejected"),
        ("audit", "CPU_CHECK_INCOMPLETE"),
        ("vulnerability-scan", "unknown"),
        ("gpu-preflight", "GPU_PREFLIGHT_FAIL"),
        ("final-pull", "mismatch"),
    ]
    assert m3["investigations"][2]["reason"] == "pip check failed"
    # A later pass stands as the audit of the image; the failure stays an investigation.
    assert m3["audit"]["status"] == "CPU_PASS"


def test_the_lock_shows_the_gpu_preflight_status_of_the_current_image(ws: Workspace) -> None:
    _history(ws)
    assert render_lock(ws)["images"]["m3"]["gpu_preflight_status"] == NOT_RECORDED
    append_all(
        ws,
        Rec(
            "gpu-preflight",
            "m3",
            {"image": PUSHED},
            "GPU_PREFLIGHT_PASS",
            "a hardware and communication check",
            {"where": "image", "image_id": NEW_ID, "world_size": 8},
        ),
    )
    shown = render_lock(ws)["images"]["m3"]["gpu_preflight_status"]
    assert shown["status"] == "GPU_PREFLIGHT_PASS" and shown["record_seq"] == 8
    assert shown["level"] is None  # a preflight from before levels
    append_all(
        ws,
        Rec(
            "gpu-preflight",
            "m3",
            {"image": PUSHED},
            "GPU_PREFLIGHT_PASS",
            "a hardware and communication check",
            {"where": "image", "image_id": NEW_ID, "world_size": 8, "level": "quick"},
        ),
    )
    shown = render_lock(ws)["images"]["m3"]["gpu_preflight_status"]
    assert (shown["level"], shown["record_seq"]) == ("quick", 9)


NIGHT_ID = "sha256:" + "8" * 64
NIGHT_MANIFEST = "sha256:" + "9" * 64
NIGHT_TAG = "nightly-20261203T032300Z-ab12cd"


@pytest.mark.parametrize(
    ("builder", "night"),
    [
        # the engine builds under a local candidate tag; the night pushes it unrecorded
        ("engine", (_build(f"imagekit/m3:{NIGHT_TAG}", NIGHT_ID),)),
        # the registry builder: its build record names the image by digest, its push the tag
        (
            "registry",
            (
                Rec(
                    "build",
                    "m3",
                    {"image": f"registry.example.com/serving/sglang@{NIGHT_MANIFEST}"},
                    "built",
                    details={"image_id": NIGHT_ID, "builder": "registry", "candidate": NIGHT_TAG},
                ),
                Rec(
                    "push",
                    "m3",
                    {
                        "image": f"registry.example.com/serving/sglang:{NIGHT_TAG}",
                        "pushed": f"registry.example.com/serving/sglang@{NIGHT_MANIFEST}",
                    },
                    "pushed",
                    details={"manifest_digest": NIGHT_MANIFEST, "config_digest": NIGHT_ID},
                ),
            ),
        ),
        # a BuildKit daemon pushes by digest only: the build record says it is a candidate
        (
            "buildkit",
            (
                Rec(
                    "build",
                    "m3",
                    {"image": f"registry.example.com/serving/sglang@{NIGHT_MANIFEST}"},
                    "built",
                    details={"image_id": NIGHT_ID, "builder": "buildkit", "candidate": NIGHT_TAG},
                ),
            ),
        ),
    ],
)
def test_a_nights_candidate_is_never_the_plans_current_image(
    ws: Workspace, builder: str, night: tuple[Rec, ...]
) -> None:
    """A night rebuilds the plan and records a build of its candidate; the lock still shows
    the accepted build and its push, and lists the candidate among the investigations."""
    _history(ws)
    before = render_lock(ws)["images"]["m3"]
    seqs = [r.seq for r in append_all(ws, *night)]
    Rec("audit", "m3", {"image": NIGHT_ID}, "CPU_PASS", "the night's candidate").append(ws)
    m3 = render_lock(ws)["images"]["m3"]
    assert m3["prepared_image"] == before["prepared_image"], builder
    assert m3["prepared_image"]["build"]["record_seq"] == 5
    assert m3["prepared_image"]["reference"] == PUSHED
    assert m3["audit"] == NOT_RECORDED  # the candidate's audit is not the accepted image's
    shown = {i["record_seq"]: i["reason"] for i in m3["investigations"]}
    assert "a night's candidate" in shown[seqs[0]]
    assert shown[2] == "superseded by a later build"


def test_a_build_after_a_nights_candidate_is_current(ws: Workspace) -> None:
    """The candidate is set apart, not the builds after it: a later accepted build is current."""
    _history(ws)
    append_all(ws, _build(f"imagekit/m3:{NIGHT_TAG}", NIGHT_ID), _build("m3:newer", OLD_ID))
    m3 = render_lock(ws)["images"]["m3"]
    assert m3["prepared_image"]["build"]["record_seq"] == 9
    assert m3["prepared_image"]["reference"] is None  # not pushed yet


def test_images_recorded_without_a_plan_are_listed_and_say_why(ws: Workspace) -> None:
    loose = f"127.0.0.1:5000/mine/app@{'sha256:' + 'e' * 64}"
    failing = {"report": {"failing": ["pip-check", "av-roundtrip"], "checks": {}}}
    append_all(
        ws,
        Rec("audit", None, {"image": loose}, "CPU_PASS", "first", details={"profile": "generic"}),
        Rec(
            "audit",
            None,
            {"image": loose},
            "CPU_CHECK_INCOMPLETE",
            "CPU-only checks, no weights loaded, no GPU test",
            details={"profile": "vllm", **failing},
        ),
    )
    lock = render_lock(ws)
    assert lock["images"] == {}
    unplanned = lock["not_in_a_plan"]
    assert "without a plan" in unplanned["why"] and "manifests/NAME.yaml" in unplanned["why"]
    newest = unplanned["images"][loose]["audit"]
    assert (newest["status"], newest["record_seq"]) == ("CPU_CHECK_INCOMPLETE", 2)
    assert newest["reason"] == "2 checks failed: pip-check, av-roundtrip"


def test_an_investigation_names_the_checks_that_failed(ws: Workspace) -> None:
    _history(ws)
    append_all(
        ws,
        Rec(
            "audit",
            "m3",
            {"image": NEW_ID},
            "CPU_CHECK_INCOMPLETE",
            "CPU-only checks, no weights loaded, no GPU test",
            details={"profile": "sglang", "report": {"failing": ["torch"], "checks": {}}},
        ),
    )
    m3 = render_lock(ws)["images"]["m3"]
    audits = [i for i in m3["investigations"] if i["kind"] == "audit"]
    assert [i["reason"] for i in audits] == ["1 check failed: torch"]
    assert m3["audit"]["status"] == "CPU_CHECK_INCOMPLETE"
    assert render_lock(ws)["not_in_a_plan"]["images"] == {}
