"""imagekit: build, audit, mirror and record the container images that serve large models.

The public face: the names in ``__all__``, each loaded on first use (PEP 562), so that
``import imagekit`` (and so the CLI's start-up) loads no stage. docs/API.md shows each with
an example; everything else under ``imagekit.`` is internal and may move.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from imagekit.version import __version__

__all__ = [
    "AuditRequest",
    "AuditResult",
    "AuditStatus",
    "AuditTimeout",
    "BuildFailed",
    "BuildOptions",
    "BuiltImage",
    "CheckFailed",
    "CouldNotFinish",
    "ImagekitError",
    "GateResult",
    "Ledger",
    "LedgerRecord",
    "LoadedPlan",
    "MirrorOptions",
    "MirrorReport",
    "MirrorVerdict",
    "Platform",
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
    "inspect_image",
    "load_plan",
    "verify_image",
    "verify_mirror",
]

# Public name -> (module, its name there).
_WHERE: dict[str, tuple[str, str]] = {
    # the calls
    "audit_image": ("imagekit.api", "audit_image"),
    "build_image": ("imagekit.api", "build_image"),
    "final_pull": ("imagekit.api", "final_pull"),
    "inspect_image": ("imagekit.api", "inspect_image"),
    "load_plan": ("imagekit.api", "load_plan"),
    "verify_mirror": ("imagekit.api", "verify_mirror"),
    "verify_image": ("imagekit.attest.gate", "verify_image"),
    "Ledger": ("imagekit.ledger.ledger", "Ledger"),
    "Workspace": ("imagekit.workspace", "Workspace"),
    # their options and results
    "AuditRequest": ("imagekit.audit.stage", "AuditRequest"),
    "AuditResult": ("imagekit.audit.stage", "AuditResult"),
    "AuditStatus": ("imagekit.audit.report", "AuditStatus"),
    "BuildOptions": ("imagekit.build.options", "BuildOptions"),
    "BuiltImage": ("imagekit.build.built", "BuiltImage"),
    "GateResult": ("imagekit.attest.gate", "GateResult"),
    "LedgerRecord": ("imagekit.ledger.record", "LedgerRecord"),
    "LoadedPlan": ("imagekit.plans.model", "LoadedPlan"),
    "MirrorOptions": ("imagekit.mirror", "MirrorOptions"),
    "MirrorReport": ("imagekit.mirror", "MirrorReport"),
    "MirrorVerdict": ("imagekit.mirror", "Verdict"),
    "Platform": ("imagekit.refs", "Platform"),
    "PullResult": ("imagekit.pull", "PullResult"),
    "ResolvedImage": ("imagekit.registry.resolve", "ResolvedImage"),
    "VerifyReport": ("imagekit.ledger.verify", "VerifyReport"),
    # the errors (imagekit/errors.py: the class gives the exit code)
    "AuditTimeout": ("imagekit.errors", "AuditTimeout"),
    "BuildFailed": ("imagekit.errors", "BuildFailed"),
    "CheckFailed": ("imagekit.errors", "CheckFailed"),
    "CouldNotFinish": ("imagekit.errors", "CouldNotFinish"),
    "ImagekitError": ("imagekit.errors", "ImagekitError"),
    "RecordRefused": ("imagekit.errors", "RecordRefused"),
    "UsageError": ("imagekit.errors", "UsageError"),
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'imagekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and editors see; nothing of this runs
    from imagekit.api import (
        audit_image,
        build_image,
        final_pull,
        inspect_image,
        load_plan,
        verify_mirror,
    )
    from imagekit.attest.gate import GateResult, verify_image
    from imagekit.audit.report import AuditStatus
    from imagekit.audit.stage import AuditRequest, AuditResult
    from imagekit.build.built import BuiltImage
    from imagekit.build.options import BuildOptions
    from imagekit.errors import (
        AuditTimeout,
        BuildFailed,
        CheckFailed,
        CouldNotFinish,
        ImagekitError,
        RecordRefused,
        UsageError,
    )
    from imagekit.ledger.ledger import Ledger
    from imagekit.ledger.record import LedgerRecord
    from imagekit.ledger.verify import VerifyReport
    from imagekit.mirror import MirrorOptions, MirrorReport
    from imagekit.mirror import Verdict as MirrorVerdict
    from imagekit.plans.model import LoadedPlan
    from imagekit.pull import PullResult
    from imagekit.refs import Platform
    from imagekit.registry.resolve import ResolvedImage
    from imagekit.workspace import Workspace
