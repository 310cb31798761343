"""`imagekit build --push --sign-key`: SLSA v1 provenance beside the pushed image, accepted
by cosign (`--type slsaprovenance1`) and by `imagekit verify` with a provenance policy; on
each of the three builders (the engine, a buildkitd of its own, the registry builder), each
named truthfully in the provenance."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.cli import main
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.integration.build.test_buildkit import _tag
from tests.support.base_image import BaseImage
from tests.support.buildkitd import RunningBuildkitd, start_buildkitd
from tests.support.demo_variants import index_url, overlay_only
from tests.support.gotools import cosign_verify_attestation
from tests.support.registries import RunningRegistry


def test_a_pushed_build_carries_signed_provenance(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    pair = generate_key_pair(tmp_path / "build")
    tag = _tag("demo", created_refs)
    push_repo = f"{registry.host}/imagekit-test/demo-provenance"
    created_refs.append(f"{push_repo}:{tag.rpartition(':')[2]}")
    result = CliRunner().invoke(
        main,
        [
            "build",
            "demo",
            "--base",
            base_image.reference,
            "--tag",
            tag,
            "--push",
            push_repo,
            "--sign-key",
            str(pair.private),
            "--json",
        ],
        env={"PIP_INDEX_URL": index_url()},
    )
    assert result.exit_code == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    pushed = document["pushed"]
    assert document["attestation"]["attested"] is True
    records = read_records(workspace.ledger_path)
    assert records[-1].kind == "push"
    assert records[-1].details["attestation"] == document["attestation"]["envelope_digest"]

    accepted = cosign_verify_attestation(pushed, pair.public, SLSA_PROVENANCE_V1)
    assert accepted.returncode == 0, accepted.stderr
    statement = json.loads(base64.b64decode(json.loads(accepted.stdout.splitlines()[0])["payload"]))
    definition = statement["predicate"]["buildDefinition"]
    plan_bytes = (workspace.plans_dir / "demo.yaml").read_bytes()
    assert definition["externalParameters"]["plan"] == {
        "name": "demo",
        "sha256": hashlib.sha256(plan_bytes).hexdigest(),
    }
    base_hex = base_image.digest.split(":")[1]
    assert {"sha256": base_hex} in [d["digest"] for d in definition["resolvedDependencies"]]

    policy = tmp_path / "provenance.yaml"
    policy.write_text(
        f"version: 1\naudit: null\nprovenance:\n  plan: demo\n  base: {base_image.digest}\n"
    )
    code = CliRunner().invoke(
        main, ["verify", pushed, "--key", str(pair.public), "--policy", str(policy)]
    )
    assert code.exit_code == 0, code.output
    policy.write_text("version: 1\naudit: null\nprovenance:\n  plan: other\n")
    refused = CliRunner().invoke(
        main, ["verify", pushed, "--key", str(pair.public), "--policy", str(policy)]
    )
    assert refused.exit_code == 1 and "plan demo" in refused.stdout


def _provenance(pushed: str, public: Path) -> dict[str, Any]:
    """The provenance statement cosign accepted for PUSHED (it fails the test if none)."""
    accepted = cosign_verify_attestation(pushed, public, SLSA_PROVENANCE_V1)
    assert accepted.returncode == 0, accepted.stderr
    payload = json.loads(accepted.stdout.splitlines()[0])["payload"]
    statement: dict[str, Any] = json.loads(base64.b64decode(payload))
    return statement


def _policy_holds(pushed: str, public: Path, base_digest: str, plan: str, tmp: Path) -> None:
    policy = tmp / f"{plan}-provenance.yaml"
    policy.write_text(
        f"version: 1\naudit: null\nprovenance:\n  plan: {plan}\n  base: {base_digest}\n"
    )
    verdict = CliRunner().invoke(
        main, ["verify", pushed, "--key", str(public), "--policy", str(policy)]
    )
    assert verdict.exit_code == 0, verdict.output


@pytest.fixture(scope="module")
def buildkitd(
    registry: RunningRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningBuildkitd]:
    daemon = start_buildkitd(tmp_path_factory.mktemp("bkd"), [registry.host])
    yield daemon
    daemon.stop()


def test_a_build_on_a_buildkitd_of_its_own_carries_provenance_naming_that_daemon(
    buildkitd: RunningBuildkitd,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    pair = generate_key_pair(tmp_path / "remote")
    repo = f"{registry.host}/imagekit-test/remote-provenance"
    result = CliRunner().invoke(
        main,
        ["build", "demo", "--base", base_image.reference, "--buildkit", buildkitd.address,
         "--push", repo, "--sign-key", str(pair.private), "--json"],
        env={"PIP_INDEX_URL": index_url()},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    pushed = document["pushed"]
    created_refs.append(pushed)  # the assertions pulled it into the engine
    assert document["attestation"]["attested"] is True
    [record] = read_records(workspace.ledger_path)
    assert record.kind == "build"
    assert record.details["attestation"] == document["attestation"]["envelope_digest"]

    statement = _provenance(pushed, pair.public)
    assert statement["subject"][0]["digest"] == {"sha256": pushed.split(":")[-1]}
    builder = statement["predicate"]["runDetails"]["builder"]
    assert builder["id"] == "https://imagekit.dev/builders/buildkit"
    assert builder["version"]["builder"] == "buildkit"
    assert builder["version"]["buildkit"] == buildkitd.address
    internal = statement["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["dockerfile_sha256"] == document["dockerfile_sha256"]
    assert internal["config_digest"] == document["image_id"]
    _policy_holds(pushed, pair.public, base_image.digest, "demo", tmp_path)


def test_a_registry_build_carries_provenance_naming_imagekits_assembler(
    engine: Engine,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    tmp_path: Path,
) -> None:
    pair = generate_key_pair(tmp_path / "registry")
    name = overlay_only(workspace, "demo-overlay-signed")
    repo = f"{registry.host}/imagekit-test/registry-provenance"
    result = CliRunner().invoke(
        main,
        ["build", name, "--builder", "registry", "--base", base_image.reference,
         "--push", repo, "--index", "--sign-key", str(pair.private), "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    pushed = document["pushed"]
    created_refs.append(pushed)
    # With --index the tag names an index: the index and the manifest in it are both subjects.
    index = _provenance(f"{repo}@{document['index_digest']}", pair.public)
    assert {s["digest"]["sha256"] for s in index["subject"]} == {
        pushed.split(":")[-1],
        document["index_digest"].split(":")[-1],
    }
    assert document["attestation"]["attested"] is True
    push = read_records(workspace.ledger_path)[-1]
    assert push.kind == "push"
    assert push.details["attestation"] == document["attestation"]["envelope_digest"]

    statement = _provenance(pushed, pair.public)
    builder = statement["predicate"]["runDetails"]["builder"]
    assert builder["id"] == "https://imagekit.dev/builders/registry"
    assert "no engine" in builder["version"]["builder"]
    definition = statement["predicate"]["buildDefinition"]
    assert "dockerfile_sha256" not in definition["internalParameters"]
    assert definition["internalParameters"]["config_digest"] == document["config_digest"]
    assert definition["internalParameters"]["layer"]["diff_id"] == document["layer"]["diff_id"]
    assert [g["verdict"] for g in definition["internalParameters"]["guard"]] == ["ok", "ok"]
    overlay = (workspace.dockerfiles_dir / name / "overlay" / "av_about.py").read_bytes()
    assert {
        "uri": f"file:dockerfiles/{name}/overlay/av_about.py",
        "digest": {"sha256": hashlib.sha256(overlay).hexdigest()},
    } in definition["resolvedDependencies"]
    _policy_holds(pushed, pair.public, base_image.digest, name, tmp_path)
