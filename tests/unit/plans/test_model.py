"""The plan model: which built-in audit profiles a plan may name; its GPU section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from imagekit.audit.profiles import HOST_PROFILES, IMAGE_PROFILES, load_profile
from imagekit.errors import ImagekitError
from imagekit.plans.model import Plan

BASE = "127.0.0.1:5000/team/base@sha256:" + "ab" * 32


def _plan(profile: str) -> Plan:
    return Plan.model_validate({"name": "p", "base": {"reference": BASE}, "audit_profile": profile})


@pytest.mark.parametrize("profile", IMAGE_PROFILES)
def test_every_built_in_image_profile_may_be_named_and_loads(profile: str) -> None:
    assert _plan(profile).audit_profile == profile
    assert load_profile(profile) is not None


@pytest.mark.parametrize("profile", HOST_PROFILES)
def test_a_host_profile_is_no_plans_profile(profile: str) -> None:
    with pytest.raises(ValidationError, match=f"neither one of {', '.join(IMAGE_PROFILES)} nor"):
        _plan(profile)


@pytest.mark.parametrize(
    ("gpu", "said"),
    [
        ({"name": "H20("}, "gpu.name 'H20(' is not a regular expression"),
        ({"min_memory_gib": float("inf")}, "finite number"),
        ({"min_memory_gib": float("nan")}, "finite number"),
        ({"count": 10**23}, "count"),
        ({"count": True}, "valid integer"),
        ({"count": "8"}, "valid integer"),
        ({"count": 8.0}, "valid integer"),
        ({"min_capability": "9.0\n"}, "min_capability"),
    ],
)
def test_the_gpu_section_is_checked_where_the_plan_is_read(
    gpu: dict[str, object], said: str
) -> None:
    """Never first on the GPU node: a pattern that does not compile, an infinite memory."""
    with pytest.raises(ValidationError, match=re.escape(said)):
        Plan.model_validate({"name": "p", "base": {"reference": BASE}, "gpu": gpu})


def test_a_yaml_plan_with_an_infinite_memory_or_a_float_count_is_refused(tmp_path: Path) -> None:
    from imagekit.plans.load import parse_plan

    for gpu, said in (("min_memory_gib: .inf", "min_memory_gib"), ("count: 1e23", "count")):
        text = f"name: p\nbase:\n  reference: {BASE}\ngpu:\n  {gpu}\n"
        with pytest.raises(ImagekitError, match=said):
            parse_plan(text.encode(), tmp_path / "p.yaml", dockerfiles_dir=tmp_path)
