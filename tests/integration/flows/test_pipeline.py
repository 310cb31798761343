"""`imagekit pipeline demo` end to end: the real engine, BuildKit, two real registries.

What the pipeline promises and each test checks: every stage runs in order and passes on the
demo plan; each stage appends its own record and the ledger verifies; a gate that says no
stops the run and every later stage is "not run", never passed.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagekit.attest.keys import generate_key_pair
from imagekit.audit.vulns import VulnPolicy
from imagekit.flows.pipeline import (
    FAILED,
    NOT_RUN,
    PASSED,
    SKIPPED,
    STAGES,
    PipelineOptions,
    run_pipeline,
)
from imagekit.kinds.audit import AUDIT_V1
from imagekit.kinds.final_pull import FINAL_PULL_V1
from imagekit.kinds.push import SLSA_PROVENANCE_V1
from imagekit.ledger import read_records, verify
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.engine_refs import pipeline_into_fresh_registries, remember_images
from tests.support.gotools import cosign_verify_attestation
from tests.support.osv_export import days_ago, records, write_zip
from tests.support.registries import RunningRegistry, free_port

pytestmark = pytest.mark.integration

IMAGEKIT = str(Path(sys.executable).parent / "imagekit")


@dataclass(frozen=True)
class Demo:
    """The demo plan in the test workspace on the base fixture, with a private DOCKER_CONFIG;
    what its runs leave in the engine goes into ``refs``."""

    workspace: Workspace
    base: BaseImage
    make_registry: Callable[..., RunningRegistry]
    refs: list[str]


@pytest.fixture
def demo(
    base_image: BaseImage,
    make_registry: Callable[..., RunningRegistry],
    workspace: Workspace,
    docker_config: Path,
    created_refs: list[str],
) -> Demo:
    return Demo(workspace, base_image, make_registry, created_refs)


def _passed_end_to_end(workspace: Workspace, document: dict[str, Any], mirror: str) -> list[Any]:
    """What every passing run of the demo shows in its summary and the ledger: each stage in
    order and passed (the GPU preflight skipped), its evidence there, each stage's record
    once and in order, the final pull verified, the ledger verifying. The run's records."""
    assert document["ok"] is True and document["exit_code"] == 0
    stages = document["stages"]
    assert [s["stage"] for s in stages] == list(STAGES)
    # No GPU on these machines: the GPU preflight is skipped, saying so, and counts as ok.
    expected = [SKIPPED if s == "gpu-preflight" else PASSED for s in STAGES]
    assert [s["status"] for s in stages] == expected, stages
    by_stage = {s["stage"]: s for s in stages}
    assert by_stage["gpu-preflight"]["detail"].startswith("no GPU visible on this host")
    assert by_stage["audit"]["detail"] in ("CPU_PASS", "CPU_PASS_GPU_CLI_DEFERRED")
    assert by_stage["mirror"]["detail"].startswith(("identical", "content-identical"))
    final = document["final_reference"]
    assert final.startswith(f"{mirror}/imagekit/demo@sha256:")
    assert by_stage["final-pull"]["digest"] == final.partition("@")[2]
    for stage in stages:
        if stage["evidence"]:
            assert (workspace.root / stage["evidence"]).exists() or Path(
                stage["evidence"]
            ).exists(), stage

    records = read_records(workspace.ledger_path)
    added = [r for r in records if r.seq in document["ledger_records"]]
    kinds = [r.kind for r in added]
    for kind in ("build", "audit", "push", "mirror-verify", "final-pull"):
        assert kinds.count(kind) == 1, kinds  # each stage recorded itself, once
    assert kinds.index("build") < kinds.index("audit") < kinds.index("push")
    assert kinds.index("push") < kinds.index("mirror-verify") < kinds.index("final-pull")
    assert {r.plan for r in added} == {"demo"}  # `ledger show --plan demo` finds them all
    pulled = next(r for r in added if r.kind == "final-pull")
    assert pulled.status == "verified" and pulled.images["image"] == final
    assert verify(workspace).ok
    assert "pipeline.json" in document["evidence"]
    assert Path(document["evidence"]).exists()
    return added


def test_pipeline_demo_end_to_end(demo: Demo, tmp_path: Path) -> None:
    """Two whole runs, one pair of registries (each whole run into fresh registries costs the
    push of the demo image from the engine). The first, `imagekit pipeline demo --json` with
    IMAGEKIT_SIGNING_KEY (the --sign-key of every stage), passes every stage and reaches each
    stage that proves something: the push signs the build's provenance and the audit's
    verdict and scan onto the pushed digest, the mirror binds its copy, the final pull signs
    itself; cosign and `imagekit verify` then accept the final image (the mirror's) from the
    registry alone. The second, unsigned, runs into the same, now warm, registries (as a
    second `make demo` does) with a vulnerability database whose findings are known and
    --fail-on never: the findings are recorded and the image goes on to the push and passes."""
    workspace = demo.workspace
    pair = generate_key_pair(tmp_path / "pipeline")
    push_to, mirror_to = demo.make_registry("none"), demo.make_registry("none")
    proc = subprocess.run(
        [IMAGEKIT, "pipeline", "demo", "--registry", push_to.host, "--mirror", mirror_to.host,
         "--base", demo.base.reference, "--json"],
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
        env={**os.environ, "IMAGEKIT_SIGNING_KEY": str(pair.private)},
    )  # fmt: skip
    document = json.loads(proc.stdout)  # exactly one JSON document, nothing else
    remember_images(document, demo.refs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    added = {r.kind: r for r in _passed_end_to_end(workspace, document, mirror_to.host)}

    by_stage = {s["stage"]: s for s in document["stages"]}
    assert "provenance and audit attested" in by_stage["push"]["detail"]
    push = added["push"].details
    for key in ("attestation", "audit_attestation", "vuln_attestation"):
        assert str(push[key]).startswith("sha256:"), (key, push)
    assert str(added["mirror-verify"].details["attestation"]).startswith("sha256:")
    assert str(added["final-pull"].details["attestation"]).startswith("sha256:")

    final = document["final_reference"]
    pushed = str(added["push"].images["pushed"])
    for reference in (pushed, final):  # the mirror carries the pushed image's attestations
        for predicate_type in (SLSA_PROVENANCE_V1, AUDIT_V1):
            accepted = cosign_verify_attestation(reference, pair.public, predicate_type)
            assert accepted.returncode == 0, (reference, predicate_type, accepted.stderr)
    accepted = cosign_verify_attestation(final, pair.public, FINAL_PULL_V1)
    assert accepted.returncode == 0, accepted.stderr
    statement = json.loads(base64.b64decode(json.loads(accepted.stdout.splitlines()[0])["payload"]))
    assert statement["subject"][0]["digest"] == {"sha256": final.rpartition(":")[2]}

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\naudit:\n  status: [CPU_PASS, CPU_PASS_GPU_CLI_DEFERRED]\n"
        f"provenance:\n  plan: demo\n  base: {demo.base.digest}\n"
    )
    for reference in (pushed, final):
        for extra in ([], ["--policy", str(policy)]):
            gate = subprocess.run(
                [IMAGEKIT, "verify", reference, "--key", str(pair.public), *extra],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert gate.returncode == 0, (reference, extra, gate.stdout, gate.stderr)

    # Every attestation the run signed is named by a record, so `ledger sync` imports none.
    synced = subprocess.run(
        [IMAGEKIT, "ledger", "sync", "--key", str(pair.public), "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["imported"] == []

    # The second run: unsigned, into the same warm registries, --vuln-db with --fail-on never.
    database = write_zip(tmp_path / "all.zip", records(days_ago(1)))
    again = run_pipeline(
        workspace,
        "demo",
        PipelineOptions(
            registry=push_to.host,
            mirror=mirror_to.host,
            base_override=demo.base.reference,
            vulns=VulnPolicy(database=database, fail_on="never"),
        ),
    )
    remember_images(again.to_json(), demo.refs)
    assert again.ok, [s.to_json() for s in again.stages]
    assert again.final_reference is not None
    assert again.ledger_seq_before == max(document["ledger_records"])
    unsigned = {r.kind: r for r in _passed_end_to_end(workspace, again.to_json(), mirror_to.host)}
    # The same findings --fail-on findings stops on (the test below) are recorded; no key,
    # nothing attested.
    assert unsigned["vulnerability-scan"].status == "findings"
    assert not unsigned["push"].details.get("attestation")


def test_rejected_build_stops_the_pipeline(demo: Demo) -> None:
    workspace = demo.workspace
    plan = workspace.plans_dir / "demo.yaml"
    text = plan.read_text()
    needle = "    - argv: [imagekit-demo-hello]\n      exit_code: 0\n"
    assert needle in text
    plan.write_text(text.replace(needle, "    - argv: [imagekit-demo-hello]\n      exit_code: 7\n"))
    result = pipeline_into_fresh_registries(
        workspace, "demo", demo.base.reference, demo.make_registry, demo.refs
    )
    statuses = {s.stage: s.status for s in result.stages}
    assert statuses["doctor"] == PASSED
    assert statuses["build"] == FAILED
    assert [statuses[s] for s in STAGES[2:]] == [NOT_RUN] * (len(STAGES) - 2)
    assert result.exit_code == 1 and not result.ok
    kinds = [r.kind for r in read_records(workspace.ledger_path)]
    assert "rejected-build" in kinds
    assert not {"push", "mirror-verify", "final-pull", "audit"} & set(kinds)


def test_doctor_no_stops_before_the_build(demo: Demo) -> None:
    workspace = demo.workspace
    nothing_there = f"127.0.0.1:{free_port()}"
    result = run_pipeline(
        workspace,
        "demo",
        PipelineOptions(
            registry=demo.make_registry("none").host,
            mirror=nothing_there,
            base_override=demo.base.reference,
        ),
    )
    statuses = {s.stage: s.status for s in result.stages}
    assert statuses["doctor"] == FAILED
    doctor = next(s for s in result.stages if s.stage == "doctor")
    assert "registry mirror" in doctor.detail
    assert all(statuses[s] == NOT_RUN for s in STAGES[1:])
    assert result.exit_code == 1
    assert not workspace.ledger_path.exists() or not read_records(workspace.ledger_path)


def test_known_vulnerabilities_stop_the_pipeline_before_the_push(
    demo: Demo, tmp_path: Path
) -> None:
    """`imagekit audit --vuln-db` exits 1 on the demo image's Debian pip 23.0.1 and
    setuptools 66.1.1; the pipeline's audit stage did not look at the scan, so the image was
    pushed. Now the export and --fail-on reach the stage and its findings stop the run."""
    workspace, created_refs = demo.workspace, demo.refs
    database = write_zip(tmp_path / "all.zip", records(days_ago(1)))
    push_to, mirror_to = demo.make_registry("none"), demo.make_registry("none")
    proc = subprocess.run(
        [IMAGEKIT, "pipeline", "demo", "--registry", push_to.host, "--mirror", mirror_to.host,
         "--base", demo.base.reference, "--vuln-db", str(database), "--json"],
        capture_output=True, text=True, timeout=800, check=False,
    )  # fmt: skip
    document = json.loads(proc.stdout)
    remember_images(document, created_refs)
    assert proc.returncode == 1, proc.stderr[-3000:]
    by_stage = {s["stage"]: s for s in document["stages"]}
    assert by_stage["build"]["status"] == PASSED
    audit = by_stage["audit"]
    assert audit["status"] == FAILED
    assert audit["detail"] in (
        f"{status}; 2 vulnerability findings (--fail-on findings)"
        for status in ("CPU_PASS", "CPU_PASS_GPU_CLI_DEFERRED")
    )
    assert [by_stage[s]["status"] for s in STAGES[3:]] == [NOT_RUN] * (len(STAGES) - 3)
    kinds = [r.kind for r in read_records(workspace.ledger_path)]
    assert kinds.count("vulnerability-scan") == 1
    scan = next(r for r in read_records(workspace.ledger_path) if r.kind == "vulnerability-scan")
    assert scan.status == "findings"
    assert not {"push", "mirror-verify", "final-pull"} & set(kinds)
