"""`imagekit nightly`: rebuild every plan from its pinned base and say loudly what moved.

A plan pins its base by digest, but its pip installs go to a live package index, and a
rebuild is only as good as the assumption that nothing upstream changed. Each night every
plan (or those named) is rebuilt without cache, its assertions and audit run again, and the
new image is pushed as a candidate (beside the accepted image, or to ``--registry``) and
compared with the last accepted image of that plan in the ledger (the image a complete
pipeline pulled at its end; failing that, the last one pushed). Both are then read from the
registry layer by layer, so the base layers they share are streamed once, not twice:

- the same diffIDs: ``reproducible`` (bit for bit);
- otherwise the layers' contents are compared (imagekit.layerdiff: paths, modes, owners,
  content hashes; timestamps and bytecode caches set apart): ``equivalent`` when nothing
  else differs, else ``changed`` with the distributions added, removed or at another version
  and the files added, removed or changed.

A change is reported, not failed: it may be wanted. What fails the night: a preflight
(`imagekit doctor`) that says no, an audit status worse than the accepted one, a rebuild
whose assertions reject it, a plan with nothing accepted to compare with (exit 1); a base
that can no longer be reached, or a stage that could not finish (exit 3). Every plan is
tried even when an earlier one failed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

from imagekit.audit.report import audit_rank
from imagekit.errors import CheckFailed, ImagekitError, UsageError
from imagekit.evidence import new_run_dir, write_json
from imagekit.layerdiff import ComparisonVerdict, ImageComparison, RegistryImage, compare_images
from imagekit.ledger import LedgerRecord, append_record, read_records
from imagekit.plan import list_plans, load_plan, plan_path
from imagekit.refs import parse_reference, repository_for
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace


class NightVerdict(StrEnum):
    """What a night says of one plan: the comparison's verdict, or why there is none."""

    REPRODUCIBLE = ComparisonVerdict.REPRODUCIBLE.value
    EQUIVALENT = ComparisonVerdict.EQUIVALENT.value
    CHANGED = ComparisonVerdict.CHANGED.value
    AUDIT_WORSE = "audit-worse"
    REJECTED = "rejected"
    NO_BASELINE = "no-baseline"
    BASE_UNREACHABLE = "base-unreachable"
    ERROR = "error"
    PREFLIGHT_NO = "preflight-no"


# The members under short names, for the code below and the tests.
(
    REPRODUCIBLE,
    EQUIVALENT,
    CHANGED,
    AUDIT_WORSE,
    REJECTED,
    NO_BASELINE,
    BASE_UNREACHABLE,
    ERROR,
    PREFLIGHT_NO,
) = NightVerdict


@dataclass(frozen=True)
class Baseline:
    """The last accepted image of a plan and the audit status it was accepted with."""

    reference: str
    record_seq: int
    record_kind: str
    audit_status: str | None


def _pullable(text: str | None) -> bool:
    """A reference pinned by digest that a registry can serve (a pod's bare image ID is not)."""
    if not text or "/" not in text:
        return False
    try:
        return parse_reference(text).pinned
    except ImagekitError:
        return False


def find_baseline(records: list[LedgerRecord], plan: str) -> Baseline | None:
    """The newest verified final pull of the plan, else its newest push; with its audit."""
    accepted: LedgerRecord | None = None
    for kind, status, role in (("final-pull", "verified", "image"), ("push", "pushed", "pushed")):
        accepted = next(
            (
                r
                for r in reversed(records)
                if r.plan == plan
                and r.kind == kind
                and r.status == status
                and _pullable(r.images.get(role))
            ),
            None,
        )
        if accepted is not None:
            reference = accepted.images[role]
            break
    if accepted is None:
        return None
    audit = next(
        (
            r.status
            for r in reversed(records)
            if r.plan == plan and r.kind == "audit" and r.seq < accepted.seq
        ),
        None,
    )
    return Baseline(reference, accepted.seq, accepted.kind, audit)


@dataclass(frozen=True)
class PlanNight:
    plan: str
    status: NightVerdict
    exit_code: int
    detail: str
    baseline: Baseline | None = None
    image_id: str | None = None
    audit_status: str | None = None
    comparison: ImageComparison | None = None
    evidence: Path | None = None
    changes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "status": self.status,
            "exit_code": self.exit_code,
            "detail": self.detail,
            "baseline": None
            if self.baseline is None
            else {
                "reference": self.baseline.reference,
                "record_seq": self.baseline.record_seq,
                "record_kind": self.baseline.record_kind,
                "audit_status": self.baseline.audit_status,
            },
            "image_id": self.image_id,
            "audit_status": self.audit_status,
            "changes": list(self.changes),
            "comparison": self.comparison.to_json() if self.comparison else None,
            "evidence": str(self.evidence) if self.evidence else None,
        }


@dataclass(frozen=True)
class NightlyResult:
    started: str
    plans: tuple[PlanNight, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        codes = {p.exit_code for p in self.plans}
        for code in (3, 2, 1):
            if code in codes:
                return code
        return 0 if self.plans else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "exit_code": self.exit_code,
            "plans": [p.to_json() for p in self.plans],
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        out = []
        for p in self.plans:
            audit = p.audit_status or "-"
            if p.baseline and p.baseline.audit_status:
                audit += f" (accepted: {p.baseline.audit_status})"
            out.append(f"{p.plan}: {p.status} - {p.detail}; audit {audit}")
            out.extend(f"  {c}" for c in p.changes)
        if not self.plans:
            out.append("no plans found: nothing was rebuilt")
        out.append(f"nightly: exit {self.exit_code}")
        return out

    def markdown(self) -> str:
        """A CI job summary: the verdict first, one row a plan, then each plan's changes."""
        icon = {0: "passed", 1: "FAILED", 2: "FAILED (bad input)", 3: "FAILED (could not finish)"}
        rows = [
            f"# imagekit nightly ({self.started})",
            "",
            f"**Night {icon.get(self.exit_code, 'FAILED')}** (exit {self.exit_code}).",
            "",
            "| plan | verdict | audit (accepted) | compared with | detail |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in self.plans:
            accepted = p.baseline.audit_status if p.baseline else None
            audit = f"{p.audit_status or '-'} ({accepted or '-'})"
            ref = f"`{p.baseline.reference}`" if p.baseline else "-"
            detail = p.detail.replace("|", "\\|")
            rows.append(f"| {p.plan} | **{p.status}** | {audit} | {ref} | {detail} |")
        for p in self.plans:
            if p.changes:
                rows += ["", f"## {p.plan}: what changed", ""]
                rows += [f"- {c}" for c in p.changes]
        if not self.plans:
            rows.append("| - | no plans found | - | - | - |")
        return "\n".join(rows) + "\n"


def _changes(comparison: ImageComparison) -> tuple[str, ...]:
    diff = comparison.diff
    if diff is None:
        return ()
    lines = [p.describe() for p in diff.packages]
    for change in diff.files[:50]:
        owner = f" [{change.distribution}]" if change.distribution else ""
        fields = f" ({', '.join(change.fields)})" if change.fields else ""
        lines.append(f"file {change.change}: /{change.path}{fields}{owner}")
    if len(diff.files) > 50:
        lines.append(f"... and {len(diff.files) - 50} more files (see the evidence)")
    return tuple(lines)


def _night_for_plan(
    workspace: Workspace,
    name: str,
    *,
    base_override: str | None,
    client: RegistryClient,
    echo: TextIO,
    keep_images: bool,
    candidate_registry: str | None,
) -> PlanNight:
    from imagekit.audit.stage import AuditRequest, audit
    from imagekit.build import BuildOptions, build_plan, push_image
    from imagekit.engine import connect, engine_errors
    from imagekit.flows.doctor import run_doctor

    loaded = load_plan(
        plan_path(workspace.plans_dir, name),
        dockerfiles_dir=workspace.dockerfiles_dir,
        base_override=base_override,
    )
    try:
        client.resolve(loaded.base, loaded.platform)
    except CheckFailed as exc:
        return PlanNight(name, BASE_UNREACHABLE, 1, f"the pinned base fails: {exc.message}")
    except ImagekitError as exc:
        return PlanNight(
            name,
            BASE_UNREACHABLE,
            3,
            f"the pinned base {loaded.base} cannot be reached: {exc.message}",
        )
    baseline = (
        find_baseline(read_records(workspace.ledger_path), name)
        if (workspace.ledger_path.exists())
        else None
    )
    # The same preflight as `imagekit pipeline`: a night should not spend an hour finding out
    # that the disk is too small or BuildKit is missing.
    preflight = run_doctor(workspace, name, base_override=base_override, client=client)
    if not preflight.ok:
        said_no = "; ".join(f"{c.name}: {c.detail}" for c in preflight.failed)
        return PlanNight(name, PREFLIGHT_NO, 1, f"doctor said no: {said_no}", baseline=baseline)
    try:
        built = build_plan(
            workspace,
            name,
            BuildOptions(no_cache=True, base_override=base_override),
            echo=echo,
        )
    except CheckFailed as exc:
        return PlanNight(name, REJECTED, 1, exc.message.splitlines()[0], baseline=baseline)
    engine = connect()
    remote_tag: str | None = None
    try:
        audit_status = audit(workspace, AuditRequest(ref=built.tag, plan=name)).verdict.status
        if baseline is None:
            return PlanNight(
                name,
                NO_BASELINE,
                1,
                "nothing accepted to compare with: run `imagekit pipeline "
                f"{name}` once to accept an image",
                image_id=built.image_id,
                audit_status=audit_status,
            )
        # The candidate goes next to the accepted image (or to --registry): the registry
        # already holds the shared base layers, so only the new layers travel, and both
        # images can then be read layer by layer, the shared bottom only once.
        if candidate_registry is not None:
            repo = repository_for(candidate_registry, name)
        else:
            repo = parse_reference(baseline.reference).name
        log = built.evidence_dir / "nightly-push.log"
        candidate, _ = push_image(engine, built.tag, repo, log)
        remote_tag = f"{repo}:{built.tag.rpartition(':')[2]}"
        comparison = compare_images(
            RegistryImage.open(client, baseline.reference, loaded.platform),
            RegistryImage.open(client, candidate, loaded.platform),
        )
    finally:
        if not keep_images:
            for tag in (built.tag, remote_tag):
                if tag is not None:
                    with engine_errors(f"removing the nightly tag {tag}"):
                        engine.client.image.remove(tag)
    verdict = NightVerdict(comparison.verdict)
    changes = _changes(comparison)
    worse = audit_rank(audit_status) > audit_rank(baseline.audit_status)
    if comparison.diff is not None:
        d = comparison.diff
        detail = (
            f"{comparison.shared_layers} layers shared; {len(d.packages)} package changes, "
            f"{len(d.files)} file changes; set apart: {d.bytecode_changed} bytecode, "
            f"{d.timestamp_only} timestamp-only"
        )
    else:
        detail = f"all {len(comparison.diff_ids_after)} diffIDs equal"
    status, code = verdict, 0
    if worse:
        status, code = AUDIT_WORSE, 1
        detail = f"audit {audit_status} is worse than the accepted {baseline.audit_status}; " + (
            f"content {verdict}"
        )
    run_dir = new_run_dir(workspace.evidence_dir, name, "nightly")
    path = run_dir / "comparison.json"
    night = PlanNight(
        name,
        status,
        code,
        detail,
        baseline=baseline,
        image_id=built.image_id,
        audit_status=audit_status,
        comparison=comparison,
        evidence=path,
        changes=changes,
    )
    write_json(path, night.to_json())
    append_record(
        workspace,
        "note",
        plan=name,
        images={
            "image": built.image_id,
            "base": str(loaded.base),
            "source": baseline.reference,
            "pushed": candidate,
        },
        status=f"nightly-{status}",
        scope=(
            f"a rebuild without cache compared with the accepted {baseline.reference}: "
            f"{verdict} ({'same diffIDs' if verdict is REPRODUCIBLE else 'layer contents'}"
            "; timestamps and bytecode caches set apart); proves nothing about GPU service"
        ),
        evidence=path,
        details={
            "verdict": verdict,
            "audit_status": audit_status,
            "accepted_audit_status": baseline.audit_status,
            "changes": list(changes[:50]),
        },
    )
    return night


def run_nightly(
    workspace: Workspace,
    plans: list[str] | None = None,
    *,
    base_override: str | None = None,
    echo: TextIO | None = None,
    keep_images: bool = False,
    candidate_registry: str | None = None,
    client: RegistryClient | None = None,
) -> NightlyResult:
    """Rebuild, audit and compare each plan; a failing plan does not stop the others."""
    echo = echo or sys.stderr
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if plans is None:
        summaries = list_plans(workspace.plans_dir, workspace.dockerfiles_dir)
        names = [s.name for s in summaries]
    else:
        names = plans
    if base_override is not None and len(names) != 1:
        raise UsageError(
            "--base replaces one plan's base: name exactly one plan with --plans",
            hint="e.g. imagekit nightly --plans demo --base REGISTRY/REPO@sha256:...",
        )
    own = client is None
    client = client or RegistryClient()
    results: list[PlanNight] = []
    try:
        for name in names:
            echo.write(f"nightly: {name} ...\n")
            try:
                night = _night_for_plan(
                    workspace,
                    name,
                    base_override=base_override,
                    client=client,
                    echo=echo,
                    keep_images=keep_images,
                    candidate_registry=candidate_registry,
                )
            except ImagekitError as exc:
                status = REJECTED if isinstance(exc, CheckFailed) else ERROR
                night = PlanNight(name, status, exc.exit_code, exc.message.splitlines()[0])
            echo.write(f"nightly: {name} {night.status}: {night.detail}\n")
            results.append(night)
    finally:
        if own:
            client.close()
    return NightlyResult(started, tuple(results))
