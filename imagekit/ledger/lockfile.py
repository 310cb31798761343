"""The image lock: the current state of every plan, rendered from the ledger alone.

The ledger is the history; the lock is the answer to "what is accepted now, and what was
proved about it?", in the shape of the public MiniMax-M3 image lock: per plan, the upstream
base (source tag, index digest, platform, manifest and config digests, compressed layer bytes,
layer digests), the base content verification verdict and its sentence, the prepared image's
manifest and config digests, the CPU audit status (and each kind's column of the newest
verdict about the prepared image: the vulnerability scan, ``gpu_preflight_status``, as each
kind's spec in imagekit.kinds names it), the prepared image's key versions
(``prepared_versions``, from that audit's record; null for a distribution it found absent),
the destination status, the final pull (and the newest engine and containerd final pulls side
by side), and the rejected attempts kept as investigations.

The current image is the plan's newest build that is not a night's candidate: a night
(`imagekit nightly`) rebuilds the plan and records a build of its candidate, which is proposed,
never accepted (imagekit.ledger.accepted says which builds and pushes are candidates, for the
lock and for the night's accepted image alike); the lock lists it among the investigations as
"a night's candidate" and keeps showing the accepted build, its push and its verdicts.

A plan of several platforms is built as one index with a ``build`` record a platform (each
naming the index) and one ``push`` record of the index. Its current state is that whole
build: ``prepared_image`` names the index, its push, and under ``platforms`` each platform's
build, manifest and config; ``upstream_base`` gives the base's image of each platform;
each kind's column (``audit``, ``vulnerability_scan``, ...) and ``prepared_versions`` are
given a platform (each the
newest about that platform's own image). The mirror verdict and the final pulls are of the
index.

Only records that concern the current prepared image count for it: an audit of an earlier
build is not an audit of this one, so a plan whose newest build was never audited says
``not-recorded`` rather than inheriting an older pass. The output is deterministic (sorted
keys, no wall-clock time; the ledger head hash pins what it was rendered from), so a diff of
the lock is a diff of the state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from imagekit.errors import LedgerBroken
from imagekit.evidence import utc_stamp
from imagekit.kinds import KINDS, kind
from imagekit.kinds.build import BUILD
from imagekit.ledger.accepted import CurrentBuild, is_candidate_build
from imagekit.ledger.accepted import concerns as _concerns
from imagekit.ledger.accepted import identifiers as _identifiers
from imagekit.ledger.accepted import index_of as _index_of
from imagekit.ledger.accepted import platform_builds as _platform_builds
from imagekit.ledger.readback import Entry, Line, passes
from imagekit.ledger.record import (
    AuditDetails,
    BuildDetails,
    FinalPullDetails,
    LedgerRecord,
    MirrorDetails,
    PushDetails,
)
from imagekit.ledger.verify import VerifyReport, verify_lines
from imagekit.workspace import Workspace

LOCK_SCHEMA = 1
NOT_RECORDED = "not-recorded"
_BASE_KEYS = (
    "source_tag",
    "index_digest",
    "platform",
    "manifest_digest",
    "config_digest",
    "compressed_layer_bytes",
    "layer_digests",
)


@dataclass(frozen=True)
class LockResult:
    path: Path | None
    document: dict[str, Any]
    plans: tuple[str, ...]

    # A lock is only rendered from a ledger that verifies; otherwise write_lock raises.
    ok: ClassVar[bool] = True
    exit_code: ClassVar[int] = 0

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path) if self.path else None, "lock": self.document}


def _ref(entry: Entry) -> dict[str, Any]:
    rec = entry.record
    ref: dict[str, Any] = {"record_seq": rec.seq, "time": rec.time}
    if rec.evidence is not None:
        ref["evidence"] = {"path": rec.evidence.path, "sha256": rec.evidence.sha256}
    return ref


def _latest(entries: Iterable[Entry]) -> Entry | None:
    result = None
    for entry in entries:
        result = entry
    return result


def _pull_entry(entry: Entry) -> dict[str, Any]:
    """A final pull as the lock shows it: the store's image ID and what it means there."""
    d: FinalPullDetails = entry.record.info
    return {
        "status": entry.record.status,
        "reference": entry.record.images.get("image"),
        "image_id": d.image_id,
        "image_store": d.image_store,
        "where": d.where,
        "source": d.source or "engine",
        **_ref(entry),
    }


def _final_pulls(candidates: list[Entry], ids: set[str]) -> dict[str, Any]:
    """The newest engine, containerd and pod final pulls of the image, side by side.

    The stores name one image by different digests (the classic store by its config, the
    CRI by its config as image ID and by the pulled digest as the kubelet's imageID, a pod's
    status by the kubelet's imageID), so each entry carries the sentence its record gave for
    what its image ID means; a pod's entry names the pod, its uid and its node.
    """
    pulls = [e for e in candidates if e.record.kind == "final-pull" and _concerns(e.record, ids)]
    shown: dict[str, Any] = {}
    for source in ("engine", "containerd", "pod"):
        entry = _latest(e for e in pulls if (e.record.info.source or "engine") == source)
        if entry is None or not ids:
            shown[source] = NOT_RECORDED
            continue
        d: FinalPullDetails = entry.record.info
        shown[source] = {
            **_pull_entry(entry),
            "image_id_means": d.image_id_means or NOT_RECORDED,
            "runtime_version": d.engine_version,
            "repo_digests": d.repo_digests,
            **({"kubelet_image_ref": d.kubelet_image_ref} if source == "containerd" else {}),
            **({"pod": d.pod, "pod_uid": d.pod_uid} if source == "pod" else {}),
        }
        del shown[source]["source"]
    return shown


def _prepared(entries: list[Entry], build: Entry) -> tuple[Any, Any, set[str]]:
    """The upstream base and the prepared image of the newest build, and the identifiers
    (tag, image ID, pushed reference, digests) its other records may name it by."""
    rec = build.record
    built: BuildDetails = rec.info
    base_doc: dict[str, Any] = {"reference": rec.images.get("base")}
    if built.base is not None:
        base_doc.update({k: getattr(built.base, k) for k in _BASE_KEYS})
    ids = _identifiers(built.image_id, rec.images.get("image"))

    def pushed_this(record: LedgerRecord) -> bool:
        info: PushDetails = record.info
        return _concerns(record, ids) or info.config_digest == built.image_id

    push = _latest(
        e
        for e in entries
        if e.record.kind == "push"
        and e.record.seq > rec.seq
        and e.record.status == "pushed"
        and pushed_this(e.record)
    )
    prepared: dict[str, Any] = {
        "build": {"status": rec.status, "image_id": built.image_id, **_ref(build)},
        "reference": None,
        "manifest_digest": None,
        "config_digest": None,
    }
    if push is not None:
        pushed: PushDetails = push.record.info
        prepared["reference"] = push.record.images.get("pushed")
        prepared["manifest_digest"] = pushed.manifest_digest
        prepared["config_digest"] = pushed.config_digest
        prepared["push"] = _ref(push)
        ids |= _identifiers(
            push.record.images.get("pushed"), pushed.manifest_digest, pushed.config_digest
        )
    return base_doc, prepared, ids


def _mirror_verdict(entry: Entry | None) -> Any:
    if entry is None:
        return NOT_RECORDED
    rec = entry.record
    info: MirrorDetails = rec.info
    return {
        "verdict": rec.status,
        "statement": info.message or rec.scope,
        "source": rec.images.get("source"),
        "destination": rec.images.get("destination"),
        **_ref(entry),
    }


def _status_of(candidates: list[Entry], name: str, ids: set[str]) -> Any:
    """The newest record of kind NAME about the image (never about an earlier build): its
    status, scope and where it is; a kind's lock column (imagekit.kinds)."""
    entry = _latest(e for e in candidates if e.record.kind == name and _concerns(e.record, ids))
    if entry is None or not ids:
        return NOT_RECORDED
    found = {"status": entry.record.status, "scope": entry.record.scope, **_ref(entry)}
    # An audit's verdict depends on the profile it ran with (a generic CPU_PASS and a vllm
    # CPU_CHECK_INCOMPLETE can both be true of one image): the lock names it.
    profile = getattr(entry.record.info, "profile", None)
    if profile is not None:
        found["profile"] = profile
    # A GPU preflight's verdict depends on its level (a quick PASS measured no bandwidth): the
    # lock names it, None for a preflight from before levels.
    if entry.record.kind == "gpu-preflight":
        found["level"] = getattr(entry.record.info, "level", None)
    return found


def _prepared_versions(candidates: list[Entry], ids: set[str]) -> Any:
    """The key distributions' versions in the prepared image, as the lock's prepared_versions.

    Read from the same record the lock's ``audit`` names (the newest audit of this image): a
    version is the installed one, None a distribution the probe looked for and did not find.
    An audit written before audits recorded versions, or none at all, is ``not-recorded``.
    """
    entry = _latest(e for e in candidates if e.record.kind == "audit" and _concerns(e.record, ids))
    if entry is None or not ids:
        return NOT_RECORDED
    info: AuditDetails = entry.record.info
    if info.report is None or info.report.versions is None:
        return NOT_RECORDED
    return dict(sorted(info.report.versions.items()))


def failed_checks(record: LedgerRecord) -> list[str]:
    """The checks a failed record names as failing (an audit's, a GPU preflight's), if any."""
    info = record.info
    report = getattr(info, "report", None)
    failing = getattr(report, "failing", None) or getattr(info, "failing", None)
    return [str(name) for name in failing] if failing else []


def failure_reason(record: LedgerRecord) -> str:
    """Why a failed record failed, in its own words: the checks that failed where it names
    them, then its reason or message; its scope only when it says nothing else."""
    info = record.info
    said = getattr(info, "reason", None) or getattr(info, "message", None)
    checks = failed_checks(record)
    if checks:
        named = f"{len(checks)} check{'s' * (len(checks) != 1)} failed: {', '.join(checks)}"
        return f"{named} ({said})" if said else named
    return str(said or record.scope or record.status)


def _investigations(entries: list[Entry], current: set[int]) -> list[dict[str, Any]]:
    """Rejected and failed attempts, superseded builds and nights' candidates: kept in the
    lock, never hidden.

    A record is a failed attempt when its kind's spec says its status failed
    (imagekit.kinds), whatever stage made it; the reason names the checks that failed where
    the record lists them, else it is the record's own sentence (:func:`failure_reason`). A
    night's candidate (imagekit.ledger.accepted.is_candidate_build) is never the current
    build, so it is listed here whether or not a build came after it."""
    found = []
    for entry in entries:
        rec = entry.record
        reason: str | None = None
        if kind(rec.kind).failed(rec.status):
            reason = failure_reason(rec)
        elif rec.kind == BUILD.name and is_candidate_build(rec):
            reason = "a night's candidate: proposed, never accepted"
        elif rec.kind == BUILD.name and rec.seq not in current:
            reason = "superseded by a later build"
        if reason is not None:
            found.append(
                {
                    "kind": rec.kind,
                    "status": rec.status,
                    "reason": reason,
                    "images": dict(sorted(rec.images.items())),
                    **_ref(entry),
                }
            )
    return found


def _index_push(entries: Iterable[Entry], builds: list[Entry]) -> Entry | None:
    """The push record of the index the platform builds name, after the first of them."""
    index = _index_of(builds[0])
    return _latest(
        e
        for e in entries
        if e.record.kind == "push"
        and e.record.seq > builds[0].record.seq
        and e.record.status == "pushed"
        and e.record.info.index_digest == index
    )


def _platform_ids(build: Entry) -> set[str]:
    """The names one platform's image goes by: its config (image ID) and repo@manifest."""
    info: BuildDetails = build.record.info
    return _identifiers(info.image_id, build.record.images.get("image"), info.manifest_digest)


def _index_prepared(
    entries: list[Entry], builds: list[Entry]
) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """The upstream base and the prepared index of a build of several platforms, each
    platform's build beside the other, and every name the index and its images go by."""
    first = builds[0].record
    index = _index_of(builds[0])
    base_doc: dict[str, Any] = {"reference": first.images.get("base"), "platforms": {}}
    platforms: dict[str, Any] = {}
    ids = _identifiers(index)
    for entry in builds:
        rec = entry.record
        info: BuildDetails = rec.info
        platform = str(info.platform)
        if info.base is not None:
            base_doc["platforms"][platform] = {k: getattr(info.base, k) for k in _BASE_KEYS}
        platforms[platform] = {
            "build": {"status": rec.status, "image_id": info.image_id, **_ref(entry)},
            "reference": rec.images.get("image"),
            "manifest_digest": info.manifest_digest,
            "config_digest": info.image_id,
        }
        ids |= _platform_ids(entry)
    prepared: dict[str, Any] = {
        "index_digest": index,
        "reference": None,
        "platforms": platforms,
    }
    push = _index_push(entries, builds)
    if push is not None:
        prepared["reference"] = push.record.images.get("pushed")
        prepared["push"] = _ref(push)
        ids |= _identifiers(push.record.images.get("pushed"))
    return base_doc, prepared, ids


def _base_ids(base: dict[str, Any]) -> set[str]:
    """The names the upstream base goes by: its reference, and each platform's manifest."""
    found = _identifiers(base.get("reference"), base.get("manifest_digest"))
    for image in base.get("platforms", {}).values():
        found |= _identifiers(image.get("manifest_digest"))
    return found


def _render_plan(entries: list[Entry], unplanned: list[Entry]) -> dict[str, Any]:
    """One plan's section; ``unplanned`` records (no plan) count when they name its images."""
    builds = [e for e in entries if e.record.kind == "build" and not is_candidate_build(e.record)]
    build = _latest(builds)
    group = _platform_builds(builds, build) if build is not None else []
    section: dict[str, Any] = {}
    ids: set[str] = set()
    base_ids: set[str] = set()
    if group:
        base, section["prepared_image"], ids = _index_prepared(entries, group)
        section["upstream_base"] = base
        base_ids = _base_ids(base)
    elif build is None:
        section["upstream_base"] = NOT_RECORDED
        section["prepared_image"] = NOT_RECORDED
    else:
        base, section["prepared_image"], ids = _prepared(entries, build)
        section["upstream_base"] = base
        base_ids = _identifiers(base.get("reference"), base.get("manifest_digest"))
    # A mirror, audit or pull run on its own (`imagekit mirror SRC DST`) records no plan; it
    # still speaks about this plan's images when it names them, which _concerns checks.
    candidates = sorted(entries + unplanned, key=lambda e: e.record.seq)
    mirrors = [e for e in candidates if e.record.kind == "mirror-verify"]
    section["base_content_verification"] = _mirror_verdict(
        _latest(
            e
            for e in mirrors
            if base_ids and _concerns(e.record, base_ids) and not (ids and _concerns(e.record, ids))
        )
    )
    section["destination"] = _mirror_verdict(
        _latest(e for e in mirrors if ids and _concerns(e.record, ids))
    )
    if group:
        # Each platform's audit is of its own image: one platform's pass is not another's.
        by_platform = {str(e.record.info.platform): _platform_ids(e) for e in group}
        for column, name in _COLUMNS:
            section[column] = {p: _status_of(candidates, name, i) for p, i in by_platform.items()}
        section["prepared_versions"] = {
            p: _prepared_versions(candidates, i) for p, i in by_platform.items()
        }
    else:
        for column, name in _COLUMNS:
            section[column] = _status_of(candidates, name, ids)
        section["prepared_versions"] = _prepared_versions(candidates, ids)
    pull = _latest(
        e for e in candidates if e.record.kind == "final-pull" and _concerns(e.record, ids)
    )
    if pull is None or not ids:
        section["final_pull"] = NOT_RECORDED
    else:
        d: FinalPullDetails = pull.record.info
        section["final_pull"] = {**_pull_entry(pull), "engine_version": d.engine_version}
    section["final_pulls"] = _final_pulls(candidates, ids)
    current = {e.record.seq for e in group} or ({build.record.seq} if build else set())
    section["investigations"] = _investigations(entries, current)
    return section


#: The kinds a plan's section reads besides its builds and pushes: a record of these kinds
#: counts for a plan when it names the plan's image or base (``_concerns``).
_ABOUT_IMAGES = tuple(spec.name for spec in KINDS if spec.about_images)
#: The columns of the newest verdict of a kind about the prepared image (each kind's spec).
_COLUMNS = tuple((spec.lock_column, spec.name) for spec in KINDS if spec.lock_column)


class _Current(CurrentBuild):
    """Pass one's answer for a plan (imagekit.ledger.accepted.CurrentBuild), and the names
    its image and base go by."""

    def identifiers(self) -> set[str]:
        """Every name the plan's image and its base may be called by in other records."""
        if self.build is None:
            return set()
        if self.platforms:
            entries = [*self.platforms, *([self.push] if self.push else [])]
            base, _prepared_doc, ids = _index_prepared(entries, self.platforms)
            return ids | _base_ids(base)
        entries = [self.build] + ([self.push] if self.push else [])
        base, _prepared_doc, ids = _prepared(entries, self.build)
        return ids | _identifiers(base.get("reference"), base.get("manifest_digest"))


def _kept(entry: Entry, current: _Current, names: set[str]) -> bool:
    """Whether a plan's section can show this record (pass two keeps nothing else)."""
    rec = entry.record
    if rec.kind in ("build", "rejected-build"):
        return True  # the current build, or an investigation
    if rec.kind == "push":
        return current.push is not None and rec.seq == current.push.record.seq
    if rec.kind in _ABOUT_IMAGES:
        return (bool(names) and _concerns(rec, names)) or kind(rec.kind).failed(rec.status)
    return False


@dataclass
class _Heads:
    """Pass one, watched as another reader goes through the lines (verify, in ``write_lock``):
    how many records, the last one, and each plan's newest build and its push."""

    current: dict[str, _Current] = field(default_factory=dict)
    records: int = 0
    last: Entry | None = None

    def watching(self, lines: Iterable[Line]) -> Iterator[Line]:
        for line in lines:
            if isinstance(line, Entry):
                self.records += 1
                self.last = line
                if line.record.plan is not None:
                    self.current.setdefault(line.record.plan, _Current()).feed(line)
            yield line


def render_lock(
    workspace: Workspace, lines: Callable[[], Iterable[Line]] | None = None
) -> dict[str, Any]:
    """The lock document for every plan that has records (of ``lines``, else read now).

    Records without a plan appear under a plan only when they name its images. Two passes
    over the same bytes (``lines`` is called once for each): the first finds each plan's
    newest build and its push, the second keeps only the records a section can show, so
    memory follows the size of the lock, not the ledger's length.
    """
    if lines is None:
        with passes(workspace.ledger_path) as again:
            return render_lock(workspace, again)
    heads = _Heads()
    for _line in heads.watching(lines()):
        pass
    return _render(workspace, heads, lines())


def _render(workspace: Workspace, heads: _Heads, lines: Iterable[Line]) -> dict[str, Any]:
    """Pass two: keep what each plan's section shows, then render the sections."""
    current, records, last = heads.current, heads.records, heads.last
    names = {plan: state.identifiers() for plan, state in current.items()}
    by_plan: dict[str, list[Entry]] = {plan: [] for plan in current}
    unplanned: dict[str, list[Entry]] = {plan: [] for plan in current}
    loose: dict[str, dict[str, Any]] = {}
    for line in lines:
        if not isinstance(line, Entry):
            continue
        plan = line.record.plan
        if plan is not None:
            if _kept(line, current[plan], names[plan]):
                by_plan[plan].append(line)
        elif line.record.kind in _ABOUT_IMAGES:
            claimed = False
            for other, ids in names.items():
                if ids and _concerns(line.record, ids):
                    unplanned[other].append(line)
                    claimed = True
            if not claimed:
                _add_loose(loose, line)
    try:
        ledger_name = workspace.ledger_path.resolve().relative_to(workspace.root.resolve())
        ledger_shown = ledger_name.as_posix()
    except ValueError:
        ledger_shown = workspace.ledger_path.name
    return {
        "schema": LOCK_SCHEMA,
        "ledger": {
            "path": ledger_shown,
            "records": records,
            "head_seq": last.record.seq if last else None,
            "head": last.digest if last else None,
        },
        "images": {plan: _render_plan(by_plan[plan], unplanned[plan]) for plan in sorted(by_plan)},
        "not_in_a_plan": {
            "why": NOT_IN_A_PLAN,
            "images": {image: loose[image] for image in sorted(loose)},
        },
    }


#: What the lock says of the images whose records name no plan.
NOT_IN_A_PLAN = (
    "records made without a plan (`imagekit audit REF`, `mirror`, `pull --record`, "
    "`gpu-preflight` without --plan) about images no plan built: the lock's `images` holds a "
    "plan's images only (manifests/NAME.yaml, then `imagekit build NAME`); here each such "
    "image's newest record of each kind"
)


def _add_loose(loose: dict[str, dict[str, Any]], entry: Entry) -> None:
    """Keep the newest record of each kind about an image that is in no plan (a record
    names its image first: ``image``, else ``destination``, else its first image)."""
    rec = entry.record
    images = rec.images
    name = images.get("image") or images.get("destination") or next(iter(images.values()), None)
    if name is None:
        return
    shown: dict[str, Any] = {"status": rec.status, **_ref(entry)}
    if kind(rec.kind).failed(rec.status):
        shown["reason"] = failure_reason(rec)
    loose.setdefault(str(name), {})[rec.kind] = shown


def encode_lock(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _refusal(report: VerifyReport) -> LedgerBroken:
    if report.first is None:
        return LedgerBroken(
            f"refusing to write a lock: the ledger {report.path} is empty, nothing verified",
            hint="a lock states what the ledger proves; record something first",
        )
    return LedgerBroken(
        f"refusing to write a lock: the ledger {report.path} does not verify "
        f"({len(report.problems)} problem(s)); first: {report.first.message}",
        hint="`imagekit ledger verify` lists them; a torn last line: `imagekit ledger repair`",
    )


def write_lock(workspace: Workspace, output: Path | None) -> LockResult:
    """Render the lock; write it to ``output`` (atomically, by rename) when one is given.

    A lock is a statement that the ledger verifies: it is rendered from the very bytes just
    verified, and refused (LedgerBroken) when they do not verify or hold no record.
    """
    with passes(workspace.ledger_path) as lines:
        heads = _Heads()  # the lock's first pass rides along with verify's
        report = verify_lines(workspace, workspace.ledger_path, heads.watching(lines()))
        if not report.ok:
            raise _refusal(report)
        document = _render(workspace, heads, lines())
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        temp = output.with_name(f".{output.name}.{utc_stamp()}.tmp")
        try:
            temp.write_bytes(encode_lock(document))
            temp.replace(output)
        finally:
            temp.unlink(missing_ok=True)  # an interrupt between the two leaves no stray file
    return LockResult(output, document, tuple(document["images"]))
