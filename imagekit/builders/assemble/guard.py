"""The overlay guard without a pull: what the base has at a path, from its layers' indexes.

An overlay says what it replaces: a file with this sha256, or nothing. The engine path checks
that inside the build, on the extracted base. Here the base is never extracted: it is read
through the image interface as its merged filesystem (imagekit.image.view: the OCI layer
rules, a layer read and indexed only when no layer above it decided, links followed as COPY
follows them), and each overlay's destination is resolved in it. ``absent`` is checked on
the path itself, as ``[ -e p ] || [ -L p ]`` does (a dangling link is present). A hard link
is the file it names: its content is checked, and the overlay replaces this name only. The
plan's rules about destinations hold for the path as it resolves: a base link that carries a
destination under /proc, /sys or /dev (or onto /etc/hosts) is refused, ``blocked``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagekit.image.index import IndexStore
from imagekit.image.remote import RegistryImage
from imagekit.image.view import BaseView, Found, LayerUse, LinkLoop, Resolution
from imagekit.plans.steps import Overlay, Step, runtime_mounted
from imagekit.registry import RegistryClient, ResolvedImage


@dataclass(frozen=True)
class OverlayCheck:
    """One overlay's guard: what was expected, what the base has, and where it is written."""

    step: int
    destination: str
    expected: str  # sha256:<hex> or absent
    found: str  # sha256:<hex>, absent, missing, directory, symlink:T, present (kind), ...
    verdict: str  # ok, drift, blocked
    resolution: Resolution
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def written(self) -> str:
        return "/" + self.resolution.path

    def marker(self) -> str:
        """The engine guard's grep-able words: path=... expected=... actual=..."""
        return f"path={self.destination} expected={self.expected} actual={self.found}"

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "destination": self.destination,
            "written": self.written,
            "expected": self.expected,
            "found": self.found,
            "verdict": self.verdict,
            "decided_by_layer": self.resolution.final.layer,
            "links_followed": [list(link) for link in self.resolution.links],
            "notes": list(self.notes),
        }


def check_overlay(view: BaseView, step: int, overlay: Overlay) -> OverlayCheck:
    """Check one overlay against the base, reading as few layers as decide it."""
    absent = bool(overlay.replaces.absent)
    expected = "absent" if absent else f"sha256:{overlay.replaces.sha256}"
    try:
        resolution = view.resolve(overlay.destination, follow_last=not absent)
        if view.unhashed(resolution.final):
            view.hash_everything()
            resolution = view.resolve(overlay.destination, follow_last=not absent)
    except LinkLoop as exc:
        here = Found(overlay.destination.strip("/"), None, None)
        loop = Resolution(here.path, here.path, here, (), (), ())
        return OverlayCheck(
            step, overlay.destination, expected, "symlink-loop", "blocked", loop, (exc.message,)
        )
    notes = [f"/{where} is a symbolic link to {target}" for where, target in resolution.links]
    if resolution.blocked is not None:
        blocked = resolution.blocked
        found = f"{blocked.describe()} at /{blocked.path}"
        notes.append(
            f"/{blocked.path} is not a folder in the base (found {blocked.describe()}), so "
            f"nothing can be written below it"
        )
        return OverlayCheck(
            step, overlay.destination, expected, found, "blocked", resolution, tuple(notes)
        )
    final = resolution.final
    refused = runtime_mounted("/" + resolution.path) if resolution.links else None
    if refused is not None:
        # The plan's path passed this rule; the base's links carry it where it does not.
        notes.append(f"/{resolution.path} {refused[0]}; {refused[1]}")
        return OverlayCheck(
            step,
            overlay.destination,
            expected,
            f"/{resolution.path}, which {refused[0].split(':')[0]}",
            "blocked",
            resolution,
            tuple(notes),
        )
    if absent:
        if final.exists:
            kind = final.describe()
            found = "present" if kind.startswith("sha256:") else f"present ({kind})"
            return OverlayCheck(
                step, overlay.destination, expected, found, "drift", resolution, tuple(notes)
            )
        return OverlayCheck(
            step, overlay.destination, expected, "absent", "ok", resolution, tuple(notes)
        )
    found = final.describe()
    if final.entry is not None and final.entry.kind == "hardlink":
        notes.append(
            f"/{final.path} is a hard link to /{final.entry.link}; the overlay replaces "
            f"/{final.path} only, /{final.entry.link} keeps its content"
        )
    verdict = "ok" if found == expected else "drift"
    return OverlayCheck(
        step, overlay.destination, expected, found, verdict, resolution, tuple(notes)
    )


def guard_overlays(
    client: RegistryClient,
    image: ResolvedImage,
    steps: Sequence[Step],
    store: IndexStore,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[tuple[OverlayCheck, ...], tuple[LayerUse, ...]]:
    """Every overlay of ``steps`` checked against ``image``; and how each layer was used.

    The one guard both callers use: the registry builder before it writes a layer, and a
    base bump (imagekit.builders.bump) before it proposes a new digest.
    """
    base = RegistryImage(client, image, str(image.reference))
    with BaseView(base, store, log=log) as view:
        view.wanted = frozenset(
            step.destination.strip("/") for step in steps if isinstance(step, Overlay)
        )
        checks = tuple(
            check_overlay(view, i, step)
            for i, step in enumerate(steps)
            if isinstance(step, Overlay)
        )
        return checks, tuple(view.uses)
