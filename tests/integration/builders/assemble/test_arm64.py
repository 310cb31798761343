"""A linux/arm64 image assembled on this amd64 machine, its assertions and audit emulated.

The base is an index (linux/amd64 and linux/arm64/v8) whose arm64 image is Debian's own
arm64 python3 plus a layer with a serving package in dist-packages, written into a real
registry. The plan has the shape of the H3 report's Dockerfile: four files laid over the
base (the patched module, guarded by its sha256, a launcher that becomes the ENTRYPOINT, a
shared shell library and a quantisation config). The assertions and the audit run through
qemu-user-static's binfmt handler, and every status says so.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from imagekit.audit.stage import AuditRequest, audit
from imagekit.builders.assemble import AssembleOptions, assemble_plan
from imagekit.cli.build_cmd import command as build_command
from imagekit.ledger import read_records
from imagekit.refs import parse_platform
from imagekit.runtime.engine import Engine, execution_for
from imagekit.workspace import Workspace
from tests.integration.builders.assemble.conftest import PlanWriter
from tests.support.demo_index import arm64_python_layer
from tests.support.images import Blob, M, Writer
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

SITE = "usr/local/lib/python3.11/dist-packages"
MODULE = f"{SITE}/fakeomni/models/transformer.py"
ORIGINAL = b"PATCHED = False\n\ndef forward(x):\n    return x\n"
PATCHED = b"PATCHED = True\n\ndef forward(x):\n    return x * 2\n"
LAUNCHER = b"""#!/usr/bin/python3
import sys
import fakeomni.models.transformer as t
print("fake-h3 launcher: patched" if t.PATCHED else "fake-h3 launcher: NOT patched")
sys.exit(0 if t.PATCHED else 1)
"""
PROFILE = b"""name: fake-h3
description: the generic checks without the video roundtrip (no PyAV in this base)
distributions: [pip]
required_distributions: []
modules: [fakeomni.models.transformer]
torch: {required: false, arches: []}
video: false
cli: []
model_sources: []
timeouts: {default: 300, record: 600}
"""


@pytest.fixture(scope="module")
def arm64_layer() -> Blob:
    return arm64_python_layer()


def _index_base(writer: Writer, python: Blob) -> str:
    serving = Blob.gzip(
        [
            M("usr/local/lib/python3.11", "dir"),
            M(SITE, "dir"),
            M(f"{SITE}/fakeomni", "dir"),
            M(f"{SITE}/fakeomni/__init__.py", data=b""),
            M(f"{SITE}/fakeomni/models", "dir"),
            M(f"{SITE}/fakeomni/models/__init__.py", data=b""),
            M(MODULE, data=ORIGINAL),
        ]
    )
    arm = writer.image(
        "imagekit-test/h3-base",
        "arm64",
        [python, serving],
        arch="arm64",
        variant="v8",
        config={"config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["python3"]}},
    )
    amd = writer.image("imagekit-test/h3-base", "amd64", [Blob.gzip([M("etc", "dir")])])
    return writer.index(
        "imagekit-test/h3-base", "multi", [(amd, "linux/amd64"), (arm, "linux/arm64/v8")]
    )


def _plan(write_plan: PlanWriter, base: str) -> str:
    def overlay(source: str, destination: str, **replaces: object) -> dict[str, object]:
        return {"kind": "overlay", "source": source, "destination": destination,
                "replaces": replaces}  # fmt: skip

    steps = [
        overlay("patches/transformer.py", f"/{MODULE}",
                sha256=hashlib.sha256(ORIGINAL).hexdigest()),
        overlay("start-fake-h3", "/usr/local/bin/start-fake-h3", absent=True),
        overlay("security-common.sh", "/usr/local/lib/fake-h3/security-common.sh", absent=True),
        overlay("fp8-quant.json", "/etc/fake-h3/fp8-quant.json", absent=True),
        {"kind": "entrypoint", "argv": ["/usr/local/bin/start-fake-h3"]},
    ]  # fmt: skip
    files: dict[str, bytes | tuple[bytes, int]] = {
        "patches/transformer.py": PATCHED,
        "start-fake-h3": (LAUNCHER, 0o755),
        "security-common.sh": b"# shared checks\n",
        "fp8-quant.json": b'{"quant": "fp8", "dynamic": true}\n',
        "fake-h3-profile.yaml": PROFILE,
    }
    return write_plan(
        "fake-h3",
        base,
        steps,
        files,
        platform="linux/arm64",
        epoch=1_700_000_000,
        assertions={
            "imports": ["fakeomni.models.transformer"],
            "commands": [
                {"argv": ["python3", "-c", "import fakeomni.models.transformer as t; "
                          "assert t.PATCHED and t.forward(2) == 4"]},
                {"argv": ["/usr/local/bin/start-fake-h3"], "exit_code": 0},
            ],
        },
        audit_profile="dockerfiles/fake-h3/fake-h3-profile.yaml",
    )  # fmt: skip


def test_an_arm64_image_from_an_index_base_with_four_overlays(
    engine: Engine,
    writer: Writer,
    registry: RunningRegistry,
    write_plan: PlanWriter,
    workspace: Workspace,
    cache_dir: Path,
    created_refs: list[str],
    arm64_layer: Blob,
) -> None:
    execution = execution_for(parse_platform("linux/arm64"))
    assert execution.how == "emulated", (
        f"this host cannot emulate arm64 ({execution.reason}); scripts/setup-host.sh "
        "installs qemu-user-static and registers its binfmt handlers"
    )
    base = _index_base(writer, arm64_layer)
    name = _plan(write_plan, base)
    repo = f"{registry.host}/imagekit-test/fake-h3"
    result = CliRunner().invoke(
        build_command,
        ["fake-h3", "--builder", "registry", "--push", repo, "--index", "--json"],
        env={"IMAGEKIT_CACHE_DIR": str(cache_dir)},
    )
    assert result.exit_code == 0, result.stderr[-3000:]
    built = json.loads(result.stdout)
    created_refs.append(built["pushed"])
    assert built["platform"] == "linux/arm64"
    assert [g["verdict"] for g in built["guard"]] == ["ok"] * 4
    assert built["guard"][0]["decided_by_layer"] == 1  # the serving layer; python not read
    assert [u["how"] for u in built["base_layers"]] == ["read", "read"]  # absent: all layers
    assertions = built["assertions"]
    assert assertions["status"] == "passed" and assertions["emulator"] == "qemu-aarch64"
    assert "emulated (qemu-aarch64)" in assertions["scope"]

    # The tag names an index holding the one arm64 manifest.
    tagged = writer.get_manifest("imagekit-test/fake-h3", built["tag"].rpartition(":")[2])
    index = json.loads(tagged.content)
    assert tagged.headers["Docker-Content-Digest"] == built["index_digest"]
    assert [(m["digest"], m["platform"]) for m in index["manifests"]] == [
        (built["manifest_digest"], {"architecture": "arm64", "os": "linux", "variant": "v8"})
    ]
    config = json.loads(writer.get_blob("imagekit-test/fake-h3", built["config_digest"]))
    assert config["architecture"] == "arm64" and config["variant"] == "v8"
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/start-fake-h3"]
    assert config["created"] == "2023-11-14T22:13:20Z"  # the plan's epoch

    # The launcher is the entrypoint, and it finds the patched module (emulated).
    run = subprocess.run(
        [engine.client_path, "run", "--rm", "--network", "none", "--platform", "linux/arm64",
         built["pushed"]],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout == "fake-h3 launcher: patched\n", run.stderr

    # The audit runs emulated and says so.
    audited = audit(workspace, AuditRequest(ref=built["pushed"], plan=name, offline=True))
    assert audited.verdict.status == "CPU_PASS", audited.to_json()["failing_checks"]
    assert "emulated (qemu-aarch64)" in audited.scope
    assert audited.report.platform.model_dump()["machine"] == "aarch64"
    records = read_records(workspace.ledger_path)
    scopes = {r.kind: r.scope for r in records}
    assert "emulated (qemu-aarch64)" in scopes["build"]
    assert "emulated (qemu-aarch64)" in scopes["audit"]

    # The same plan on the same base: the same digests (warm: no layer read).
    again = assemble_plan(
        workspace, name, AssembleOptions(push=repo, index=True, assertions=False,
                                         cache_dir=cache_dir),
    )  # fmt: skip
    assert again.manifest_digest == built["manifest_digest"]
    assert again.index_digest == built["index_digest"]
    assert [u.how for u in again.layers] == ["cached", "cached"]
    assert again.assertions.status == "NOT RUN" and "--no-assertions" in again.assertions.scope


def test_assertions_that_cannot_run_are_not_a_pass(
    writer: Writer,
    registry: RunningRegistry,
    write_plan: PlanWriter,
    workspace: Workspace,
    cache_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arm64_layer: Blob,
) -> None:
    base = _index_base(writer, arm64_layer)
    _plan(write_plan, base)
    # A host without qemu's handlers: an empty binfmt_misc.
    empty = tmp_path / "binfmt_misc"
    empty.mkdir()
    monkeypatch.setattr(
        "imagekit.builders.assemble.check.execution_for",
        lambda platform: execution_for(platform, binfmt_dir=empty),
    )
    repo = f"{registry.host}/imagekit-test/fake-h3-unchecked"
    result = CliRunner().invoke(
        build_command,
        ["fake-h3", "--builder", "registry", "--push", repo, "--tag", "v1", "--json"],
        env={"IMAGEKIT_CACHE_DIR": str(cache_dir)},
    )
    assert result.exit_code == 3, result.stderr[-2000:]
    error = json.loads(result.stdout)["error"]
    assert "assertions were NOT RUN" in error["message"]
    assert "no qemu-aarch64 binfmt_misc handler" in error["message"]
    assert "--no-assertions" in error["hint"]
    assert writer.get_manifest("imagekit-test/fake-h3-unchecked", "v1").status_code == 404
    records = read_records(workspace.ledger_path)
    assert [(r.kind, r.details["reason"]) for r in records] == [
        ("rejected-build", "assertions-not-run")
    ]
