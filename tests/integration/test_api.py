"""docs/API.md's examples, run as written against the real engine and registry.

Each ```python block under a "## " heading of the page runs in a fresh namespace, in the
test's workspace (the ``workspace`` fixture points IMAGEKIT_* there, which is what
``workspace=None`` reads), with the page's example references replaced by real ones. The
test then checks what the example did beyond its own asserts: the records and evidence.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from imagekit.ledger import read_records
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.registries import RunningRegistry
from tests.support.tiny_image import TinyImage

pytestmark = pytest.mark.integration

PAGE = Path(__file__).resolve().parents[2] / "docs" / "API.md"
IMAGE = "registry.example.com/team/app:1.0"
MIRROR = "mirror.example.com/team/app:1.0"
PUSH_REPO = "registry.example.com/team/app"


def examples() -> dict[str, str]:
    """The page's python blocks by the heading above them."""
    found: dict[str, str] = {}
    heading = ""
    for part in re.split(r"^(## .*)$", PAGE.read_text(), flags=re.M):
        if part.startswith("## "):
            heading = part[3:].strip()
        for block in re.findall(r"^```python\n(.*?)^```$", part, flags=re.M | re.S):
            found[heading] = block
    return found


def run_example(heading: str, replacements: dict[str, str]) -> dict[str, object]:
    code = examples()[heading]
    for placeholder, value in replacements.items():
        assert placeholder in code, f"{heading}: the example no longer names {placeholder}"
        code = code.replace(placeholder, value)
    namespace: dict[str, object] = {"__name__": "example"}
    exec(compile(code, f"docs/API.md ({heading})", "exec"), namespace)  # noqa: S102
    return namespace


def test_the_page_has_the_five_examples() -> None:
    assert set(examples()) == {
        "Audit an image",
        "Preflight the GPUs",
        "Verify a mirror",
        "Append and verify",
        "Build a plan",
    }


def test_audit_an_image(workspace: Workspace, base_image: BaseImage) -> None:
    run_example("Audit an image", {IMAGE: base_image.reference})
    assert [(r.kind, r.status) for r in read_records(workspace.ledger_path)] == [
        ("audit", "CPU_PASS"),
        ("vulnerability-scan", "skipped"),
    ]


def test_preflight_the_gpus(workspace: Workspace, base_image: BaseImage) -> None:
    """No GPU here: the example's call comes back INCOMPLETE, no GPU visible, recorded."""
    done = run_example("Preflight the GPUs", {IMAGE: base_image.reference})
    result = done["result"]
    assert result.status == "GPU_PREFLIGHT_INCOMPLETE"  # type: ignore[attr-defined]
    assert "no GPU visible" in result.verdict.sentence  # type: ignore[attr-defined]
    (record,) = read_records(workspace.ledger_path)
    assert (record.kind, record.status) == ("gpu-preflight", "GPU_PREFLIGHT_INCOMPLETE")


def test_verify_a_mirror(
    workspace: Workspace, tiny_image: TinyImage, registry: RunningRegistry
) -> None:
    source = f"{tiny_image.repository}:{tiny_image.tag}"
    copy = f"{tiny_image.repository}-mirror:{tiny_image.tag}"
    done = run_example("Verify a mirror", {IMAGE: source, MIRROR: copy})
    report = done["report"]
    assert report.verdict == "identical"  # type: ignore[attr-defined]
    (record,) = read_records(workspace.ledger_path)
    assert record.kind == "mirror-verify" and record.status == "identical"
    # Both pinned to the manifest the copy made: identical means the same digest.
    assert record.images == {
        "source": f"{tiny_image.repository}@{tiny_image.digest}",
        "destination": f"{copy.rpartition(':')[0]}@{tiny_image.digest}",
    }


def test_append_and_verify(workspace: Workspace) -> None:
    done = run_example("Append and verify", {})
    (record,) = read_records(workspace.ledger_path)
    assert record.kind == "note" and record.images == {"image": IMAGE}
    assert done["report"].head is not None  # type: ignore[attr-defined]


def test_build_a_plan(
    workspace: Workspace,
    tiny_image: TinyImage,
    registry: RunningRegistry,
) -> None:
    folder = workspace.dockerfiles_dir / "app"
    folder.mkdir(parents=True)
    (folder / "app.conf").write_bytes(b"mode = serve\n")
    plan = {
        "name": "app",
        "base": {"reference": tiny_image.pinned, "platform": "linux/amd64"},
        "steps": [
            {
                "kind": "overlay",
                "source": "app.conf",
                "destination": "/etc/app.conf",
                "replaces": {"absent": True},
            },
            {"kind": "env", "vars": {"APP_MODE": "serve"}},
        ],
    }
    (workspace.plans_dir / "app.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    repo = f"{registry.host}/imagekit-test/api-app"
    done = run_example("Build a plan", {PUSH_REPO: repo})
    built = done["built"]
    assert built.builder == "registry"  # type: ignore[attr-defined]
    assert built.pushed.startswith(f"{repo}@sha256:")  # type: ignore[attr-defined]
    assert [r.kind for r in read_records(workspace.ledger_path)] == ["build", "push"]
