"""Profiles are data: the built-ins load, a misspelt key or a bad arch is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.audit.profiles import BUILTIN, load_profile, probe_spec
from imagekit.errors import ProfileError


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_profiles_load(name: str) -> None:
    assert load_profile(name).name == name


def test_sglang_and_vllm_carry_the_issue_s_flags_and_fallback() -> None:
    sglang = load_profile("sglang")
    assert sglang.torch.arches == ["sm_90"]
    assert "nixl" in sglang.modules
    assert "--mem-fraction-static" in sglang.cli[0].flags
    vllm = load_profile("vllm")
    serve = next(p for p in vllm.cli if p.name == "serve-help")
    assert serve.command == ["vllm", "serve", "--help=all"]
    assert serve.environmental_failure is not None
    assert serve.environmental_failure.pattern == "Failed to infer device type"
    assert "CpuPlatform" in " ".join(serve.environmental_failure.fallback.command)
    assert {"--block-size", "--enable-auto-tool-choice"} <= set(serve.flags)
    assert any(p.name == "bench-serve-help" for p in vllm.cli)


def test_a_profile_file_loads_and_a_misspelt_key_is_refused(tmp_path: Path) -> None:
    good = tmp_path / "mine.yaml"
    good.write_text("name: mine\nmodules: [nixl]\ntorch: {required: true, arches: [sm_90]}\n")
    assert load_profile(str(good)).modules == ["nixl"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodule: [nixl]\n")
    with pytest.raises(ProfileError, match="module"):
        load_profile(str(bad))
    arch = tmp_path / "arch.yaml"
    arch.write_text("name: arch\ntorch: {arches: [hopper]}\n")
    with pytest.raises(ProfileError, match="sm_90"):
        load_profile(str(arch))


def test_unknown_profile_names_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("sglang2")
    assert info.value.exit_code == 2
    with pytest.raises(ProfileError):
        load_profile(str(tmp_path / "missing.yaml"))


def test_probe_spec_merges_plan_modules_and_overlays() -> None:
    profile = load_profile("generic").with_modules(["nixl", "nixl"])
    spec = probe_spec(profile, expected_paths=["/b", "/a"], host=False)
    assert spec["profile"]["modules"] == ["nixl"]
    assert spec["expected_paths"] == ["/a", "/b"]
