"""`imagekit build --push --sign-key`: SLSA v1 provenance beside the pushed image, accepted
by cosign (`--type slsaprovenance1`) and by `imagekit verify` with a provenance policy; on
each of the three builders (the engine, a buildkitd of its own, the registry builder), each
named truthfully in the provenance."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from imagekit.attest.keys import KeyPairFiles
from imagekit.cli import main
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.ledger import read_records
from imagekit.plans.render import assertion_checker
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.buildkitd import RunningBuildkitd
from tests.support.demo_variants import index_url, overlay_only
from tests.support.engine_refs import new_tag
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.gotools import cosign_verify_attestation
from tests.support.registries import RunningRegistry
from tests.support.upstream import tags


@dataclass(frozen=True)
class Signer:
    """What each builder's test does with its signed build: the build itself, the provenance
    cosign accepts, a policy that must hold. The key is the test's own; the pushed
    references go on MADE (the assertions may pull them into the engine), the policy files
    into FOLDER."""

    pair: KeyPairFiles
    made: list[str]
    folder: Path

    def build(self, *argv: str) -> dict[str, Any]:
        """`imagekit build ARGV --sign-key --json`: it must succeed and say the provenance
        was attested; the document, for the test's own assertions."""
        result = CliRunner().invoke(
            main,
            ["build", *argv, "--sign-key", str(self.pair.private), "--json"],
            env={"PIP_INDEX_URL": index_url()},
        )
        assert result.exit_code == 0, result.stderr[-3000:]
        document: dict[str, Any] = json.loads(result.stdout)
        self.made.append(document["pushed"])
        assert document["attestation"]["attested"] is True
        return document

    def provenance(self, pushed: str) -> dict[str, Any]:
        """The provenance statement cosign accepted for PUSHED (it fails the test if none)."""
        accepted = cosign_verify_attestation(pushed, self.pair.public, SLSA_PROVENANCE_V1)
        assert accepted.returncode == 0, accepted.stderr
        payload = json.loads(accepted.stdout.splitlines()[0])["payload"]
        statement: dict[str, Any] = json.loads(base64.b64decode(payload))
        return statement

    def verify(self, pushed: str, plan: str, base_digest: str | None = None) -> Result:
        """`imagekit verify PUSHED` with a policy asking for provenance of PLAN (on the base
        BASE_DIGEST if given) and no audit."""
        policy = self.folder / f"{plan}-provenance.yaml"
        text = f"version: 1\naudit: null\nprovenance:\n  plan: {plan}\n"
        policy.write_text(text + (f"  base: {base_digest}\n" if base_digest else ""))
        return CliRunner().invoke(
            main, ["verify", pushed, "--key", str(self.pair.public), "--policy", str(policy)]
        )

    def policy_holds(self, pushed: str, base_digest: str, plan: str) -> None:
        """The policy of PLAN on BASE_DIGEST accepts PUSHED (exit 0)."""
        verdict = self.verify(pushed, plan, base_digest)
        assert verdict.exit_code == 0, verdict.output


@pytest.fixture
def signer(pair: KeyPairFiles, created_refs: list[str], tmp_path: Path) -> Signer:
    return Signer(pair, created_refs, tmp_path)


def test_a_pushed_build_carries_signed_provenance(
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    created_refs: list[str],
    signer: Signer,
) -> None:
    tag = new_tag("demo", created_refs)
    push_repo = f"{registry.host}/imagekit-test/demo-provenance"
    created_refs.append(f"{push_repo}:{tag.rpartition(':')[2]}")
    document = signer.build(
        "demo", "--base", base_image.reference, "--tag", tag, "--push", push_repo
    )
    pushed = document["pushed"]
    records = read_records(workspace.ledger_path)
    assert records[-1].kind == "push"
    assert records[-1].details["attestation"] == document["attestation"]["envelope_digest"]

    statement = signer.provenance(pushed)
    definition = statement["predicate"]["buildDefinition"]
    plan_bytes = (workspace.plans_dir / "demo.yaml").read_bytes()
    assert definition["externalParameters"]["plan"] == {
        "name": "demo",
        "sha256": hashlib.sha256(plan_bytes).hexdigest(),
    }
    base_hex = base_image.digest.split(":")[1]
    assert {"sha256": base_hex} in [d["digest"] for d in definition["resolvedDependencies"]]

    signer.policy_holds(pushed, base_image.digest, "demo")
    refused = signer.verify(pushed, "other")
    assert refused.exit_code == 1 and "plan demo" in refused.stdout


def test_a_build_on_a_buildkitd_of_its_own_carries_provenance_naming_that_daemon(
    buildkitd: RunningBuildkitd,
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    signer: Signer,
) -> None:
    repo = f"{registry.host}/imagekit-test/remote-provenance"
    document = signer.build(
        "demo", "--base", base_image.reference, "--buildkit", buildkitd.address,
        "--push", repo,
    )  # fmt: skip
    pushed = document["pushed"]
    [record] = read_records(workspace.ledger_path)
    assert record.kind == "build"
    assert record.details["attestation"] == document["attestation"]["envelope_digest"]

    statement = signer.provenance(pushed)
    assert statement["subject"][0]["digest"] == {"sha256": pushed.split(":")[-1]}
    builder = statement["predicate"]["runDetails"]["builder"]
    assert builder["id"] == "https://imagekit.dev/builders/buildkit"
    assert builder["version"]["builder"] == "buildkit"
    assert builder["version"]["buildkit"] == buildkitd.address
    internal = statement["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["dockerfile_sha256"] == document["dockerfile_sha256"]
    assert internal["config_digest"] == document["image_id"]
    # Every file of the context but the overlays, as the build record pins them: the plan's
    # checks and imagekit's checker, by the exact bytes that ran.
    assert set(internal["rendered"]) == {"Dockerfile", "imagekit-assert.json", "imagekit-assert.py"}
    checker = hashlib.sha256(assertion_checker()).hexdigest()
    assert internal["rendered"]["imagekit-assert.py"] == checker
    assert internal["rendered"] == record.details["rendered_sha256"]
    signer.policy_holds(pushed, base_image.digest, "demo")


def test_a_registry_build_carries_provenance_naming_imagekits_assembler(
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    signer: Signer,
) -> None:
    name = overlay_only(workspace, "demo-overlay-signed")
    repo = f"{registry.host}/imagekit-test/registry-provenance"
    document = signer.build(
        name, "--builder", "registry", "--base", base_image.reference, "--push", repo,
        "--index",
    )  # fmt: skip
    pushed = document["pushed"]
    # With --index the tag names an index: the index and the manifest in it are both subjects.
    index = signer.provenance(f"{repo}@{document['index_digest']}")
    assert {s["digest"]["sha256"] for s in index["subject"]} == {
        pushed.split(":")[-1],
        document["index_digest"].split(":")[-1],
    }
    push = read_records(workspace.ledger_path)[-1]
    assert push.kind == "push"
    assert push.details["attestation"] == document["attestation"]["envelope_digest"]

    statement = signer.provenance(pushed)
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
    signer.policy_holds(pushed, base_image.digest, name)


def test_a_registry_that_takes_the_image_but_refuses_its_provenance_is_exit_3_records_kept(
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    pair: KeyPairFiles,
    created_refs: list[str],
) -> None:
    """The order every builder keeps (imagekit.builders.record.sign_then_record): the provenance
    signed first, the records next, naming its envelope, then attached, and exit 3 only after
    them (the result says the registry refused it). A
    registry that refuses the cosign tag while taking the image (a tag-immutability rule, as
    Harbor and ECR have) is a fault the real registry cannot produce: it stands in front."""
    name = overlay_only(workspace, "demo-overlay-refused")
    refuse = Fault(
        "status",
        path=r"/manifests/sha256-[0-9a-f]{64}\.att$",
        method="PUT",
        status=403,
        times=-1,
        body=b'{"errors":[{"code":"DENIED","message":"the tag is immutable"}]}',
    )
    with FaultProxy(registry.host, [refuse]) as proxy:
        repo = f"{proxy.host}/imagekit-test/refused-provenance"
        result = CliRunner().invoke(
            main,
            ["build", name, "--builder", "registry", "--base", base_image.reference,
             "--push", repo, "--sign-key", str(pair.private), "--json"],
        )  # fmt: skip
    assert result.exit_code == 3, result.stderr[-3000:]
    assert refuse.fired >= 1
    document = json.loads(result.stdout)
    created_refs.append(document["pushed"])
    assert document["attestation"]["attested"] is False
    assert "403" in document["not_attested"]["message"]
    build, push = read_records(workspace.ledger_path)[-2:]
    assert (build.kind, push.kind) == ("build", "push")
    assert document["ledger_seq"] == [build.seq, push.seq]
    said = push.details["attestation"]
    # written before the push of the provenance: the record names the envelope refused
    assert said.startswith("sha256:"), said
    # the image itself was pushed and tagged, and the refusal hid nothing
    assert push.images["pushed"] == document["pushed"]


def test_a_build_whose_records_are_refused_never_attaches_its_provenance(
    base_image: BaseImage,
    registry: RunningRegistry,
    workspace: Workspace,
    pair: KeyPairFiles,
    created_refs: list[str],
) -> None:
    """Sign after record: the ledger refuses the build's records (its last line is torn), so
    the signed provenance must not reach the registry (no .att tag on the pushed digest)."""
    name = overlay_only(workspace, "demo-overlay-torn")
    repo = f"{registry.host}/imagekit-test/torn-provenance"
    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_bytes(b'{"seq": 1, "torn')
    result = CliRunner().invoke(
        main,
        ["build", name, "--builder", "registry", "--base", base_image.reference,
         "--push", repo, "--sign-key", str(pair.private), "--json"],
    )  # fmt: skip
    assert result.exit_code != 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    created_refs.append(document["pushed"])
    digest = document["pushed"].rpartition("@")[2]
    held = tags(registry.host, "imagekit-test/torn-provenance")
    assert held and f"sha256-{digest.partition(':')[2]}.att" not in held, held
    assert "ledger_refused" in document and "attestation" not in document, document
