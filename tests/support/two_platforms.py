"""A plan of two platforms on small bases written straight into a registry, for `plans bump`
and `plans pin-overlay` (tests/integration/plans/): each platform's image holds the file the
plan's one overlay replaces, so each platform's guard reads it."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from imagekit.cli.plans_cmd import command as plans_command
from imagekit.workspace import Workspace
from tests.support.images import Blob, M, Pushed, Writer

ORIGINAL = b"# about.py as the base ships it\nVERSION = '1'\n"
UPSTREAM_CHANGED = b"# about.py as a new upstream ships it\nVERSION = '2'\n"
DESTINATION = "/opt/app/about.py"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image(writer: Writer, repo: str, arch: str, about: bytes, extra: bytes = b"") -> Pushed:
    """A one-layer linux/ARCH image with ABOUT at DESTINATION (EXTRA: another file's bytes)."""
    files = [M(DESTINATION.lstrip("/"), data=about), M("opt/app/notes.txt", data=extra)]
    return writer.image(repo, f"{arch}-{secrets.token_hex(3)}", [Blob.gzip(files)], arch=arch)


def both(writer: Writer, repo: str, about: bytes = ORIGINAL) -> dict[str, Pushed]:
    """An amd64 and an arm64 image (as :func:`image` makes them), by architecture."""
    return {arch: image(writer, repo, arch, about) for arch in ("amd64", "arm64")}


def index(writer: Writer, repo: str, images: dict[str, Pushed], tag: str = "latest") -> str:
    """An index of linux/ARCH entries, tagged TAG; returns host/repo@digest."""
    return writer.index(repo, tag, [(img, f"linux/{arch}") for arch, img in images.items()])


def write_plan(ws: Workspace, name: str, reference: str, replaces: str | None = None) -> Path:
    """Plan NAME for linux/amd64 and linux/arm64 on REFERENCE, found as ``latest``, whose one
    overlay replaces REPLACES (a hex sha256; default ORIGINAL's)."""
    path = ws.plans_dir / f"{name}.yaml"
    path.write_text(
        f"# a plan of two platforms (its comments are kept)\n"
        f"name: {name}\n"
        "description: two platforms, one guarded overlay\n"
        "base:\n"
        f"  reference: {reference}\n"
        "  found_as: latest\n"
        "  platforms: [linux/amd64, linux/arm64]\n"
        "steps:\n"
        "  - kind: overlay\n"
        "    source: overlay/about.py\n"
        f"    destination: {DESTINATION}\n"
        "    replaces:\n"
        f"      sha256: '{replaces or sha256(ORIGINAL)}'\n"
    )
    overlay = ws.dockerfiles_dir / name / "overlay"
    overlay.mkdir(parents=True)
    (overlay / "about.py").write_bytes(b"VERSION = 'patched'\n")
    return path


@dataclass(frozen=True)
class PinnedPlan:
    """A plan written against a fresh index, as each test of bump and pin-overlay starts:
    the images by architecture, the index it pins, and its file with the text as written
    (what a test compares the file with after the command)."""

    images: dict[str, Pushed]
    reference: str
    path: Path
    text: str


def pinned_plan(
    writer: Writer,
    ws: Workspace,
    repo: str,
    name: str,
    images: dict[str, Pushed] | None = None,
    replaces: str | None = None,
) -> PinnedPlan:
    """Plan NAME (as :func:`write_plan` writes it, REPLACES its overlay's hash) on an index
    of IMAGES in REPO (default: :func:`both`), so the set-up is written once."""
    pushed = images if images is not None else both(writer, repo)
    reference = index(writer, repo, pushed)
    path = write_plan(ws, name, reference, replaces)
    return PinnedPlan(pushed, reference, path, path.read_text())


def plans_json(ws: Workspace, *args: str) -> tuple[int, dict[str, object]]:
    """``imagekit plans ARGS --json`` rooted at WS: its exit code and its document."""
    done = CliRunner().invoke(plans_command, [*args, "--json"], env={"IMAGEKIT_ROOT": str(ws.root)})
    return done.exit_code, json.loads(done.stdout)
