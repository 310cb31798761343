"""`plans pin-overlay`: fill a plan's expected overlay hashes from the base image itself.

Each overlay says what it replaces. Writing that hash by hand invites copying it from the wrong
image; here it is read from the pinned base: a container is created (never started, no
network) and the destination is copied out with ``docker cp``, so the bytes hashed are exactly
the bytes the build's guard will see. Overlays that must replace nothing are checked too.
A plan of several platforms is read from the registry instead, each platform's image with the
registry builder's guard (imagekit.builders.assemble.guard: nothing pulled, links followed as
COPY follows them); one ``replaces`` holds for every platform, so where the platforms' bases
differ at a destination nothing is pinned.

The plan file is rewritten in place, textually: only the 64-hex values of the overlays change,
comments and layout stay, and nothing is written unless every overlay could be pinned.
(For a file of an installed distribution, its RECORD line in ``*.dist-info`` carries the same
sha256 in urlsafe base64; the copied file is hashed directly, which also covers files no
RECORD lists.)
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from python_on_whales.exceptions import DockerException

from imagekit.builders.buildkit import ensure_base
from imagekit.builders.bump import guard_platforms
from imagekit.errors import CheckFailed, EngineUnavailable, PlanError
from imagekit.plans.load import load_plan, plan_path
from imagekit.plans.model import LoadedPlan
from imagekit.plans.steps import Overlay
from imagekit.registry import RegistryClient
from imagekit.runtime.engine import Engine, connect, engine_errors
from imagekit.workspace import Workspace


class PinStatus(StrEnum):
    UNCHANGED = "unchanged"  # the plan already pins the base's file
    UPDATED = "updated"  # the plan's hash was replaced by the base's
    OK = "ok"  # absent expected, and absent in the base
    DRIFT = "drift"  # absent expected but present in the base
    MISSING = "missing"  # a hash expected but no file in the base


@dataclass(frozen=True)
class PinnedOverlay:
    step: int
    destination: str
    expected: str  # "sha256:<hex>" or "absent"
    found: str  # "sha256:<hex>", "absent" or "present"
    status: PinStatus


@dataclass(frozen=True)
class PinReport:
    plan: str
    path: Path
    base: str
    overlays: tuple[PinnedOverlay, ...]
    rewritten: bool


class _NullLog:
    def write(self, text: str) -> None:
        pass


_NOT_A_FILE = b"\0imagekit: a link or a directory\0"


def _read_file(engine: Engine, container: str, path: str) -> bytes | None:
    """The file's bytes in the stopped container; None when nothing is there, and a marker
    when a link or directory is (the guard would hash a link's target: pin that file)."""
    with tempfile.TemporaryDirectory(prefix="imagekit-pin-") as tmp:
        target = Path(tmp) / "file"
        try:
            engine.client.container.copy((container, path), target)
        except DockerException as exc:
            text = (exc.stderr or "") + (exc.stdout or "")
            if "No such container:path" in text or "Could not find the file" in text:
                return None
            raise EngineUnavailable(
                f"copying {path} out of the base failed: {text.strip()}"
            ) from exc
        if target.is_symlink() or target.is_dir():
            return _NOT_A_FILE
        return target.read_bytes()


def pin_overlays(
    workspace: Workspace, name: str, *, base_override: str | None = None, write: bool = True
) -> PinReport:
    """Hash each overlay's destination in the base and rewrite the plan's expected hashes."""
    path = plan_path(workspace.plans_dir, name)
    loaded = load_plan(path, dockerfiles_dir=workspace.dockerfiles_dir, base_override=base_override)
    if not loaded.plan.overlays:
        return PinReport(loaded.name, path, str(loaded.base), (), rewritten=False)
    results = _from_registry(loaded) if loaded.multi_platform else _from_engine(loaded)
    bad = [r for r in results if r.status in (PinStatus.MISSING, PinStatus.DRIFT)]
    if bad:
        raise CheckFailed(
            "cannot pin: "
            + "; ".join(
                f"steps[{r.step}] {r.destination}: expected {r.expected}, base has {r.found}"
                for r in bad
            ),
            hint="fix the overlay's destination or its replaces: in the plan; nothing was written",
        )
    rewritten = False
    updates = [r for r in results if r.status is PinStatus.UPDATED]
    if updates and write:
        _rewrite(path, loaded.raw, updates)
        rewritten = True
    return PinReport(loaded.name, path, str(loaded.base), tuple(results), rewritten)


def _status(overlay: Overlay, step: int, found: str) -> PinnedOverlay:
    """One overlay's pin from what the base has at its destination (``sha256:<hex>``,
    ``absent``, or another word for what is there instead of a file)."""
    if overlay.replaces.absent:
        status = PinStatus.OK if found == "absent" else PinStatus.DRIFT
        shown = found if found == "absent" else "present"
        return PinnedOverlay(step, overlay.destination, "absent", shown, status)
    expected = f"sha256:{overlay.replaces.sha256}"
    if not found.startswith("sha256:"):
        status = PinStatus.MISSING
    else:
        status = PinStatus.UNCHANGED if found == expected else PinStatus.UPDATED
    return PinnedOverlay(step, overlay.destination, expected, found, status)


def _from_registry(loaded: LoadedPlan) -> list[PinnedOverlay]:
    """A plan of several platforms: each overlay's destination read in each platform's image
    from the registry, with the registry builder's guard (links followed as COPY follows
    them; nothing pulled). One ``replaces`` holds for every platform, so the platforms must
    have the same there; where they differ nothing is pinned."""
    with RegistryClient() as client:
        guarded = guard_platforms(client, loaded, loaded.base)
    found: dict[int, dict[str, str]] = {}
    for guard in guarded:
        for check in guard.checks:
            if check.verdict == "blocked":
                raise PlanError(
                    f"{check.destination} resolves in the {guard.platform} base to a path the "
                    f"runtime mounts over ({check.found})",
                    path=str(loaded.path),
                    key=f"steps[{check.step}].destination",
                    hint="overlay another path",
                )
            found.setdefault(check.step, {})[str(guard.platform)] = check.found
    results = []
    for index, step in enumerate(loaded.plan.steps):
        if not isinstance(step, Overlay):
            continue
        by_platform = found[index]
        if len(set(by_platform.values())) > 1:
            raise CheckFailed(
                f"cannot pin steps[{index}] {step.destination}: the platforms' bases differ "
                "there (" + "; ".join(f"{p} has {f}" for p, f in by_platform.items()) + "), "
                "and one replaces: must hold for each",
                hint="overlay a path that is the same in every platform's base, or build the "
                "platforms as plans of their own; nothing was written",
            )
        results.append(_status(step, index, next(iter(by_platform.values()))))
    return results


def _from_engine(loaded: LoadedPlan) -> list[PinnedOverlay]:
    """A plan of one platform: each destination copied out of a stopped container of the
    base in the engine and hashed, the bytes the build's guard will see."""
    path = loaded.path
    engine = connect()
    ensure_base(engine, loaded.base, loaded.plan.base.platform, _NullLog())
    results: list[PinnedOverlay] = []
    with engine_errors(f"creating a stopped container of {loaded.base}"):
        container = engine.client.container.create(
            str(loaded.base),
            command=["/nonexistent"],
            networks=["none"],
            labels={"io.imagekit.purpose": "pin-overlay"},
        )
    try:
        for index, step in enumerate(loaded.plan.steps):
            if not isinstance(step, Overlay):
                continue
            data = _read_file(engine, str(container.id), step.destination)
            if data is _NOT_A_FILE and not step.replaces.absent:
                raise PlanError(
                    f"{step.destination} is a link or a directory in the base, not a file",
                    path=str(path),
                    key=f"steps[{index}].destination",
                    hint="overlay the file a link points to",
                )
            found = "absent" if data is None else "sha256:" + hashlib.sha256(data).hexdigest()
            results.append(_status(step, index, found))
    finally:
        with engine_errors("removing the pin-overlay container"):
            engine.client.container.remove(container, force=True)
    return results


def _rewrite(path: Path, raw: bytes, updates: list[PinnedOverlay]) -> None:
    """Replace the old hex values in order of appearance, keeping every other byte."""
    text = raw.decode("utf-8")
    position = 0
    for update in updates:
        old = update.expected.removeprefix("sha256:")
        new = update.found.removeprefix("sha256:")
        at = text.find(old, position)
        if at < 0:
            raise PlanError(
                f"could not find the hash {old} of steps[{update.step}] in the file",
                path=str(path),
                key=f"steps[{update.step}].replaces.sha256",
            )
        text = text[:at] + new + text[at + len(old) :]
        position = at + len(new)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)
