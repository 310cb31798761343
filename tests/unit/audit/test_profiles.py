"""Profiles are data: the built-ins load and check what the field checks; a misspelt key, a
flag named twice, an empty pattern or a bad arch is refused naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.audit.profiles import BUILTIN, load_profile, probe_spec
from imagekit.cli import main
from imagekit.errors import ProfileError

REPLICA_PROFILES = Path(__file__).resolve().parents[2] / "support" / "replica_profiles"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "profiles.md"
# The distributions the field's image lock records, beside the engine itself.
LOCK_VERSIONS = [
    "torch", "transformers", "flashinfer-python", "av", "decord", "nixl", "nixl-cu12",
    "nixl-cu13", "cuda-python", "cuda-bindings", "cuda-pathfinder", "numpy", "pillow",
    "setuptools",
]  # fmt: skip
BENCH_FLAGS = [
    "--random-input-len", "--random-output-len", "--num-prompts", "--num-warmups",
    "--save-detailed", "--request-id-prefix", "--ignore-eos", "--metric-percentiles",
    "--metadata",
]  # fmt: skip
SGLANG_FLAGS = [
    "--reasoning-parser", "--tool-call-parser", "--mem-fraction-static",
    "--chunked-prefill-size", "--max-running-requests", "--disable-radix-cache",
]  # fmt: skip


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


def test_vllm_reads_every_help_with_help_all_and_requires_the_benchmark_flags() -> None:
    vllm = load_profile("vllm")
    probes = {p.name: p for p in vllm.cli}
    bench = probes["bench-serve-help"]
    assert probes["serve-help"].command == ["vllm", "serve", "--help=all"]
    assert bench.command == ["vllm", "bench", "serve", "--help=all"]
    for probe in probes.values():
        assert probe.environmental_failure is not None
        fallback = " ".join(probe.environmental_failure.fallback.command)
        assert "'--help=all'" in fallback
        assert "'--help'" not in fallback
        # The fallback checks the probe's own flags: a missing benchmark flag is not deferred.
        assert probe.environmental_failure.fallback.flags is None
    assert set(BENCH_FLAGS) <= set(bench.flags)


def test_sglang_requires_disable_radix_cache_beside_the_serving_flags() -> None:
    (launch,) = load_profile("sglang").cli
    assert launch.flags == SGLANG_FLAGS


@pytest.mark.parametrize(("name", "engine"), [("vllm", "vllm"), ("sglang", "sglang")])
def test_engine_profiles_read_the_image_lock_s_versions(name: str, engine: str) -> None:
    profile = load_profile(name)
    assert profile.distributions[: len(LOCK_VERSIONS) + 1] == [engine, *LOCK_VERSIONS]


def test_the_replica_profiles_check_what_the_built_ins_check() -> None:
    """The seed replicas' profiles leave out only what their replica cannot carry."""
    vllm = load_profile("vllm")
    replica = load_profile(str(REPLICA_PROFILES / "vllm-replica.yaml"))
    assert replica.cli == vllm.cli
    assert set(vllm.distributions) - {"triton", "xformers"} <= set(replica.distributions)
    sglang = load_profile(str(REPLICA_PROFILES / "sglang-replica.yaml"))
    assert set(load_profile("sglang").distributions) - {"sgl-kernel"} <= set(sglang.distributions)


_GOOD_CLI = {
    "name": "bench",
    "command": ["vllm", "bench", "serve", "--help=all"],
    "flags": ["--num-prompts", "--metadata"],
    "environmental_failure": {
        "pattern": "Failed to infer device type",
        "fallback": {"command": ["{python}", "-c", "pass"]},
    },
}


def _cli(**changes: object) -> dict[str, object]:
    probe: dict[str, object] = json.loads(json.dumps(_GOOD_CLI))
    probe.update(changes)
    return probe


@pytest.mark.parametrize(
    ("profile", "field", "says"),
    [
        (
            {"cli": [_cli(flags=["--num-prompts", "--metadata", "--num-prompts"])]},
            "cli[0].flags",
            "names the flag --num-prompts twice",
        ),
        (
            {"cli": [_cli(environmental_failure={
                "pattern": "", "fallback": {"command": ["x"]}})]},
            "cli[0].environmental_failure.pattern",
            "is empty",
        ),
        (
            {"cli": [_cli(environmental_failure={
                "pattern": "  ", "fallback": {"command": ["x"]}})]},
            "cli[0].environmental_failure.pattern",
            "is empty",
        ),
        ({"model_sources": [{"package": "vllm", "glob": ""}]}, "model_sources[0].glob", "empty"),
        ({"cli": [_cli(flagz=["--x"])]}, "cli[0].flagz", "unknown key"),
        ({"serving_flags": ["--x"]}, "serving_flags", "unknown key"),
        ({"cli": [_cli(flags=["num-prompts"])]}, "cli[0].flags", "spelt as on the command line"),
        (
            {"cli": [_cli(environmental_failure={
                "pattern": "x", "fallback": {"command": ["x"], "flags": ["--a", "--a"]}})]},
            "cli[0].environmental_failure.fallback.flags",
            "names the flag --a twice",
        ),
        ({"cli": [_cli(), _cli()]}, "cli", "names the CLI probe bench twice"),
        ({"distributions": ["vllm", "numpy", "vllm"]}, "distributions", "names vllm twice"),
    ],
)  # fmt: skip
def test_a_bad_profile_is_exit_2_naming_the_file_and_the_field(
    tmp_path: Path, profile: dict[str, object], field: str, says: str
) -> None:
    path = tmp_path / "team-profile.yaml"
    path.write_text(yaml.safe_dump({"name": "team", **profile}))
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{path}: {field}: "), info.value.message
    assert says in info.value.message


def test_the_audit_command_refuses_a_bad_profile_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGEKIT_ROOT", str(tmp_path))
    path = tmp_path / "team-profile.yaml"
    path.write_text(yaml.safe_dump({"name": "team", "cli": [_cli(flags=["--a", "--a"])]}))
    result = CliRunner().invoke(main, ["audit", "nowhere/image:1", "--profile", str(path)])
    assert result.exit_code == 2
    assert f"{path}: cli[0].flags: names the flag --a twice" in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert not (tmp_path / "manifests" / "ledger.jsonl").exists()


def _doc_profiles() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    blocks = text.split("```yaml\n")[1:]
    return [block.split("```", 1)[0] for block in blocks]


def test_the_documented_team_profile_loads(tmp_path: Path) -> None:
    """docs/profiles.md's MiniMax-H3 on vLLM-Omni example is a profile the audit accepts."""
    (example,) = [b for b in _doc_profiles() if b.startswith("# dockerfiles/")]
    path = tmp_path / "audit-profile.yaml"
    path.write_text(example)
    profile = load_profile(str(path))
    assert profile.model_sources[0].glob == "*minimax_h3_transformer.py"
    serve = next(p for p in profile.cli if p.name == "serve-help")
    assert "--omni" in serve.flags
    assert serve.command[-1] == "--help=all"
    bench = next(p for p in profile.cli if p.name == "bench-serve-help")
    assert set(BENCH_FLAGS) <= set(bench.flags)
