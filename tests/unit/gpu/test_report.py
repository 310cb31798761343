"""The verdict decided from the probe's report: a report cannot print its way into a pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagekit.errors import UsageError
from imagekit.gpu.report import REQUIRED, decide, parse_report
from imagekit.kinds.gpu_preflight import GpuPreflightStatus


def _report(checks: dict[str, Any], mode: str = "gpu") -> bytes:
    return json.dumps(
        {
            "probe": "imagekit-gpu-preflight",
            "probe_version": 1,
            "mode": mode,
            "scope": "s",
            "host": "node-1",
            "started_at": "2026-12-05T10:00:00Z",
            "finished_at": "2026-12-05T10:00:30Z",
            "launched_by": "torch.distributed.run",
            "world_size": 8,
            "local_world_size": 8,
            "backend": "nccl",
            "python": "3.12.3",
            "versions": {"torch": "2.11.0+cu130"},
            "environment": {"NCCL_NVLS_ENABLE": "0"},
            "nvlink_multicast": "off (NCCL_NVLS_ENABLE=0)",
            "ranks": [],
            "checks": checks,
            "errors": [],
        }
    ).encode()


PASSING = {name: {"status": "PASS", "reason": f"{name} ok"} for name in REQUIRED} | {
    "topology": {"status": "RECORDED", "reason": "recorded, not judged", "matrix": {}}
}


def test_every_required_check_passing_is_a_pass_and_the_topology_is_not_judged() -> None:
    verdict = decide(parse_report(_report(PASSING), "r"))
    assert verdict.status is GpuPreflightStatus.PASS and verdict.ok


def test_one_failing_check_fails_the_preflight_naming_it() -> None:
    checks = PASSING | {"all_reduce": {"status": "FAIL", "reason": "rank 3: 12 elements wrong"}}
    verdict = decide(parse_report(_report(checks), "r"))
    assert verdict.status is GpuPreflightStatus.FAIL
    assert verdict.failing == ("all_reduce: rank 3: 12 elements wrong",)


@pytest.mark.parametrize("missing", REQUIRED)
def test_a_report_that_leaves_out_a_check_is_incomplete_never_a_pass(missing: str) -> None:
    checks = {k: v for k, v in PASSING.items() if k != missing}
    verdict = decide(parse_report(_report(checks), "r"))
    assert verdict.status is GpuPreflightStatus.INCOMPLETE
    assert f"{missing}: not reported" in verdict.sentence


def test_a_skipped_required_check_is_not_a_pass() -> None:
    checks = PASSING | {"gpus": {"status": "SKIPPED", "reason": "?"}}
    assert decide(parse_report(_report(checks), "r")).status is GpuPreflightStatus.INCOMPLETE


def test_a_fail_wins_over_what_could_not_be_decided() -> None:
    checks = PASSING | {
        "gpus": {"status": "FAIL", "reason": "expected 8 GPU(s), 7 present"},
        "all_reduce": {"status": "INCOMPLETE", "reason": "floor on one rank"},
    }
    assert decide(parse_report(_report(checks), "r")).status is GpuPreflightStatus.FAIL


def test_a_self_test_is_never_a_pass_even_when_every_check_passed() -> None:
    verdict = decide(parse_report(_report(PASSING, mode="self-test"), "r"))
    assert verdict.status is GpuPreflightStatus.INCOMPLETE and verdict.self_test
    assert verdict.sentence.startswith("CPU self-test, not a GPU preflight")


def test_no_report_is_incomplete_with_why() -> None:
    verdict = decide(None, why_none="timed out after 45 s")
    assert verdict.status is GpuPreflightStatus.INCOMPLETE
    assert verdict.sentence == "not decided: timed out after 45 s"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        json.dumps({"probe": "something-else"}).encode(),
        _report(PASSING).replace(b'"errors": []', b'"errors": [], "verdict": "PASS"'),
        _report({"gpus": {"status": "GREAT", "reason": "trust me"}}),
    ],
)
def test_anything_but_the_probe_s_report_is_bad_input(data: bytes) -> None:
    with pytest.raises(UsageError, match="is not a report of imagekit's GPU probe"):
        parse_report(data, "job.log")
