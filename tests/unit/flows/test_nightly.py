"""nightly's rules: which record is the baseline, audit ranks, exit codes, the job summary."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from imagekit.audit.report import audit_rank
from imagekit.errors import UsageError
from imagekit.flows.nightly import (
    AUDIT_WORSE,
    BASE_CURRENT,
    BASE_MOVED,
    BASE_TAG_GONE,
    BASE_UNREACHABLE,
    CHANGED,
    EQUIVALENT,
    OVERLAY_DRIFT,
    REJECTED,
    REPRODUCIBLE,
    NightlyResult,
    NightOptions,
    PlanNight,
    _Night,
    find_baseline,
    run_nightly,
)
from imagekit.ledger import NightlyDetails, append_record, read_records
from imagekit.plans.bump import FileChange, Proposal
from imagekit.plans.load import load_named_plan, load_plan, plan_path
from imagekit.plans.upstream import TagState, UpstreamTag
from imagekit.refs import Digest
from imagekit.registry.client import RegistryClient
from imagekit.workspace import Workspace

DIGEST = "sha256:" + "b" * 64
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "p"
    (root / "manifests").mkdir(parents=True)
    return Workspace.at(root)


def record(ws: Workspace, kind: str, status: str, plan: str = "demo", **images: str) -> None:
    append_record(ws, kind, plan=plan, images=images, status=status, scope="test")


def test_audit_rank_orders_statuses() -> None:
    assert audit_rank("CPU_PASS") < audit_rank("CPU_PASS_GPU_CLI_DEFERRED")
    assert audit_rank("CPU_PASS_GPU_CLI_DEFERRED") < audit_rank("CPU_CHECK_INCOMPLETE")
    assert audit_rank("CPU_CHECK_INCOMPLETE") < audit_rank("SOMETHING_ELSE")
    assert audit_rank("SOMETHING_ELSE") < audit_rank(None)


def test_baseline_prefers_the_verified_final_pull(ws: Workspace) -> None:
    record(ws, "audit", "CPU_PASS_GPU_CLI_DEFERRED", image="imagekit/demo:1")
    record(ws, "push", "pushed", image="imagekit/demo:1", pushed=f"r/imagekit/demo@{DIGEST}")
    record(ws, "final-pull", "verified", image=f"m/imagekit/demo@{DIGEST}")
    record(ws, "audit", "CPU_CHECK_INCOMPLETE", image="imagekit/demo:2")  # after: not its audit
    record(ws, "final-pull", "mismatch", image=f"m/imagekit/demo@{'sha256:' + 'c' * 64}")
    record(ws, "final-pull", "verified", plan="other", image=f"m/other@{DIGEST}")
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None
    assert baseline.reference == f"m/imagekit/demo@{DIGEST}"
    assert baseline.record_kind == "final-pull" and baseline.record_seq == 3
    assert baseline.audit_status == "CPU_PASS_GPU_CLI_DEFERRED"


def test_baseline_falls_back_to_the_last_push(ws: Workspace) -> None:
    record(ws, "push", "pushed", image="imagekit/demo:1", pushed=f"r/imagekit/demo@{DIGEST}")
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.record_kind == "push"
    assert baseline.audit_status is None


def test_no_baseline(ws: Workspace) -> None:
    record(ws, "build", "built", image="imagekit/demo:1")
    assert find_baseline(read_records(ws.ledger_path), "demo") is None


def test_exit_code_is_the_worst_plan() -> None:
    ok = PlanNight("a", EQUIVALENT, 0, "fine")
    changed = PlanNight("b", CHANGED, 0, "moved", changes=("python six 1.16.0 -> 1.17.0",))
    worse = PlanNight("c", AUDIT_WORSE, 1, "audit worse")
    gone = PlanNight("d", BASE_UNREACHABLE, 3, "base gone")
    assert NightlyResult("t", (ok, changed)).exit_code == 0
    assert NightlyResult("t", (ok, worse)).exit_code == 1
    assert NightlyResult("t", (worse, gone)).exit_code == 3
    assert NightlyResult("t", ()).exit_code == 1  # nothing rebuilt is not a pass


def test_markdown_names_the_changes() -> None:
    changed = PlanNight("b", CHANGED, 0, "a | b", changes=("python six 1.16.0 -> 1.17.0",))
    text = NightlyResult("2026-12-02T03:23:00Z", (changed,)).markdown()
    assert text.startswith("# imagekit nightly (2026-12-02T03:23:00Z)")
    assert "**Night passed** (exit 0)" in text
    assert "| b | - | - | - | **changed** | - |" in text and "a \\| b" in text
    assert "## b: what changed" in text and "- python six 1.16.0 -> 1.17.0" in text
    failed = NightlyResult("t", (PlanNight("d", BASE_UNREACHABLE, 3, "gone"),)).markdown()
    assert "**Night FAILED (could not finish)** (exit 3)" in failed


def test_baseline_skips_records_without_a_pullable_reference(ws: Workspace) -> None:
    record(ws, "final-pull", "verified", image=f"m/imagekit/demo@{DIGEST}")
    # `ledger record-pod` style: a bare image ID, nothing a registry can serve
    record(ws, "final-pull", "verified", image="sha256:" + "d" * 64)
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.reference == f"m/imagekit/demo@{DIGEST}"


def test_a_nights_candidate_push_is_never_the_baseline(ws: Workspace) -> None:
    record(ws, "push", "pushed", image="r/imagekit/demo:v1", pushed=f"r/imagekit/demo@{DIGEST}")
    other = "sha256:" + "c" * 64
    # the registry builder records the candidate's push; its tag says what it is
    record(
        ws, "push", "pushed", image="r/imagekit/demo:nightly-20261203T032300Z-ab12cd",
        pushed=f"r/imagekit/demo@{other}",
    )  # fmt: skip
    baseline = find_baseline(read_records(ws.ledger_path), "demo")
    assert baseline is not None and baseline.reference == f"r/imagekit/demo@{DIGEST}"


PINNED, SERVED = Digest("sha256:" + "1" * 64), Digest("sha256:" + "2" * 64)


def _upstream(state: TagState, served: Digest | None) -> UpstreamTag:
    return UpstreamTag(
        "demo", "bookworm", "r/base", PINNED, state, "2026-12-03T03:23:01Z", served, None, "x"
    )


def test_markdown_has_the_watch_table_and_the_proposed_diff(tmp_path: Path) -> None:
    diff = "--- a/manifests/demo.yaml\n+++ b/manifests/demo.yaml\n@@ -1 +1 @@\n-a\n+b\n"
    proposal = Proposal(
        "demo", "r/base@" + PINNED, "r/base@" + SERVED,
        FileChange(tmp_path / "demo.yaml", "manifests/demo.yaml", b"a\n", b"b\n", diff), (),
    )  # fmt: skip
    moved = PlanNight(
        "demo", BASE_MOVED, 0, "moved", upstream=_upstream(TagState.MOVED, SERVED),
        base_changes=("python toml 0.10.1 -> 0.10.2",), proposal=proposal,
    )  # fmt: skip
    current = PlanNight("m3", BASE_CURRENT, 0, "same", upstream=_upstream(TagState.CURRENT, PINNED))
    gone = PlanNight("m4", BASE_TAG_GONE, 1, "404", upstream=_upstream(TagState.GONE, None))
    text = NightlyResult("t", (moved, current, gone)).markdown()
    assert "| plan | tag | pinned | upstream now | verdict | what changed inside |" in text
    short_pinned, short_served = PINNED[:19], SERVED[:19]
    assert (
        f"| demo | `bookworm` | `{short_pinned}` | `{short_served}` | **base-moved** | - |" in text
    )
    assert (
        f"| m3 | `bookworm` | `{short_pinned}` | `{short_pinned}` (same) | **base-current**" in text
    )
    assert "| m4 | `bookworm` | `" + short_pinned + "` | gone | **base-tag-gone**" in text
    assert "## demo: what upstream changed (pinned base -> new base)" in text
    assert "```diff\n--- a/manifests/demo.yaml" in text and "\n+b\n```" in text
    assert "**Night FAILED** (exit 1)" in text


def test_a_nights_note_has_typed_details(ws: Workspace) -> None:
    details = NightlyDetails(verdict="base-moved", plan_diff="-a\n+b\n")
    append_record(
        ws, "note", plan="demo", images={}, status="nightly-base-moved", scope="t",
        details=details,
    )  # fmt: skip
    info = read_records(ws.ledger_path)[-1].info
    assert isinstance(info, NightlyDetails) and info.plan_diff == "-a\n+b\n"
    with pytest.raises(UsageError, match="NightlyDetails"):
        append_record(
            ws, "note", plan="demo", images={}, status="nightly-base-moved", scope="t",
            details={"verdict": "base-moved", "candidat": "typo"},
        )  # fmt: skip
    # other notes keep free details
    append_record(ws, "note", plan=None, images={}, status="hello", scope="t", details={"x": 1})


def test_a_night_whose_note_the_ledger_refuses_is_never_a_pass(ws: Workspace) -> None:
    shutil.copy2(REPO_ROOT / "manifests" / "demo.yaml", ws.plans_dir / "demo.yaml")
    shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", ws.dockerfiles_dir / "demo")
    record(ws, "build", "built")
    torn = ws.ledger_path.read_bytes() + b'{"seq": 2, "kind": "no'  # cut short, no newline
    ws.ledger_path.write_bytes(torn)
    loaded = load_plan(plan_path(ws.plans_dir, "demo"), dockerfiles_dir=ws.dockerfiles_dir)
    with RegistryClient() as client:
        nights = [_Night(ws, loaded, NightOptions(), client, io.StringIO()) for _ in range(2)]
        passed = nights[0].record(
            PlanNight("demo", REPRODUCIBLE, 0, "all 3 diffIDs equal"), "t", {}
        )
        failed = nights[1].record(PlanNight("demo", OVERLAY_DRIFT, 1, "a guard broke"), "t", {})
    assert (passed.status, passed.exit_code) == (REJECTED, 1)
    assert passed.detail.startswith("all 3 diffIDs equal; the ledger refused the night's note: ")
    assert "torn" in passed.detail
    assert passed.evidence is not None and passed.evidence.exists()  # the verdict's evidence
    assert (failed.status, failed.exit_code) == (OVERLAY_DRIFT, 1)  # already failing: kept
    assert "the ledger refused the night's note" in failed.detail
    assert ws.ledger_path.read_bytes() == torn  # nothing appended behind the torn line


def _watched_plan(ws: Workspace, pinned: str) -> None:
    from tests.unit.registry.fakes import HOST

    (ws.plans_dir / "watched.yaml").write_text(
        f"name: watched\nbase:\n  reference: {HOST}/upstream/serving@{pinned}\n"
        "  found_as: v1\n  platform: linux/amd64\n"
    )


def test_a_tag_moved_to_an_artifact_or_an_index_without_the_platform_is_a_named_no(
    ws: Workspace,
) -> None:
    """The registry answered both times; what it serves is wrong. A night says so with exit 1
    and the problem named, never 3 ("cannot be reached", "could not finish")."""
    from tests.unit.registry.fakes import (
        OCI_INDEX,
        OCI_MANIFEST,
        FakeRegistry,
        dumps,
        entry,
        index_of,
        make_image,
        sha,
    )

    repo = "upstream/serving"
    pinned, arm64 = make_image(b"pinned"), make_image(b"arm", "arm64")
    empty = b"{}"
    artifact = dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": "application/vnd.example.sbom+json",
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": sha(empty),
                "size": len(empty),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.empty.v1+json",
                    "digest": sha(empty),
                    "size": len(empty),
                }
            ],
        }
    )
    _watched_plan(ws, pinned.manifest_digest)
    for served, media_type, said in (
        (artifact, OCI_MANIFEST, "not a container image"),
        (index_of(entry(arm64, arch="arm64")), OCI_INDEX, "no matching manifest for linux/amd64"),
    ):
        fake = FakeRegistry()
        fake.add_image(repo, pinned)
        fake.add_image(repo, arm64)
        fake.blobs[f"/v2/{repo}/blobs/{sha(empty)}"] = empty
        fake.add_manifest(repo, "v1", served, media_type)
        fake.add_manifest(repo, sha(served), served, media_type)
        with fake.client() as client:
            night = run_nightly(
                ws, ["watched"], NightOptions(watch_only=True), echo=io.StringIO(), client=client
            )
        plan = night.plans[0]
        assert (plan.exit_code, night.exit_code) == (1, 1), plan.to_json()
        assert said in plan.detail, plan.detail
        assert "cannot be reached" not in plan.detail


@pytest.mark.parametrize("plans", ["", ",", " , "])
def test_nightly_plans_naming_no_plan_is_bad_input(ws: Workspace, plans: str) -> None:
    """`--plans ''` (an unset variable in a script) must not silently run every plan."""
    from click.testing import CliRunner

    from imagekit.cli.nightly_cmd import command

    shutil.copy2(REPO_ROOT / "manifests" / "demo.yaml", ws.plans_dir / "demo.yaml")
    result = CliRunner().invoke(
        command, ["--plans", plans, "--watch-only", "--json"], env={"IMAGEKIT_ROOT": str(ws.root)}
    )
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["error"]["message"] == (
        "--plans names no plan (it is empty, or only commas and spaces)"
    )
    with pytest.raises(UsageError, match="names no plan"):
        run_nightly(ws, [], NightOptions(watch_only=True), echo=io.StringIO())


def test_a_head_that_a_get_contradicts_never_makes_a_night_base_current(ws: Workspace) -> None:
    """HEAD answers the pin, a GET of the tag serves another manifest: the watch-only night
    is a no naming both digests, never `base-current`; `plans bump` never says current."""
    import httpx

    from imagekit.errors import DigestMismatch
    from imagekit.plans.bump import bump_plan
    from tests.unit.registry.fakes import OCI_MANIFEST, FakeRegistry, make_image

    repo = "upstream/serving"
    pinned, other = make_image(b"pinned"), make_image(b"other")
    _watched_plan(ws, pinned.manifest_digest)
    fake = FakeRegistry()
    fake.add_image(repo, pinned)
    fake.add_image(repo, other)

    def lying(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(
                200,
                headers={
                    "Content-Type": OCI_MANIFEST,
                    "Docker-Content-Digest": pinned.manifest_digest,
                },
            )
        return httpx.Response(200, content=other.manifest, headers={"Content-Type": OCI_MANIFEST})

    fake.overrides[f"/v2/{repo}/manifests/v1"] = lying
    with fake.client() as client:
        night = run_nightly(
            ws, ["watched"], NightOptions(watch_only=True), echo=io.StringIO(), client=client
        )
        with pytest.raises(DigestMismatch) as bumped:
            bump_plan(ws, "watched", client=client, echo=io.StringIO(), write=False)
    plan = night.plans[0]
    assert plan.status != BASE_CURRENT and (plan.exit_code, night.exit_code) == (1, 1)
    assert other.manifest_digest in plan.detail and pinned.manifest_digest in plan.detail
    assert bumped.value.exit_code == 1


def _demo_plans(ws: Workspace) -> None:
    """The demo plan (a pip step: the engine's) and an overlay-only copy (the registry's)."""
    text = (REPO_ROOT / "manifests" / "demo.yaml").read_text()
    (ws.plans_dir / "demo.yaml").write_text(text)
    pip = "  - kind: pip_install\n    requirements:\n      - six==1.16.0\n"
    assert pip in text
    (ws.plans_dir / "overlays.yaml").write_text(
        text.replace("name: demo\n", "name: overlays\n").replace(pip, "")
    )
    for name in ("demo", "overlays"):
        shutil.copytree(REPO_ROOT / "dockerfiles" / "demo", ws.dockerfiles_dir / name)


@pytest.mark.parametrize(
    ("plan", "asked", "builder"),
    [
        ("demo", {}, "engine"),
        ("overlays", {}, "registry"),
        ("demo", {"buildkit": "tcp://127.0.0.1:1"}, "buildkit"),
        ("overlays", {"buildkit": "unix:///run/b.sock"}, "buildkit"),
        ("demo", {"buildx_builder": "farm"}, "buildx"),
    ],
)
def test_a_nights_candidate_takes_the_builder_imagekit_build_would(
    ws: Workspace, plan: str, asked: dict[str, str], builder: str
) -> None:
    """The night asks imagekit.build.choice, with the push it will make: the same plan and
    options give the same builder as `imagekit build --push REPO`."""
    from imagekit.build.choice import chosen_builder
    from imagekit.build.options import BuildOptions
    from imagekit.flows.nightly import candidate_options

    _demo_plans(ws)
    loaded = load_named_plan(ws, plan)
    repo, base = "127.0.0.1:1/team/x", f"127.0.0.1:1/base@{DIGEST}"
    options = NightOptions(**asked)  # type: ignore[arg-type]
    chosen, build = candidate_options(loaded, options, repo, "nightly-1", base)
    as_build = BuildOptions(builder="auto", push=repo, **asked)  # type: ignore[arg-type]
    assert chosen == builder == chosen_builder(loaded.plan, as_build)
    assert build.base_override == base
    if builder == "engine":  # built under a local tag, pushed by the night unrecorded
        assert (build.push, build.tag, build.no_cache) == (None, "imagekit/demo:nightly-1", True)
    elif builder == "registry":  # pushed and recorded under the candidate tag
        assert (build.builder, build.push, build.tag) == ("registry", repo, "nightly-1")
    else:  # pushed by digest by BuildKit, without cache as a night rebuilds
        assert (build.push, build.no_cache, build.tag) == (repo, True, None)
        assert (build.buildkit, build.buildx_builder) == (
            asked.get("buildkit"),
            asked.get("buildx_builder"),
        )


def test_a_nights_registry_cache_is_used_and_said(ws: Workspace) -> None:
    from imagekit.flows.nightly import candidate_options

    _demo_plans(ws)
    loaded = load_named_plan(ws, "demo")
    cached = NightOptions(buildkit="tcp://127.0.0.1:1", cache_ref="127.0.0.1:1/cache:demo")
    _, build = candidate_options(loaded, cached, "127.0.0.1:1/x", "nightly-1", "b")
    assert build.cache_ref == "127.0.0.1:1/cache:demo" and not build.no_cache
    assert "registry cache 127.0.0.1:1/cache:demo" in cached.rebuild()
    assert "not run again" in cached.rebuild()
    assert NightOptions().rebuild() == "a rebuild without cache"
    assert NightOptions(buildx_builder="farm").rebuild() == (
        "a rebuild without cache on the buildx builder farm"
    )


@pytest.mark.parametrize(
    ("asked", "code", "words"),
    [
        ({"buildkit": "127.0.0.1:1234"}, 2, "is not a BuildKit address"),
        ({"buildkit": "tcp://127.0.0.1:9"}, 3, "the BuildKit daemon at tcp://127.0.0.1:9 did not"),
        ({"buildkit": "unix:///x.sock", "buildx_builder": "b"}, 2, "name two builders"),
        ({"cache_ref": "127.0.0.1:5/cache:x"}, 2, "--cache-ref is an option of --buildkit"),
        (
            {"buildkit": "tcp://127.0.0.1:9", "buildkit_ca": "/nonexistent/ca.pem"},
            2,
            "--buildkit-ca /nonexistent/ca.pem is not a file",
        ),
    ],
)
def test_a_builder_the_night_cannot_use_stops_it_before_any_plan(
    ws: Workspace, asked: dict[str, object], code: int, words: str
) -> None:
    """Exit 2 for a malformed builder, 3 for a daemon that does not answer (port 9, discard:
    nothing listens there), before any plan is read or anything recorded."""
    from imagekit.errors import ImagekitError

    if "buildkit_ca" in asked:
        asked = {**asked, "buildkit_ca": Path(str(asked["buildkit_ca"]))}
    echo = io.StringIO()
    with pytest.raises(ImagekitError) as info:
        run_nightly(ws, ["absent"], NightOptions(**asked), echo=echo)  # type: ignore[arg-type]
    assert info.value.exit_code == code and words in info.value.message
    assert echo.getvalue() == "" and not ws.ledger_path.exists()
