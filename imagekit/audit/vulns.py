"""The vulnerability stage: the distributions the probe found in the image, looked up either
by pip-audit's service or in an offline OSV database.

Online, it runs pip-audit's CLI on a requirements file of ``name==version`` lines with
``--no-deps --disable-pip`` (the image's own pip is never run, and nothing is resolved): the
list is what the probe saw installed. Offline (``--vuln-db``), pip-audit's service interface
runs over :class:`~imagekit.audit.osv_match.OfflineOsvService` in this process and its JSON format
is written, so both paths leave the same kind of document and are read by the same code.

Statuses keep their scope, in the ledger's vocabulary:

- ``clean``: every distribution was looked up (offline: in a database of a stated age, no
  older than the limit) and none is affected;
- ``findings``: known vulnerabilities, each with its id, aliases, the installed and fixed
  versions and where the distribution lies in the image;
- ``unknown``: the service or database could not answer for some distribution (they are
  listed), or the database is older than the limit; never a pass, even when it found nothing;
- ``skipped``: ``--offline`` without a database; the service was not asked.

Whether findings fail the audit is a policy (:data:`FailOn`), decided by :func:`fails`.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagekit import jsondoc

if TYPE_CHECKING:
    from imagekit.audit.osv import OsvDatabase

VulnStatus = Literal["clean", "findings", "unknown", "skipped"]
FailOn = Literal["findings", "fixable", "never"]
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_AGE_DAYS = 30
#: pip-audit's JSON of a large image's few hundred distributions is a few MB at most.
MAX_REPORT_BYTES = 64 << 20


@dataclass(frozen=True)
class VulnPolicy:
    """Where an audit looks vulnerabilities up and which findings fail it: what the
    pipeline hands to its audit stage as `imagekit audit` takes it from its options."""

    database: Path | None = None  # an offline OSV export; None: the service
    max_age_days: int = DEFAULT_MAX_AGE_DAYS
    fail_on: FailOn = "findings"


ONLINE_SOURCE = "pip-audit (its default vulnerability service)"
OFFLINE_SOURCE = "offline OSV export"


@dataclass(frozen=True)
class Finding:
    name: str
    version: str
    id: str
    fix_versions: tuple[str, ...]
    aliases: tuple[str, ...]
    locations: tuple[str, ...] = ()  # the site directories the distribution was found in

    def line(self) -> str:
        """'pip 23.0.1 PYSEC-2023-228 (CVE-..., GHSA-...) fixed in 23.3 at /usr/lib/...'"""
        aliases = f" ({', '.join(self.aliases)})" if self.aliases else ""
        fixed = (
            f"fixed in {', '.join(self.fix_versions)}"
            if self.fix_versions
            else "no fixed version known"
        )
        where = f" at {', '.join(self.locations)}" if self.locations else ""
        return f"{self.name} {self.version} {self.id}{aliases} {fixed}{where}"


@dataclass(frozen=True)
class VulnScan:
    status: VulnStatus
    reason: str
    findings: tuple[Finding, ...] = ()
    audited: int = 0
    not_audited: tuple[str, ...] = ()  # "name version: why" for what could not be looked up
    command: tuple[str, ...] = ()
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    requirements: tuple[str, ...] = field(default=())
    source: str = ONLINE_SOURCE
    database: dict[str, Any] | None = None  # the offline database: digest, age, records

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "source": self.source,
            "database": self.database,
            "audited": self.audited,
            "not_audited": list(self.not_audited),
            "findings": [
                {
                    "name": f.name,
                    "version": f.version,
                    "id": f.id,
                    "fix_versions": list(f.fix_versions),
                    "aliases": list(f.aliases),
                    "locations": list(f.locations),
                }
                for f in self.findings
            ],
            "command": list(self.command),
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "requirements": list(self.requirements),
        }


def fails(scan: VulnScan, policy: FailOn) -> bool:
    """Does this scan fail the audit under ``--fail-on``? (findings listed under ``unknown``,
    from a stale database, count too: they are still known vulnerabilities.)"""
    if policy == "findings":
        return bool(scan.findings)
    if policy == "fixable":
        return any(f.fix_versions for f in scan.findings)
    return False


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
    database: OsvDatabase | None = None,
    max_age_days: int = DEFAULT_MAX_AGE_DAYS,
    locations: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
    now: datetime | None = None,
) -> VulnScan:
    """Look these distributions up; unknown (never clean) when the answer is incomplete.

    With ``database`` the lookup is offline and ``offline`` changes nothing (no service is
    asked either way). ``locations`` maps (PEP 503 name, version) to where the probe found
    the distribution, for the findings.
    """
    if database is not None:
        result = _scan_database(distributions, database, max_age_days, now or datetime.now(UTC))
    elif offline:
        return VulnScan("skipped", "--offline: the vulnerability service was not asked")
    else:
        result = _scan_service(distributions, timeout_s)
    if locations:
        found = tuple(
            replace(f, locations=locations.get((str(canonicalize_name(f.name)), f.version), ()))
            for f in result.findings
        )
        result = replace(result, findings=found)
    return result


def _scan_service(distributions: list[tuple[str, str]], timeout_s: float) -> VulnScan:
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
        dependencies = _report(stdout)["dependencies"]
    except (ValueError, KeyError, TypeError):
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {proc.returncode}"
        return replace(ran, reason=f"pip-audit gave no report: {last}", not_audited=tuple(left_out))
    return _decide(ran, dependencies, left_out, "pip-audit")


def _report(text: str) -> Any:
    """pip-audit's JSON report, through the bounded reader: what it refuses is no report."""
    return jsondoc.loads(text, limit=MAX_REPORT_BYTES)


def _scan_database(
    distributions: list[tuple[str, str]],
    database: OsvDatabase,
    max_age_days: int,
    now: datetime,
) -> VulnScan:
    """pip-audit's service interface and JSON format over the offline database."""
    from pip_audit._format.json import JsonFormat
    from pip_audit._service.interface import Dependency, ResolvedDependency, SkippedDependency

    from imagekit.audit.osv_match import OfflineOsvService

    specs: list[Dependency] = []
    for name, version in dict.fromkeys(distributions):  # one query per (name, version)
        try:
            specs.append(ResolvedDependency(name=name, version=Version(version)))
        except InvalidVersion:
            specs.append(
                SkippedDependency(name=name, skip_reason=f"{version} is not a PEP 440 version")
            )
    results = dict(OfflineOsvService(database).query_all(iter(specs)))
    document = JsonFormat(output_desc=True, output_aliases=True).format(results, [])
    described = database.describe(now)
    ran = VulnScan(
        "unknown",
        "",
        command=("imagekit", "offline OSV match", database.source.name),
        stdout=document,
        requirements=tuple(f"{n}=={v}" for n, v in dict.fromkeys(distributions)),
        source=OFFLINE_SOURCE,
        database={**database.to_json(now), "max_age_days": max_age_days},
    )
    age = database.age(now)
    if timedelta(0) <= age <= timedelta(days=max_age_days):
        return _decide(ran, _report(document)["dependencies"], [], f"the {described}")
    # Too old, or dated after this machine's clock: what it says is kept, but it is no pass.
    result = _decide(ran, _report(document)["dependencies"], [], "the database", cite=False)
    why = (
        f"{described}, older than --vuln-db-max-age {max_age_days} days, so newer advisories "
        "are missing from it"
        if age > timedelta(0)
        else f"{described} (newest record {database.newest_modified.isoformat()}): this "
        "machine's clock or the export is wrong"
    )
    return replace(result, status="unknown", reason=f"{why}; it says: {result.reason}")


def _decide(
    ran: VulnScan,
    dependencies: list[dict[str, Any]],
    left_out: list[str],
    by: str,
    *,
    cite: bool = True,
) -> VulnScan:
    """The status from pip-audit's JSON ``dependencies``: clean only if every one was looked
    up and none is affected."""
    findings: list[Finding] = []
    skipped = list(left_out)
    audited = 0
    for dep in dependencies:
        if "skip_reason" in dep:
            version = f" {dep['version']}" if dep.get("version") else ""
            skipped.append(f"{dep.get('name')}{version}: {dep['skip_reason']}")
            continue
        audited += 1
        findings.extend(
            Finding(
                name=str(dep["name"]),
                version=str(dep["version"]),
                id=str(vuln["id"]),
                fix_versions=tuple(str(v) for v in vuln.get("fix_versions", [])),
                aliases=tuple(sorted(str(a) for a in vuln.get("aliases", []))),
            )
            for vuln in dep.get("vulns", [])
        )
    note = f"; {len(skipped)} not audited (listed)" if skipped else ""
    source = f" ({by})" if cite else ""
    base = replace(ran, findings=tuple(findings), audited=audited, not_audited=tuple(skipped))
    if findings:
        names = sorted({f"{f.name} {f.version}" for f in findings})
        return replace(
            base,
            status="findings",
            reason=f"{len(findings)} known vulnerabilities in {', '.join(names)}{source}{note}",
        )
    if audited == 0:
        return replace(base, reason=f"{by} checked none of the distributions{note}")
    if skipped:
        return replace(
            base,
            reason=f"no known vulnerabilities in the {audited} distributions {by} checked, "
            f"but {len(skipped)} could not be looked up (listed)",
        )
    return replace(
        base, status="clean", reason=f"no known vulnerabilities in {audited} distributions{source}"
    )
