"""`imagekit gpu-preflight` in a real serving image's torch, on these GPU-less machines.

The image is the sglang seed replica (tests/support/replicas.py: the real torch
2.11.0+cu130 wheels the upstream image carries). Where no GPU is, the probe's own logic
still runs for real: the CPU self-test swaps the backend and device (gloo, CPU) and runs the
same all-reduce element checks and BF16-against-FP32 comparison in two processes under
torch's launcher, inside the image with no network; it is never a pass. The GPU run of the
same image says GPU_PREFLIGHT_INCOMPLETE, no GPU visible, because the engine here has no
NVIDIA runtime to give it one. The GPU runs themselves are evidence from the lent GPU
machine (evidence/gpu-preflight/), never CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.gpu import health, probe
from imagekit.gpu.launch import ProbeOptions
from imagekit.gpu.stage import PreflightRequest, gpu_preflight
from imagekit.kinds.gpu_preflight import GpuPreflightStatus
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.replicas import PublishedReplica

pytestmark = pytest.mark.usefixtures("engine")


@pytest.fixture(scope="module")
def sglang(seed_replica: Callable[[str], PublishedReplica]) -> PublishedReplica:
    return seed_replica("sglang-cu13")


def _left(engine: Engine, evidence: Path) -> list[str]:
    """The run's container, if the engine still has it (named in the run's evidence)."""
    ran = json.loads((evidence / "gpu-probe-run.json").read_text())
    name = ran["container"]
    found = subprocess.run(
        [engine.client_path, "container", "inspect", name], capture_output=True, check=False
    )
    return [name] if found.returncode == 0 else []


def test_the_probe_s_logic_runs_for_real_on_cpu_in_the_image_and_is_never_a_pass(
    workspace: Workspace, sglang: PublishedReplica, engine: Engine
) -> None:
    request = PreflightRequest(reference=sglang.reference, options=ProbeOptions(self_test=True))
    result = gpu_preflight(workspace, request)
    assert result.status is GpuPreflightStatus.INCOMPLETE and not result.ok
    assert result.verdict.self_test and result.exit_code == 1
    assert result.scope.startswith("CPU self-test, not a GPU preflight")
    report = result.report
    assert report is not None and report.mode == "self-test" and report.backend == "gloo"
    assert report.world_size == 2 and report.launched_by == "torch.distributed.run"
    assert report.versions["torch"] == "2.11.0+cu130"
    assert report.checks["all_reduce"].status == "PASS"
    assert report.checks["bf16"].status == "PASS"
    sizes = report.check("all_reduce")["sizes"]
    assert [s["all_elements_right"] for s in sizes] == [True, True]
    assert all(s["busbw_gbps"] > 0 for s in sizes)  # two ranks cross a link: gloo's
    for rank in report.check("bf16")["ranks"]:
        assert rank["finite"] and rank["relative_error"] <= rank["bound"]
    # the health checks' own logic ran too: the copies (median of 5) and the BF16 load on CPU,
    # judged again by imagekit from the numbers; what needs a GPU's driver is said skipped
    assert report.level == "standard"
    standard = health.resolve_thresholds("standard")
    for name in probe.MEASURED:
        found = report.check(name)
        assert found["status"] == "RECORDED", found["reason"]  # no floor for a CPU
        assert [gpu["repeats"] for gpu in found["gpus"]] == [5, 5]
        assert health.judge_check(name, found, standard).state == "RECORDED"
    above = health.resolve_thresholds("standard", options={"min_d2d_gbps": 1e6})
    judged = health.judge_check("memory_bandwidth", report.check("memory_bandwidth"), above)
    assert judged.state == "FAIL" and "(median of 5) under the floor" in judged.sentence
    assert all(len((rank.model_extra or {})["load"]["tflops"]) >= 1 for rank in report.ranks)
    budget = report.check("budget")
    assert budget["status"] == "RECORDED" and budget["seconds"] > 0  # a CPU's time, not judged
    assert {report.checks[name].status for name in probe.NODE_READ} == {"SKIPPED"}
    [record] = read_records(workspace.ledger_path)
    assert (record.kind, record.status) == ("gpu-preflight", "GPU_PREFLIGHT_INCOMPLETE")
    assert record.images == {"image": sglang.reference}
    assert record.info.image_id == result.image_id and record.info.world_size == 2
    assert _left(engine, result.evidence_dir) == []


def test_the_image_without_a_gpu_is_incomplete_no_gpu_visible_exit_1(
    workspace: Workspace, sglang: PublishedReplica
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "imagekit", "gpu-preflight", sglang.reference, "--gpus", "8",
         "--json"],
        capture_output=True, text=True, check=False, env=os.environ.copy(),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    document = json.loads(proc.stdout)
    assert document["status"] == "GPU_PREFLIGHT_INCOMPLETE"
    assert document["why_not_decided"].startswith("no GPU visible:")
    assert "with capabilities: [[gpu]]" in document["why_not_decided"]  # what Docker said
    expected = document["preflight"]["expected"]
    assert expected["count"] == 8 and expected["level"] == "standard"
    assert set(expected) == {"count", "level", "thresholds"}
    [record] = read_records(workspace.ledger_path)
    assert record.status == "GPU_PREFLIGHT_INCOMPLETE" and "no GPU visible" in record.scope


def test_a_collective_that_hangs_ends_at_the_limit_with_no_rank_left(
    workspace: Workspace, sglang: PublishedReplica, engine: Engine
) -> None:
    options = ProbeOptions(self_test=True, timeout_s=25, fault={"rank": 1, "skip_collective": True})
    result = gpu_preflight(workspace, PreflightRequest(reference=sglang.reference, options=options))
    assert result.status is GpuPreflightStatus.INCOMPLETE and result.report is None
    assert result.why_none is not None and result.why_none.startswith("timed out after")
    assert _left(engine, result.evidence_dir) == []  # the container and every rank in it
    ran = json.loads((Path(result.evidence_dir) / "gpu-probe-run.json").read_text())
    assert ran["ended"] == "killed at the wall-clock limit"
