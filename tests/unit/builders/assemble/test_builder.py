"""Choosing the builder, and the epoch a registry build stamps."""

from __future__ import annotations

import pytest

from imagekit.builders.assemble import engine_steps
from imagekit.builders.assemble.builder import _epoch
from imagekit.builders.choice import choose_builder
from imagekit.errors import UsageError
from imagekit.plans.model import Plan

BASE = {"reference": "127.0.0.1:5000/x/base@sha256:" + "ab" * 32}
OVERLAY: dict[str, object] = {
    "kind": "overlay",
    "source": "f",
    "destination": "/f",
    "replaces": {"absent": True},
}


def _plan(*steps: dict[str, object], epoch: int | None = None) -> Plan:
    return Plan.model_validate({"name": "p", "base": BASE, "steps": list(steps), "epoch": epoch})


def test_auto_takes_the_registry_only_for_overlay_plans_with_a_push_target() -> None:
    overlay_only = _plan(
        OVERLAY, {"kind": "env", "vars": {"A": "1"}}, {"kind": "cmd", "argv": ["x"]}
    )
    assert choose_builder(overlay_only, "auto", "r/x") == "registry"
    assert choose_builder(overlay_only, "auto", None) == "engine"
    with_pip = _plan({"kind": "pip_install", "requirements": ["six==1.16.0"]}, OVERLAY)
    assert choose_builder(with_pip, "auto", "r/x") == "engine"
    assert engine_steps(with_pip) == ["steps[0] (pip_install)"]
    assert choose_builder(with_pip, "registry", None) == "registry"  # refused later, by name
    with pytest.raises(UsageError):
        choose_builder(overlay_only, "buildah", None)


def test_the_epoch_source_date_epoch_then_the_plan_then_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert _epoch(_plan()) == (0, "default (0)")
    assert _epoch(_plan(epoch=5)) == (5, "plan")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert _epoch(_plan(epoch=5)) == (1_700_000_000, "SOURCE_DATE_EPOCH")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        _epoch(_plan())
