"""The audit status is decided on the host from per-check statuses, failing closed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from imagekit.audit.report import (
    SCOPE,
    ProbeReport,
    audit_rank,
    condensed,
    decide,
    excerpt,
    parse_probe_output,
)
from imagekit.errors import CouldNotFinish


def check(name: str, status: str, kind: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind or name.split(":")[0],
        "status": status,
        "reason": f"{name} said {status}",
        "proves": "something",
        "data": extra.pop("data", {}),
        "command": ["python3", "probe.py"],
        "exit_code": 0,
        "stdout": extra.pop("stdout", ""),
        "stderr": "",
        "stdout_bytes": 0,
        "stderr_bytes": 0,
        "output_capped": False,
        "output_notes": [],
        "duration_s": 0.1,
    }


def report(*checks: dict[str, Any]) -> ProbeReport:
    return ProbeReport.model_validate(
        {
            "probe_version": 1,
            "mode": "container",
            "profile": "generic",
            "python": {"version": "3.11.2", "implementation": "CPython", "executable": "/x"},
            "platform": {"machine": "x86_64", "system": "Linux"},
            "environment": {"CUDA_VISIBLE_DEVICES": ""},
            "output_cap_bytes": 16 * 1024 * 1024,
            "duration_s": 1.0,
            "checks": list(checks),
        }
    )


def test_all_pass_with_unrequired_skips_is_cpu_pass() -> None:
    verdict = decide(report(check("pip-check", "PASS"), check("torch", "SKIPPED")))
    assert verdict.status == "CPU_PASS"
    assert verdict.skipped == ("torch",)
    assert "torch not required" in verdict.sentence


def test_only_a_deferred_cli_is_cpu_pass_gpu_cli_deferred() -> None:
    verdict = decide(report(check("pip-check", "PASS"), check("cli:serve", "DEFERRED")))
    assert verdict.status == "CPU_PASS_GPU_CLI_DEFERRED"
    assert verdict.deferred == ("cli:serve",)


@pytest.mark.parametrize("bad", ["FAIL", "TIMEOUT"])
def test_any_fail_or_timeout_is_incomplete_and_named(bad: str) -> None:
    verdict = decide(
        report(
            check("pip-check", "PASS"), check("cli:serve", "DEFERRED"), check("av-roundtrip", bad)
        )
    )
    assert verdict.status == "CPU_CHECK_INCOMPLETE"
    assert verdict.failing == ("av-roundtrip",)
    assert f"av-roundtrip {bad}" in verdict.sentence


def test_deferred_outside_a_cli_probe_counts_as_failing() -> None:
    verdict = decide(report(check("torch", "DEFERRED")))
    assert verdict.status == "CPU_CHECK_INCOMPLETE"


def test_no_checks_is_never_a_pass() -> None:
    assert decide(report()).status == "CPU_CHECK_INCOMPLETE"


def test_probe_output_that_is_not_a_report_means_could_not_finish() -> None:
    with pytest.raises(CouldNotFinish):
        parse_probe_output("")
    with pytest.raises(CouldNotFinish):
        parse_probe_output("Traceback (most recent call last):\n  SyntaxError")
    doc = json.loads(report(check("pip-check", "PASS")).model_dump_json())
    doc["checks"][0]["status"] = "PASS-ISH"
    with pytest.raises(CouldNotFinish):
        parse_probe_output(json.dumps(doc))
    doc["checks"][0]["status"] = "PASS"
    doc["surprise"] = True  # extra="forbid": an image cannot add fields
    with pytest.raises(CouldNotFinish):
        parse_probe_output(json.dumps(doc))


def test_summary_excerpts_long_output_and_keeps_the_raw_failure() -> None:
    raw = {"command": ["vllm", "serve"], "exit_code": 1, "stderr": "Failed to infer device type"}
    rows = condensed(
        report(check("cli:serve", "DEFERRED", stdout="x" * 10000, data={"raw_failure": raw}))
    )
    assert len(rows[0]["stdout_excerpt"]) < 2200
    assert "characters cut" in rows[0]["stdout_excerpt"]
    assert rows[0]["raw_failure"]["stderr_excerpt"] == "Failed to infer device type"
    assert excerpt("short") == "short"


def test_scope_sentence() -> None:
    assert SCOPE == "CPU-only checks, no weights loaded, no GPU test"


def test_audit_rank_orders_statuses() -> None:
    assert audit_rank("CPU_PASS") < audit_rank("CPU_PASS_GPU_CLI_DEFERRED")
    assert audit_rank("CPU_PASS_GPU_CLI_DEFERRED") < audit_rank("CPU_CHECK_INCOMPLETE")
    assert audit_rank("CPU_CHECK_INCOMPLETE") < audit_rank("SOMETHING_ELSE")
    assert audit_rank("SOMETHING_ELSE") < audit_rank(None)


def test_the_count_of_checks_agrees_with_its_noun() -> None:
    assert decide(report(check("versions", "PASS"))).sentence == "CPU_PASS: its one check passed"
    two = decide(report(check("versions", "PASS"), check("record", "PASS")))
    assert two.sentence == "CPU_PASS: all 2 checks passed"
