"""`imagekit nightly`: watch each plan's upstream base tag, rebuild, say loudly what moved.

Two things drift under a plan that pins its base by digest, and a night looks at both.

**The base tag upstream.** For a plan with ``base.found_as`` the tag is asked on the base's
registry (imagekit.plans.upstream: a HEAD request, the digest as the registry serves it, and a
GET of the tag whose bytes confirm any "nothing moved") and held against the pin:

- it serves the pin: nothing upstream moved (with ``watch_only`` the night ends there for
  the plan, ``base-current``, having cost that HEAD and GET);
- it serves another digest: every overlay guard is checked against the new base first
  (imagekit.plans.bump, the registry builder's guard: no pull). A guard that no longer holds is
  ``overlay-drift`` with the path and both hashes, and no candidate is built or pushed.
  Otherwise a candidate is built on the new digest (through the registry for a plan of
  overlays and metadata, which costs seconds and no pull; through the engine for a plan
  with pip or package steps), audited, compared with the accepted image, and the pinned
  base is compared with the new one (what upstream changed). The plan change is proposed
  as a unified diff of manifests/NAME.yaml (one line: the digest), kept as evidence, and
  for a candidate that is ready also written to ``proposals_dir`` and, with
  ``write_plans``, applied. The verdict is ``base-moved`` (a candidate is ready) or
  ``audit-worse``;
- it is gone (HTTP 404): ``base-tag-gone``.

**The package index.** A plan whose tag did not move (or that has none) is rebuilt from
its pinned base without cache, audited again, pushed as a candidate beside the accepted
image (or to ``candidate_registry``) and compared with the last accepted image of that
plan in the ledger (the image a complete pipeline pulled at its end; failing that, the
last one pushed that was not a night's candidate). Both are read from the registry layer
by layer (imagekit.layerdiff): the same diffIDs are ``reproducible``; the same contents but
for timestamps and bytecode caches ``equivalent``; anything else ``changed``, with the
distributions added, removed or at another version and the files changed, named.

A change is reported, not failed: it may be wanted. What fails the night (exit 1): an
overlay that drifted upstream, a vanished base tag, a preflight (`imagekit doctor`) that
says no, an audit worse than the accepted one, a plan with nothing accepted to compare with,
and ``rejected``: a build whose guards or assertions reject it, or one whose record the
ledger refuses (imagekit.errors.RecordRefused: the build finished, but an image the ledger
does not vouch for is no candidate; it is removed like any other, and named). A night's
note the ledger refuses turns a passing verdict into ``rejected`` too, its detail kept.
What ends it with exit 3: a registry that cannot be reached (a 503 is retried by the
registry transport first), a stage that could not finish. Every plan is tried even when an
earlier one failed, and each night appends one ``note`` record a plan, its details typed
(imagekit.ledger.record.NightlyDetails).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from imagekit.audit.report import audit_rank
from imagekit.build.options import BuildOptions
from imagekit.errors import (
    CheckFailed,
    ImagekitError,
    RecordRefused,
    RegistryNotFound,
    UsageError,
)
from imagekit.evidence import new_run_dir, write_bytes, write_json
from imagekit.layerdiff import ComparisonVerdict, ImageComparison, RegistryImage, compare_images
from imagekit.ledger import LedgerRecord, NightlyDetails, append_record, iter_records
from imagekit.plans.bump import GuardedBase, Proposal, guard_base, propose
from imagekit.plans.catalogue import list_plans
from imagekit.plans.load import load_named_plan
from imagekit.plans.model import LoadedPlan
from imagekit.plans.upstream import TagState, UpstreamTag, watch_tag
from imagekit.refs import parse_reference, repository_for
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace

if TYPE_CHECKING:
    from imagekit.runtime.engine import Engine

#: The tag every night's candidate is pushed under; such pushes are never a baseline.
CANDIDATE_TAG_PREFIX = "nightly-"


class NightVerdict(StrEnum):
    """What a night says of one plan: the comparison's verdict, the watch's, or why none."""

    REPRODUCIBLE = ComparisonVerdict.REPRODUCIBLE.value
    EQUIVALENT = ComparisonVerdict.EQUIVALENT.value
    CHANGED = ComparisonVerdict.CHANGED.value
    AUDIT_WORSE = "audit-worse"
    REJECTED = "rejected"
    NO_BASELINE = "no-baseline"
    BASE_UNREACHABLE = "base-unreachable"
    ERROR = "error"
    PREFLIGHT_NO = "preflight-no"
    BASE_MOVED = "base-moved"
    OVERLAY_DRIFT = "overlay-drift"
    BASE_TAG_GONE = "base-tag-gone"
    BASE_CURRENT = "base-current"
    NOT_WATCHED = "not-watched"


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
    BASE_MOVED,
    OVERLAY_DRIFT,
    BASE_TAG_GONE,
    BASE_CURRENT,
    NOT_WATCHED,
) = NightVerdict


@dataclass(frozen=True)
class NightOptions:
    """What a caller may choose about a night; each plan decides the rest."""

    base_override: str | None = None
    keep_images: bool = False
    candidate_registry: str | None = None
    #: a plan whose tag did not move is not rebuilt: the watch costs a HEAD and a GET a plan
    watch_only: bool = False
    #: where the proposed plan changes of ready candidates go, one NAME.diff each
    proposals_dir: Path | None = None
    #: apply those changes to the plans (and their committed renders)
    write_plans: bool = False
    #: build the candidates on a BuildKit of their own (imagekit.build.remote), as
    #: ``imagekit build --buildkit/--buildx-builder`` does: no engine builds, BuildKit pushes
    #: by digest; the engine still audits the pushed image
    buildkit: str | None = None
    buildkit_ca: Path | None = None
    buildkit_cert: Path | None = None
    buildkit_key: Path | None = None
    buildx_builder: str | None = None
    #: with one of those: BuildKit's cache from and to this registry reference, so a fresh
    #: runner reuses layers; steps it finds there are not run again (said in the record)
    cache_ref: str | None = None

    @property
    def remote(self) -> bool:
        """Whether the candidates are built on a BuildKit of their own."""
        return self.buildkit is not None or self.buildx_builder is not None

    def rebuild(self) -> str:
        """How a candidate is rebuilt, for a record's scope: where, and with which cache."""
        where = (
            f" on the buildx builder {self.buildx_builder}"
            if self.buildx_builder is not None
            else f" on the BuildKit daemon at {self.buildkit}"
            if self.buildkit is not None
            else ""
        )
        if self.remote and self.cache_ref is not None:
            return (
                f"a rebuild{where} with BuildKit's registry cache {self.cache_ref} (steps "
                "found there were not run again)"
            )
        return f"a rebuild without cache{where}"


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


def _candidate_push(record: LedgerRecord) -> bool:
    """A push of a night's candidate (tagged ``nightly-...``): proposed, never accepted."""
    tag = record.images.get("image", "").rpartition(":")[2]
    return tag.startswith(CANDIDATE_TAG_PREFIX)


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
                and not (kind == "push" and _candidate_push(r))
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


def _short(digest: str | None) -> str:
    return f"{digest[:19]}" if digest else "-"


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
    upstream: UpstreamTag | None = None
    candidate: str | None = None
    builder: str | None = None
    guard: GuardedBase | None = None
    base_comparison: ImageComparison | None = None
    base_changes: tuple[str, ...] = ()
    proposal: Proposal | None = None
    proposal_file: Path | None = None
    written: tuple[Path, ...] = ()
    notes: tuple[str, ...] = ()

    def inside(self) -> str:
        """What changed inside, in one cell: drifted files, else the named changes."""
        if self.guard is not None and self.guard.drifted:
            return "; ".join(
                f"{c.destination}: {_short(c.expected)} in the plan, {_short(c.found)} upstream"
                for c in self.guard.drifted
            )
        if self.comparison is None:
            return "-"
        diff = self.comparison.diff
        if diff is None:
            return f"nothing: all {len(self.comparison.diff_ids_after)} diffIDs equal"
        parts = [p.describe() for p in diff.packages[:3]]
        if len(diff.packages) > 3:
            parts.append(f"{len(diff.packages) - 3} more packages")
        parts.append(f"{len(diff.files)} files changed")
        parts.append(
            f"set apart: {diff.bytecode_changed} bytecode, {diff.timestamp_only} timestamp-only"
        )
        return "; ".join(parts)

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
            "upstream": self.upstream.to_json() if self.upstream else None,
            "candidate": self.candidate,
            "builder": self.builder,
            "guard": self.guard.report().to_json() if self.guard else None,
            "base_comparison": self.base_comparison.to_json() if self.base_comparison else None,
            "base_changes": list(self.base_changes),
            "proposal": self.proposal.to_json() if self.proposal else None,
            "proposal_file": str(self.proposal_file) if self.proposal_file else None,
            "written": [str(p) for p in self.written],
            "inside": self.inside(),
            "notes": list(self.notes),
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
            if p.upstream is not None:
                out.append(
                    f"  tag {p.upstream.tag_reference}: pinned {p.upstream.pinned}, upstream "
                    f"now {p.upstream.served or p.upstream.state} (resolved "
                    f"{p.upstream.resolved_at})"
                )
            out.extend(f"  {c}" for c in p.changes)
            if p.base_changes:
                out.append("  upstream, the pinned base against the new one:")
                out.extend(f"    {c}" for c in p.base_changes)
            if p.proposal is not None:
                out.append("  proposed plan change:")
                out.extend(f"    {line}" for line in p.proposal.plan_diff.splitlines())
            out.extend(f"  note: {n}" for n in p.notes)
        if not self.plans:
            out.append("no plans found: nothing was rebuilt")
        out.append(f"nightly: exit {self.exit_code}")
        return out

    def markdown(self) -> str:
        """A CI job summary: the verdict, one row a plan, then each plan's changes and diff."""
        icon = {0: "passed", 1: "FAILED", 2: "FAILED (bad input)", 3: "FAILED (could not finish)"}

        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")

        rows = [
            f"# imagekit nightly ({self.started})",
            "",
            f"**Night {icon.get(self.exit_code, 'FAILED')}** (exit {self.exit_code}).",
            "",
            "| plan | tag | pinned | upstream now | verdict | what changed inside |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for p in self.plans:
            up = p.upstream
            tag = f"`{up.tag}`" if up else "-"
            pinned = f"`{_short(str(up.pinned))}`" if up else "-"
            if up is None:
                now = "-"
            elif up.served is None:
                now = f"{up.state}"
            else:
                now = f"`{_short(str(up.served))}`" + (" (same)" if not up.moved else "")
            rows.append(
                f"| {p.plan} | {tag} | {pinned} | {now} | **{p.status}** | {cell(p.inside())} |"
            )
        if not self.plans:
            rows.append("| - | - | - | - | no plans found | - |")
        rows += [
            "",
            "| plan | audit (accepted) | compared with | detail |",
            "| --- | --- | --- | --- |",
        ]
        for p in self.plans:
            accepted = p.baseline.audit_status if p.baseline else None
            audit = f"{p.audit_status or '-'} ({accepted or '-'})"
            ref = f"`{p.baseline.reference}`" if p.baseline else "-"
            rows.append(f"| {p.plan} | {audit} | {ref} | {cell(p.detail)} |")
        for p in self.plans:
            if p.guard is not None and p.guard.drifted:
                rows += ["", f"## {p.plan}: overlay drift", ""]
                rows += [f"- {line}" for line in p.guard.drift_lines()]
            if p.changes:
                rows += ["", f"## {p.plan}: what changed", ""]
                rows += [f"- {c}" for c in p.changes]
            if p.base_changes:
                rows += ["", f"## {p.plan}: what upstream changed (pinned base -> new base)", ""]
                rows += [f"- {c}" for c in p.base_changes]
            if p.proposal is not None:
                rows += ["", f"## {p.plan}: proposed plan change", "", "```diff"]
                rows += p.proposal.plan_diff.rstrip("\n").splitlines()
                rows.append("```")
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


def _content_detail(comparison: ImageComparison) -> str:
    if comparison.diff is None:
        return f"all {len(comparison.diff_ids_after)} diffIDs equal"
    d = comparison.diff
    return (
        f"{comparison.shared_layers} layers shared; {len(d.packages)} package changes, "
        f"{len(d.files)} file changes; set apart: {d.bytecode_changed} bytecode, "
        f"{d.timestamp_only} timestamp-only"
    )


def candidate_options(
    loaded: LoadedPlan, options: NightOptions, repo: str, tag: str, base: str
) -> tuple[str, BuildOptions]:
    """The builder of a night's candidate, as `imagekit build` chooses it
    (imagekit.build.choice), and the options the night gives that builder.

    They differ by builder; the result is read the same way whichever ran:

    - ``engine``: built without cache under a local tag; the night pushes it beside the
      accepted image unrecorded (a ``build`` record, no ``push`` record);
    - ``registry``: assembled and pushed under the candidate tag (``build`` and ``push``
      records, the push tagged ``nightly-...``, which is never a baseline);
    - ``buildkit`` / ``buildx``: built on that BuildKit and pushed by digest, untagged, by
      BuildKit (one ``build`` record naming the daemon, no ``push`` record: no engine holds
      the image to push it); without cache unless ``cache_ref`` asks for one.
    """
    from imagekit.build.choice import chosen_builder

    request = BuildOptions(
        builder="auto",
        push=repo,
        base_override=base,
        buildkit=options.buildkit,
        buildkit_ca=options.buildkit_ca,
        buildkit_cert=options.buildkit_cert,
        buildkit_key=options.buildkit_key,
        buildx_builder=options.buildx_builder,
        cache_ref=options.cache_ref,
    )
    builder = chosen_builder(loaded.plan, request)
    if builder == "registry":
        return builder, replace(request, builder=builder, tag=tag)
    if builder == "engine":
        return builder, BuildOptions(
            builder=builder, no_cache=True, base_override=base, tag=f"imagekit/{loaded.name}:{tag}"
        )
    return builder, replace(request, no_cache=options.cache_ref is None)


def check_builder(options: NightOptions) -> None:
    """Before any plan: a BuildKit or buildx builder the night cannot use stops it at once.

    A malformed address or TLS file and an unknown buildx builder are UsageError (exit 2), a
    daemon that does not answer CouldNotFinish (exit 3) naming its address; ``cache_ref``
    without either is refused as `imagekit build` refuses it.
    """
    from imagekit.build.remote import buildctl_base, buildx_base, probe

    if not options.remote:
        if options.cache_ref is not None:
            raise UsageError(
                "--cache-ref is an option of --buildkit and --buildx-builder builds",
                hint="add --buildkit ADDR or --buildx-builder NAME, or drop --cache-ref",
            )
        return
    if options.buildkit is not None and options.buildx_builder is not None:
        raise UsageError("--buildkit and --buildx-builder name two builders; give one")
    if options.cache_ref is not None:
        parse_reference(options.cache_ref)  # a malformed reference is exit 2 here
    if options.buildx_builder is not None:
        buildx_base(options.buildx_builder)
        return
    probe(
        buildctl_base(
            BuildOptions(
                buildkit=options.buildkit,
                buildkit_ca=options.buildkit_ca,
                buildkit_cert=options.buildkit_cert,
                buildkit_key=options.buildkit_key,
            )
        ),
        str(options.buildkit),
    )


@dataclass(frozen=True)
class _Candidate:
    builder: str
    image_id: str
    pushed: str
    audit_status: str
    comparison: ImageComparison


class _Night:
    """One plan's night: the loaded plan, its evidence folder, and the shared parts."""

    def __init__(
        self,
        workspace: Workspace,
        loaded: LoadedPlan,
        options: NightOptions,
        client: RegistryClient,
        echo: TextIO,
    ) -> None:
        self.workspace, self.loaded, self.options = workspace, loaded, options
        self.client, self.echo = client, echo
        self.name = loaded.name
        self._run_dir: Path | None = None
        self.baseline = None
        if workspace.ledger_path.exists():
            with iter_records(workspace.ledger_path) as records:
                mine = [r for r in records if r.plan == loaded.name]  # bounded by the plan's
            self.baseline = find_baseline(mine, loaded.name)

    @property
    def run_dir(self) -> Path:
        """The night's evidence folder for this plan, made when first written to."""
        if self._run_dir is None:
            self._run_dir = new_run_dir(self.workspace.evidence_dir, self.name, "nightly")
        return self._run_dir

    def say(self, text: str) -> None:
        self.echo.write(f"nightly: {self.name}: {text}\n")
        self.echo.flush()

    # ------------------------------------------------------------------ the candidate

    def _repository(self) -> str:
        assert self.baseline is not None  # noqa: S101 - checked by the callers
        if self.options.candidate_registry is not None:
            return repository_for(self.options.candidate_registry, self.name)
        return parse_reference(self.baseline.reference).name

    def build_candidate(self, base: str) -> _Candidate:
        """Build on ``base``, push beside the accepted image, audit, compare with it.

        Raises CheckFailed when the build is rejected (its record is kept by the builder),
        RecordRefused when the ledger refused the build's record (the image is removed).
        """
        from imagekit.audit.stage import AuditRequest, audit
        from imagekit.build.built import BuiltImage
        from imagekit.build.choice import build_image
        from imagekit.build.push import push_image
        from imagekit.runtime.engine import connect, engine_errors

        assert self.baseline is not None  # noqa: S101 - checked by the callers
        repo = self._repository()
        tag = f"{CANDIDATE_TAG_PREFIX}{self.run_dir.name}"
        builder, options = candidate_options(self.loaded, self.options, repo, tag, base)
        engine: Engine = connect()
        made: list[str] = []
        try:
            built: BuiltImage = build_image(
                self.workspace,
                self.name,
                options,
                engine=engine,
                registry=self.client,
                echo=self.echo,
            )
            made.append(built.runnable)
            pushed = built.pushed
            if pushed is None:
                # The candidate goes next to the accepted image (or to --registry): the
                # registry already holds the shared base layers, so only new layers travel.
                made.append(f"{repo}:{tag}")
                log = built.evidence_dir / "nightly-push.log"
                pushed, _ = push_image(engine, built.tag, repo, log)
            image_id = built.image_id
            self.say(f"candidate {pushed} ({builder} builder); auditing it")
            status = audit(
                self.workspace, AuditRequest(ref=built.runnable, plan=self.name), engine=engine
            ).verdict.status
            self.say(f"comparing {pushed} with the accepted {self.baseline.reference}")
            comparison = compare_images(
                RegistryImage.open(self.client, self.baseline.reference, self.loaded.platform),
                RegistryImage.open(self.client, pushed, self.loaded.platform),
            )
        except RecordRefused as refused:  # built (and pushed), but not on record
            if isinstance(refused.result, BuiltImage):
                made.append(refused.result.runnable)
            raise
        finally:
            if not self.options.keep_images:
                for ref in made:
                    with engine_errors(f"removing the nightly image {ref}"):
                        if engine.client.image.exists(ref):
                            engine.client.image.remove(ref)
        return _Candidate(builder, image_id, pushed, str(status), comparison)

    def preflight(self, base: str) -> str | None:
        """The same preflight as `imagekit pipeline`, on ``base``; what it said no to."""
        from imagekit.flows.doctor import run_doctor

        # A night should not spend an hour finding out that the disk is too small or
        # BuildKit is missing.
        report = run_doctor(self.workspace, self.name, base_override=base, client=self.client)
        if report.ok:
            return None
        return "; ".join(f"{c.name}: {c.detail}" for c in report.failed)

    # ------------------------------------------------------------------ the record

    def record(self, night: PlanNight, scope: str, images: dict[str, str]) -> PlanNight:
        """Keep the night's evidence and its one note record; returns the night with both."""
        path = self.run_dir / "night.json"
        night = PlanNight(**{**night.__dict__, "evidence": path})
        write_json(path, night.to_json())
        up = night.upstream
        details = NightlyDetails(
            verdict=night.status,
            audit_status=night.audit_status,
            accepted_audit_status=night.baseline.audit_status if night.baseline else None,
            changes=list(night.changes[:50]),
            **({"upstream": _upstream_json(up)} if up else {}),
            **({"candidate": night.candidate} if night.candidate else {}),
            **({"builder": night.builder} if night.builder else {}),
            **({"guard": night.guard.report()} if night.guard else {}),
            **({"base_changes": list(night.base_changes[:50])} if night.base_comparison else {}),
            **({"plan_diff": night.proposal.plan_diff} if night.proposal else {}),
            **({"notes": list(night.notes)} if night.notes else {}),
        )
        try:
            append_record(
                self.workspace,
                "note",
                plan=self.name,
                images={k: v for k, v in images.items() if v},
                status=f"nightly-{night.status}",
                scope=scope,
                evidence=path,
                details=details,
            )
        except RecordRefused as refused:
            # The verdict and its evidence stand, but a night the ledger does not hold
            # is not a pass.
            detail = f"{night.detail}; the ledger refused the night's note: {refused.problem}"
            if night.exit_code == 0:
                return replace(night, status=REJECTED, exit_code=1, detail=detail)
            return replace(night, detail=detail)
        return night


def _rejected(exc: CheckFailed) -> tuple[str, str | None]:
    """Why a candidate was rejected, in one line, and the image it was built as, if any."""
    from imagekit.build.built import BuiltImage

    if isinstance(exc, RecordRefused) and isinstance(exc.result, BuiltImage):
        built = exc.result  # the build finished (a registry build: pushed); its record did not
        made = f"assembled and pushed as {built.pushed}" if built.builder == "registry" else "built"
        return (
            f"the candidate {built.image_id} was {made}, but the ledger refused its build "
            f"record: {exc.problem}"
        ), built.image_id
    return exc.message.splitlines()[0], None


def _upstream_json(up: UpstreamTag) -> dict[str, Any]:
    document = up.to_json()
    document.pop("plan")
    return document


def _rebuild(night: _Night, upstream: UpstreamTag | None) -> PlanNight:
    """Today's night: rebuild from the pinned base and compare with the accepted image."""
    loaded, name, client = night.loaded, night.name, night.client
    try:
        client.resolve(loaded.base, loaded.platform)
    except CheckFailed as exc:
        return PlanNight(
            name, BASE_UNREACHABLE, 1, f"the pinned base fails: {exc.message}", upstream=upstream
        )
    except ImagekitError as exc:
        return PlanNight(
            name,
            BASE_UNREACHABLE,
            3,
            f"the pinned base {loaded.base} cannot be reached: {exc.message}",
            upstream=upstream,
        )
    baseline = night.baseline
    if baseline is None:
        return PlanNight(
            name,
            NO_BASELINE,
            1,
            f"nothing accepted to compare with: run `imagekit pipeline {name}` once to accept "
            "an image",
            upstream=upstream,
        )
    said_no = night.preflight(str(loaded.base))
    if said_no is not None:
        return PlanNight(
            name, PREFLIGHT_NO, 1, f"doctor said no: {said_no}", baseline=baseline,
            upstream=upstream,
        )  # fmt: skip
    try:
        candidate = night.build_candidate(str(loaded.base))
    except CheckFailed as exc:
        why, image = _rejected(exc)
        return PlanNight(
            name, REJECTED, 1, why, baseline=baseline, image_id=image, upstream=upstream
        )
    comparison = candidate.comparison
    verdict = NightVerdict(comparison.verdict)
    status, code, detail = verdict, 0, _content_detail(comparison)
    if audit_rank(candidate.audit_status) > audit_rank(baseline.audit_status):
        status, code = AUDIT_WORSE, 1
        detail = (
            f"audit {candidate.audit_status} is worse than the accepted "
            f"{baseline.audit_status}; content {verdict}"
        )
    result = PlanNight(
        name, status, code, detail, baseline=baseline, image_id=candidate.image_id,
        audit_status=candidate.audit_status, comparison=comparison,
        changes=_changes(comparison), upstream=upstream, candidate=candidate.pushed,
        builder=candidate.builder,
    )  # fmt: skip
    how = "same diffIDs" if verdict is REPRODUCIBLE else "layer contents"
    return night.record(
        result,
        f"{night.options.rebuild()} on the pinned base compared with the accepted "
        f"{baseline.reference}: {verdict} ({how}; timestamps and bytecode caches set apart); "
        "proves nothing about GPU service",
        {
            "image": candidate.image_id,
            "base": str(loaded.base),
            "source": baseline.reference,
            "pushed": candidate.pushed,
        },
    )


def _moved(night: _Night, upstream: UpstreamTag) -> PlanNight:
    """The tag moved: guard the new base, compare the bases, build and judge a candidate."""
    loaded, name, client, options = night.loaded, night.name, night.client, night.options
    new_base = upstream.new_base()
    assert upstream.served is not None  # noqa: S101 - moved
    night.say(upstream.detail)
    write_json(night.run_dir / "upstream.json", upstream.to_json())
    guarded = guard_base(client, loaded, new_base, log=night.say)
    write_json(night.run_dir / "guard.json", guarded.report().to_json())
    # What upstream changed: the pinned base against the new one, layer by layer.
    base_comparison: ImageComparison | None = None
    notes: list[str] = []
    try:
        base_comparison = compare_images(
            RegistryImage.open(client, str(loaded.base), loaded.platform),
            RegistryImage.open(client, str(new_base), loaded.platform),
        )
        write_json(night.run_dir / "base-comparison.json", base_comparison.to_json())
    except RegistryNotFound as exc:
        notes.append(
            f"the pinned base is no longer served, so the bases were not compared: {exc.message}"
        )
    base_changes = _changes(base_comparison) if base_comparison else ()
    images = {"base": str(loaded.base), "upstream": str(new_base)}
    moved = (
        f"{upstream.tag_reference} moved from {upstream.pinned} to {upstream.served} "
        f"(resolved {upstream.resolved_at})"
    )
    common: dict[str, Any] = {
        "baseline": night.baseline,
        "upstream": upstream,
        "guard": guarded,
        "base_comparison": base_comparison,
        "base_changes": base_changes,
    }
    if guarded.drifted:
        first = guarded.drifted[0]
        result = PlanNight(
            name, OVERLAY_DRIFT, 1,
            f"{moved}; the new base breaks {len(guarded.drifted)} overlay guard(s), first "
            f"{first.marker()}; no candidate was built or pushed",
            notes=tuple(notes), **common,
        )  # fmt: skip
        return night.record(
            result,
            f"{moved}; the overlay guards were checked against the new base from its layers "
            "(no pull) and at least one no longer holds: no candidate was built",
            images,
        )
    proposal = propose(night.workspace, loaded, upstream.served)
    write_bytes(night.run_dir / "plan.diff", proposal.plan_diff.encode())
    if proposal.rendered:
        write_bytes(night.run_dir / "proposal.patch", proposal.patch.encode())
    notes.extend(proposal.notes)
    common["proposal"] = proposal
    baseline = night.baseline
    if baseline is None:
        result = PlanNight(
            name, NO_BASELINE, 1,
            f"{moved}; nothing accepted to compare a candidate with: run `imagekit pipeline "
            f"{name}` once to accept an image",
            notes=tuple(notes), **common,
        )  # fmt: skip
        return night.record(result, f"{moved}; no candidate was built (nothing accepted)", images)
    said_no = night.preflight(str(new_base))
    if said_no is not None:
        result = PlanNight(
            name, PREFLIGHT_NO, 1, f"{moved}; doctor said no: {said_no}", notes=tuple(notes),
            **common,
        )  # fmt: skip
        return night.record(result, f"{moved}; no candidate was built (preflight)", images)
    try:
        candidate = night.build_candidate(str(new_base))
    except CheckFailed as exc:
        why, image = _rejected(exc)
        result = PlanNight(
            name, REJECTED, 1, f"{moved}; the candidate was rejected: {why}", image_id=image,
            notes=tuple(notes), **common,
        )  # fmt: skip
        return night.record(result, f"{moved}; the candidate build was rejected", images)
    comparison = candidate.comparison
    status, code = BASE_MOVED, 0
    detail = f"{moved}; candidate ready: {_content_detail(comparison)} against the accepted image"
    if audit_rank(candidate.audit_status) > audit_rank(baseline.audit_status):
        status, code = AUDIT_WORSE, 1
        detail = (
            f"{moved}; the candidate's audit {candidate.audit_status} is worse than the "
            f"accepted {baseline.audit_status}"
        )
    proposal_file: Path | None = None
    written: tuple[Path, ...] = ()
    if status is BASE_MOVED:
        if options.proposals_dir is not None:
            options.proposals_dir.mkdir(parents=True, exist_ok=True)
            proposal_file = options.proposals_dir / f"{name}.diff"
            proposal_file.write_text(proposal.patch, encoding="utf-8")
        if options.write_plans:
            written = proposal.write(night.workspace)
    result = PlanNight(
        name, status, code, detail, image_id=candidate.image_id,
        audit_status=candidate.audit_status, comparison=comparison,
        changes=_changes(comparison), candidate=candidate.pushed, builder=candidate.builder,
        proposal_file=proposal_file, written=written, notes=tuple(notes), **common,
    )  # fmt: skip
    return night.record(
        result,
        f"{moved}; a candidate built on the new digest ({candidate.builder} builder, overlay "
        f"guards checked against the new base) was audited ({candidate.audit_status}) and "
        f"compared with the accepted {baseline.reference} by layer contents (timestamps and "
        "bytecode caches set apart); proves nothing about GPU service",
        {
            **images,
            "image": candidate.image_id,
            "source": baseline.reference,
            "pushed": candidate.pushed,
        },
    )


def _night_for_plan(
    workspace: Workspace,
    name: str,
    options: NightOptions,
    client: RegistryClient,
    echo: TextIO,
) -> PlanNight:
    loaded = load_named_plan(workspace, name, base_override=options.base_override)
    tag = loaded.plan.base.found_as
    if tag is None:
        if options.watch_only:
            return PlanNight(
                name,
                NOT_WATCHED,
                0,
                "no base.found_as: there is no tag to watch; the plan is rebuilt only "
                "without --watch-only",
            )
        return _rebuild(_Night(workspace, loaded, options, client, echo), None)
    try:
        upstream = watch_tag(client, loaded)
    except CheckFailed as exc:
        return PlanNight(name, BASE_UNREACHABLE, 1, f"the base tag {tag} fails: {exc.message}")
    except ImagekitError as exc:
        return PlanNight(
            name,
            BASE_UNREACHABLE,
            3,
            f"the base tag {loaded.base.name}:{tag} cannot be reached: {exc.message}",
        )
    night = _Night(workspace, loaded, options, client, echo)
    if upstream.state is TagState.MOVED:
        return _moved(night, upstream)
    if upstream.state is TagState.GONE:
        result = PlanNight(
            name,
            BASE_TAG_GONE,
            1,
            f"{upstream.detail}; the plan still pins {upstream.pinned}, which nothing upstream "
            "names any more",
            baseline=night.baseline,
            upstream=upstream,
        )
        return night.record(
            result,
            f"{upstream.tag_reference} was asked at {upstream.resolved_at} and is gone",
            {"base": str(loaded.base)},
        )
    if options.watch_only:
        result = PlanNight(
            name,
            BASE_CURRENT,
            0,
            f"{upstream.detail} (resolved {upstream.resolved_at}); nothing was built",
            baseline=night.baseline,
            upstream=upstream,
        )
        return night.record(
            result,
            f"{upstream.tag_reference} was asked at {upstream.resolved_at} and serves the "
            "pinned digest; nothing was built (--watch-only)",
            {"base": str(loaded.base)},
        )
    return _rebuild(night, upstream)


def run_nightly(
    workspace: Workspace,
    plans: list[str] | None = None,
    options: NightOptions | None = None,
    *,
    echo: TextIO | None = None,
    client: RegistryClient | None = None,
) -> NightlyResult:
    """Watch, rebuild, audit and compare each plan; a failing plan does not stop the others."""
    echo = echo or sys.stderr
    options = options or NightOptions()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if plans is None:
        summaries = list_plans(workspace.plans_dir, workspace.dockerfiles_dir)
        names = [s.name for s in summaries]
    elif not plans:
        # An unset variable in a script (`--plans "$PLANS"`) must not become every plan.
        raise UsageError(
            "--plans names no plan (it is empty, or only commas and spaces)",
            hint="name the plans (--plans demo,vllm), or leave --plans out for every plan",
        )
    else:
        names = plans
    if options.base_override is not None and len(names) != 1:
        raise UsageError(
            "--base replaces one plan's base: name exactly one plan with --plans",
            hint="e.g. imagekit nightly --plans demo --base REGISTRY/REPO@sha256:...",
        )
    check_builder(options)
    own = client is None
    client = client or RegistryClient()
    results: list[PlanNight] = []
    try:
        for name in names:
            echo.write(f"nightly: {name} ...\n")
            try:
                night = _night_for_plan(workspace, name, options, client, echo)
            except ImagekitError as exc:
                status = REJECTED if isinstance(exc, CheckFailed) else ERROR
                night = PlanNight(name, status, exc.exit_code, exc.message.splitlines()[0])
            echo.write(f"nightly: {name} {night.status}: {night.detail}\n")
            results.append(night)
    finally:
        if own:
            client.close()
    return NightlyResult(started, tuple(results))
