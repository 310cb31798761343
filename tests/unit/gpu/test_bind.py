"""A report bound to where it was made: one report a log, the pod that made it, this host."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import CheckFailed, UsageError
from imagekit.gpu.bind import (
    ShownGpu,
    bind_to_pod,
    check_on_host,
    host_gpus,
    report_from_log,
)
from imagekit.gpu.judges import Outcome
from imagekit.gpu.report import parse_report
from imagekit.refs import Digest
from tests.support.gpu_reports import MARKER, encoded, log_of, report

MANIFEST = Digest("sha256:" + "a" * 64)
CONFIG = Digest("sha256:" + "c" * 64)
IMAGE = f"r.example/team/m3@{MANIFEST}"
POD = "imagekit-gpu-preflight-aaaaaaaaaaaa-7x2kq"


def test_a_log_with_one_report_gives_it_and_its_exact_bytes() -> None:
    document = report(8)
    parsed, raw = report_from_log(log_of(document), "job.log")
    assert parsed.world_size == 8 and json.loads(raw) == document


def test_a_log_with_two_reports_is_ambiguous_even_mid_line() -> None:
    failing = report(8)
    failing["checks"]["all_reduce"]["sizes"][0]["all_elements_right"] = False
    with pytest.raises(UsageError, match="carries 2 GPU probe reports"):
        report_from_log(log_of(failing, report(8)), "job.log")
    mid_line = log_of(failing) + b"[rank3]: NCCL INFO ... " + (MARKER + "{}").encode() + b"\n"
    with pytest.raises(UsageError, match="ambiguous"):
        report_from_log(mid_line, "job.log")


def _pod(
    phase: str = "Succeeded",
    name: str = POD,
    container: str = "gpu-preflight",
    image_id: str = f"r.example/team/m3@{MANIFEST}",
    node: str = "gpu-node-07",
) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": container, "image": "x", "imageID": image_id}],
        },
    }


def _bind(tmp_path: Path, *pods: dict[str, Any], host: str = POD) -> Any:
    path = tmp_path / "pod.json"
    document = pods[0] if len(pods) == 1 else {"kind": "List", "items": list(pods)}
    path.write_text(json.dumps(document))
    parsed = parse_report(encoded(report(8, host=host)), "job.log")
    return bind_to_pod(parsed, path, MANIFEST, CONFIG, IMAGE)


def test_the_finished_pod_of_the_job_that_ran_the_image_binds_the_report(tmp_path: Path) -> None:
    bound = _bind(tmp_path, _pod())
    assert (bound.pod, bound.node) == (f"ml/{POD}", "gpu-node-07")


@pytest.mark.parametrize(
    ("pod", "said"),
    [
        (_pod(phase="Running"), "is Running: a report is taken only from a pod that finished"),
        (_pod(phase="Failed"), "is Failed"),
        (_pod(phase="Pending", image_id=""), "has not been created yet"),
        (_pod(container="server"), "no container 'gpu-preflight'"),
        (_pod(image_id=f"r.example/team/m3@sha256:{'b' * 64}"), "not the expected"),
        (_pod(name="vllm-serving-0"), "written on host"),
    ],
)
def test_a_pod_that_did_not_make_this_report_is_refused_and_says_why(
    tmp_path: Path, pod: dict[str, Any], said: str
) -> None:
    with pytest.raises(CheckFailed, match="bound to no pod") as caught:
        _bind(tmp_path, pod)
    assert said in caught.value.message


def test_in_a_list_the_pod_whose_host_wrote_the_report_is_chosen(tmp_path: Path) -> None:
    other = _pod(name=f"{POD[:-5]}zzzzz")
    bound = _bind(tmp_path, other, _pod(), host=POD)
    assert bound.pod == f"ml/{POD}"


def test_a_pod_on_the_host_network_reports_the_node_s_name(tmp_path: Path) -> None:
    assert _bind(tmp_path, _pod(), host="gpu-node-07").node == "gpu-node-07"


def _here(**given: Any) -> Any:
    return parse_report(encoded(report(2, host=socket.gethostname(), **given)), "r")


SHOWN = tuple(
    ShownGpu(str(i), f"GPU-{i:08d}-0000-0000-0000-000000000000", "NVIDIA H20", 97871)
    for i in range(2)
)


def test_a_report_of_the_gpus_this_host_shows_is_confirmed() -> None:
    assert check_on_host(_here(), SHOWN, None).outcome is Outcome.PASS


def test_a_host_with_no_nvidia_smi_confirms_nothing_and_is_incomplete() -> None:
    decision = check_on_host(_here(), (), "nvidia-smi is not on this host's PATH")
    assert decision.outcome is Outcome.INCOMPLETE and "cannot be checked" in decision.sentence


@pytest.mark.parametrize(
    "given",
    [
        {"uuids": ["GPU-x", "GPU-y"]},
        {"name": "NVIDIA H100 80GB HBM3"},
        {"memory_gib": 141.0},
    ],
)
def test_a_report_claiming_gpus_this_host_does_not_show_is_refused(given: dict[str, Any]) -> None:
    with pytest.raises(CheckFailed, match="claims GPU\\(s\\) this host does not show"):
        check_on_host(_here(**given), SHOWN, None)


def test_gpus_on_other_nodes_cannot_be_shown_here_and_are_not_a_pass() -> None:
    document = report(2, host=socket.gethostname())
    document["local_world_size"] = 1
    document["checks"]["gpus"]["gpus"][1]["host"] = "node-2"
    decision = check_on_host(parse_report(encoded(document), "r"), SHOWN, None)
    assert decision.outcome is Outcome.INCOMPLETE and "on other nodes" in decision.sentence


def test_a_report_of_another_host_is_refused() -> None:
    other = parse_report(encoded(report(2, host="elsewhere")), "r")
    with pytest.raises(CheckFailed, match="this host is"):
        check_on_host(other, SHOWN, None)


def test_nvidia_smi_is_run_by_imagekit_and_its_absence_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert host_gpus() == ((), "nvidia-smi is not on this host's PATH")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho '0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H20, 97871'\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    shown, why = host_gpus()
    assert why is None and shown[0].name == "NVIDIA H20" and shown[0].memory_mib == 97871
    assert os.environ["PATH"] == str(tmp_path)
