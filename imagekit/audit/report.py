"""The probe's report as read back from the image, and the audit status decided from it.

The probe runs inside an image nobody has vouched for yet, so its JSON is parsed with
``extra="forbid"`` models and the overall status is decided here, on the host, from the
per-check statuses alone. The vocabulary is the MiniMax-M3 image lock's:

- ``CPU_PASS``: every check passed (a check the profile does not require may be SKIPPED);
- ``CPU_PASS_GPU_CLI_DEFERRED``: the only gap is a CLI probe that hit its declared
  environmental failure (no GPU) and whose fallback passed;
- ``CPU_CHECK_INCOMPLETE``: anything else, naming the checks that failed or timed out.

Whatever the status, the report carries SCOPE: a CPU audit proves nothing about GPU service.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit import jsondoc
from imagekit.errors import CouldNotFinish
from imagekit.kinds.audit import AuditStatus

SCOPE = "CPU-only checks, no weights loaded, no GPU test"
HOST_SCOPE = (
    "checks of the current Python environment on this host, no weights loaded, no GPU "
    "service test (the GPU was only queried for its compute capability)"
)


def audit_rank(status: str | None) -> int:
    """0 for the best status; a status outside the vocabulary ranks below all of it, and
    no status at all ranks last."""
    order = list(AuditStatus)
    if status is None:
        return len(order) + 1
    return order.index(AuditStatus(status)) if status in order else len(order)


class CheckStatus(StrEnum):
    """One check's status, as the probe reports it."""

    PASS = "PASS"  # noqa: S105 - a status, not a password
    FAIL = "FAIL"
    DEFERRED = "DEFERRED"
    SKIPPED = "SKIPPED"
    TIMEOUT = "TIMEOUT"


EXCERPT_CHARS = 2000
#: The probe's report line (the probe caps its own output at 16 MiB).
_MAX_REPORT = 16 << 20


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckResult(_Model):
    """One check as the probe reported it; stdout and stderr kept whole."""

    name: str
    kind: str
    status: CheckStatus
    reason: str
    proves: str
    data: dict[str, Any] = Field(default_factory=dict)
    command: list[str]
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    output_capped: bool
    output_notes: list[str]
    duration_s: float


class PythonInfo(_Model):
    version: str
    implementation: str
    executable: str


class PlatformInfo(_Model):
    machine: str
    system: str


class ProbeReport(_Model):
    """The probe's one JSON document."""

    probe_version: int
    mode: Literal["container", "host"]
    profile: str | None
    python: PythonInfo
    platform: PlatformInfo
    environment: dict[str, str | None]
    output_cap_bytes: int
    duration_s: float
    checks: list[CheckResult]

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def distributions(self) -> list[tuple[str, str]]:
        """(name, version) of every installed distribution the versions check listed."""
        versions = self.check("versions")
        if versions is None:
            return []
        inventory = versions.data.get("inventory") or []
        return [
            (str(item["name"]), str(item["version"]))
            for item in inventory
            if isinstance(item, dict) and "name" in item and "version" in item
        ]

    def locations(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(PEP 503 name, version) -> the site directories the versions check found it in."""
        versions = self.check("versions")
        found: dict[tuple[str, str], tuple[str, ...]] = {}
        for item in (versions.data.get("inventory") or []) if versions else []:
            if isinstance(item, dict) and {"name", "version", "location"} <= item.keys():
                key = (str(canonicalize_name(str(item["name"]))), str(item["version"]))
                if str(item["location"]) not in found.get(key, ()):
                    found[key] = (*found.get(key, ()), str(item["location"]))
        return found


def parse_probe_output(text: str) -> ProbeReport:
    """The probe's stdout as a ProbeReport; anything else means the audit did not run."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CouldNotFinish(
            "the probe printed nothing",
            hint="the image's python3 may be missing or too old (the probe needs 3.8+)",
        )
    try:
        return ProbeReport.model_validate(jsondoc.loads(lines[-1], limit=_MAX_REPORT))
    except jsondoc.JsonRefused as exc:
        raise CouldNotFinish(
            f"the probe's output is not a probe report: {exc}",
            hint="run with --json and keep the evidence folder; the raw output is saved there",
        ) from None
    except ValidationError as exc:
        raise CouldNotFinish(
            f"the probe's output is not a probe report: {exc.errors()[0]['msg']}",
            hint="run with --json and keep the evidence folder; the raw output is saved there",
        ) from exc


@dataclass(frozen=True)
class AuditVerdict:
    status: AuditStatus
    failing: tuple[str, ...]
    deferred: tuple[str, ...]
    skipped: tuple[str, ...]
    sentence: str


def decide(report: ProbeReport) -> AuditVerdict:
    """The overall status, from the per-check statuses only (fail closed)."""
    failing = [c.name for c in report.checks if c.status in (CheckStatus.FAIL, CheckStatus.TIMEOUT)]
    # DEFERRED is only meaningful for a CLI probe with a passing fallback; anywhere else it
    # is a gap the status vocabulary has no word for, so it counts as failing.
    deferred_any = [c for c in report.checks if c.status is CheckStatus.DEFERRED]
    failing += [c.name for c in deferred_any if c.kind != "cli"]
    deferred = [c.name for c in deferred_any if c.kind == "cli"]
    skipped = [c.name for c in report.checks if c.status is CheckStatus.SKIPPED]
    if not report.checks:
        failing.append("(no checks ran)")
    if failing:
        details = "; ".join(
            f"{c.name} {c.status}: {c.reason}" for c in report.checks if c.name in failing
        )
        return AuditVerdict(
            AuditStatus.CPU_CHECK_INCOMPLETE,
            tuple(failing),
            tuple(deferred),
            tuple(skipped),
            f"{AuditStatus.CPU_CHECK_INCOMPLETE}: {len(failing)} check(s) did not pass: {details}",
        )
    if deferred:
        return AuditVerdict(
            AuditStatus.CPU_PASS_GPU_CLI_DEFERRED,
            (),
            tuple(deferred),
            tuple(skipped),
            f"{AuditStatus.CPU_PASS_GPU_CLI_DEFERRED}: CPU checks passed; GPU CLI deferred for "
            f"{', '.join(deferred)} (raw environmental failure kept, fallback passed)",
        )
    return AuditVerdict(
        AuditStatus.CPU_PASS,
        (),
        (),
        tuple(skipped),
        f"{AuditStatus.CPU_PASS}: "
        + (
            "its one check passed"
            if len(report.checks) - len(skipped) == 1
            else f"all {len(report.checks) - len(skipped)} checks passed"
        )
        + (f" ({', '.join(skipped)} not required by the profile)" if skipped else ""),
    )


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The head and tail of a long output, with what was cut said in the middle."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return (
        f"{text[:half]}\n[... {len(text) - limit} characters cut; whole in the report ...]\n"
        + (text[-half:])
    )


def condensed(report: ProbeReport) -> list[dict[str, Any]]:
    """Each check with its output excerpted, for the summary and the human rendering."""
    rows: list[dict[str, Any]] = []
    for c in report.checks:
        row: dict[str, Any] = {
            "name": c.name,
            "status": c.status,
            "reason": c.reason,
            "proves": c.proves,
            "command": c.command,
            "exit_code": c.exit_code,
            "duration_s": c.duration_s,
            "stdout_excerpt": excerpt(c.stdout),
            "stderr_excerpt": excerpt(c.stderr),
        }
        if c.output_notes:
            row["output_notes"] = c.output_notes
        raw = c.data.get("raw_failure")
        if isinstance(raw, dict):
            row["raw_failure"] = {
                "command": raw.get("command"),
                "exit_code": raw.get("exit_code"),
                "stderr_excerpt": excerpt(str(raw.get("stderr", ""))),
            }
        rows.append(row)
    return rows
