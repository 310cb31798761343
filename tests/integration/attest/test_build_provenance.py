"""`imagekit build --push --sign-key`: SLSA v1 provenance beside the pushed image, accepted
by cosign (`--type slsaprovenance1`) and by `imagekit verify` with a provenance policy."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.attest.predicates import SLSA_PROVENANCE_V1
from imagekit.cli import main
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.integration.build.test_buildkit import _tag
from tests.support.base_image import BaseImage
from tests.support.demo_variants import index_url
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
