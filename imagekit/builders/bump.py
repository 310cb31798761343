"""`imagekit plans bump`: move a plan's base to a new digest, only if its overlays still fit.

A new upstream digest is only half the news; the other half is whether the files the plan
patches are still the files it was written for. So a bump first checks every overlay guard
against the new base, with the registry builder's guard (imagekit.builders.assemble.guard: the
base's layers read from the top down through their cached indexes, never pulled), and
refuses with each drifted path and both hashes when one no longer holds. Only then is the
plan changed, and only in one place: the digest of ``base.reference``.

The plan is edited as text, where the round-trip YAML parser (ruamel.yaml) found that
value: even a round-trip dump re-flows lines it did not change (indentation of sequences,
quoting, long lines), and the change must read as one line in review, with every comment,
key and blank line kept. The new bytes are parsed and validated before they replace the
file, and must give the same plan but for that one value.

A plan whose rendered build context is committed (dockerfiles/NAME/Dockerfile) names its
base there too; the render is part of the proposal, so the change applies whole.
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from imagekit.builders.assemble.guard import OverlayCheck, guard_overlays
from imagekit.errors import CheckFailed, PlanError, UsageError
from imagekit.image.index import IndexStore
from imagekit.image.view import LayerUse
from imagekit.ledger.record import GuardReport
from imagekit.plans.load import load_plan, parse_plan, plan_path
from imagekit.plans.model import LoadedPlan
from imagekit.plans.render import DOCKERFILE, folder_changes, render, write_rendered
from imagekit.plans.upstream import TagState, UpstreamTag, watch_tag
from imagekit.refs import Digest, Platform, Reference, parse_reference
from imagekit.registry import RegistryClient, ResolvedImage
from imagekit.workspace import Workspace


class BumpStatus(StrEnum):
    CURRENT = "current"  # the plan already pins that digest; nothing to change
    BUMPED = "bumped"  # the plan (and its committed render) were rewritten
    PROPOSED = "proposed"  # the change was worked out and not written (--dry-run)


@dataclass(frozen=True)
class GuardedBase:
    """A candidate base and every overlay guard checked against it (for a plan of several
    platforms, one platform's image, named in ``platform``)."""

    image: ResolvedImage
    checks: tuple[OverlayCheck, ...]
    layers: tuple[LayerUse, ...]
    platform: Platform | None = None

    @property
    def drifted(self) -> tuple[OverlayCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def report(self) -> GuardReport:
        return GuardReport.model_validate(
            {
                "checks": [c.to_json() for c in self.checks],
                "base_layers": [u.to_json() for u in self.layers],
            }
        )

    def drift_lines(self) -> list[str]:
        """One line a drifted overlay: the path, what the plan expects, what the base has."""
        on = f" for {self.platform}" if self.platform is not None else ""
        return [
            f"steps[{c.step}] {c.destination}: the plan expects {c.expected}, the new base{on} "
            f"has {c.found} ({c.verdict})"
            for c in self.drifted
        ]


class BaseDrift(CheckFailed):
    """The new base no longer has what an overlay was written for; nothing was changed."""

    def __init__(self, message: str, *, guards: tuple[GuardedBase, ...], hint: str) -> None:
        super().__init__(message, hint=hint)
        self.guards = guards

    @property
    def checks(self) -> tuple[OverlayCheck, ...]:
        return tuple(c for guard in self.guards for c in guard.drifted)

    def fields(self) -> dict[str, Any]:
        return {
            "drifted": [
                {
                    "step": c.step,
                    "path": c.destination,
                    "expected": c.expected,
                    "found": c.found,
                    **({"platform": str(g.platform)} if g.platform is not None else {}),
                }
                for g in self.guards
                for c in g.drifted
            ]
        }


def guard_base(
    client: RegistryClient,
    loaded: LoadedPlan,
    base: Reference,
    *,
    cache_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> GuardedBase:
    """Resolve ``base`` for the plan's platform and check every overlay guard against it."""
    image = client.resolve(base, loaded.platform)
    checks, uses = guard_overlays(client, image, loaded.plan.steps, IndexStore(cache_dir), log=log)
    return GuardedBase(image, checks, uses)


def guard_platforms(
    client: RegistryClient,
    loaded: LoadedPlan,
    base: Reference,
    *,
    cache_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[GuardedBase, ...]:
    """Every overlay guard against ``base``: for the plan's one platform, or against each
    platform's image of a plan of several (an overlay must fit every image it lands in)."""
    if not loaded.multi_platform:
        return (guard_base(client, loaded, base, cache_dir=cache_dir, log=log),)
    store = IndexStore(cache_dir)
    guarded = []
    for platform in loaded.platforms:
        image = client.resolve(base, platform)
        checks, uses = guard_overlays(client, image, loaded.plan.steps, store, log=log)
        guarded.append(GuardedBase(image, checks, uses, platform))
    return tuple(guarded)


@dataclass(frozen=True)
class FileChange:
    """One file of a proposal: where it lives, its bytes before and after, their diff;
    ``removed`` when the file goes (a file the render no longer produces; ``after`` empty)."""

    path: Path
    shown_as: str  # the path in the diff's headers, relative to the project
    before: bytes | None
    after: bytes
    diff: str
    removed: bool = False


@dataclass(frozen=True)
class Proposal:
    """The change that moves a plan to a new base digest, as unified diffs and new bytes."""

    plan: str
    old_reference: str
    new_reference: str
    plan_file: FileChange
    rendered: tuple[FileChange, ...]
    notes: tuple[str, ...] = ()

    @property
    def plan_diff(self) -> str:
        """The diff of manifests/NAME.yaml alone: one line out, one line in."""
        return self.plan_file.diff

    @property
    def patch(self) -> str:
        """Every file's diff, the plan first: what `git apply` takes in the project root."""
        return self.plan_file.diff + "".join(f.diff for f in self.rendered)

    def write(self, workspace: Workspace) -> tuple[Path, ...]:
        """Replace the plan file, then re-render the plan's committed build context.

        A plan file that is a symbolic link is written through to the file it names (the
        link stays a link: replacing it with a copy would silently fork a shared plan), and
        that file is what is returned as written.
        """
        written = _link_target(self.plan_file.path)
        _replace(written, self.plan_file.after)
        if not self.rendered:
            return (written,)
        loaded = load_plan(self.plan_file.path, dockerfiles_dir=workspace.dockerfiles_dir)
        write_rendered(loaded)
        return (written, *(f.path for f in self.rendered))

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "old_reference": self.old_reference,
            "new_reference": self.new_reference,
            "plan_diff": self.plan_diff,
            "files": [self.plan_file.shown_as, *(f.shown_as for f in self.rendered)],
            "patch": self.patch,
            "notes": list(self.notes),
        }


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` over ``path`` atomically, keeping its permission bits."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def _link_target(path: Path) -> Path:
    """The file ``path`` names, through every symbolic link (itself when it is none)."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # a loop, or a link whose target went away
        raise PlanError(
            f"{path} cannot be followed to a file: {exc}",
            path=str(path),
            hint="nothing was written; point the link at the plan file, or replace it with "
            "the file",
        ) from exc


def _shown(workspace: Workspace, path: Path) -> str:
    """The path as the project names it (a link as the link, not as its target)."""
    try:
        return (path.parent.resolve() / path.name).relative_to(workspace.root.resolve()).as_posix()
    except ValueError:
        return path.name


def _diff(shown_as: str, before: bytes | None, after: bytes | None) -> str:
    old = before.decode("utf-8").splitlines(keepends=True) if before is not None else []
    new = after.decode("utf-8").splitlines(keepends=True) if after is not None else []
    lines = difflib.unified_diff(
        old,
        new,
        fromfile=f"a/{shown_as}" if before is not None else "/dev/null",
        tofile=f"b/{shown_as}" if after is not None else "/dev/null",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)  # fmt: skip


def rebased_text(loaded: LoadedPlan, digest: Digest) -> tuple[bytes, str]:
    """The plan file's bytes with ``base.reference`` pinned to ``digest``; and the new value.

    Every other byte is kept. Raises PlanError when the value is not written where and as
    the parser says (a multi-line or escaped scalar), so nothing is guessed.
    """
    path = loaded.path
    text = loaded.raw.decode("utf-8")
    try:
        document = YAML(typ="rt").load(text)
    except YAMLError as exc:
        raise PlanError(
            f"the round-trip YAML parser refuses the plan: {exc}", path=str(path)
        ) from exc
    base = document.get("base") if isinstance(document, CommentedMap) else None
    if not isinstance(base, CommentedMap) or "reference" not in base:
        raise PlanError("no base.reference to rewrite", path=str(path), key="base.reference")
    line, column = base.lc.value("reference")
    old = loaded.plan.base.reference
    lines = text.splitlines(keepends=True)
    current = lines[line]
    start = column + (1 if current[column : column + 1] in ("'", '"') else 0)
    if current[start : start + len(old)] != old:
        raise PlanError(
            "base.reference is not written on one line where the YAML parser found it, so it "
            "cannot be rewritten alone",
            path=str(path),
            key="base.reference",
            hint="write the reference on one line (plain or quoted), then bump again",
        )
    new = old[: old.rindex("@") + 1] + str(digest)
    lines[line] = current[:start] + new + current[start + len(old) :]
    return "".join(lines).encode("utf-8"), new


def propose(workspace: Workspace, loaded: LoadedPlan, digest: Digest) -> Proposal:
    """Work out the plan change that pins ``digest``; checked, never written here."""
    after, new_reference = rebased_text(loaded, digest)
    reloaded = parse_plan(after, loaded.path, dockerfiles_dir=workspace.dockerfiles_dir)
    expected = loaded.plan.model_copy(
        update={"base": loaded.plan.base.model_copy(update={"reference": new_reference})}
    )
    shown = _shown(workspace, loaded.path)
    diff = _diff(shown, loaded.raw, after)
    changed = [line for line in diff.splitlines()[2:] if line[:1] in ("+", "-")]
    if reloaded.plan != expected or len(changed) != 2:
        raise PlanError(  # a bug in the edit above, never the user's: nothing is written
            f"the edit of base.reference changed more than that value ({len(changed)} lines)",
            path=str(loaded.path),
            hint="nothing was written; edit the digest by hand and report this",
        )
    plan_file = FileChange(loaded.path, shown, loaded.raw, after, diff)
    rendered: list[FileChange] = []
    if (loaded.overlay_dir / DOCKERFILE).exists():
        # Each file the render changes, and each it no longer renders (removed on write).
        for name, data in folder_changes(render(reloaded), loaded.overlay_dir).items():
            target = loaded.overlay_dir / name
            before = target.read_bytes() if target.exists() else None
            where = _shown(workspace, target)
            diff = _diff(where, before, data)
            rendered.append(FileChange(target, where, before, data or b"", diff, data is None))
    notes: list[str] = []
    if loaded.path.is_symlink():
        notes.append(
            f"{shown} is a symbolic link to {_link_target(loaded.path)}: the change is written "
            "through to that file, and the link is kept"
        )
    if loaded.base_overridden and loaded.base.name != parse_reference(new_reference).name:
        notes.append(
            f"the digest was read in {loaded.base.name} (the --base override); the plan names "
            f"{parse_reference(new_reference).name}: pin it only if that repository serves the "
            "same digest (a mirror that copies by digest does)"
        )
    return Proposal(
        loaded.name, loaded.plan.base.reference, new_reference, plan_file, tuple(rendered),
        tuple(notes),
    )  # fmt: skip


@dataclass(frozen=True)
class BumpResult:
    plan: str
    path: Path
    status: BumpStatus
    old_reference: str
    new_reference: str | None
    upstream: UpstreamTag | None
    #: the guards checked: one, or one a platform for a plan of several; empty when current
    guards: tuple[GuardedBase, ...]
    proposal: Proposal | None
    written: tuple[Path, ...] = ()

    @property
    def guard(self) -> GuardedBase | None:
        """The one platform's guard (None for a plan of several: see ``guards``)."""
        return self.guards[0] if len(self.guards) == 1 and self.guards[0].platform is None else None

    def to_json(self) -> dict[str, Any]:
        by_platform = {str(g.platform): g.report().to_json() for g in self.guards if g.platform}
        return {
            "plan": self.plan,
            "path": str(self.path),
            "status": self.status,
            "old_reference": self.old_reference,
            "new_reference": self.new_reference,
            "upstream": self.upstream.to_json() if self.upstream else None,
            "guard": self.guard.report().to_json() if self.guard else None,
            **({"guards": by_platform} if by_platform else {}),
            "proposal": self.proposal.to_json() if self.proposal else None,
            "written": [str(p) for p in self.written],
        }


def _target_digest(loaded: LoadedPlan, to: str) -> Digest:
    """--to: a digest, or REPO@digest of the base's own repository."""
    if "@" not in to:
        return Digest(to)
    ref = parse_reference(to)
    if ref.name != loaded.base.name or ref.digest is None:
        raise UsageError(
            f"--to {to} is not a digest of {loaded.base.name}, the plan's base",
            hint="give the digest alone (sha256:...) or REPO@sha256:... of that repository",
        )
    return ref.digest


def bump_plan(
    workspace: Workspace,
    name: str,
    *,
    to: str | None = None,
    base_override: str | None = None,
    write: bool = True,
    client: RegistryClient | None = None,
    cache_dir: Path | None = None,
    echo: TextIO | None = None,
) -> BumpResult:
    """Pin plan ``name`` to what its ``found_as`` serves now (or to ``to``), guards first.

    Raises BaseDrift (exit 1) naming every overlay the new base breaks, CheckFailed (exit 1)
    when the tag is gone, UsageError (exit 2) for a plan without ``found_as`` and no ``to``,
    and the registry's errors (exit 3) when it cannot be asked.
    """
    echo = echo or sys.stderr
    path = plan_path(workspace.plans_dir, name)
    loaded = load_plan(path, dockerfiles_dir=workspace.dockerfiles_dir, base_override=base_override)
    own = client is None
    client = client or RegistryClient()
    try:
        upstream: UpstreamTag | None = None
        if to is not None:
            digest = _target_digest(loaded, to)
        else:
            upstream = watch_tag(client, loaded)
            echo.write(f"imagekit: {upstream.detail}\n")
            if upstream.state is TagState.GONE:
                raise CheckFailed(
                    f"cannot bump {name}: {upstream.detail}",
                    hint="the tag was deleted or renamed upstream: find the new tag, put it "
                    "in base.found_as, or give the digest with --to",
                )
            if upstream.state is TagState.CURRENT or upstream.served is None:
                return BumpResult(
                    name, path, BumpStatus.CURRENT, loaded.plan.base.reference, None, upstream,
                    (), None,
                )  # fmt: skip
            digest = upstream.served
        if digest == loaded.base.digest:
            return BumpResult(
                name, path, BumpStatus.CURRENT, loaded.plan.base.reference, None, upstream,
                (), None,
            )  # fmt: skip
        guarded = guard_platforms(
            client,
            loaded,
            loaded.base.pinned_only(digest),
            cache_dir=cache_dir,
            log=lambda line: print(f"imagekit: {line}", file=echo, flush=True),
        )
    finally:
        if own:
            client.close()
    drifted = [g for g in guarded if g.drifted]
    if drifted:
        lines = [line for g in drifted for line in g.drift_lines()]
        raise BaseDrift(
            f"cannot bump {name} to {digest}: the new base breaks "
            f"{len(lines)} overlay guard(s): " + "; ".join(lines),
            guards=tuple(drifted),
            hint="nothing was written; review the upstream change, then re-pin the overlay "
            "(`imagekit plans pin-overlay NAME --base REPO@DIGEST`) or keep the old base",
        )
    proposal = propose(workspace, loaded, digest)
    written = proposal.write(workspace) if write else ()
    status = BumpStatus.BUMPED if write else BumpStatus.PROPOSED
    return BumpResult(
        name, path, status, loaded.plan.base.reference, proposal.new_reference, upstream,
        guarded, proposal, written,
    )  # fmt: skip
