"""The public face: the names ``import imagekit`` offers, loaded lazily, and their shapes.

A script depends on exactly these: a name added, removed or renamed, or a signature changed,
must fail here first and be a decision (docs/API.md follows).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import imagekit
from imagekit.errors import CheckFailed, CouldNotFinish, ReferenceFormatError, UsageError

PUBLIC = [
    "AuditRequest",
    "AuditResult",
    "AuditStatus",
    "AuditTimeout",
    "BuildFailed",
    "BuildOptions",
    "BuiltImage",
    "CheckFailed",
    "CouldNotFinish",
    "Expectations",
    "GateResult",
    "GpuPreflightStatus",
    "ImagekitError",
    "Ledger",
    "LedgerRecord",
    "LoadedPlan",
    "MirrorOptions",
    "MirrorReport",
    "MirrorVerdict",
    "Platform",
    "PreflightRequest",
    "PreflightResult",
    "ProbeOptions",
    "PullResult",
    "RecordRefused",
    "ResolvedImage",
    "UsageError",
    "VerifyReport",
    "Workspace",
    "__version__",
    "audit_image",
    "build_image",
    "final_pull",
    "gpu_preflight",
    "inspect_image",
    "load_plan",
    "verify_image",
    "verify_mirror",
]

SIGNATURES = {
    "audit_image": "(reference: 'str', options: 'AuditRequest | None' = None, workspace: "
    "'Workspace | None' = None, *, platform: 'str | Platform | None' = None) -> 'AuditResult'",
    "build_image": "(name: 'str', options: 'BuildOptions | None' = None, workspace: "
    "'Workspace | None' = None) -> 'BuiltImage'",
    "final_pull": "(reference: 'str', workspace: 'Workspace | None' = None, *, expect_digest: "
    "'str | None' = None, record: 'bool' = True, plan: 'str | None' = None, where: "
    "'str | None' = None) -> 'PullResult'",
    "inspect_image": "(reference: 'str', *, platform: 'str | Platform | None' = None) -> "
    "'ResolvedImage'",
    "load_plan": "(name: 'str', workspace: 'Workspace | None' = None, *, base: "
    "'str | None' = None) -> 'LoadedPlan'",
    "verify_mirror": "(source: 'str', destination: 'str', options: 'MirrorOptions | None' = "
    "None, workspace: 'Workspace | None' = None, *, platform: 'str | Platform | None' = None, "
    "record: 'bool' = True) -> 'MirrorReport'",
    "gpu_preflight": "(reference: 'str | None', options: 'PreflightRequest | None' = None, "
    "workspace: 'Workspace | None' = None, *, record: 'bool' = True) -> 'PreflightResult'",
    "verify_image": "(reference: 'str', key_paths: 'Sequence[Path]', policy_path: 'Path | None' "
    "= None, *, insecure: 'Sequence[str]' = (), now: 'datetime | None' = None) -> 'GateResult'",
    "Ledger": "(workspace: 'Workspace | None' = None) -> 'None'",
    "Ledger.append": "(self, kind: 'str', *, status: 'str', scope: 'str', images: "
    "'dict[str, str] | None' = None, plan: 'str | None' = None, evidence: 'Path | None' = "
    "None, details: 'RecordDetails | dict[str, Any] | None' = None) -> 'LedgerRecord'",
    "Ledger.records": "(self) -> 'list[LedgerRecord]'",
    "Ledger.verify": "(self, *, head: 'str | None' = None, lock: 'Path | None' = None) -> "
    "'VerifyReport'",
    "Ledger.lock": "(self, output: 'Path | None' = None) -> 'LockResult'",
    "Ledger.repair": "(self) -> 'RepairReport'",
    "Workspace.at": "(root: 'Path') -> 'Workspace'",
}

# Every result a public call returns says whether it passed, with the CLI's exit code, and
# is its own JSON document.
RESULTS = [
    "AuditResult",
    "PreflightResult",
    "GateResult",
    "MirrorReport",
    "PullResult",
    "ResolvedImage",
    "VerifyReport",
    "BuiltImage",
]


def test_all_is_pinned() -> None:
    assert imagekit.__all__ == PUBLIC


def test_every_public_name_loads_and_dir_lists_it() -> None:
    for name in PUBLIC:
        assert getattr(imagekit, name) is not None, name
    assert set(PUBLIC) <= set(dir(imagekit))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'audit_images'"):
        imagekit.audit_images  # type: ignore[attr-defined]  # noqa: B018 - the lookup is the test


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_public_signatures(name: str) -> None:
    owner, _, attribute = name.partition(".")
    target = getattr(imagekit, owner)
    if attribute:
        target = getattr(target, attribute)
    assert str(inspect.signature(target)) == SIGNATURES[name]


@pytest.mark.parametrize("name", RESULTS)
def test_every_result_has_ok_exit_code_and_to_json(name: str) -> None:
    cls = getattr(imagekit, name)
    for member in ("ok", "exit_code", "to_json"):
        assert hasattr(cls, member), f"{name}.{member}"


def test_both_builders_results_are_built_images() -> None:
    from imagekit.builders.assemble import AssembleResult
    from imagekit.builders.buildkit import BuildResult

    # mypy holds the types (imagekit.api.build_image returns either as a BuiltImage); this
    # holds the names, for a member added to the protocol and to one builder only.
    members = [m for m in vars(imagekit.BuiltImage) if not m.startswith("_")]
    assert "pushed" in members and "to_json" in members
    for cls in (BuildResult, AssembleResult):
        missing = [m for m in members if not _declares(cls, m)]
        assert not missing, f"{cls.__name__} lacks {missing}"


def _declares(cls: type, member: str) -> bool:
    return hasattr(cls, member) or member in getattr(cls, "__dataclass_fields__", {})


def test_the_errors_are_the_tree_and_give_the_exit_codes() -> None:
    assert imagekit.UsageError is UsageError and UsageError.exit_code == 2
    assert issubclass(imagekit.BuildFailed, CheckFailed) and imagekit.BuildFailed.exit_code == 1
    assert issubclass(imagekit.AuditTimeout, CouldNotFinish)
    assert issubclass(imagekit.RecordRefused, CheckFailed)
    assert issubclass(imagekit.CheckFailed, imagekit.ImagekitError)


def test_import_imagekit_loads_no_stage_module() -> None:
    code = (
        "import sys, imagekit; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'imagekit')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["imagekit", "imagekit.lazy", "imagekit.version"]


def test_a_malformed_reference_or_platform_is_bad_input_before_any_request(
    tmp_path: Path,
) -> None:
    ws = imagekit.Workspace.at(tmp_path)
    # Nothing listens on port 1: a request would be a CouldNotFinish, not a UsageError.
    with pytest.raises(ReferenceFormatError):
        imagekit.verify_mirror("127.0.0.1:1/Bad Name:x", "127.0.0.1:1/ok:y", workspace=ws)
    with pytest.raises(ReferenceFormatError):
        imagekit.verify_mirror("127.0.0.1:1/a:x", "127.0.0.1:1/b:y", workspace=ws, platform="x")
    with pytest.raises(ReferenceFormatError):
        imagekit.inspect_image("127.0.0.1:1/UPPER:x")
    assert not ws.ledger_path.exists() and not any(tmp_path.iterdir())


def test_a_platform_is_a_string_or_a_platform() -> None:
    from imagekit.api import _platform

    given = imagekit.Platform("linux", "arm64", "v8")
    assert _platform(given) is given
    assert _platform("linux/arm64/v8") == given
    assert _platform(None) is None
