"""Plans of several platforms (``base.platforms``): each built, asserted, recorded; one index.

Real parts only: a buildkitd the tests start (runc worker, arm64 RUN steps under the host's
qemu-user binfmt handler), the local engine, the session's loopback registry, the docker
CLI's ``buildx imagetools`` as the peer that reads the index back. The demo's base is an
index of the amd64 fixture and its arm64 counterpart (tests/support/demo_index.py). Emulated
pip on two cores is slow: the pip steps install one small pure wheel (six).
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.cli.build_cmd import command as build_command
from imagekit.cli.inspect_cmd import command as inspect_command
from imagekit.cli.plans_cmd import command as plans_command
from imagekit.cli.verify_cmd import command as verify_command
from imagekit.flows.pipeline import PipelineOptions, run_pipeline
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.final_pull import FINAL_PULL_V1
from imagekit.kinds.mirror import MIRROR_V1
from imagekit.ledger import read_records, verify
from imagekit.ledger.lockfile import write_lock
from imagekit.refs import parse_platform
from imagekit.runtime.engine import BINFMT_DIR, Engine, buildx_client, execution_for
from imagekit.workspace import Workspace
from tests.support import replicas
from tests.support.base_image import BaseImage
from tests.support.buildkitd import RunningBuildkitd
from tests.support.demo_index import arm64_demo_layer, push_demo_index, with_debian_pip
from tests.support.demo_variants import build_json, write_variant
from tests.support.engine_refs import removing
from tests.support.gotools import cosign_verify_attestation
from tests.support.images import Writer
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

TWO = ["linux/amd64", "linux/arm64"]


@pytest.fixture(scope="module")
def demo_index(registry: RunningRegistry, base_image: BaseImage, engine: Engine) -> Iterator[str]:
    """The demo base as an index of linux/amd64 and linux/arm64/v8, pinned by digest.

    The engine pulls the arm64 half by its manifest digest (as it has the amd64 half, which
    it pushed): it then knows the session registry holds that layer, so each engine push of
    an arm64 image built on it mounts the layer instead of compressing its 556 MB again.
    """
    with Writer(registry.host) as writer:
        index = push_demo_index(writer, base_image, arm64_demo_layer())
        arm = _arm64_half(writer, index)
    with removing(engine) as refs:
        refs.append(arm)
        subprocess.run(
            [engine.client_path, "pull", "--quiet", "--platform", "linux/arm64", arm],
            capture_output=True, check=True,
        )  # fmt: skip
        yield index


def _arm64_half(writer: Writer, index: str) -> str:
    """host/repo@digest of the linux/arm64 manifest the index at ``index`` lists."""
    name, _, digest = index.partition("@")
    repo = name.partition("/")[2]
    manifests = json.loads(writer.get_manifest(repo, digest).content)["manifests"]
    [arm] = [m["digest"] for m in manifests if m["platform"]["architecture"] == "arm64"]
    return f"{name}@{arm}"


@pytest.fixture
def arm64_emulated() -> None:
    execution = execution_for(parse_platform("linux/arm64"))
    assert execution.how == "emulated", (
        f"this host cannot emulate arm64 ({execution.reason}); scripts/setup-host.sh "
        "installs qemu-user-static and registers its binfmt handlers"
    )


@pytest.fixture
def demo_two(demo_index: str, workspace: Workspace, arm64_emulated: None) -> str:
    """The demo plan for amd64 and arm64 (``demo-two``) in the test's workspace, arm64 run
    emulated here; the base index it builds on."""
    _platforms_variant(workspace, "demo-two", TWO)
    return demo_index


def _platforms_variant(workspace: Workspace, name: str, platforms: list[str]) -> None:
    """The demo plan under ``name``, for several platforms (base.platform dropped)."""
    write_variant(workspace, name, {})
    path = workspace.plans_dir / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["base"].pop("platform")
    data["base"]["platforms"] = platforms
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _imagetools(ref: str) -> dict[str, Any]:
    """What docker buildx reads at REF: the raw index, as its own resolver fetched it."""
    done = subprocess.run(
        [buildx_client(), "buildx", "imagetools", "inspect", "--raw", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _imagekit_inspect(ref: str, platform: str | None = None) -> dict[str, Any]:
    chosen = ["--platform", platform] if platform else []
    result = CliRunner().invoke(inspect_command, [ref, *chosen, "--json"])
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def _check_index(doc: dict[str, Any], repo: str, workspace: Workspace) -> None:
    """One index with both platforms; each asserted (arm64 emulated); a record a platform;
    docker buildx imagetools and imagekit inspect agree on the index."""
    assert doc["pushed"] == f"{repo}@{doc['index_digest']}"
    images = {p["platform"]: p for p in doc["platforms"]}
    assert list(images) == TWO
    amd, arm = images["linux/amd64"], images["linux/arm64"]
    assert amd["assertions"]["status"] == arm["assertions"]["status"] == "passed"
    assert amd["assertions"]["execution"] == "native"
    assert arm["assertions"]["execution"] == "emulated"
    assert "emulated (qemu-aarch64)" in arm["assertions"]["scope"]
    assert "IMAGEKIT_ASSERTIONS_PASSED" in Path(arm["assertions"]["log"]).read_text()

    raw = _imagetools(doc["pushed"])
    listed = {
        f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"]
        for m in raw["manifests"]
    }
    assert listed == {p: images[p]["manifest_digest"] for p in TWO}
    # imagekit inspect lists the same index: the same manifest for each platform.
    whole = _imagekit_inspect(doc["pushed"])
    assert whole["index_digest"] == doc["index_digest"]
    assert {
        "/".join(m["platform"].split("/")[:2]): m["digest"] for m in whole["index_manifests"]
    } == listed
    for platform in TWO:
        seen = _imagekit_inspect(doc["pushed"], platform)
        assert seen["index_digest"] == doc["index_digest"]
        assert seen["manifest_digest"] == listed[platform]
        assert seen["config_digest"] == images[platform]["image_id"]
    arm_config = _imagekit_inspect(doc["pushed"], "linux/arm64")
    assert arm_config["platform"].startswith("linux/arm64")

    records = read_records(workspace.ledger_path)
    builds = [r for r in records if r.kind == "build"]
    assert [(r.details["platform"], r.details["manifest_digest"]) for r in builds] == [
        (p, images[p]["manifest_digest"]) for p in TWO
    ]
    assert all(r.details["index_digest"] == doc["index_digest"] for r in builds)
    assert builds[0].details["assertions"]["execution"] == "native"
    assert builds[1].details["assertions"]["execution"] == "emulated"
    assert "emulated (qemu-aarch64)" in builds[1].scope
    assert builds[1].details["base"]["platform"] == "linux/arm64"
    assert builds[1].images["image"] == images["linux/arm64"]["pushed"]
    [push] = [r for r in records if r.kind == "push"]
    assert push.details["index_digest"] == doc["index_digest"]
    assert push.images["pushed"] == doc["pushed"]
    assert [r.kind for r in records] == ["build", "build", "push"]


def test_the_demo_for_amd64_and_arm64_on_a_buildkit_daemon_is_one_index_and_signed(
    buildkitd: RunningBuildkitd,
    demo_two: str,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    # Signed: one SLSA provenance whose subjects are the index and each platform's manifest,
    # stored beside each: cosign finds it from the index's reference and from each
    # platform's. (The unsigned build of several platforms is the buildx builder's and the
    # engine's tests below.)
    pair = generate_key_pair(tmp_path / "build")
    repo = f"{registry.host}/imagekit-test/demo-two-buildkit"
    code, out, err = build_json(
        "demo-two", "--base", demo_two, "--buildkit", buildkitd.address, "--push", repo,
        "--sign-key", str(pair.private),
    )  # fmt: skip
    assert code == 0, err[-4000:]
    doc = json.loads(out)
    created_refs.extend(p["pushed"] for p in doc["platforms"])
    assert doc["builder"] == "buildkit" and doc["buildkit"] == buildkitd.address
    log = Path(doc["log"]).read_text()
    # Both platforms ran the guard, pip and the in-build assertions on the daemon.
    assert log.count("IMAGEKIT_OVERLAY_OK path=/usr/lib/python3/dist-packages/av/about.py") >= 2
    assert log.count("Successfully installed six-1.16.0") == 2
    assert "[linux/arm64 " in log and "[linux/amd64 " in log
    _check_index(doc, repo, workspace)

    assert doc["attestation"]["attested"] is True
    manifests = [p["manifest_digest"] for p in doc["platforms"]]
    for reference in (doc["pushed"], *(f"{repo}@{m}" for m in manifests)):
        accepted = cosign_verify_attestation(reference, pair.public, "slsaprovenance1")
        assert accepted.returncode == 0, (reference, accepted.stderr)
        statement = json.loads(
            base64.b64decode(json.loads(accepted.stdout.splitlines()[0])["payload"])
        )
        assert [s["digest"]["sha256"] for s in statement["subject"]] == [
            d.partition(":")[2] for d in (doc["index_digest"], *manifests)
        ]
        assert statement["predicate"]["buildDefinition"]["externalParameters"]["plan"] == {
            "name": "demo-two",
            "sha256": doc["plan_sha256"],
        }
        internal = statement["predicate"]["buildDefinition"]["internalParameters"]
        assert internal["index_digest"] == doc["index_digest"]
        assert {p: i["manifest_digest"] for p, i in internal["platforms"].items()} == dict(
            zip(TWO, manifests, strict=True)
        )
    envelope = doc["attestation"]["envelope_digest"]
    records = read_records(workspace.ledger_path)
    assert [r.details.get("attestation") for r in records] == [envelope] * 3
    # Another key's signature is not accepted.
    other = generate_key_pair(tmp_path / "other")
    refused = cosign_verify_attestation(doc["pushed"], other.public, "slsaprovenance1")
    assert refused.returncode != 0


def test_the_demo_for_amd64_and_arm64_on_the_engine_is_one_index(
    demo_two: str,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
) -> None:
    repo = f"{registry.host}/imagekit-test/demo-two-engine"
    # --no-cache: the engine's build cache is the machine's; every step of both must run.
    code, out, err = build_json("demo-two", "--base", demo_two, "--push", repo, "--no-cache")
    doc = json.loads(out) if code == 0 else {}
    created_refs.extend(platform["pushed"] for platform in doc.get("platforms", []))
    run_id = Path(doc.get("log", "x/x")).parent.name
    for suffix in ("linux-amd64", "linux-arm64"):
        created_refs.append(f"imagekit/demo-two:{run_id}-{suffix}")
        created_refs.append(f"{repo}:{run_id}-{suffix}")
    assert code == 0, err[-4000:]
    assert doc["builder"] in ("buildx", "docker build (BuildKit)") and doc["buildkit"] is None
    log = Path(doc["log"]).read_text()
    assert log.count("Successfully installed six-1.16.0") == 2
    index = json.loads((Path(doc["evidence_dir"]) / "index.json").read_text())
    assert [m["digest"] for m in index["manifests"]] == [
        p["manifest_digest"] for p in doc["platforms"]
    ]
    _check_index(doc, repo, workspace)


def test_an_h3_spark_variant_with_a_pip_step_builds_for_arm64_on_buildkit(
    buildkitd: RunningBuildkitd,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    arm64_emulated: None,
) -> None:
    # The H3 report's four overlays on the arm64 replica of its base (with Debian's pip, as
    # the real image has one), plus a pinned pip install: a RUN step on arm64, emulated on
    # this amd64 machine.
    replica = replicas.push("h3", registry.host)
    with Writer(registry.host) as writer:
        base = with_debian_pip(writer, replica.repository, replica.image_manifest)
    plan = yaml.safe_load((workspace.plans_dir / "h3-spark.yaml").read_text())
    plan["name"] = "h3-spark-pip"
    plan["steps"].insert(0, {"kind": "pip_install", "requirements": ["six==1.16.0"]})
    plan["assertions"]["find_spec"] = ["vllm_omni", "six"]
    plan["audit_profile"] = "dockerfiles/h3-spark-pip/audit-profile.yaml"
    (workspace.plans_dir / "h3-spark-pip.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    source = workspace.dockerfiles_dir / "h3-spark"
    target = workspace.dockerfiles_dir / "h3-spark-pip"
    for path in source.rglob("*"):
        if path.is_file() and path.name not in (
            "Dockerfile",
            "imagekit-assert.json",
            "imagekit-assert.py",
        ):
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (target / path.relative_to(source)).write_bytes(path.read_bytes())
            (target / path.relative_to(source)).chmod(path.stat().st_mode & 0o777)
    repo = f"{registry.host}/imagekit-test/h3-spark-pip"
    code, out, err = build_json(
        "h3-spark-pip", "--base", base, "--buildkit", buildkitd.address,
        "--push", repo,
    )  # fmt: skip
    assert code == 0, err[-4000:]
    doc = json.loads(out)
    created_refs.append(doc["pushed"])
    log = Path(doc["log"]).read_text()
    assert "Successfully installed six-1.16.0" in log
    assert "IMAGEKIT_OVERLAY_OK path=/usr/local/lib/python3.11/dist-packages/vllm_omni/" in log
    assert doc["assertions"]["status"] == "passed"
    assert doc["assertions"]["execution"] == "emulated"
    assert "emulated (qemu-aarch64)" in doc["assertions"]["scope"]
    seen = _imagekit_inspect(doc["pushed"], "linux/arm64")
    assert seen["manifest_digest"] == doc["manifest_digest"]
    assert seen["platform"].startswith("linux/arm64")
    [record] = read_records(workspace.ledger_path)
    assert record.details["assertions"]["execution"] == "emulated"
    assert record.details["base"]["platform"] == "linux/arm64"


def test_a_platform_listed_twice_is_exit_2(workspace: Workspace) -> None:
    _platforms_variant(workspace, "demo-twice", ["linux/amd64", "linux/arm64", "linux/amd64"])
    for command, argv in (
        (build_command, ["demo-twice", "--push", "127.0.0.1:5/never", "--json"]),
        (plans_command, ["validate", "demo-twice", "--json"]),
    ):
        result = CliRunner().invoke(command, argv)
        assert result.exit_code == 2, result.stderr
        assert "base.platforms: linux/amd64 is listed twice" in result.stderr
        assert "Traceback" not in result.stderr
    assert not workspace.ledger_path.exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--builder", "registry", "--push", "127.0.0.1:5/x"], "--builder registry assembles one"),
        ([], "give --push REPO"),
        (["--push", "127.0.0.1:5/x", "--no-assertions"], "--no-assertions is not supported"),
    ],
)
def test_what_cannot_build_several_platforms_is_exit_2(
    argv: list[str], words: str, workspace: Workspace
) -> None:
    _platforms_variant(workspace, "demo-two", TWO)
    code, _, err = build_json("demo-two", *argv)
    assert code == 2, err[-2000:]
    assert words in err
    assert not workspace.ledger_path.exists()


@pytest.mark.parametrize("where", ["engine", "buildkit"])
def test_a_platform_that_cannot_run_here_is_not_run_exit_3(
    where: str,
    buildkitd: RunningBuildkitd,
    demo_index: str,
    registry: RunningRegistry,
    workspace: Workspace,
) -> None:
    # This host registers qemu for arm64 only: s390x runs neither natively nor emulated.
    assert not (BINFMT_DIR / "qemu-s390x").exists()
    assert execution_for(parse_platform("linux/s390x")).how == "impossible"
    _platforms_variant(workspace, "demo-s390x", ["linux/amd64", "linux/s390x"])
    repo = f"{registry.host}/imagekit-test/demo-s390x-{where}"
    extra = ["--buildkit", buildkitd.address] if where == "buildkit" else []
    code, out, err = build_json("demo-s390x", "--base", demo_index, "--push", repo, *extra)
    assert code == 3, err[-3000:]
    error = json.loads(out)["error"]
    assert "linux/s390x" in error["message"] and "NOT RUN" in error["message"]
    assert "no qemu-s390x binfmt_misc handler" in error["message"]
    [record] = read_records(workspace.ledger_path)
    assert (record.kind, record.details["reason"]) == ("rejected-build", "assertions-not-run")
    assert record.details["platform"] == "linux/s390x"
    assert record.details["assertions"]["status"] == "NOT RUN"
    # Nothing was built or pushed.
    with Writer(registry.host) as writer:
        answer = writer.http.get(f"/v2/imagekit-test/demo-s390x-{where}/tags/list")
    assert answer.status_code == 404


def test_the_demo_for_amd64_and_arm64_on_a_buildx_builder_is_one_index(
    remote_buildx: Callable[[str], str],
    demo_two: str,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
) -> None:
    name = remote_buildx("imagekit-test-platforms")
    repo = f"{registry.host}/imagekit-test/demo-two-buildx"
    code, out, err = build_json(
        "demo-two", "--base", demo_two, "--buildx-builder", name, "--push", repo
    )
    assert code == 0, err[-4000:]
    doc = json.loads(out)
    created_refs.extend(p["pushed"] for p in doc["platforms"])
    assert doc["builder"] == "buildx" and doc["buildkit"] == name
    assert f'building with "{name}" instance using remote driver' in Path(doc["log"]).read_text()
    _check_index(doc, repo, workspace)


def test_the_pipeline_of_the_demo_for_amd64_and_arm64_audits_each_platform(
    demo_two: str,
    registry: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
    workspace: Workspace,
    docker_config: Path,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    # One run of every stage on the engine: both platforms built and asserted, one index
    # pushed by digest, each platform's image audited from the registry (arm64 under qemu),
    # the index mirrored and every platform verified by diffID, the host's platform pulled;
    # signed: each stage's attestation beside the mirror's copy, where cosign and the gate
    # find it. R is the registry the base came from (the engine pushed its amd64 half and
    # pulled its arm64 half there): the engine's push mounts the base's layers instead of
    # compressing 1.3 GB again; M is a registry of its own, the mirror copying every blob.
    push_to, mirror_to = registry, make_registry("none")
    pair = generate_key_pair(tmp_path / "pipeline")
    result = run_pipeline(
        workspace,
        "demo-two",
        PipelineOptions(
            registry=push_to.host,
            mirror=mirror_to.host,
            base_override=demo_two,
            sign_key=pair.private,
        ),
    )
    document = result.to_json()
    stages = {s["stage"]: s for s in document["stages"]}
    built = stages["build"]["data"]
    created_refs.extend(
        f"{document['registry']}@{p['manifest_digest']}" for p in built.get("platforms", [])
    )
    run_id = Path(stages["build"]["evidence"] or "x/x").parent.name
    for suffix in ("linux-amd64", "linux-arm64"):
        created_refs.append(f"imagekit/demo-two:{run_id}-{suffix}")
        created_refs.append(f"{document['registry']}:{run_id}-{suffix}")
    if document["final_reference"]:
        created_refs.append(document["final_reference"])
    assert list(stages) == [
        "doctor", "build", "audit linux/amd64", "audit linux/arm64", "mirror", "final-pull",
        "gpu-preflight", "ledger",
    ]  # fmt: skip
    assert result.ok and result.exit_code == 0, document["stages"]
    table = "\n".join(result.table())
    assert "audit linux/amd64" in table and "audit linux/arm64" in table
    amd, arm = (stages[f"audit {p}"] for p in TWO)
    assert amd["detail"].endswith("(native)") and amd["data"]["execution"] == "native"
    assert arm["data"]["execution"] == "emulated (qemu-aarch64)"
    assert arm["detail"].endswith("(emulated (qemu-aarch64))")
    manifests = {p["platform"]: p["manifest_digest"] for p in built["platforms"]}
    assert amd["digest"] == manifests["linux/amd64"] and arm["digest"] == manifests["linux/arm64"]
    index = stages["build"]["digest"]
    assert built["pushed"] == f"{document['registry']}@{index}"
    assert stages["mirror"]["data"]["platforms"] == {
        "linux/amd64": "identical",
        "linux/arm64": "identical",
    }
    assert document["final_reference"] == f"{document['mirror']}@{index}"
    assert stages["final-pull"]["digest"] == manifests["linux/amd64"]

    records = read_records(workspace.ledger_path)
    assert [r.kind for r in records] == [
        "build", "build", "push", "audit", "vulnerability-scan", "audit", "vulnerability-scan",
        "mirror-verify", "final-pull",
    ]  # fmt: skip
    audits = [r for r in records if r.kind == "audit"]
    assert [a.images["image"] for a in audits] == [
        f"{document['registry']}@{manifests[p]}" for p in TWO
    ]
    assert "emulated (qemu-aarch64)" in audits[1].scope
    assert "emulated" not in audits[0].scope
    assert all(a.status in ("CPU_PASS", "CPU_PASS_GPU_CLI_DEFERRED") for a in audits)
    [mirrored] = [r for r in records if r.kind == "mirror-verify"]
    assert mirrored.images["destination"].endswith(f"@{index}")
    saved = json.loads((workspace.root / stages["mirror"]["evidence"]).read_text())
    assert [p["destination"]["platform"] for p in saved["platforms"]] == TWO
    assert all(layer["match"] for p in saved["platforms"] for layer in p["layers"])
    assert mirrored.details["layers"] == sum(len(p["layers"]) for p in saved["platforms"])
    assert verify(workspace).ok
    # `ledger lock` shows each platform, its audit, and the index's push and mirror.
    lock = write_lock(workspace, None).document["images"]["demo-two"]
    assert lock["prepared_image"]["index_digest"] == index
    assert lock["prepared_image"]["reference"] == built["pushed"]
    assert {p: i["manifest_digest"] for p, i in lock["prepared_image"]["platforms"].items()} == (
        manifests
    )
    assert {p: a["record_seq"] for p, a in lock["audit"].items()} == {
        p: a.seq for p, a in zip(TWO, audits, strict=True)
    }
    assert lock["destination"]["verdict"] == "identical"
    assert lock["final_pull"]["status"] == "verified"

    # Every stage signed, and its record names the envelope (never "not attested").
    attested = {r.kind: r.details.get("attestation") for r in records}
    assert all(str(v).startswith("sha256:") for v in attested.values()), attested
    # On the mirror: the provenance and the final pull from the index; each platform's audit
    # and the binding (one, of the whole index) from that platform's manifest.
    on_mirror = document["final_reference"]
    assert on_mirror is not None
    mirror_repo = on_mirror.rsplit("@", 1)[0]
    checks = [(on_mirror, "slsaprovenance1"), (on_mirror, FINAL_PULL_V1),
              (on_mirror, MIRROR_V1)]  # fmt: skip
    for platform in TWO:
        checks += [(f"{mirror_repo}@{manifests[platform]}", AUDIT_V1),
                   (f"{mirror_repo}@{manifests[platform]}", MIRROR_V1)]  # fmt: skip
    for reference, kind in checks:
        accepted = cosign_verify_attestation(reference, pair.public, kind)
        assert accepted.returncode == 0, (reference, kind, accepted.stderr[-2000:])
    # The final pull names the manifest this host pulled, with the index, and no other.
    pulled = cosign_verify_attestation(on_mirror, pair.public, FINAL_PULL_V1)
    statement = json.loads(base64.b64decode(json.loads(pulled.stdout.splitlines()[0])["payload"]))
    assert sorted(s["digest"]["sha256"] for s in statement["subject"]) == sorted(
        d.partition(":")[2] for d in (manifests["linux/amd64"], index)
    )
    # The gate accepts each platform's copy on its own audit, and the index as both.
    for reference in (*(f"{mirror_repo}@{manifests[p]}" for p in TWO), on_mirror):
        gate = CliRunner().invoke(verify_command, ["--json", reference, "--key", str(pair.public)])
        assert gate.exit_code == 0, gate.output
    assert json.loads(gate.stdout)["platforms"] == TWO
