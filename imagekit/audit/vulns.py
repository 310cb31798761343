"""The vulnerability stage: pip-audit over the distributions the probe found in the image.

It runs pip-audit's CLI on a requirements file of ``name==version`` lines with ``--no-deps
--disable-pip`` (the image's own pip is never run, and nothing is resolved): the list is what
the probe saw installed. A service that cannot be reached makes the stage ``unknown`` with
the error, never a pass; ``--offline`` skips the stage and says so. Statuses follow the
ledger's vocabulary: ``clean``, ``findings``, ``unknown``, ``skipped``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

VulnStatus = Literal["clean", "findings", "unknown", "skipped"]
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Finding:
    name: str
    version: str
    id: str
    fix_versions: tuple[str, ...]
    aliases: tuple[str, ...]


@dataclass(frozen=True)
class VulnScan:
    status: VulnStatus
    reason: str
    findings: tuple[Finding, ...] = ()
    audited: int = 0
    not_audited: tuple[str, ...] = ()  # "name version: why" for what pip-audit could not check
    command: tuple[str, ...] = ()
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    requirements: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "audited": self.audited,
            "not_audited": list(self.not_audited),
            "findings": [
                {
                    "name": f.name,
                    "version": f.version,
                    "id": f.id,
                    "fix_versions": list(f.fix_versions),
                    "aliases": list(f.aliases),
                }
                for f in self.findings
            ],
            "command": list(self.command),
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "requirements": list(self.requirements),
        }


def requirement_lines(distributions: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """``name==version`` lines pip-audit can read, and what had to be left out (and why)."""
    lines: dict[str, str] = {}
    left_out: list[str] = []
    for name, version in distributions:
        try:
            parsed = Version(version)
        except InvalidVersion:
            left_out.append(f"{name} {version}: not a PEP 440 version")
            continue
        if parsed.local is not None:
            left_out.append(f"{name} {version}: local version, not published on an index")
            continue
        key = str(canonicalize_name(name))
        if key in lines and lines[key] != f"{key}=={version}":
            left_out.append(f"{name} {version}: a second version of {key} is installed")
            continue
        lines[key] = f"{key}=={version}"
    return sorted(lines.values()), left_out


def scan(
    distributions: list[tuple[str, str]],
    *,
    offline: bool,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> VulnScan:
    """Run pip-audit over these distributions; unknown (never clean) when it cannot answer."""
    if offline:
        return VulnScan("skipped", "--offline: the vulnerability service was not asked")
    lines, left_out = requirement_lines(distributions)
    if not lines:
        return VulnScan(
            "unknown",
            "no distribution the probe found can be looked up (none listed, or none with a "
            "published version)",
            not_audited=tuple(left_out),
        )
    with tempfile.TemporaryDirectory(prefix="imagekit-vulns-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(lines) + "\n", encoding="utf-8")
        argv = [
            sys.executable, "-m", "pip_audit", "-r", str(req), "--no-deps", "--disable-pip",
            "--format", "json", "--progress-spinner", "off",
        ]  # fmt: skip
        shown = ("pip-audit", "-r", "requirements.txt", *argv[5:])
        try:
            proc = subprocess.run(  # noqa: S603 - fixed argv, no shell
                argv, capture_output=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return VulnScan(
                "unknown",
                f"pip-audit did not answer within {timeout_s:.0f}s",
                not_audited=tuple(left_out),
                command=shown,
                requirements=tuple(lines),
            )
    stdout = proc.stdout.decode("utf-8", errors="replace")
    stderr = proc.stderr.decode("utf-8", errors="replace")
    ran = VulnScan(
        "unknown",
        "",
        command=shown,
        exit_code=proc.returncode,
        stdout=stdout,
        stderr=stderr,
        requirements=tuple(lines),
    )
    try:
        document = json.loads(stdout)
        dependencies = document["dependencies"]
    except (ValueError, KeyError, TypeError):
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {proc.returncode}"
        return replace(ran, reason=f"pip-audit gave no report: {last}", not_audited=tuple(left_out))
    findings: list[Finding] = []
    skipped = list(left_out)
    audited = 0
    for dep in dependencies:
        if "skip_reason" in dep:
            skipped.append(f"{dep.get('name')} {dep.get('version', '')}: {dep['skip_reason']}")
            continue
        audited += 1
        findings.extend(
            Finding(
                name=str(dep["name"]),
                version=str(dep["version"]),
                id=str(vuln["id"]),
                fix_versions=tuple(str(v) for v in vuln.get("fix_versions", [])),
                aliases=tuple(str(a) for a in vuln.get("aliases", [])),
            )
            for vuln in dep.get("vulns", [])
        )
    note = f"; {len(skipped)} not audited (listed)" if skipped else ""
    if findings:
        names = sorted({f"{f.name} {f.version}" for f in findings})
        return replace(
            ran,
            status="findings",
            reason=f"{len(findings)} known vulnerabilities in {', '.join(names)}{note}",
            findings=tuple(findings),
            audited=audited,
            not_audited=tuple(skipped),
        )
    if audited == 0:
        return replace(
            ran,
            reason="pip-audit checked none of the distributions" + note,
            not_audited=tuple(skipped),
        )
    return replace(
        ran,
        status="clean",
        reason=f"no known vulnerabilities in {audited} distributions{note}",
        audited=audited,
        not_audited=tuple(skipped),
    )
