"""imagekit.cluster.pods (record-pod): kubelet imageID forms (containerd, cri-dockerd) against
the expected digests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.cluster.pods import (
    MISMATCH,
    UNKNOWN,
    VERIFIED,
    PodOptions,
    load_pods,
    parse_image_id,
    record_pod,
)
from imagekit.errors import UsageError
from imagekit.ledger import append_record, read_records, verify
from imagekit.workspace import Workspace
from tests.unit.ledger.support import Rec, append_all, run_cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pods"
MANIFEST = "sha256:" + "3f" * 32
CONFIG = "sha256:" + "c0" * 32
OTHER = "sha256:" + "9a" * 32
REPO = "registry.example.com/serving/sglang"


@pytest.mark.parametrize(
    ("raw", "form", "repository", "digest"),
    [
        (f"docker-pullable://{REPO}@{MANIFEST}", "repo-digest", REPO, MANIFEST),
        (f"{REPO}@{MANIFEST}", "repo-digest", REPO, MANIFEST),
        (f"docker://{CONFIG}", "image-id", None, CONFIG),
        (CONFIG, "image-id", None, CONFIG),
        ("", "unparsed", None, None),
        (f"{REPO}:latest", "unparsed", None, None),
        (f"{REPO}@sha256:../../etc", "unparsed", None, None),
    ],
)
def test_parse_image_id_forms(
    raw: str, form: str, repository: str | None, digest: str | None
) -> None:
    parsed = parse_image_id(raw)
    assert (parsed.form, parsed.repository, parsed.digest) == (form, repository, digest)


def test_containerd_pod_matches_and_is_recorded(ws: Workspace) -> None:
    report = record_pod(
        ws, FIXTURES / "containerd_pod.json", PodOptions(plan="m3", expect=MANIFEST)
    )
    assert report.ok
    # Init containers are not the service; they are left out unless asked for by name.
    assert [(c.container, c.status) for c in report.checks] == [("server", VERIFIED)]
    records = read_records(ws.ledger_path)
    assert len(records) == 1
    rec = records[0]
    assert rec.kind == "final-pull" and rec.status == VERIFIED and rec.plan == "m3"
    assert rec.images == {"image": f"{REPO}@{MANIFEST}"}
    assert rec.details["source"] == "pod"
    assert rec.details["pod"] == "m3-probe-zero-gpu" and rec.details["namespace"] == "serving"
    assert rec.details["image_id"] == MANIFEST and rec.details["where"] == "gpu-node-07"
    assert rec.evidence is not None
    evidence = json.loads((ws.root / rec.evidence.path).read_text())
    assert evidence["containers"][0]["image_id"] == f"{REPO}@{MANIFEST}"
    # The pod document itself (env values and all) is never copied into evidence.
    assert "MODEL_PATH" not in (ws.root / rec.evidence.path).read_text()
    assert verify(ws).ok


def test_cri_dockerd_pod_with_docker_pullable_prefix(ws: Workspace) -> None:
    report = record_pod(ws, FIXTURES / "cri_dockerd_pod.json", PodOptions(expect=MANIFEST))
    assert report.ok
    assert report.checks[0].image_id_raw == f"docker-pullable://{REPO}@{MANIFEST}"
    assert read_records(ws.ledger_path)[0].details["image_id_form"] == "repo-digest"


def test_bare_image_id_needs_the_config_digest(ws: Workspace) -> None:
    path = FIXTURES / "cri_dockerd_image_id.json"
    unknown = record_pod(ws, path, PodOptions(expect=MANIFEST))
    assert not unknown.ok and unknown.checks[0].status == UNKNOWN
    known = record_pod(ws, path, PodOptions(expect=MANIFEST, expect_config=CONFIG))
    assert known.ok and known.checks[0].status == VERIFIED
    wrong = record_pod(ws, path, PodOptions(expect=MANIFEST, expect_config=OTHER))
    assert wrong.checks[0].status == MISMATCH
    assert [r.status for r in read_records(ws.ledger_path)] == [UNKNOWN, VERIFIED, MISMATCH]


def test_pod_list_with_one_mismatch_fails_and_records_both(ws: Workspace) -> None:
    report = record_pod(ws, FIXTURES / "pod_list_mismatch.json", PodOptions(expect=MANIFEST))
    assert not report.ok
    assert [(c.pod, c.status) for c in report.checks] == [("m3-a", VERIFIED), ("m3-b", MISMATCH)]
    assert OTHER in report.checks[1].reason
    assert [r.status for r in read_records(ws.ledger_path)] == [VERIFIED, MISMATCH]


def test_pending_pod_is_unknown_not_a_pass(ws: Workspace) -> None:
    report = record_pod(ws, FIXTURES / "pod_pending.json", PodOptions(expect=MANIFEST))
    assert not report.ok and report.checks[0].status == UNKNOWN
    assert "not been created" in report.checks[0].reason


def test_container_filter_reaches_init_containers(ws: Workspace) -> None:
    report = record_pod(
        ws, FIXTURES / "containerd_pod.json", PodOptions(expect=MANIFEST, container="fetch-config")
    )
    assert [(c.container, c.init, c.status) for c in report.checks] == [
        ("fetch-config", True, MISMATCH)
    ]
    with pytest.raises(UsageError, match="no container statuses"):
        record_pod(
            ws, FIXTURES / "containerd_pod.json", PodOptions(expect=MANIFEST, container="nope")
        )


def _push(manifest: str, config: str) -> Rec:
    details: dict[str, object] = {"manifest_digest": manifest, "config_digest": config}
    return Rec("push", "m3", {"pushed": f"{REPO}@{manifest}"}, "pushed", details=details)


def test_expected_digest_comes_from_the_plans_newest_push(ws: Workspace) -> None:
    with pytest.raises(UsageError, match="no ledger"):
        record_pod(ws, FIXTURES / "cri_dockerd_image_id.json", PodOptions(plan="m3"))
    append_record(ws, "push", plan="other", images={}, status="pushed", scope="")
    with pytest.raises(UsageError, match="no push record"):
        record_pod(ws, FIXTURES / "cri_dockerd_image_id.json", PodOptions(plan="m3"))
    append_all(ws, _push(OTHER, OTHER), _push(MANIFEST, CONFIG))
    report = record_pod(ws, FIXTURES / "cri_dockerd_image_id.json", PodOptions(plan="m3"))
    assert report.ok
    assert report.expected_manifest_digest == MANIFEST
    assert report.expected_config_digest == CONFIG
    with pytest.raises(UsageError, match="nothing to compare"):
        record_pod(ws, FIXTURES / "cri_dockerd_image_id.json")


def test_not_a_pod_is_usage_error(ws: Workspace, tmp_path: Path) -> None:
    bad = tmp_path / "svc.json"
    bad.write_text(json.dumps({"kind": "Service", "metadata": {"name": "x"}}))
    with pytest.raises(UsageError, match="not a Pod"):
        record_pod(ws, bad, PodOptions(expect=MANIFEST))
    bad.write_text("{")
    with pytest.raises(UsageError, match="not JSON"):
        record_pod(ws, bad, PodOptions(expect=MANIFEST))


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ('{"kind": "Pod", "x": ' + "[" * 1000 + "]" * 1000 + "}", "nested deeper than 100"),
        ('{"kind": "Pod", "kind": "List"}', "the key 'kind' appears twice"),
        ('{"kind": "Pod", "x": NaN}', "NaN is not a JSON number"),
    ],
)
def test_a_hostile_pod_file_is_bad_input_in_one_line(
    ws: Workspace, tmp_path: Path, data: str, said: str
) -> None:
    """Nested 1,000 deep it was a RecursionError (a crash); a key twice kept the last."""
    bad = tmp_path / "pod.json"
    bad.write_text(data)
    with pytest.raises(UsageError, match=f"is not a pod's JSON: {said}") as refused:
        record_pod(ws, bad, PodOptions(expect=MANIFEST))
    assert refused.value.exit_code == 2 and "\n" not in refused.value.message


@pytest.mark.parametrize(
    ("document", "what"),
    [
        ("[]", "a JSON array"),
        ('[{"kind": "Pod"}]', "a JSON array"),
        ('"pod"', "a JSON string"),
        ("3", "a JSON number"),
        ("null", "JSON null"),
        ('{"metadata": {}}', "an object without a kind"),
        ('{"kind": 7}', "an object of kind 7"),
    ],
)
def test_a_document_that_is_not_a_pod_says_what_it_is(
    ws: Workspace, tmp_path: Path, document: str, what: str
) -> None:
    bad = tmp_path / "pods.json"
    bad.write_text(document)
    with pytest.raises(UsageError) as info:
        record_pod(ws, bad, PodOptions(expect=MANIFEST))
    assert info.value.message == f"{bad} is {what}, not a Pod or a List of pods"
    assert "None" not in info.value.message


def test_a_fifo_nobody_writes_to_is_refused_at_once_never_waited_on(
    ws: Workspace, tmp_path: Path
) -> None:
    """Opening a FIFO blocks until a writer comes; a pod file that is one with no writer
    must be one line of bad input, not a command that hangs."""
    fifo = tmp_path / "pod.json"
    os.mkfifo(fifo)
    said = subprocess.run(
        [sys.executable, "-m", "imagekit", "ledger", "record-pod", str(fifo),
         "--expect", str(MANIFEST), "--ledger", str(ws.ledger_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert said.returncode == 2, said.stderr
    assert f"{fifo} is a FIFO that nobody wrote to" in said.stderr
    assert "Traceback" not in said.stderr
    assert not ws.ledger_path.exists()


def test_a_pod_read_from_a_pipe_is_recorded(ws: Workspace) -> None:
    """`record-pod <(kubectl get pod ... -o json)` hands over a pipe with its writer
    attached: that is input, read to its end."""
    data = (FIXTURES / "cri_dockerd_image_id.json").read_bytes()
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    pods, raw = load_pods(Path(f"/proc/self/fd/{read_end}"))
    os.close(read_end)
    assert raw == data and len(pods) == 1


def test_a_device_that_never_ends_is_refused_by_size(ws: Workspace) -> None:
    with pytest.raises(UsageError, match="more than 64 MiB"):
        load_pods(Path("/dev/zero"))


def _cli(ws: Workspace, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(ws, *args, ledger=ws.ledger_path)


def test_cli_record_pod_exit_codes_and_json(ws: Workspace) -> None:
    ok = _cli(
        ws,
        "ledger",
        "record-pod",
        str(FIXTURES / "containerd_pod.json"),
        "--expect",
        MANIFEST,
        "--json",
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["containers"][0]["status"] == VERIFIED
    bad = _cli(
        ws,
        "ledger",
        "record-pod",
        str(FIXTURES / "pod_list_mismatch.json"),
        "--expect",
        MANIFEST,
        "--json",
    )
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["ok"] is False
    usage = _cli(ws, "ledger", "record-pod", str(FIXTURES / "containerd_pod.json"), "--json")
    assert usage.returncode == 2
    assert "nothing to compare" in json.loads(usage.stdout)["error"]["message"]
    shown = _cli(ws, "ledger", "show", "--kind", "final-pull", "--json")
    assert shown.returncode == 0
    assert len(json.loads(shown.stdout)["records"]) == 3
    checked = _cli(ws, "ledger", "verify")
    assert checked.returncode == 0 and "ledger ok: 3 records" in checked.stdout


def _containerd_pull(ws: Workspace, *, where: str, status: str = VERIFIED) -> None:
    append_record(
        ws,
        "final-pull",
        plan=None,
        images={"image": f"{REPO}@{MANIFEST}"},
        status=status,
        scope="",
        details={
            "source": "containerd",
            "repository": REPO,
            "where": where,
            "target_digest": MANIFEST,
            "platform_manifest_digest": MANIFEST,
            "platform": "linux/amd64",
            "image_id": CONFIG,
            "cri_references": [f"{REPO}@{MANIFEST}", CONFIG],
        },
    )


def test_pod_against_the_containerd_final_pull_of_its_node(ws: Workspace) -> None:
    pod = FIXTURES / "containerd_pod.json"
    with pytest.raises(UsageError, match="no ledger"):
        record_pod(ws, pod, PodOptions(against_final_pull=True))
    _containerd_pull(ws, where="gpu-node-01")
    other_node = record_pod(ws, pod, PodOptions(against_final_pull=True)).checks[0]
    assert other_node.status == UNKNOWN and "on node gpu-node-07" in other_node.reason
    _containerd_pull(ws, where="gpu-node-07")
    report = record_pod(ws, pod, PodOptions(against_final_pull=True))
    assert report.ok and report.checks[0].final_pull is not None
    assert report.checks[0].final_pull.seq == 3
    rec = read_records(ws.ledger_path)[-1]
    assert rec.details["final_pull_seq"] == 3 and rec.details["expected_config_digest"] == CONFIG
    # The newest pull on the node counts: a later failed pull leaves nothing verified to match.
    _containerd_pull(ws, where="gpu-node-07", status=MISMATCH)
    assert record_pod(ws, pod, PodOptions(against_final_pull=True)).checks[0].status == UNKNOWN
    with pytest.raises(UsageError, match="from the node's final pull"):
        record_pod(ws, pod, PodOptions(against_final_pull=True, expect=MANIFEST))
