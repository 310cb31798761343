"""`imagekit nightly` watching base tags upstream, and `imagekit plans bump`, on real registries.

The upstream is a repository on a real loopback registry whose tag ``bookworm`` the tests
move between images stacked on the demo base through the registry API
(tests/support/upstream.py): v1 with toml 0.10.1 installed by pip, v2 with toml 0.10.2,
and a base whose av/about.py (the file the demo plan patches) changed. Two copies of the
demo plan pin v1 with ``found_as: bookworm``: the demo plan itself (a pip step: the engine
builds its candidate) and its overlay-only variant (the registry builder assembles its
candidate without a pull). Faults the registry cannot produce (503s) come from the fault
proxy in front of it, which also counts the requests a night makes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.audit.stage import AuditRequest, audit
from imagekit.builders.assemble import AssembleOptions, assemble_plan
from imagekit.cli.nightly_cmd import command as nightly_command
from imagekit.cli.plans_cmd import command as plans_command
from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.result import (
    BASE_CURRENT,
    BASE_MOVED,
    BASE_TAG_GONE,
    BASE_UNREACHABLE,
    OVERLAY_DRIFT,
)
from imagekit.flows.nightly.run import run_nightly
from imagekit.flows.pipeline import PipelineOptions, run_pipeline
from imagekit.ledger import LedgerRecord, NightlyDetails, read_records, verify
from imagekit.ledger.accepted import accepted_image
from imagekit.plans.load import load_plan, plan_path
from imagekit.plans.render import render_plans
from imagekit.pull import final_pull
from imagekit.runtime.engine import Engine
from imagekit.workspace import Workspace
from tests.support.base_image import BaseImage
from tests.support.engine_refs import remember_images, removing
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.registries import RunningRegistry
from tests.support.upstream import Upstream, file_layer, package_layer, tags

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
TAG = "bookworm"
AV_ABOUT = "usr/lib/python3/dist-packages/av/about.py"
PINNED_ABOUT = "75e5d191c344a5bdf61c1ee3e720661cb2d0c38e8d3bfb90b587b8107303c92e"
DEMO_REFERENCE = (
    "127.0.0.1:5000/imagekit-test/base@sha256:"
    "52f6e63cdccafc5631f9415e9d779bd9546a50b263c76fe417ac474c068f6fb6"
)
CHANGED_ABOUT = b'# upstream rebuilt PyAV\n__version__ = "10.0.0"\nIMAGEKIT_UPSTREAM = 2\n'


@dataclass(frozen=True)
class Bases:
    upstream: Upstream
    v1: str  # the demo base + toml 0.10.1
    v2: str  # the demo base + toml 0.10.2
    drifted: str  # v1 with av/about.py changed


@dataclass(frozen=True)
class Project:
    workspace: Workspace
    bases: Bases
    demo_final: str  # the demo copy's accepted image (a whole pipeline)
    overlay_accepted: str  # the overlay-only copy's (registry build + final pull)


def _digest(reference: str) -> str:
    return reference.partition("@")[2]


@pytest.fixture(scope="module")
def bases(registry: RunningRegistry, base_image: BaseImage) -> Iterator[Bases]:
    upstream = Upstream(
        registry.host, "upstream/bookworm", base_image.repository, base_image.digest
    )
    v1 = upstream.stack(package_layer("toml==0.10.1"))
    v2 = upstream.stack(package_layer("toml==0.10.2"))
    drifted = upstream.stack(file_layer(AV_ABOUT, CHANGED_ABOUT), on=v1)
    upstream.tag(TAG, v1)
    yield Bases(upstream, v1, v2, drifted)
    upstream.close()


def _write_demo_copy(ws: Workspace, name: str, reference: str) -> None:
    """The demo plan's own text (comments and all) under another name, pinned elsewhere."""
    text = (REPO_ROOT / "manifests" / "demo.yaml").read_text()
    assert DEMO_REFERENCE in text and "found_as: bookworm" in text
    text = text.replace("name: demo\n", f"name: {name}\n").replace(DEMO_REFERENCE, reference)
    (ws.plans_dir / f"{name}.yaml").write_text(text)
    folder = ws.dockerfiles_dir / name
    if not folder.exists():
        shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", folder)


def _write_overlay_copy(ws: Workspace, name: str, reference: str) -> None:
    """The demo plan without its pip step: every step a registry build can do."""
    data = yaml.safe_load((REPO_ROOT / "manifests" / "demo.yaml").read_text())
    data["name"] = name
    data["base"]["reference"] = reference
    data["steps"] = [s for s in data["steps"] if s["kind"] != "pip_install"]
    data["assertions"]["find_spec"] = [m for m in data["assertions"]["find_spec"] if m != "six"]
    (ws.plans_dir / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", ws.dockerfiles_dir / name)


@pytest.fixture(scope="module")
def ws(bases: Bases, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A project with the two copies of the demo plan, pinned to v1, renders committed."""
    root = tmp_path_factory.mktemp("watch") / "project"
    for folder in ("manifests", "dockerfiles", "evidence"):
        (root / folder).mkdir(parents=True)
    workspace = Workspace.at(root)
    _write_demo_copy(workspace, "demo-watch", bases.v1)
    _write_overlay_copy(workspace, "overlay-watch", bases.v1)
    render_plans(workspace, None)
    return workspace


@pytest.fixture(scope="module")
def project(
    engine: Engine,
    bases: Bases,
    ws: Workspace,
    registry: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
) -> Iterator[Project]:
    """Both copies accepted on v1: the demo copy by a whole pipeline, the overlay-only copy
    by a registry build, its audit and a final pull. Both push to the registry upstream's
    bases live on (their lower layers are mounted there, never compressed and uploaded
    again); the pipeline mirrors to a registry of its own."""
    push_to, mirror_to = registry, make_registry("none")
    # What was made on the bases goes first, then the bases.
    with removing(engine) as stacked, removing(engine) as made:
        stacked += [bases.v1, bases.v2, bases.drifted]
        accepted = run_pipeline(
            ws, "demo-watch", PipelineOptions(registry=push_to.host, mirror=mirror_to.host)
        )
        remember_images(accepted.to_json(), made)
        assert accepted.ok, [s.to_json() for s in accepted.stages]
        assert accepted.final_reference is not None
        # The overlay-only copy is accepted the registry way: built, audited, finally pulled.
        overlay = assemble_plan(
            ws, "overlay-watch", AssembleOptions(push=f"{push_to.host}/team/overlay-watch")
        )
        made.append(overlay.pushed)
        audit(ws, AuditRequest(ref=overlay.pushed, plan="overlay-watch"))
        pulled = final_pull(ws, overlay.pushed, record=True, plan="overlay-watch")
        assert pulled.ok
        yield Project(ws, bases, accepted.final_reference, overlay.pushed)


def _note(ws: Workspace) -> NightlyDetails:
    record = read_records(ws.ledger_path)[-1]
    assert record.kind == "note" and record.status.startswith("nightly-")
    info = record.info
    assert isinstance(info, NightlyDetails)
    return info


def _records(ws: Workspace) -> list[LedgerRecord]:
    return read_records(ws.ledger_path) if ws.ledger_path.exists() else []


def _restore(ws: Workspace, name: str, text: str) -> None:
    (ws.plans_dir / f"{name}.yaml").write_text(text)
    render_plans(ws, name)


# ---------------------------------------------------------------------------- the watch only


@pytest.fixture
def proxied(
    ws: Workspace, bases: Bases, registry: RunningRegistry
) -> Iterator[tuple[FaultProxy, str]]:
    """The fault proxy in front of the registry, and a demo copy whose base goes through it."""
    with FaultProxy(registry.host) as proxy:
        _write_demo_copy(ws, "proxied", bases.v1.replace(registry.host, proxy.host))
        yield proxy, "proxied"


def test_a_tag_that_did_not_move_costs_a_head_confirmed_by_a_get(
    ws: Workspace, bases: Bases, proxied: tuple[FaultProxy, str]
) -> None:
    proxy, name = proxied
    bases.upstream.tag(TAG, bases.v1)
    before = len(_records(ws))
    night = run_nightly(ws, [name], NightOptions(watch_only=True))
    plan = night.plans[0]
    assert plan.status == BASE_CURRENT and night.exit_code == 0, plan.to_json()
    # HEAD names the pin; the GET's bytes, hashed, confirm it. Nothing else is asked.
    assert [(e.method, e.path, e.status) for e in proxy.log] == [
        ("HEAD", f"/v2/upstream/bookworm/manifests/{TAG}", 200),
        ("GET", f"/v2/upstream/bookworm/manifests/{TAG}", 200),
    ]
    assert plan.candidate is None and plan.comparison is None
    records = read_records(ws.ledger_path)[before:]
    assert [r.kind for r in records] == ["note"]  # no build, no push: nothing was built
    info = _note(ws)
    assert info.upstream is not None and info.upstream.state == "current"
    assert info.upstream.served == _digest(bases.v1) == info.upstream.pinned
    assert "(same)" in night.markdown()


def test_a_head_that_names_the_pin_while_the_tag_moved_is_never_base_current(
    ws: Workspace, bases: Bases, proxied: tuple[FaultProxy, str]
) -> None:
    """The tag moved to v2; a proxy in front of the real registry makes every HEAD of a
    manifest name v1, the pin. The GET of the tag serves v2's bytes: the night says so (exit
    1, both digests named), never base-current, and `plans bump` never says current."""
    proxy, name = proxied
    bases.upstream.tag(TAG, bases.v2)
    pinned, moved = _digest(bases.v1), _digest(bases.v2)
    proxy.set_faults(
        Fault("wrong_digest", path="/manifests/", method="HEAD", times=-1, digest=pinned)
    )
    try:
        night = run_nightly(ws, [name], NightOptions(watch_only=True))
        plan = night.plans[0]
        assert plan.status != BASE_CURRENT and plan.exit_code == 1, plan.to_json()
        assert pinned in plan.detail and moved in plan.detail, plan.detail
        bumped = CliRunner().invoke(
            plans_command, ["bump", name, "--dry-run", "--json"],
            env={"IMAGEKIT_ROOT": str(ws.root)},
        )  # fmt: skip
        assert bumped.exit_code == 1, bumped.output
        assert json.loads(bumped.stdout)["error"]["type"] == "DigestMismatch"
    finally:
        bases.upstream.tag(TAG, bases.v1)


def test_a_503_then_recovery_is_retried(
    ws: Workspace, bases: Bases, proxied: tuple[FaultProxy, str]
) -> None:
    proxy, name = proxied
    bases.upstream.tag(TAG, bases.v1)
    proxy.set_faults(Fault("status", path="/manifests/", method="HEAD", times=2, retry_after="0"))
    night = run_nightly(ws, [name], NightOptions(watch_only=True))
    assert night.plans[0].status == BASE_CURRENT, night.plans[0].to_json()
    assert proxy.fired("status") == 2
    # Two HEADs refused, the third answered, then the GET that confirms it.
    assert [(e.method, e.status) for e in proxy.log] == [
        ("HEAD", 503), ("HEAD", 503), ("HEAD", 200), ("GET", 200),
    ]  # fmt: skip


def test_a_watch_through_a_registry_like_nexus_hub_and_harbor_still_says_current(
    ws: Workspace, bases: Bases, proxied: tuple[FaultProxy, str]
) -> None:
    """Issue 24's done case for `nightly --watch-only`: a HEAD answered 404 (a Nexus or
    Artifactory proxy that has not cached the manifest yet) is confirmed by a GET, through
    a 429 and a session cookie, and the tag that did not move is current, not gone."""
    proxy, name = proxied
    bases.upstream.tag(TAG, bases.v1)
    proxy.set_faults(
        Fault("status", path="/manifests/", method="HEAD", status=404, times=-1),
        Fault("status", path="/manifests/", method="GET", status=429, retry_after="0", times=1),
        Fault("csrf", method="*", path=r"/", times=-1),
    )
    night = run_nightly(ws, [name], NightOptions(watch_only=True))
    plan = night.plans[0]
    assert plan.status == BASE_CURRENT and night.exit_code == 0, plan.to_json()
    # HEAD 404 confirmed by a GET (after its 429), then the watch's own GET whose bytes
    # confirm that nothing moved (a HEAD alone is never trusted to say so).
    assert [(e.method, e.status) for e in proxy.log] == [
        ("HEAD", 404),
        ("GET", 429),
        ("GET", 200),
        ("GET", 200),
    ]
    assert all(e.cookie is None for e in proxy.log)


def test_a_registry_that_stays_down_is_exit_3_never_a_pass(
    ws: Workspace, proxied: tuple[FaultProxy, str]
) -> None:
    proxy, name = proxied
    proxy.set_faults(Fault("status", path="/manifests/", method="HEAD", times=-1, retry_after="0"))
    result = CliRunner().invoke(
        nightly_command,
        ["--plans", name, "--watch-only", "--json"],
        env={"IMAGEKIT_ROOT": str(ws.root)},
    )
    assert result.exit_code == 3, result.output
    document = json.loads(result.stdout)
    plan = document["plans"][0]
    assert plan["status"] == BASE_UNREACHABLE and plan["exit_code"] == 3
    assert "gave up after 5 attempts" in plan["detail"]
    assert proxy.fired("status") == 5


def test_a_deleted_tag_is_base_tag_gone(ws: Workspace, bases: Bases) -> None:
    doomed = bases.upstream.stack(file_layer("etc/imagekit-doomed", b"soon gone\n"), on=bases.v1)
    bases.upstream.tag("doomed", doomed)
    _write_demo_copy(ws, "vanishing", doomed)
    path = ws.plans_dir / "vanishing.yaml"
    path.write_text(path.read_text().replace("found_as: bookworm", "found_as: doomed"))
    assert (
        run_nightly(ws, ["vanishing"], NightOptions(watch_only=True)).plans[0].status
        == BASE_CURRENT
    )
    bases.upstream.delete(doomed)
    result = CliRunner().invoke(
        nightly_command,
        ["--plans", "vanishing", "--watch-only", "--json"],
        env={"IMAGEKIT_ROOT": str(ws.root)},
    )
    assert result.exit_code == 1, result.output
    plan = json.loads(result.stdout)["plans"][0]
    assert plan["status"] == BASE_TAG_GONE, plan
    assert "404" in plan["detail"] and plan["upstream"]["state"] == "gone"
    assert _note(ws).upstream is not None
    bump = CliRunner().invoke(
        plans_command, ["bump", "vanishing"], env={"IMAGEKIT_ROOT": str(ws.root)}
    )
    assert bump.exit_code == 1 and "the tag is gone" in bump.output


# ---------------------------------------------------------------------------- moved tags


def test_a_moved_tag_gets_a_candidate_that_names_the_package_change(
    project: Project, tmp_path: Path
) -> None:
    ws, bases = project.workspace, project.bases
    plan_file = ws.plans_dir / "demo-watch.yaml"
    original = plan_file.read_text()
    bases.upstream.tag(TAG, bases.v2)
    proposals = tmp_path / "proposals"
    summary = tmp_path / "summary.md"
    result = CliRunner().invoke(
        nightly_command,
        ["--plans", "demo-watch", "--proposals", str(proposals), "--markdown", str(summary),
         "--json"],
        env={"IMAGEKIT_ROOT": str(ws.root)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plans"][0]
    assert plan["status"] == BASE_MOVED, plan
    assert plan["upstream"]["pinned"] == _digest(bases.v1)
    assert plan["upstream"]["served"] == _digest(bases.v2)
    assert plan["builder"] == "engine" and plan["audit_status"] == "CPU_PASS"
    # what changed inside, against the accepted image, and upstream, base against base
    toml = "python toml 0.10.1 -> 0.10.2 (usr/local/lib/python3.11/dist-packages)"
    assert toml in plan["changes"], plan["changes"]
    assert toml in plan["base_changes"], plan["base_changes"]
    assert any("toml/decoder.py" in c for c in plan["changes"])
    assert plan["candidate"].startswith(project.demo_final.partition("@")[0] + "@")
    # the proposed change: one line of the plan, and the committed render with it
    diff = plan["proposal"]["plan_diff"]
    changed = [line for line in diff.splitlines()[2:] if line[:1] in ("+", "-")]
    assert changed == [f"-  reference: {bases.v1}", f"+  reference: {bases.v2}"]
    assert (proposals / "demo-watch.diff").read_text() == plan["proposal"]["patch"]
    assert "dockerfiles/demo-watch/Dockerfile" in plan["proposal"]["files"]
    assert plan_file.read_text() == original  # proposed, not written (no --write)
    info = _note(ws)
    assert info.verdict == BASE_MOVED and info.plan_diff == diff
    assert info.upstream is not None and info.upstream.resolved_at.endswith("Z")
    assert info.candidate == plan["candidate"] and info.builder == "engine"
    text = summary.read_text()
    assert "| plan | tag | pinned | upstream now | verdict | what changed inside |" in text
    assert (
        f"| demo-watch | `{TAG}` | `{_digest(bases.v1)[:19]}` | `{_digest(bases.v2)[:19]}` |"
        in text
    )
    assert "python toml 0.10.1 -> 0.10.2" in text and "```diff" in text
    # the candidate is proposed, not accepted: the next night still compares with the pipeline's
    baseline = accepted_image(read_records(ws.ledger_path), "demo-watch")
    assert baseline is not None and baseline.reference == project.demo_final

    # `plans bump` applies the same one-line change, then has nothing left to do
    env = {"IMAGEKIT_ROOT": str(ws.root)}
    try:
        bumped = CliRunner().invoke(plans_command, ["bump", "demo-watch", "--json"], env=env)
        assert bumped.exit_code == 0, bumped.output
        document = json.loads(bumped.stdout)
        assert document["status"] == "bumped" and document["proposal"]["plan_diff"] == diff
        assert plan_file.read_text() == original.replace(_digest(bases.v1), _digest(bases.v2))
        assert [r.changed for r in render_plans(ws, "demo-watch", check=True)] == [False]
        again = CliRunner().invoke(plans_command, ["bump", "demo-watch"], env=env)
        assert again.exit_code == 0 and "nothing to change" in again.output
    finally:
        _restore(ws, "demo-watch", original)
        bases.upstream.tag(TAG, bases.v1)
    assert verify(ws).ok


def test_an_overlay_only_plan_is_rebased_through_the_registry(project: Project) -> None:
    ws, bases = project.workspace, project.bases
    bases.upstream.tag(TAG, bases.v2)
    try:
        night = run_nightly(ws, ["overlay-watch"], NightOptions(write_plans=True))
    finally:
        bases.upstream.tag(TAG, bases.v1)
    plan = night.plans[0]
    assert plan.status == BASE_MOVED and night.exit_code == 0, plan.to_json()
    assert plan.builder == "registry" and plan.candidate is not None
    assert plan.audit_status == "CPU_PASS"
    assert any(c.startswith("python toml 0.10.1 -> 0.10.2") for c in plan.changes), plan.changes
    assert plan.guard is not None and all(c.ok for c in plan.guard.checks)
    # --write applied the proposal: the plan now pins v2, the render with it
    loaded = load_plan(plan_path(ws.plans_dir, "overlay-watch"), dockerfiles_dir=ws.dockerfiles_dir)
    assert str(loaded.base) == bases.v2
    assert [r.changed for r in render_plans(ws, "overlay-watch", check=True)] == [False]
    assert len(plan.written) == 2
    # the candidate's push record (the registry builder writes one) is no baseline
    baseline = accepted_image(read_records(ws.ledger_path), "overlay-watch")
    assert baseline is not None and baseline.reference == project.overlay_accepted
    assert baseline.record_kind == "final-pull"


def test_an_overlay_whose_original_changed_upstream_is_named_and_nothing_is_pushed(
    project: Project, tmp_path: Path
) -> None:
    ws, bases = project.workspace, project.bases
    text = (ws.plans_dir / "demo-watch.yaml").read_text()
    candidates = project.demo_final.partition("@")[0]
    host, _, repository = candidates.partition("/")
    tags_before = tags(host, repository)
    before = len(_records(ws))
    bases.upstream.tag(TAG, bases.drifted)
    try:
        night = run_nightly(ws, ["demo-watch"], NightOptions(proposals_dir=tmp_path / "proposals"))
        bump = CliRunner().invoke(
            plans_command, ["bump", "demo-watch", "--json"], env={"IMAGEKIT_ROOT": str(ws.root)}
        )
    finally:
        bases.upstream.tag(TAG, bases.v1)
    plan = night.plans[0]
    assert plan.status == OVERLAY_DRIFT and night.exit_code == 1, plan.to_json()
    found = "sha256:" + hashlib.sha256(CHANGED_ABOUT).hexdigest()
    assert plan.guard is not None
    drifted = [(c.destination, c.expected, c.found) for c in plan.guard.drifted]
    assert drifted == [(f"/{AV_ABOUT}", f"sha256:{PINNED_ABOUT}", found)]
    assert f"/{AV_ABOUT}" in plan.detail and found in plan.detail
    assert "no candidate was built" in plan.detail
    # upstream's change is named too: the one file, base against base
    assert len(plan.base_changes) == 1, plan.base_changes
    assert plan.base_changes[0].startswith(f"file changed: /{AV_ABOUT} (")
    # nothing was built or pushed, and no change was proposed
    assert plan.candidate is None and plan.proposal is None
    assert tags(host, repository) == tags_before
    assert [r.kind for r in read_records(ws.ledger_path)[before:]] == ["note"]
    assert not (tmp_path / "proposals").exists()
    assert "## demo-watch: overlay drift" in night.markdown()
    # `plans bump` refuses with the same path and hashes, and writes nothing
    assert bump.exit_code == 1, bump.output
    error = json.loads(bump.stdout)["error"]
    assert error["drifted"] == [
        {"step": 1, "path": f"/{AV_ABOUT}", "expected": f"sha256:{PINNED_ABOUT}", "found": found}
    ]
    assert (ws.plans_dir / "demo-watch.yaml").read_text() == text
