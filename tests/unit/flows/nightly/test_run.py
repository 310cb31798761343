"""A night's runs: bad input and unusable builders stop it before any plan; a tag whose
answer is wrong is a named no."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from imagekit.errors import UsageError
from imagekit.flows.nightly.options import NightOptions
from imagekit.flows.nightly.result import (
    BASE_CURRENT,
)
from imagekit.flows.nightly.run import run_nightly
from imagekit.workspace import Workspace
from tests.unit.flows.nightly.support import REPO_ROOT


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

    from imagekit.builders.bump import bump_plan
    from imagekit.errors import DigestMismatch
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
