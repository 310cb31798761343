"""One registration of the kinds of record, and everything that derives from it.

What docs/ARCHITECTURE.md "Adding a stage" promises: a kind is its spec module and one line of
``imagekit.kinds.KINDS``. These tests hold every registered spec complete and reachable from
the record model, ``ledger sync``, the lock, the policy file and the gate, and hold that no
other module writes a predicate type out: a kind left out of a hand-made list was how a stage
failed silently before.
"""

from __future__ import annotations

import importlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.attest.collect import Collected, VerifiedAttestation
from imagekit.attest.keys import public_key_of
from imagekit.attest.predicates import SCHEMAS
from imagekit.attest.statement import Statement
from imagekit.gate.policy import DEFAULT_POLICY, Policy, rules
from imagekit.kinds import KINDS, by_predicate
from imagekit.kinds.details import RecordDetails
from imagekit.kinds.spec import KindSpec
from imagekit.ledger import append_record
from imagekit.ledger import record as record
from imagekit.ledger.lockfile import render_lock
from imagekit.ledger.sync import _record_of
from imagekit.refs import Digest
from imagekit.workspace import Workspace

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "imagekit"
DIGEST = Digest("sha256:" + "a" * 64)
NOW = datetime(2026, 12, 1, 3, 4, 5, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
ATTESTING = [spec for spec in KINDS if spec.predicate is not None]

#: One predicate of each type `ledger sync` imports, as its signer writes it. A kind that
#: attests and is imported adds its own here (the test below says so when one is missing).
PREDICATES: dict[str, dict[str, Any]] = {
    "audit": {
        "status": "CPU_PASS", "status_sentence": "CPU_PASS: all 1 checks passed",
        "scope": "CPU-only checks", "profile": "generic", "emulated": False,
        "checks": [{"name": "pip-check", "status": "PASS", "kind": "pip", "proves": "deps"}],
        "failing": [], "deferred": [], "skipped": [],
        "vulnerabilities": {"status": "clean", "findings": 0, "fixable": 0, "finding_ids": []},
        "evidence": {}, "audited_at": NOW, "imagekit_version": "test",
    },
    "vulnerability-scan": {"scanner": {"result": {"status": "findings"}}},
    "mirror-verify": {
        "source": {"reference": f"s.example/r@{DIGEST}", "manifest_digest": str(DIGEST),
                   "config_digest": str(DIGEST)},
        "destination": {"reference": f"d.example/r@{DIGEST}", "manifest_digest": str(DIGEST),
                        "config_digest": str(DIGEST)},
        "verdict": "identical", "message": "identical", "diff_ids": [],
        "scope": "diffIDs of every layer", "verified_at": NOW, "imagekit_version": "test",
    },
    "final-pull": {
        "status": "verified", "scope": "the engine holds it", "runtime": "engine",
        "node": "gpu-node-07", "checks": [], "pulled_at": NOW, "imagekit_version": "test",
    },
    "gpu-preflight": {
        "status": "GPU_PREFLIGHT_PASS", "scope": "a hardware and communication check",
        "where": "image", "node": "gpu-node-07", "image_id": str(DIGEST), "world_size": 8,
        "gpus": [{"rank": r, "name": "NVIDIA H20", "memory_gib": 95.6, "capability": "9.0"}
                 for r in range(8)],
        "expected": {"count": 8}, "checks": [{"name": "gpus", "status": "PASS", "reason": "8"}],
        "failing": [], "all_reduce": [
            {"size_mib": 128.0, "slowest_rank_mean_us": 1000.0, "algbw_gbps": 134.2,
             "busbw_gbps": 234.9, "all_elements_right": True}],
        "versions": {"torch": "2.11.0+cu130"}, "preflight_at": NOW, "imagekit_version": "test",
    },
}  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)


def _key() -> Any:
    return public_key_of(ec.generate_private_key(ec.SECP256R1()), "test.pub")


def test_every_kind_module_holds_its_specs_and_the_tuple_registers_each() -> None:
    registered = {id(spec) for spec in KINDS}
    modules = sorted(p.stem for p in (PACKAGE / "kinds").glob("*.py"))
    found = 0
    for name in modules:
        module = importlib.import_module(f"imagekit.kinds.{name}")
        specs = [v for v in vars(module).values() if isinstance(v, KindSpec)]
        if name in ("__init__", "spec", "details"):
            continue
        assert specs, f"imagekit/kinds/{name}.py holds no kind spec"
        assert all(id(s) in registered for s in specs), f"a spec of {name} is not in KINDS"
        found += len(specs)
    assert found == len(KINDS) == len({spec.name for spec in KINDS})


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: s.name)
def test_every_spec_is_complete(spec: KindSpec) -> None:
    assert issubclass(spec.details, RecordDetails)
    fields = spec.details.model_fields
    free = spec.details.model_config.get("extra") == "allow"
    assert free or spec.details.model_config.get("extra") == "forbid"
    assert free or set(spec.identifier_keys) <= set(fields), spec.identifier_keys
    assert spec.failing <= set(spec.statuses) or not spec.statuses
    if spec.predicate is not None and spec.predicate.model is not None:
        assert spec.predicate.schema is not None and (SCHEMAS / spec.predicate.schema).is_file()
    if spec.policy is not None:
        assert spec.policy.key in Policy.model_fields
    if spec.lock_column is not None:
        assert spec.about_images, "a lock column shows records about the plan's images"


def test_names_predicate_types_columns_and_policy_keys_are_each_one_kind_s() -> None:
    for listed in (
        [s.name for s in KINDS],
        [s.predicate.uri for s in ATTESTING if s.predicate is not None],
        [s.lock_column for s in KINDS if s.lock_column],
        [s.policy.key for s in KINDS if s.policy is not None],
    ):
        assert len(listed) == len(set(listed)), listed


def test_the_record_model_derives_from_the_tuple() -> None:
    assert record.KINDS == tuple(spec.name for spec in KINDS)
    assert record.DETAILS_MODELS == {spec.name: spec.details for spec in KINDS}
    for spec in KINDS:
        assert record.details_model(spec.name, "any") is spec.details


def test_a_record_names_an_image_by_its_kind_s_identifier_keys(ws: Workspace) -> None:
    for spec in KINDS:
        for key in spec.identifier_keys:
            value: Any = [f"r/x@{DIGEST}"] if key == "repo_digests" else str(DIGEST)
            made = append_record(
                ws, spec.name, plan="p", images={}, status="x", scope="", details={key: value}
            )
            assert any(str(DIGEST) in text for text in made.identifiers()), (spec.name, key)


@pytest.mark.parametrize("spec", ATTESTING, ids=lambda s: s.name)
def test_sync_imports_each_attested_kind_as_its_spec_says(spec: KindSpec) -> None:
    assert spec.predicate is not None and by_predicate(spec.predicate.uri) is spec
    statement = Statement((), spec.predicate.uri, PREDICATES.get(spec.name, {}))
    made = _record_of(VerifiedAttestation(DIGEST, statement, _key()), "imported: test")
    if spec.predicate.imports is None:
        assert made is None, f"{spec.name}'s predicate is not imported"
        return
    assert spec.name in PREDICATES, f"add a {spec.name} predicate to PREDICATES"
    assert made is not None and made[0] == spec.name
    found = made[1]
    assert isinstance(found.details, spec.details)
    marks = {k: found.details.to_json().get(k) for k in ("attestation", "imported")}
    assert marks == {"attestation": str(DIGEST), "imported": "imported: test"}
    spec.details.model_validate(found.details.to_json())  # a record the ledger takes


def test_the_lock_shows_every_kind_s_column(ws: Workspace) -> None:
    append_record(ws, "build", plan="p", images={"image": f"r/p@{DIGEST}"}, status="built",
                  scope="", details={"image_id": str(DIGEST)})  # fmt: skip
    section = render_lock(ws)["images"]["p"]
    for spec in KINDS:
        if spec.lock_column:
            assert spec.lock_column in section, spec.name


@pytest.mark.parametrize(
    ("spec", "status"),
    [(s, status) for s in KINDS for status in sorted(s.failing)],
    ids=lambda v: v.name if isinstance(v, KindSpec) else str(v),
)
def test_every_failed_status_of_every_kind_is_an_investigation(
    ws: Workspace, spec: KindSpec, status: str
) -> None:
    append_record(ws, "build", plan="p", images={"image": "r/p:1"}, status="built", scope="")
    failed = append_record(
        ws, spec.name, plan="p", images={"image": "r/elsewhere:old"}, status=status, scope="why"
    )
    found = render_lock(ws)["images"]["p"]["investigations"]
    assert [(i["kind"], i["status"], i["record_seq"]) for i in found] == [
        (spec.name, status, failed.seq)
    ]


def test_the_policy_model_and_the_gate_s_rules_are_the_kinds_requirements() -> None:
    keys = [s.policy.key for s in KINDS if s.policy is not None]
    assert list(Policy.model_fields) == ["version", *keys]
    defaults = [s for s in KINDS if s.policy is not None and s.policy.default is not None]
    assert len(rules(DEFAULT_POLICY)) == len(defaults)
    everything = Policy.model_validate(
        {"audit": {}, "vulnerabilities": "none", "provenance": {"plan": "p"},
         "gpu_preflight": {"min_gpus": 8}}
    )  # fmt: skip
    made = rules(everything)
    # every requirement but mirror_binding, which names keys and makes no rule
    assert len(made) == len([s for s in KINDS if s.policy is not None and s.policy.rule])
    # Each rule decides on the attestations it is given (here none: each says so).
    for rule in made:
        said = rule.evaluate(Collected("nowhere", (), ()), datetime.now(UTC))
        assert said and not any(r.held for r in said)


def test_no_module_but_its_kind_s_writes_a_predicate_type_out() -> None:
    uris = {s.predicate.uri: s.name for s in ATTESTING if s.predicate is not None}
    homes = {
        uri: {p for p in (PACKAGE / "kinds").glob("*.py") if uri in p.read_text()} for uri in uris
    }
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE / "kinds":
            continue
        text = path.read_text()
        for uri in uris:
            assert uri not in text, f"{path.relative_to(REPO)} writes {uri} out"
    for uri, found in homes.items():
        assert len(found) == 1, f"{uri} is written in {sorted(p.name for p in found)}"


def test_the_architecture_page_says_what_adding_a_stage_touches() -> None:
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    section = page[page.index("## Adding a stage") : page.index("## The command-line contract")]
    places = re.findall(r"^\d\. ", section, re.M)
    assert len(places) == 6, "six places, numbered"
    for named in ("imagekit/kinds/", "KINDS", "PIPELINE", "_COMMANDS", "imagekit/__init__.pyi"):
        assert named in section, named
    for path in re.findall(r"`(imagekit/[\w/.]+\.pyi?)`", section):
        assert (REPO / path).exists(), path
