"""Reading plan files: the shipped plans validate, and every kind of bad input is exit 2
naming file and key."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from imagekit.cli.plans_cmd import command as plans_command
from imagekit.errors import BaseDigestTruncated, PlanError, UsageError
from imagekit.plans.load import load_plan
from imagekit.plans.model import plan_schema
from imagekit.plans.steps import Overlay, PipInstall
from tests.support.bounded_cli import run_bounded

REPO = Path(__file__).resolve().parents[3]
DIGEST = "sha256:" + "ab" * 32
BASE = f"127.0.0.1:5000/team/base@{DIGEST}"


def good_plan() -> dict[str, object]:
    return {
        "name": "p",
        "base": {"reference": BASE, "found_as": "bookworm", "platform": "linux/amd64"},
        "steps": [
            {"kind": "remove_system_packages", "names": ["python3-gi"]},
            {"kind": "pip_install", "requirements": ["six==1.16.0", "pkg[extra]==2.0"]},
            {
                "kind": "overlay",
                "source": "files/patch.py",
                "destination": "/usr/lib/python3/dist-packages/x/patch.py",
                "replaces": {"sha256": "cd" * 32},
            },
            {
                "kind": "overlay",
                "source": "files/launcher",
                "destination": "/usr/local/bin/launcher",
                "replaces": {"absent": True},
            },
            {"kind": "env", "vars": {"A": "1"}},
            {"kind": "labels", "labels": {"org.example.team": "serving"}},
            {"kind": "entrypoint", "argv": ["launcher"]},
            {"kind": "cmd", "argv": ["--help"]},
        ],
        "assertions": {
            "pip_check": True,
            "find_spec": ["six"],
            "imports": ["x.patch"],
            "commands": [{"argv": ["launcher", "--version"], "exit_code": 0}],
        },
        "audit_profile": "generic",
    }


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    plans = tmp_path / "manifests"
    dockerfiles = tmp_path / "dockerfiles"
    (dockerfiles / "p" / "files").mkdir(parents=True)
    plans.mkdir()
    (dockerfiles / "p" / "files" / "patch.py").write_text("x = 1\n")
    (dockerfiles / "p" / "files" / "launcher").write_text("#!/bin/sh\n")
    (tmp_path / "outside.py").write_text("secret = 1\n")
    monkeypatch.setenv("IMAGEKIT_ROOT", str(tmp_path))
    monkeypatch.setenv("IMAGEKIT_PLANS_DIR", str(plans))
    monkeypatch.setenv("IMAGEKIT_DOCKERFILES_DIR", str(dockerfiles))
    return plans, dockerfiles


def write(plans: Path, data: object, name: str = "p") -> Path:
    path = plans / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_good_plan_loads_with_its_exact_bytes(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    path = write(plans, good_plan())
    loaded = load_plan(path, dockerfiles_dir=dockerfiles)
    assert loaded.name == "p"
    assert str(loaded.base) == BASE
    assert loaded.digest.hex == __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    assert [type(s).__name__ for s in loaded.plan.steps][:3] == [
        "RemoveSystemPackages",
        "PipInstall",
        "Overlay",
    ]
    assert isinstance(loaded.plan.steps[1], PipInstall)
    assert loaded.plan.steps[1].canonical() == ["six==1.16.0", "pkg[extra]==2.0"]
    assert len(loaded.plan.overlays) == 2
    assert isinstance(loaded.plan.steps[2], Overlay)


@pytest.mark.parametrize("name", ["demo", "m3-cu13", "m3-vllm"])
def test_shipped_plans_validate(name: str) -> None:
    loaded = load_plan(REPO / "manifests" / f"{name}.yaml", dockerfiles_dir=REPO / "dockerfiles")
    assert loaded.base.pinned and loaded.base.tag is None


def test_shipped_plans_carry_what_the_issue_asks() -> None:
    cu13 = load_plan(REPO / "manifests" / "m3-cu13.yaml", dockerfiles_dir=REPO / "dockerfiles")
    assert str(cu13.base) == (
        "docker.io/lmsysorg/sglang@sha256:"
        "8cc6e6f90bf803e9817800b679173d0b526f2b42b2c61b7ecafecdadb610eb55"
    )
    assert cu13.plan.base.found_as == "dev-cu13-minimax-m3"
    assert cu13.plan.assertions.find_spec == ["nixl"] and cu13.plan.assertions.pip_check
    assert cu13.plan.audit_profile == "sglang"
    vllm = load_plan(REPO / "manifests" / "m3-vllm.yaml", dockerfiles_dir=REPO / "dockerfiles")
    assert vllm.plan.base.found_as == "minimax-m3"
    assert vllm.plan.steps[0].model_dump()["names"] == [
        "python3-gi",
        "python3-software-properties",
        "software-properties-common",
    ]
    assert vllm.plan.audit_profile == "vllm"


def _mutate(path: list[object], value: object) -> dict[str, object]:
    data: dict[str, object] = good_plan()
    node: object = data
    for part in path[:-1]:
        node = node[part]  # type: ignore[index]
    node[path[-1]] = value  # type: ignore[index]
    return data


def _write_named(plans: Path, name: str, data: dict[str, object]) -> Path:
    """A second plan in the folder: ``data`` under its own name (file and ``name`` key)."""
    return write(plans, {**data, "name": name}, name=name)


STEP_OVERLAY = 2

BadCase = tuple[str, list[object], object, str, str]


def _at(path: list[object], key: str, *cases: tuple[str, object, str]) -> list[BadCase]:
    """Cases that change the plan at one path and expect the error to name one key."""
    return [(case_id, path, value, key, words) for case_id, value, words in cases]


BAD_CASES: list[BadCase] = [
    # (id, path to change, new value, key named in the error, words in the message or hint)
    *_at(
        ["base", "reference"],
        "base.reference",
        ("tag-only", "lmsysorg/sglang:dev-cu13", "imagekit inspect"),
        ("short-digest", "lmsysorg/sglang@sha256:abc123", "64"),
        ("upper-hex-digest", "lmsysorg/sglang@sha256:" + "AB" * 32, "hex"),
        ("tag-and-digest", f"lmsysorg/sglang:x@{DIGEST}", "found_as"),
    ),
    ("bad-platform", ["base", "platform"], "amd64", "base.platform", "platform"),
    *_at(
        ["base", "platforms"],
        "base.platforms",
        ("platform-and-platforms", ["linux/amd64", "linux/arm64"], "not both"),
    ),
    *_at(
        ["steps", 1, "requirements"],
        "steps[1].requirements",
        ("unpinned", ["six"], "=="),
        ("ranged", ["six>=1,<2"], "=="),
        ("greater", ["six>=1.16"], "=="),
        ("wildcard", ["six==1.*"], "=="),
        ("url", ["six @ https://example.invalid/six.whl"], "URL"),
        ("not-a-req", ["six ==="], "valid"),
    ),
    *_at(
        ["steps", STEP_OVERLAY, "source"],
        "steps[2].source",
        ("source-missing", "files/nope.py", "does not exist"),
        ("source-escapes", "../../outside.py", "plan folder"),
        ("source-absolute", "/etc/passwd", "relative"),
    ),
    *_at(
        ["steps", STEP_OVERLAY, "destination"],
        "steps[2].destination",
        ("relative-destination", "usr/lib/x.py", "absolute"),
        ("dotdot-destination", "/usr/../etc/x", "normalised"),
        ("proc-destination", "/proc/sys/kernel/x", "the runtime mounts"),
        ("sys-destination", "/sys/fs/cgroup/x", "never shows in a container"),
        ("dev-destination", "/dev/shm/launcher", "/dev"),
        ("hosts-destination", "/etc/resolv.conf", "the runtime mounts"),
    ),
    (
        "same-destination",
        ["steps", 3, "destination"],
        "/usr/lib/python3/dist-packages/x/patch.py",
        "steps[3].destination",
        "also written by steps[2]",
    ),
    (
        "short-overlay-hash",
        ["steps", STEP_OVERLAY, "replaces"],
        {"sha256": "abc"},
        "steps[2].replaces.sha256",
        "pin-overlay",
    ),
    (
        "replaces-both",
        ["steps", STEP_OVERLAY, "replaces"],
        {"sha256": "cd" * 32, "absent": True},
        "steps[2].replaces",
        "exactly one",
    ),
    (
        "misspelt-step-key",
        ["steps", STEP_OVERLAY, "destinaton"],
        "/x",
        "steps[2].destinaton",
        "did you mean 'destination'",
    ),
    ("misspelt-top-key", ["assertion"], {"pip_check": True}, "assertion", "did you mean"),
    ("misspelt-base-key", ["base", "platfrom"], "linux/amd64", "base.platfrom", "platform"),
    ("unknown-step", ["steps", 0, "kind"], "apt_install", "steps[0]", "kind"),
    (
        "not-strict-int",
        ["assertions", "commands", 0, "exit_code"],
        "0",
        "assertions.commands[0].exit_code",
        "integer",
    ),
    ("bad-deb-name", ["steps", 0, "names"], ["python3-*"], "steps[0].names", "exact"),
    (
        "reserved-label",
        ["steps", 5, "labels"],
        {"io.imagekit.plan": "x"},
        "steps[5].labels",
        "imagekit",
    ),
    ("bad-module", ["assertions", "find_spec"], ["nixl; rm"], "assertions.find_spec", "module"),
    ("bad-profile", ["audit_profile"], "gpu", "audit_profile", "generic"),
]


@pytest.mark.parametrize(
    ("path", "value", "key", "words"),
    [c[1:] for c in BAD_CASES],
    ids=[c[0] for c in BAD_CASES],
)
def test_bad_input_names_file_and_key(
    dirs: tuple[Path, Path], path: list[object], value: object, key: str, words: str
) -> None:
    plans, dockerfiles = dirs
    plan_file = write(plans, _mutate(path, value))
    with pytest.raises(PlanError) as info:
        load_plan(plan_file, dockerfiles_dir=dockerfiles)
    err = info.value
    assert err.exit_code == 2
    assert err.path == str(plan_file)
    assert err.key == key
    assert words in err.diagnostics()
    assert "\n" not in err.message
    # Through the CLI: exit 2, one error line naming the file and the key.
    result = CliRunner().invoke(plans_command, ["validate", "p"])
    assert result.exit_code == 2, result.output
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: ") and str(plan_file) in first and key in first


def test_cli_json_error_is_one_document(dirs: tuple[Path, Path]) -> None:
    plans, _ = dirs
    write(plans, _mutate(["base", "reference"], "ubuntu:22.04"))
    result = CliRunner().invoke(plans_command, ["validate", "p", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"]["type"] == "PlanError"
    assert doc["error"]["key"] == "base.reference"
    assert "imagekit inspect" in doc["error"]["hint"]


def test_duplicate_yaml_key_is_refused(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    text = yaml.safe_dump(good_plan(), sort_keys=False) + "audit_profile: vllm\n"
    (plans / "p.yaml").write_text(text)
    with pytest.raises(PlanError, match="appears twice"):
        load_plan(plans / "p.yaml", dockerfiles_dir=dockerfiles)


def test_name_must_match_file(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    path = write(plans, good_plan(), name="other")
    with pytest.raises(PlanError) as info:
        load_plan(path, dockerfiles_dir=dockerfiles)
    assert info.value.key == "name"


def test_missing_file_and_bad_yaml(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    with pytest.raises(PlanError, match="no such plan file"):
        load_plan(plans / "nope.yaml", dockerfiles_dir=dockerfiles)
    (plans / "p.yaml").write_text("name: [unclosed\n")
    with pytest.raises(PlanError, match="not valid YAML: line"):
        load_plan(plans / "p.yaml", dockerfiles_dir=dockerfiles)
    (plans / "p.yaml").write_text("- a list\n")
    with pytest.raises(PlanError, match="mapping"):
        load_plan(plans / "p.yaml", dockerfiles_dir=dockerfiles)


def test_base_override_must_be_pinned_too(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    path = write(plans, good_plan())
    other = "127.0.0.1:5999/x/base@sha256:" + "ef" * 32
    loaded = load_plan(path, dockerfiles_dir=dockerfiles, base_override=other)
    assert str(loaded.base) == other and loaded.base_overridden
    with pytest.raises(PlanError) as info:
        load_plan(path, dockerfiles_dir=dockerfiles, base_override="127.0.0.1:5999/x/base:tag")
    assert info.value.key == "base.reference (override)"
    assert "imagekit inspect" in (info.value.hint or "")


def test_symlinked_source_escaping_the_folder_is_refused(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    (dockerfiles / "p" / "files" / "link.py").symlink_to(dockerfiles.parent / "outside.py")
    path = write(plans, _mutate(["steps", STEP_OVERLAY, "source"], "files/link.py"))
    with pytest.raises(PlanError, match="outside"):
        load_plan(path, dockerfiles_dir=dockerfiles)


def test_validate_all_lists_every_error(dirs: tuple[Path, Path]) -> None:
    plans, _ = dirs
    write(plans, good_plan())
    _write_named(plans, "q", _mutate(["base", "reference"], "ubuntu"))
    result = CliRunner().invoke(plans_command, ["validate", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert [(d["name"], d["valid"]) for d in doc] == [("p", True), ("q", False)]
    assert "base.reference" in doc[1]["error"]


def test_list_show_and_schema(dirs: tuple[Path, Path]) -> None:
    plans, _ = dirs
    write(plans, good_plan())
    listed = CliRunner().invoke(plans_command, ["list", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["base"] == BASE
    shown = CliRunner().invoke(plans_command, ["show", "p", "--json"])
    assert shown.exit_code == 0
    assert json.loads(shown.stdout)["plan"]["steps"][1]["requirements"][0] == "six==1.16.0"
    schema = CliRunner().invoke(plans_command, ["schema"])
    assert schema.exit_code == 0
    doc = json.loads(schema.stdout)
    assert doc == json.loads(json.dumps(plan_schema()))
    assert doc["additionalProperties"] is False
    assert "base" in doc["required"]


def test_h3_spark_names_its_cut_short_digest_and_how_to_complete_it() -> None:
    """The report prints sha256:e930db8e...: exit 2 on base.reference, naming --base."""
    path = REPO / "manifests" / "h3-spark.yaml"
    with pytest.raises(BaseDigestTruncated) as info:
        load_plan(path, dockerfiles_dir=REPO / "dockerfiles")
    error = info.value
    assert error.exit_code == 2
    assert error.key == "base.reference"
    assert "sha256:e930db8e..." in error.message
    assert "8 of 64 hex digits" in error.message
    assert "--base REPO@sha256:" in (error.hint or "")
    assert "imagekit inspect docker.io/vllm/vllm-omni:TAG" in (error.hint or "")


def test_h3_spark_loads_with_a_base_override_and_carries_the_four_overlays() -> None:
    base = "127.0.0.1:5113/imagekit-seeds/h3@sha256:" + "12" * 32
    loaded = load_plan(
        REPO / "manifests" / "h3-spark.yaml",
        dockerfiles_dir=REPO / "dockerfiles",
        base_override=base,
    )
    assert str(loaded.base) == base and loaded.base_overridden
    assert loaded.plan.base.platform == "linux/arm64"
    assert loaded.plan.base.reference == "docker.io/vllm/vllm-omni@sha256:e930db8e..."
    overlays = {o.destination: o for o in loaded.plan.overlays}
    assert sorted(overlays) == [
        "/etc/minimax-h3/fp8-quant.json",
        "/usr/local/bin/start-minimax-h3",
        "/usr/local/lib/minimax-h3/security-common.sh",
        "/usr/local/lib/python3.11/dist-packages/vllm_omni/diffusion/models/minimax_h3/"
        "minimax_h3_transformer.py",
    ]
    patched = overlays[
        "/usr/local/lib/python3.11/dist-packages/vllm_omni/diffusion/models/minimax_h3/"
        "minimax_h3_transformer.py"
    ]
    # Guarded by the original's sha256 (vllm-omni 0.30.0), never absent.
    assert patched.replaces.sha256 == (
        "53e875307d962be3225ed71f64d554dafece5587b2b0ce4c5e942afa7000e1c5"
    )
    entrypoint = [s for s in loaded.plan.steps if s.kind == "entrypoint"]
    assert [s.model_dump()["argv"] for s in entrypoint] == [["/usr/local/bin/start-minimax-h3"]]
    for overlay in overlays.values():
        header = (loaded.overlay_dir / overlay.source).read_text()[:400]
        assert "STAND-IN written by imagekit" in header, overlay.source


def test_cut_short_digest_cli_exit_2_list_and_validate_all_keep_working(
    dirs: tuple[Path, Path],
) -> None:
    plans, dockerfiles = dirs
    shutil.copytree(dockerfiles / "p", dockerfiles / "cut")
    write(plans, good_plan())
    _write_named(
        plans, "cut", _mutate(["base", "reference"], "docker.io/vllm/vllm-omni@sha256:e930db8e...")
    )
    one = CliRunner().invoke(plans_command, ["validate", "cut"])
    assert one.exit_code == 2
    assert "cut.yaml: base.reference: the digest of" in one.stderr
    assert "--base REPO@sha256:<64 hex>" in one.stderr
    assert "Traceback" not in one.output
    # Every plan: the cut one's hint names the commands that take --base, as for one.
    humans = CliRunner().invoke(plans_command, ["validate"])
    assert humans.exit_code == 2 and "p: ok" in humans.stdout
    assert "hint: write the full digest here" in humans.stderr
    assert "(plans validate, build, pin-overlay, doctor, pipeline)" in humans.stderr
    every = CliRunner().invoke(plans_command, ["validate", "--json"])
    assert every.exit_code == 2
    assert [(d["name"], d["valid"]) for d in json.loads(every.stdout)] == [
        ("cut", False),
        ("p", True),
    ]
    listed = CliRunner().invoke(plans_command, ["list"])
    assert listed.exit_code == 0
    assert "cut" in listed.stdout and "INVALID" in listed.stdout and "cut short" in listed.stdout
    override = "127.0.0.1:5113/x/y@sha256:" + "34" * 32
    based = CliRunner().invoke(plans_command, ["validate", "cut", "--base", override])
    assert based.exit_code == 0, based.output
    assert f"cut: ok (base {override})" in based.stdout
    bad = CliRunner().invoke(plans_command, ["validate", "cut", "--base", "x/y:tag"])
    assert bad.exit_code == 2 and "base.reference (override)" in bad.stderr
    needs_name = CliRunner().invoke(plans_command, ["validate", "--base", override])
    assert needs_name.exit_code == 2 and "name the plan" in needs_name.stderr


def test_a_truncated_digest_is_tolerated_only_with_an_override(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    for cut in ("team/base@sha256:abc", "team/base@sha256:abc..."):
        path = write(plans, _mutate(["base", "reference"], cut))
        with pytest.raises(BaseDigestTruncated):
            load_plan(path, dockerfiles_dir=dockerfiles)
        load_plan(path, dockerfiles_dir=dockerfiles, base_override=BASE)
    # A tag is not a digest cut short: an override does not excuse it.
    path = write(plans, _mutate(["base", "reference"], "team/base:latest"))
    with pytest.raises(PlanError, match="not pinned"):
        load_plan(path, dockerfiles_dir=dockerfiles, base_override=BASE)


def test_pip_uninstall_names_exact_distributions(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    data = good_plan()
    data["steps"].insert(0, {"kind": "pip_uninstall", "names": ["nixl"]})  # type: ignore[attr-defined]
    loaded = load_plan(write(plans, data), dockerfiles_dir=dockerfiles)
    assert loaded.plan.steps[0].model_dump() == {"kind": "pip_uninstall", "names": ["nixl"]}
    for names, words in ((["nixl>=1"], "distribution name"), (["nixl", "NIXL"], "twice")):
        data["steps"][0] = {"kind": "pip_uninstall", "names": names}  # type: ignore[index]
        with pytest.raises(PlanError, match=words) as info:
            load_plan(write(plans, data), dockerfiles_dir=dockerfiles)
        assert info.value.key == "steps[0].names"


def _overlay_with(change: dict[str, object]) -> dict[str, object]:
    data = good_plan()
    steps = data["steps"]
    assert isinstance(steps, list)
    steps[STEP_OVERLAY] = {**steps[STEP_OVERLAY], **change}
    return data


def test_overlay_mode_and_owner(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    path = write(plans, _overlay_with({"mode": "0750", "owner": "12:34"}))
    overlay = load_plan(path, dockerfiles_dir=dockerfiles).plan.overlays[0]
    assert (overlay.file_mode, overlay.uid_gid) == (0o750, (12, 34))
    assert load_plan(write(plans, good_plan()), dockerfiles_dir=dockerfiles).plan.overlays[
        0
    ].uid_gid == (0, 0)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"mode": 493}, "valid string"),  # YAML's unquoted 0755
        ({"mode": "0855"}, "not an octal mode"),
        ({"mode": "75"}, "not an octal mode"),
        ({"owner": "root:root"}, "not a numeric UID:GID"),
        ({"owner": "1:99999999999"}, "not a numeric UID:GID"),
    ],
)
def test_bad_mode_or_owner_is_exit_2(
    dirs: tuple[Path, Path], change: dict[str, object], words: str
) -> None:
    plans, dockerfiles = dirs
    with pytest.raises(PlanError) as info:
        load_plan(write(plans, _overlay_with(change)), dockerfiles_dir=dockerfiles)
    assert info.value.exit_code == 2 and words in info.value.message
    assert info.value.key is not None and info.value.key.startswith(f"steps[{STEP_OVERLAY}]")


def test_a_symlinked_source_needs_follow(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    (dockerfiles / "p" / "files" / "via.py").symlink_to("patch.py")
    path = write(plans, _overlay_with({"source": "files/via.py"}))
    with pytest.raises(PlanError) as info:
        load_plan(path, dockerfiles_dir=dockerfiles)
    assert "symbolic link files/via.py" in info.value.message
    assert "follow: true" in (info.value.hint or "")
    path = write(plans, _overlay_with({"source": "files/via.py", "follow": True}))
    assert load_plan(path, dockerfiles_dir=dockerfiles).plan.overlays[0].follow


def test_the_epoch_is_bounded(dirs: tuple[Path, Path]) -> None:
    plans, dockerfiles = dirs
    data = good_plan()
    data["epoch"] = 1_700_000_000
    assert load_plan(write(plans, data), dockerfiles_dir=dockerfiles).plan.epoch == 1_700_000_000
    data["epoch"] = -1
    with pytest.raises(PlanError, match="epoch"):
        load_plan(write(plans, data), dockerfiles_dir=dockerfiles)


def test_found_as_must_be_an_ascii_tag_as_references_insist(tmp_path: Path) -> None:
    """plan.py had its own tag pattern without the ASCII flag, so a found_as that no
    registry could serve ('tag' with a non-ASCII letter) passed validation."""
    from imagekit.plans.model import BaseSpec

    digest = "sha256:" + "a" * 64
    with pytest.raises(ValidationError, match="not a valid tag"):
        BaseSpec(reference=f"127.0.0.1:5000/x@{digest}", found_as="minimax-m3-é")
    assert BaseSpec(reference=f"127.0.0.1:5000/x@{digest}", found_as="minimax-m3").found_as


def _platforms(dirs: tuple[Path, Path], platforms: object) -> Path:
    plans, _ = dirs
    data = good_plan()
    base = dict(data["base"])  # type: ignore[call-overload]
    base.pop("platform")
    data["base"] = {**base, "platforms": platforms}
    return write(plans, data)


def test_a_plan_of_several_platforms_lists_them_in_order(dirs: tuple[Path, Path]) -> None:
    path = _platforms(dirs, ["linux/arm64", "linux/amd64"])
    loaded = load_plan(path, dockerfiles_dir=dirs[1])
    assert loaded.multi_platform
    assert [str(p) for p in loaded.platforms] == ["linux/arm64", "linux/amd64"]
    assert loaded.plan.base.targets == ("linux/arm64", "linux/amd64")
    # A builder of one image asks for the one platform: refused, naming the plan.
    with pytest.raises(UsageError, match="plan p lists 2 platforms"):
        loaded.platform  # noqa: B018
    # A plan of one platform is what it was.
    plans, dockerfiles = dirs
    one = load_plan(write(plans, good_plan()), dockerfiles_dir=dockerfiles)
    assert not one.multi_platform and str(one.platform) == "linux/amd64"
    assert [str(p) for p in one.platforms] == ["linux/amd64"]


@pytest.mark.parametrize(
    ("platforms", "words"),
    [
        (["linux/amd64", "linux/arm64", "linux/amd64"], "linux/amd64 is listed twice"),
        (["linux/arm64", "linux/arm64/v8"], "linux/arm64 and linux/arm64/v8 name the same"),
        (["linux/amd64"], "lists one platform"),
        (["linux/amd64", "arm64"], "malformed platform 'arm64'"),
    ],
)
def test_bad_platform_lists_are_exit_2_naming_the_key(
    dirs: tuple[Path, Path], platforms: list[str], words: str
) -> None:
    path = _platforms(dirs, platforms)
    with pytest.raises(PlanError) as info:
        load_plan(path, dockerfiles_dir=dirs[1])
    assert info.value.key == "base.platforms"
    assert words in info.value.message
    result = CliRunner().invoke(plans_command, ["validate", "p"])
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"error: {path}: base.platforms: ") and words in first


def test_the_schema_describes_platforms() -> None:
    base = plan_schema()["$defs"]["BaseSpec"]["properties"]
    assert "platforms" in base and "platform" in base


def test_a_plan_path_that_is_no_file_or_too_large_is_exit_2(dirs: tuple[Path, Path]) -> None:
    """A FIFO once blocked `plans validate` forever, a link to /dev/zero read until the kernel
    killed imagekit; a plan is read as every file a user names (imagekit.files)."""
    plans, _ = dirs
    os.mkfifo(plans / "fifo.yaml")
    (plans / "zero.yaml").symlink_to("/dev/zero")
    with (plans / "huge.yaml").open("wb") as handle:
        handle.truncate(2 << 20)
    for name, said in (
        ("fifo", "the plan file is a FIFO, not a regular file"),
        ("zero", "the plan file is a character device (a symbolic link to /dev/zero)"),
        ("huge", "the plan file is 2097152 bytes, more than the 1 MiB imagekit reads of one"),
    ):
        done = run_bounded("plans", "validate", name)
        assert done.returncode == 2, done.stderr
        assert f"{plans / name}.yaml: {said}" in done.stderr
