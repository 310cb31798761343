"""`imagekit audit --vuln-db`: the real command, the real image, an OSV export the tests wrote.

Each subject is an image built for real plus what the export must find in it. The demo image
is built from its plan (manifests/demo.yaml) on the base image fixture; the m3-vllm image from
its plan on the vllm seed replica (tests/support/replicas.py, cached by its inputs), the one
seed image whose audit accepts it (CPU_PASS_GPU_CLI_DEFERRED). Another image plugs in as one
more ``Subject``: how to build it, the audit status its probe ends with, and the
distributions the planted records must name in it (tests/support/osv_export.py holds the
records).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagekit.builders.buildkit import build_plan
from imagekit.builders.options import BuildOptions
from imagekit.ledger import read_records
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.osv_export import clean_records, days_ago, records, write_folder, write_zip

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGEKIT = str(Path(sys.executable).parent / "imagekit")
DEBIAN_SITE = "/usr/lib/python3/dist-packages"


@dataclass(frozen=True)
class Subject:
    """An image to audit and what the planted export must say about it."""

    name: str
    plan: str  # built on its base with --base, as `imagekit build PLAN --base BASE` would
    replica: str | None  # the seed replica it is built on; None: the base image fixture
    # (distribution, installed version) -> (the one id reported, where it lies in the image)
    planted: dict[tuple[str, str], tuple[str, str]]
    distributions: int
    status: str = "CPU_PASS"  # what the probe's checks end with, findings aside
    profile: str | None = None  # instead of the plan's


def _build_plan(engine: Engine, plan: str, base: str, root: Path) -> str:
    """A plan, built as `imagekit build PLAN --base BASE` would, into a scratch project."""
    (root / "manifests").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "manifests" / f"{plan}.yaml", root / "manifests" / f"{plan}.yaml")
    shutil.copytree(REPO_ROOT / "dockerfiles", root / "dockerfiles")
    tag = f"imagekit-test/osv-{plan}:{secrets.token_hex(4)}"
    build_plan(Workspace.at(root), plan, BuildOptions(tag=tag, base_override=base), engine=engine)
    return tag


SUBJECTS = [
    Subject(
        name="demo",
        plan="demo",
        replica=None,
        planted={
            ("pip", "23.0.1"): ("PYSEC-2023-228", DEBIAN_SITE),
            ("setuptools", "66.1.1"): ("CVE-2024-6345", DEBIAN_SITE),
        },
        distributions=6,
    ),
    Subject(
        name="m3-vllm",
        plan="m3-vllm",
        replica="vllm",
        # Debian's pip and setuptools, as in the demo image: the vllm replica is bookworm too.
        planted={
            ("pip", "23.0.1"): ("PYSEC-2023-228", DEBIAN_SITE),
            ("setuptools", "66.1.1"): ("CVE-2024-6345", DEBIAN_SITE),
        },
        # Debian's python3 packages the three removals left, av 16.1.0, the vllm stand-in
        # and numpy, which the stand-in declares as the real vllm wheel does.
        distributions=19,
        status="CPU_PASS_GPU_CLI_DEFERRED",
        profile=str(REPO_ROOT / "tests" / "support" / "replica_profiles" / "vllm-replica.yaml"),
    ),
]


@dataclass(frozen=True)
class Built:
    subject: Subject
    tag: str


@pytest.fixture(scope="module", params=SUBJECTS, ids=lambda s: s.name)
def built(
    request: pytest.FixtureRequest,
    engine: Engine,
    base_image: BaseImage,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Built]:
    subject: Subject = request.param
    base = base_image.reference
    if subject.replica:
        base = request.getfixturevalue("seed_replica")(subject.replica).reference
    tag = _build_plan(engine, subject.plan, base, tmp_path_factory.mktemp(f"build-{subject.name}"))
    try:
        yield Built(subject, tag)
    finally:
        subprocess.run([engine.client_path, "rmi", tag], capture_output=True, check=False)


def _audit(
    built: Built, workspace: Workspace, *args: str, as_json: bool = True
) -> tuple[int, Any, str]:
    """The real command, run in the test's project (the workspace fixture's IMAGEKIT_*
    variables reach it), so its evidence and ledger records land there."""
    argv = [IMAGEKIT, "audit", built.tag, "--plan", built.subject.plan, *args]
    argv += ["--json"] if as_json else []
    if built.subject.profile:
        argv += ["--profile", built.subject.profile]
    assert os.environ.get("IMAGEKIT_ROOT") == str(workspace.root)
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, check=False, cwd=workspace.root
    )
    doc = json.loads(proc.stdout) if as_json and proc.stdout.strip() else proc.stdout
    return proc.returncode, doc, proc.stderr


def test_findings_name_the_planted_distributions(
    built: Built, tmp_path: Path, workspace: Workspace
) -> None:
    export = write_zip(tmp_path / "all.zip", records(days_ago(3)))
    code, doc, err = _audit(built, workspace, "--vuln-db", str(export))

    assert code == 1, err  # --fail-on findings is the default
    assert doc["status"] == built.subject.status  # the probe passed; the findings alone fail it
    vulns = doc["vulnerabilities"]
    assert vulns["status"] == "findings", vulns["reason"]
    assert vulns["fails_audit"] and vulns["fail_on"] == "findings"
    assert vulns["audited"] == built.subject.distributions and vulns["not_audited"] == []
    found = {(f["name"], f["version"]): (f["id"], f["locations"]) for f in vulns["findings"]}
    assert found == {k: (i, [where]) for k, (i, where) in built.subject.planted.items()}
    pip = next(f for f in vulns["findings"] if f["name"] == "pip")
    assert pip["aliases"] == ["CVE-2023-5752", "GHSA-mq26-g339-26xf"]  # two records, one flaw
    assert pip["fix_versions"] == ["23.3"]
    assert (
        vulns["database"]["digest"] == "sha256:" + hashlib.sha256(export.read_bytes()).hexdigest()
    )
    assert "days old" in vulns["reason"]

    records_ = read_records(workspace.ledger_path)
    assert [(r.kind, r.status) for r in records_] == [
        ("audit", built.subject.status),
        ("vulnerability-scan", "findings"),
    ]
    scan = records_[1]
    assert scan.details["database"]["digest"] == vulns["database"]["digest"]
    assert scan.details["report"]["finding_ids"] == sorted(i for i, _ in found.values())
    assert "offline OSV export sha256:" in scan.scope


def test_fail_on_decides_the_exit_code(built: Built, tmp_path: Path, workspace: Workspace) -> None:
    export = write_zip(tmp_path / "all.zip", records(days_ago(3)))
    never, doc, err = _audit(built, workspace, "--vuln-db", str(export), "--fail-on", "never")
    assert never == 0, err
    assert doc["vulnerabilities"]["status"] == "findings"
    assert not doc["vulnerabilities"]["fails_audit"]
    fixable, doc, err = _audit(built, workspace, "--vuln-db", str(export), "--fail-on", "fixable")
    assert fixable == 1, err  # pip has a fixed version (23.3)


def test_clean_against_an_export_without_them_and_a_new_record_per_database(
    built: Built, tmp_path: Path, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder form too; a later audit against another database is a new record."""
    export = write_folder(tmp_path / "PyPI", clean_records(days_ago(2)))
    with monkeypatch.context() as env:
        env.setenv("IMAGEKIT_VULN_DB", str(export))
        code, doc, err = _audit(built, workspace)
    assert code == 0, err
    vulns = doc["vulnerabilities"]
    assert vulns["status"] == "clean", vulns["reason"]
    assert vulns["reason"].startswith(
        f"no known vulnerabilities in {built.subject.distributions} distributions (the database of "
    )
    assert vulns["reason"].endswith(", 2 days old)")
    assert vulns["findings"] == [] and vulns["database"]["kind"] == "folder"

    planted = write_zip(tmp_path / "all.zip", records(days_ago(1)))
    code, doc, err = _audit(built, workspace, "--vuln-db", str(planted), "--fail-on", "never")
    assert code == 0 and doc["vulnerabilities"]["status"] == "findings", err
    scans = [r for r in read_records(workspace.ledger_path) if r.kind == "vulnerability-scan"]
    assert [r.status for r in scans] == ["clean", "findings"]
    assert scans[0].details["database"]["digest"] != scans[1].details["database"]["digest"]


def test_an_old_database_is_unknown_never_clean(
    built: Built, tmp_path: Path, workspace: Workspace
) -> None:
    export = write_zip(tmp_path / "all.zip", clean_records(days_ago(45)))
    code, doc, err = _audit(built, workspace, "--vuln-db", str(export))
    assert code == 0, err  # unknown is reported, not a failed check
    vulns = doc["vulnerabilities"]
    assert vulns["status"] == "unknown"
    assert "45 days old, older than --vuln-db-max-age 30 days" in vulns["reason"]
    code, doc, err = _audit(built, workspace, "--vuln-db", str(export), "--vuln-db-max-age", "60")
    assert doc["vulnerabilities"]["status"] == "clean", err
    statuses = [r.status for r in read_records(workspace.ledger_path)]
    status = built.subject.status
    assert statuses == [status, "unknown", status, "clean"]


def test_a_database_that_does_not_parse_is_exit_2_and_nothing_is_recorded(
    built: Built, tmp_path: Path, workspace: Workspace
) -> None:
    entries = clean_records(days_ago(1))
    entries[0]["affected"][0]["ranges"][0]["events"] = [{"fixed": "1.0"}]  # no introduced
    export = write_zip(tmp_path / "all.zip", entries)
    code, doc, err = _audit(built, workspace, "--vuln-db", str(export))
    assert code == 2
    assert f"{export}!{entries[0]['id']}.json: not an OSV record" in err
    assert "must contain an introduced event" in err
    assert doc["error"]["type"] == "VulnDatabaseError"
    assert not workspace.ledger_path.exists() or read_records(workspace.ledger_path) == []


def test_without_a_database_the_online_path_says_unknown_here(
    built: Built, workspace: Workspace
) -> None:
    """No vulnerability service answers on these machines: pip-audit runs, and the status is
    unknown with its error, as before."""
    code, doc, err = _audit(built, workspace)
    assert code == 0, err
    vulns = doc["vulnerabilities"]
    assert vulns["status"] == "unknown", vulns["reason"]
    assert vulns["source"] == "pip-audit (its default vulnerability service)"
    assert vulns["database"] is None and vulns["command"][0] == "pip-audit"


def test_the_human_output_lists_each_finding(
    built: Built, tmp_path: Path, workspace: Workspace
) -> None:
    export = write_zip(tmp_path / "all.zip", records(days_ago(3)))
    code, out, err = _audit(built, workspace, "--vuln-db", str(export), as_json=False)
    assert code == 1, err
    planted = built.subject.planted
    assert f"  vulnerabilities: findings: {len(planted)} known vulnerabilities in " in out
    for (name, version), (vid, where) in planted.items():
        line = next(x for x in out.splitlines() if x.startswith(f"    FINDING  {name} {version} "))
        assert f" {vid} " in line and line.endswith(f" at {where}"), line
    assert "  --fail-on findings: the findings fail the audit" in out
