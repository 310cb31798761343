"""A GPU preflight taken back from a Job, checked against its pod, signed, and required.

The report is real: what imagekit's probe wrote on the lent GPU machine
(evidence/gpu-preflight/, copied to tests/fixtures/gpu/report-pass.json), carried here as a
Job's log would carry it (one marked line among the launcher's output). The pod documents
are as `kubectl get pods -o json` prints them, naming the image the test pushed to the real
loopback registry. What is proved: the report is recorded only against the pod that ran the
named image; the signed verdict is what `imagekit verify --policy` holds the image to, and a
policy asking for more GPUs than the node had refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.cli import main
from imagekit.ledger import read_records
from imagekit.workspace import Workspace
from tests.support.images import Pushed
from tests.support.registries import RunningRegistry
from tests.support.upstream import tags

REPORT = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "report-pass.json"
#: the lent H100's report of `--level standard` (2026-12-07, evidence/gpu-preflight/)
STANDARD = REPORT.parent / "report-standard-h100.json"


POD = "imagekit-gpu-preflight-7x2kq"


def _log(tmp_path: Path, report_file: Path = REPORT) -> Path:
    """The real report as the Job's pod would have printed it: written in the pod, so its
    host is the pod's (the lent machine's run named its own host, "vm")."""
    log = tmp_path / "job.log"
    report = json.loads(report_file.read_text())
    report["host"] = POD
    for gpu in report["checks"]["gpus"]["gpus"]:
        gpu["host"] = POD
    log.write_text(
        "WARNING:torch.distributed.run: *****\n"
        "Setting OMP_NUM_THREADS environment variable for each process to be 1\n"
        f"@@IMAGEKIT_GPU_REPORT@@ {json.dumps(report, sort_keys=True)}\n"
    )
    return log


def _pod(tmp_path: Path, image_id: str) -> Path:
    pod = tmp_path / "pod.json"
    pod.write_text(
        json.dumps(
            {
                "kind": "List",
                "items": [
                    {
                        "kind": "Pod",
                        "metadata": {"name": POD, "namespace": "ml"},
                        "spec": {"nodeName": "gpu-node-07"},
                        "status": {
                            "phase": "Succeeded",
                            "containerStatuses": [
                                {"name": "gpu-preflight", "image": "x", "imageID": image_id}
                            ],
                        },
                    }
                ],
            }
        )
    )
    return pod


def _signed(image: Pushed, key: Path, tmp_path: Path, report_file: Path = REPORT) -> Any:
    """The report taken back from the pod that ran IMAGE, recorded and signed with KEY."""
    repo = image.reference.rpartition("@")[0]
    pod = _pod(tmp_path, f"{repo}@{image.digest}")
    taken = CliRunner().invoke(
        main, ["gpu-preflight", image.reference, "--report", str(_log(tmp_path, report_file)),
               "--pod", str(pod), "--sign-key", str(key), "--json"],
    )  # fmt: skip
    assert taken.exit_code == 0, taken.output
    return json.loads(taken.stdout)


def test_a_report_is_recorded_only_against_the_pod_that_ran_the_image(
    workspace: Workspace, make_image: Callable[[str], Pushed], tmp_path: Path
) -> None:
    image = make_image("team/m3")
    other = make_image("team/m3")
    repo = image.reference.rpartition("@")[0]
    wrong = _pod(tmp_path, f"docker-pullable://{repo}@{other.digest}")
    refused = CliRunner().invoke(
        main, ["gpu-preflight", image.reference, "--report", str(_log(tmp_path)),
               "--pod", str(wrong), "--json"],
    )  # fmt: skip
    assert refused.exit_code == 1, refused.output
    assert "the report is bound to no pod that ran" in refused.stdout
    assert not workspace.ledger_path.exists() or not read_records(workspace.ledger_path)


def test_a_signed_preflight_is_required_by_the_gate_and_more_gpus_refuse_it(
    workspace: Workspace, make_image: Callable[[str], Pushed], tmp_path: Path
) -> None:
    image = make_image("team/m3")
    keys = generate_key_pair(tmp_path / "node")
    document = _signed(image, keys.private, tmp_path)
    assert document["status"] == "GPU_PREFLIGHT_PASS" and document["where"] == "pod"
    assert document["pod"] == f"ml/{POD}"
    assert document["preflight"]["node"] == "gpu-node-07"  # the pod's node, not its host name
    assert document["attestation"]["stored"], document["attestation"]
    [record] = read_records(workspace.ledger_path)
    assert (record.kind, record.status) == ("gpu-preflight", "GPU_PREFLIGHT_PASS")
    gpus = len(document["preflight"]["gpus"])

    def verify(policy: str) -> tuple[int, dict[str, object]]:
        path = tmp_path / "policy.yaml"
        path.write_text(policy)
        done = CliRunner().invoke(
            main, ["verify", image.reference, "--key", str(keys.public), "--policy", str(path),
                   "--json"],
        )  # fmt: skip
        return done.exit_code, json.loads(done.stdout)

    code, said = verify(
        f"version: 1\naudit: null\ngpu_preflight:\n  min_gpus: {gpus}\n  max_age: unbounded\n"
    )
    assert code == 0, json.dumps(said["requirements"])
    code, said = verify(
        "version: 1\naudit: null\ngpu_preflight:\n  min_gpus: 8\n  max_age: unbounded\n"
    )
    assert code == 1
    assert f"{gpus} GPU(s)" in json.dumps(said["requirements"])
    # the report came from before levels: a policy asking for any level refuses it
    code, said = verify(
        "version: 1\naudit: null\ngpu_preflight:\n  min_level: quick\n  max_age: unbounded\n"
    )
    assert code == 1
    assert "level none recorded" in json.dumps(said["requirements"])


def test_a_verdict_whose_record_is_refused_is_never_attached(
    workspace: Workspace,
    make_image: Callable[[str], Pushed],
    tmp_path: Path,
    registry: RunningRegistry,
) -> None:
    """Sign after record: the ledger refuses the record (its last line is torn), so the
    signed verdict must not reach the registry (no .att tag, no referrer)."""
    image = make_image("team/m3")
    repo = image.reference.rpartition("@")[0]
    keys = generate_key_pair(tmp_path / "node")
    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_bytes(b'{"seq": 1, "torn')
    taken = CliRunner().invoke(
        main, ["gpu-preflight", image.reference, "--report", str(_log(tmp_path)), "--pod",
               str(_pod(tmp_path, f"{repo}@{image.digest}")), "--sign-key", str(keys.private),
               "--json"],
    )  # fmt: skip
    assert taken.exit_code != 0, taken.output
    document = json.loads(taken.stdout)
    assert document["status"] == "GPU_PREFLIGHT_PASS" and "ledger_refused" in document
    assert "attestation" not in document
    repository = image.reference.split("/", 1)[1].rpartition("@")[0]
    assert f"sha256-{image.digest.partition(':')[2]}.att" not in tags(registry.host, repository)


def test_a_preflight_below_the_policy_s_level_is_refused(
    workspace: Workspace, make_image: Callable[[str], Pushed], tmp_path: Path
) -> None:
    image = make_image("team/m3")
    keys = generate_key_pair(tmp_path / "node")
    level = _signed(image, keys.private, tmp_path, STANDARD)["preflight"]["level"]
    assert level == "standard"
    [record] = read_records(workspace.ledger_path)
    assert record.details["level"] == "standard"

    def verify(minimum: str) -> tuple[int, str]:
        path = tmp_path / "policy.yaml"
        path.write_text(
            f"version: 1\naudit: null\ngpu_preflight:\n  min_level: {minimum}\n"
            "  max_age: unbounded\n"
        )
        done = CliRunner().invoke(
            main, ["verify", image.reference, "--key", str(keys.public), "--policy", str(path),
                   "--json"],
        )  # fmt: skip
        return done.exit_code, json.dumps(json.loads(done.stdout)["requirements"])

    assert verify("quick")[0] == 0
    assert verify("standard")[0] == 0
    code, said = verify("extended")
    assert code == 1
    assert "level standard" in said and "at level extended or above" in said
