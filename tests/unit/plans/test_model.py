"""The plan model: which built-in audit profiles a plan may name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from imagekit.audit.profiles import HOST_PROFILES, IMAGE_PROFILES, load_profile
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
