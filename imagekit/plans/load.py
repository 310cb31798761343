"""Reading a plan file: its exact bytes, YAML with every key once, the models, the base.

Every failure is a PlanError naming the file and the key (imagekit.plans.messages). YAML
mappings with a repeated key are refused (PyYAML would otherwise keep the last one without a
word). The bytes are read in one place, ``_read_bytes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from imagekit import yamldoc
from imagekit.errors import PlanError
from imagekit.files import read_regular
from imagekit.plans.messages import plan_error
from imagekit.plans.model import PLAN_NAME, LoadedPlan, Plan, pinned_reference
from imagekit.refs import Reference

if TYPE_CHECKING:
    from imagekit.workspace import Workspace


def plan_path(plans_dir: Path, name: str) -> Path:
    if not PLAN_NAME.fullmatch(name):
        raise PlanError(f"{name!r} is not a plan name", hint="`imagekit plans list` shows them")
    return plans_dir / f"{name}.yaml"


def load_named_plan(
    workspace: Workspace, name: str, *, base_override: str | None = None
) -> LoadedPlan:
    """Plan ``name`` of a workspace, its overlay sources read from the workspace's folder."""
    return load_plan(
        plan_path(workspace.plans_dir, name),
        dockerfiles_dir=workspace.dockerfiles_dir,
        base_override=base_override,
    )


def _read_bytes(path: Path) -> bytes:
    try:
        return read_regular(path, "plan file")
    except FileNotFoundError as exc:
        raise PlanError(
            "no such plan file", path=str(path), hint="`imagekit plans list` shows the plans"
        ) from exc
    except OSError as exc:
        raise PlanError(f"cannot read the plan: {exc.strerror}", path=str(path)) from exc


def _validate(raw: bytes, path: Path, dockerfiles_dir: Path, *, base_given: bool) -> Plan:
    """Parse and validate plan bytes as if read from ``path`` (its base is the caller's)."""
    try:
        data = yamldoc.load(raw)  # a key twice, deep nesting, bytes that are not text: refused
    except yaml.YAMLError as exc:
        raise PlanError(f"not valid YAML: {yamldoc.describe(exc)}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise PlanError("a plan must be a YAML mapping", path=str(path))
    name = path.stem
    if isinstance(data.get("name"), str) and data["name"] != name:
        raise PlanError(
            f"the plan is called {data['name']!r} but its file is {path.name}",
            path=str(path),
            key="name",
            hint=f"rename the file to {data['name']}.yaml or the plan to {name!r}",
        )
    context = {"overlay_dir": dockerfiles_dir / name, "base_override": base_given}
    try:
        return Plan.model_validate(data, context=context)
    except ValidationError as exc:
        raise plan_error(exc, path, data) from exc


def read_plan_checks(path: Path, *, dockerfiles_dir: Path) -> Plan:
    """A plan as an audit of an image reads it: profile, asserted modules, overlays.

    An audit never uses the plan's base, so a base digest cut short (which stops every build
    that does not name its base with --base) is no reason to refuse it.
    """
    return _validate(_read_bytes(path), path, dockerfiles_dir, base_given=True)


def load_plan(
    path: Path,
    *,
    dockerfiles_dir: Path,
    base_override: str | None = None,
) -> LoadedPlan:
    """Read, parse and validate one plan file; every failure names the file and the key.

    ``base_override`` replaces the plan's base reference (it must be pinned the same way): the
    demo plan's base lives in a loopback registry whose port changes from run to run, so tests
    and `make demo` pass the digest of the base they just pushed. With an override the plan's
    own reference may be a digest cut short (a report's ``sha256:e930db8e...``): it is not used.
    """
    raw = _read_bytes(path)
    return parse_plan(raw, path, dockerfiles_dir=dockerfiles_dir, base_override=base_override)


def parse_plan(
    raw: bytes, path: Path, *, dockerfiles_dir: Path, base_override: str | None = None
) -> LoadedPlan:
    """Parse and validate plan bytes as if read from ``path`` (which names the plan).

    What :func:`load_plan` does after reading the file; an edit of a plan (imagekit.builders.bump)
    checks the bytes it is about to write with it before they replace the file.
    """
    plan = _validate(raw, path, dockerfiles_dir, base_given=base_override is not None)
    base_text = base_override if base_override is not None else plan.base.reference
    try:
        base = _pinned_orplan_error(base_text)
    except PlanError as exc:
        raise PlanError(
            exc.message,
            path=str(path),
            key="base.reference (override)" if base_override is not None else "base.reference",
            hint=exc.hint,
        ) from exc
    return LoadedPlan(
        plan=plan,
        path=path,
        raw=raw,
        overlay_dir=dockerfiles_dir / path.stem,
        base=base,
        base_overridden=base_override is not None,
    )


def _pinned_orplan_error(text: str) -> Reference:
    try:
        return pinned_reference(text)
    except PydanticCustomError as exc:
        ctx = exc.context or {}
        raise PlanError(str(ctx.get("msg", exc.message())), hint=ctx.get("hint")) from exc
