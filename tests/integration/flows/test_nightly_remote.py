"""`imagekit nightly --buildkit ADDR`: the night's candidates built on a shared BuildKit, and
a matrix of nights (one plan a job) whose ledgers come back together.

Everything is real and on loopback: the session's registry and base image, a buildkitd the
module starts (tests/integration/conftest.py), the engine (which audits and pulls, and never
builds here). The committed state is one workspace where both plans were accepted (built on
the daemon, audited, pulled and recorded); each night runs in a copy of it, as a CI job runs
in its own checkout, through the command line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.audit.stage import AuditRequest, audit
from imagekit.builders.choice import build_image
from imagekit.builders.options import BuildOptions
from imagekit.cli import main
from imagekit.ledger import LedgerRecord, read_records
from imagekit.pull import final_pull
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.buildkitd import RunningBuildkitd
from tests.support.demo_variants import index_url
from tests.support.engine_refs import removing
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
PLANS = ("demo", "demo-b")
#: what a night of one plan appends, in order
NIGHT_KINDS = ("build", "audit", "vulnerability-scan", "note")


@dataclass(frozen=True)
class Committed:
    """The state a CI checkout starts from: both plans accepted, the ledger saying so."""

    workspace: Workspace
    base: str
    accepted: dict[str, str]  # plan -> the accepted image, repo@digest


def _project(root: Path) -> Workspace:
    """The demo plan and a copy of it (``demo-b``: another image title, the same steps up to
    the label), with their build contexts."""
    for folder in ("manifests", "evidence", "dockerfiles"):
        (root / folder).mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "manifests" / "demo.yaml", root / "manifests" / "demo.yaml")
    data = yaml.safe_load((REPO_ROOT / "manifests" / "demo.yaml").read_text())
    [labels] = [s for s in data["steps"] if s["kind"] == "labels"]
    labels["labels"]["org.opencontainers.image.title"] = "imagekit demo b"
    data["name"] = "demo-b"
    (root / "manifests" / "demo-b.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    for name in PLANS:
        shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", root / "dockerfiles" / name)
    return Workspace.at(root)


@pytest.fixture(scope="module")
def committed(
    engine: Engine,
    buildkitd: RunningBuildkitd,
    base_image: BaseImage,
    registry: RunningRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Committed]:
    ws = _project(tmp_path_factory.mktemp("nightly-remote") / "committed")
    accepted: dict[str, str] = {}
    with removing(engine) as made:
        for name in PLANS:
            built = build_image(
                ws,
                name,
                BuildOptions(
                    buildkit=buildkitd.address,
                    push=f"{registry.host}/imagekit-test/night-{name}",
                    base_override=base_image.reference,
                    index_url=index_url(),
                ),
            )
            assert built.pushed is not None
            made.append(built.pushed)
            audit(ws, AuditRequest(ref=built.pushed, plan=name))
            assert final_pull(ws, built.pushed, record=True, plan=name).ok
            accepted[name] = built.pushed
        yield Committed(ws, base_image.reference, accepted)


def _checkout(committed: Committed, root: Path) -> Workspace:
    shutil.copytree(committed.workspace.root, root)
    return Workspace.at(root)


def _imagekit(ws: Workspace, *argv: str) -> tuple[int, str, str]:
    """``imagekit ARGV`` in ``ws``, as a CI job runs it there."""
    env: dict[str, str | None] = {
        "IMAGEKIT_ROOT": str(ws.root),
        "IMAGEKIT_LEDGER": str(ws.ledger_path),
        "PIP_INDEX_URL": index_url(),
        **dict.fromkeys(
            ("IMAGEKIT_PLANS_DIR", "IMAGEKIT_DOCKERFILES_DIR", "IMAGEKIT_EVIDENCE_DIR")
        ),
    }
    result = CliRunner().invoke(main, list(argv), env=env)
    return result.exit_code, result.stdout, result.stderr


def _night(
    ws: Workspace, committed: Committed, plan: str, buildkitd: RunningBuildkitd, *extra: str
) -> tuple[dict[str, object], list[LedgerRecord]]:
    """One plan's night on the shared daemon: its JSON document and the records it appended."""
    before = len(read_records(ws.ledger_path))
    code, out, err = _imagekit(
        ws, "nightly", "--plans", plan, "--base", committed.base,
        "--buildkit", str(buildkitd.tcp_address), *extra, "--json",
    )  # fmt: skip
    assert code == 0, err[-4000:]
    [night] = json.loads(out)["plans"]
    return night, read_records(ws.ledger_path)[before:]


def _engine_names(engine: Engine) -> set[str]:
    out = subprocess.run(
        [engine.client_path, "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return set(out.split())


def test_a_night_on_a_buildkit_of_its_own_builds_without_the_engine_and_records_the_night(
    engine: Engine,
    buildkitd: RunningBuildkitd,
    committed: Committed,
    tmp_path: Path,
    created_refs: list[str],
) -> None:
    ws = _checkout(committed, tmp_path / "job")
    night, records = _night(ws, committed, "demo", buildkitd, "--keep-images")
    candidate = str(night["candidate"])
    created_refs.append(candidate)  # the audit pulled it into the engine; kept as asked
    assert night["status"] in ("reproducible", "equivalent"), night
    assert night["builder"] == "buildkit"
    assert night["audit_status"] == night["baseline"]["audit_status"]  # type: ignore[index]
    repo = committed.accepted["demo"].partition("@")[0]
    assert re.fullmatch(rf"{re.escape(repo)}@sha256:[0-9a-f]{{64}}", candidate)
    # The night's records: the daemon's build (no push record: BuildKit pushed it by
    # digest), the candidate's audit and its vulnerability scan (unknown: no service
    # answers here), and the night's note naming the candidate.
    assert [(r.kind, r.status) for r in records] == [
        ("build", "built"),
        ("audit", night["audit_status"]),
        ("vulnerability-scan", "unknown"),
        ("note", f"nightly-{night['status']}"),
    ]
    build, note = records[0], records[-1]
    assert build.details["builder"] == "buildkit"
    assert f"on the BuildKit daemon at {buildkitd.tcp_address}" in build.scope
    assert build.images["image"] == candidate
    assert note.images["pushed"] == candidate and note.details["builder"] == "buildkit"
    assert note.scope.startswith(
        f"a rebuild without cache on the BuildKit daemon at {buildkitd.tcp_address} on the "
        "pinned base"
    )
    log = Path(build.evidence.path if build.evidence else "")
    log = ws.root / log if not log.is_absolute() else log
    text = log.read_text()
    assert f"with the BuildKit daemon at {buildkitd.tcp_address}" in text
    assert "Successfully installed six-1.16.0" in text  # without cache: pip ran on the daemon
    # No engine built it: an engine build leaves the candidate under
    # imagekit/demo:nightly-<this night's run> (kept here by --keep-images); the engine holds
    # the candidate only as the audit pulled it, by digest. Only this night's tag is looked
    # for: a night of another test file, on the other worker, may hold the engine's own.
    run = Path(str(night["evidence"])).parent.name
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{6}", run), run  # the tag's own form
    assert f"imagekit/demo:nightly-{run}" not in _engine_names(engine)
    code, out, err = _imagekit(ws, "ledger", "verify", "--json")
    assert code == 0 and json.loads(out)["ok"], out + err
    # Pushed by digest, the candidate's build says itself that it is one: the lock goes on
    # naming the accepted image, as the committed workspace's lock did.
    assert build.details["candidate"] == f"nightly-{run}"
    code, out, err = _imagekit(ws, "ledger", "lock", "--json")
    assert code == 0, err[-4000:]
    demo = json.loads(out)["lock"]["images"]["demo"]
    assert candidate not in json.dumps(demo["prepared_image"])
    committed_lock = _imagekit(committed.workspace, "ledger", "lock", "--json")[1]
    accepted_image = json.loads(committed_lock)["lock"]["images"]["demo"]["prepared_image"]
    assert demo["prepared_image"] == accepted_image
    [shown] = [i for i in demo["investigations"] if i["record_seq"] == build.seq]
    assert shown["reason"] == "a night's candidate: proposed, never accepted"


# It runs before the matrix below, which prunes the daemon: the base this night builds on is
# still in the daemon then, as the first night left it (pulling it again proves nothing here).
def test_a_night_on_a_named_buildx_builder_and_an_unknown_one(
    remote_buildx: Callable[[str], str],
    committed: Committed,
    tmp_path: Path,
    created_refs: list[str],
) -> None:
    ws = _checkout(committed, tmp_path / "job")
    before = ws.ledger_path.read_bytes()
    code, _, err = _imagekit(
        ws, "nightly", "--plans", "demo", "--base", committed.base,
        "--buildx-builder", "imagekit-test-no-such-builder",
    )  # fmt: skip
    assert code == 2, err[-2000:]
    assert "--buildx-builder 'imagekit-test-no-such-builder'" in err
    assert ws.ledger_path.read_bytes() == before  # stopped before any plan
    name = remote_buildx("imagekit-test-night")
    code, out, err = _imagekit(
        ws, "nightly", "--plans", "demo", "--base", committed.base, "--buildx-builder", name,
        "--json",
    )  # fmt: skip
    assert code == 0, err[-4000:]
    [night] = json.loads(out)["plans"]
    created_refs.append(str(night["candidate"]))
    assert night["builder"] == "buildx" and night["status"] in ("reproducible", "equivalent")
    records = read_records(ws.ledger_path)[len(read_records(committed.workspace.ledger_path)) :]
    assert [r.kind for r in records] == list(NIGHT_KINDS)
    build = records[0]
    assert build.details["builder"] == "buildx" and build.evidence is not None
    log = (ws.root / build.evidence.path).read_text()
    assert f'building with "{name}" instance using remote driver' in log
    assert records[-1].scope.startswith(f"a rebuild without cache on the buildx builder {name}")


def _unpack(job: Workspace, into: Workspace) -> Path:
    """What the combining CI job downloads: the job's evidence/ into its checkout, and the
    job's ledger beside it as that job's piece."""
    shutil.copytree(job.root / "evidence", into.root / "evidence", dirs_exist_ok=True)
    piece = into.root / "pieces" / job.root.name / "ledger.jsonl"
    piece.parent.mkdir(parents=True)
    shutil.copy2(job.ledger_path, piece)
    return piece


def test_a_matrix_of_nights_on_one_builder_shares_its_cache_and_comes_back_as_one_ledger(
    buildkitd: RunningBuildkitd,
    committed: Committed,
    registry: RunningRegistry,
    tmp_path: Path,
    created_refs: list[str],
) -> None:
    cache = f"{registry.host}/imagekit-test/nightly-cache:shared"
    jobs: dict[str, Workspace] = {}
    nights: dict[str, dict[str, object]] = {}
    logs: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for plan in PLANS:
        # Each job finds the shared daemon with nothing cached locally (as a fresh or
        # collected builder would be): what the second reuses came from the registry cache
        # the first exported.
        pruned = buildkitd.buildctl("prune", "--all")
        assert pruned.returncode == 0, pruned.stderr
        jobs[plan] = _checkout(committed, tmp_path / f"job-{plan}")
        started = time.monotonic()
        night, records = _night(jobs[plan], committed, plan, buildkitd, "--cache-ref", cache)
        seconds[plan] = time.monotonic() - started
        created_refs.append(str(night["candidate"]))
        nights[plan] = night
        build = records[0]
        assert build.kind == "build" and build.evidence is not None
        logs[plan] = (jobs[plan].root / build.evidence.path).read_text()
        note = records[-1]
        assert f"with BuildKit's registry cache {cache}" in note.scope
    assert "exporting cache" in logs["demo"]
    warm = logs["demo-b"]
    assert "importing cache manifest from " + cache in warm
    # demo-b's steps up to its label are demo's: pip ran in the first job only.
    assert "Successfully installed six-1.16.0" in logs["demo"]
    assert "Successfully installed" not in warm
    assert re.search(r"^#\d+ CACHED$", warm, re.MULTILINE)
    for plan in PLANS:
        assert nights[plan]["status"] in ("reproducible", "equivalent"), nights[plan]
    print(
        f"nightly on one buildkitd with a registry cache: {PLANS[0]} {seconds[PLANS[0]]:.1f} s "
        f"(cold), {PLANS[1]} {seconds[PLANS[1]]:.1f} s (its steps from the cache)"
    )

    # The combining job: its own checkout of the committed state, every job's piece merged.
    combined = _checkout(committed, tmp_path / "combined")
    pieces = [_unpack(jobs[plan], combined) for plan in PLANS]
    committed_count = len(read_records(combined.ledger_path))
    argv = ["ledger", "sync", *(a for p in pieces for a in ("--from", str(p))), "--json"]
    code, out, err = _imagekit(combined, *argv)
    assert code == 0, err[-3000:]
    merged = json.loads(out)["merged"]
    assert [(m["plan"], m["kind"]) for m in merged] == [
        (plan, kind) for plan in PLANS for kind in NIGHT_KINDS
    ]
    records = read_records(combined.ledger_path)
    total = committed_count + 2 * len(NIGHT_KINDS)
    assert len(records) == total
    notes = {r.plan: r.status for r in records if r.kind == "note"}
    assert notes == {plan: f"nightly-{nights[plan]['status']}" for plan in PLANS}
    code, out, err = _imagekit(combined, "ledger", "verify", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["records"] == total, out + err
    # Syncing the same pieces again appends nothing.
    code, out, _ = _imagekit(combined, *argv)
    assert code == 0 and json.loads(out)["merged"] == []
    assert len(read_records(combined.ledger_path)) == total
