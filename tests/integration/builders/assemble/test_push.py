"""Pushing an assembled image: mounts, streamed copies, refusals and interruptions.

The registries are real; the fault proxy in front of one adds only what a real registry
cannot be made to do (refuse a mount, drop a connection after it took a chunk, fail every
upload), and its log proves the fault fired.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from imagekit.builders.assemble import AssembleOptions, AssembleResult, assemble_plan
from imagekit.cli.nightly_cmd import command as nightly_command
from imagekit.cli.plans_cmd import command as plans_command
from imagekit.errors import RetriesExhausted
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient, RetryPolicy
from imagekit.registry.upload import copy_image
from imagekit.workspace import Workspace
from tests.integration.builders.assemble.conftest import PlanWriter
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.images import Blob, M, Pushed, Writer
from tests.support.registries import RunningRegistry
from tests.support.tls import make_server_certificate

pytestmark = pytest.mark.integration

MiB = 1 << 20


@dataclass(frozen=True)
class Pushing:
    """Bases of two layers in the session's registry, one plan of one overlay on each, and
    their builds: pushed in 1 MiB chunks, indexed in this test's own cache."""

    writer: Writer
    write_plan: PlanWriter
    workspace: Workspace
    cache_dir: Path

    def base(self, name: str) -> Pushed:
        """Two layers, one of 3 MiB of incompressible bytes (three chunks of 1 MiB)."""
        repo = f"imagekit-test/{name}-base"
        noise = random.Random(repo).randbytes(3 * MiB)  # noqa: S311 - test data
        return self.writer.image(
            repo,
            "1",
            [
                Blob.gzip([M("opt", "dir"), M("opt/big.bin", data=noise)]),
                Blob.gzip([M("etc", "dir"), M("etc/app.conf", data=b"a = 1\n")]),
            ],
        )

    def plan(self, name: str, base: str) -> None:
        step = {
            "kind": "overlay",
            "source": "app.conf",
            "destination": "/etc/app.conf",
            "replaces": {"sha256": hashlib.sha256(b"a = 1\n").hexdigest()},
        }
        self.write_plan(name, base, [step], {"app.conf": b"a = 2\n"})

    def planned_base(self, name: str) -> Pushed:
        """The base of plan ``name``, and the plan on it."""
        base = self.base(name)
        self.plan(name, base.reference)
        return base

    def build(
        self,
        name: str,
        push: str,
        *,
        client: RegistryClient | None = None,
        tag: str | None = None,
        base: str | None = None,
    ) -> AssembleResult:
        options = AssembleOptions(
            push=push, cache_dir=self.cache_dir, chunk_size=MiB, tag=tag, base_override=base
        )
        return assemble_plan(self.workspace, name, options, client=client)


@pytest.fixture
def pushing(
    writer: Writer, write_plan: PlanWriter, workspace: Workspace, cache_dir: Path
) -> Pushing:
    return Pushing(writer, write_plan, workspace, cache_dir)


def test_a_registry_that_refuses_the_mount_gets_an_upload(
    pushing: Pushing, registry: RunningRegistry
) -> None:
    base = pushing.base("nomount")
    with FaultProxy(registry.host) as proxy:
        proxy.set_faults(Fault("no_mount", method="POST", path=r"\?mount=", times=-1))
        ref = base.reference.replace(registry.host, proxy.host)
        pushing.plan("nomount", ref)
        result = pushing.build("nomount", f"{proxy.host}/imagekit-test/nomount")
    assert proxy.fired("no_mount") == 2  # both base layers were asked to be mounted
    assert result.push.blobs_mounted == 0
    assert result.push.blobs_uploaded == 4  # the two base layers, our layer and config
    # Streamed from the base's repository in 1 MiB chunks, never through the local disk.
    assert result.push.bytes_uploaded > 3 * MiB
    assert any(e.method == "PATCH" for e in proxy.log)
    # The same registry without the fault: mounts, and the same layer (the config differs
    # only in the base's name, which names the proxy's port above).
    again = pushing.build("nomount", f"{registry.host}/imagekit-test/nomount2", base=base.reference)
    assert again.push.blobs_mounted == 2
    assert again.layer == result.layer


def test_a_push_interrupted_in_the_middle_is_resumed(
    pushing: Pushing, make_registry: Callable[..., RunningRegistry]
) -> None:
    base = pushing.planned_base("resume")
    target = make_registry("none")
    with FaultProxy(target.host) as proxy:
        # The relay dies after the registry took the first chunk of the big layer.
        proxy.set_faults(Fault("reset", method="PATCH", path=r"/blobs/uploads/", times=1))
        result = pushing.build("resume", f"{proxy.host}/imagekit-test/resume")
    assert proxy.fired("reset") == 1
    assert result.push.upload_restarts + result.push.chunk_resumes >= 1
    # Another registry: every blob was streamed registry to registry, none mounted.
    assert result.push.blobs_mounted == 0 and result.push.blobs_uploaded == 4
    with Writer(target.host) as there:
        tagged = there.get_manifest("imagekit-test/resume", result.tag.rpartition(":")[2])
        big = json.loads(tagged.content)["layers"][0]["digest"]
        copied = there.get_blob("imagekit-test/resume", big)
    assert tagged.status_code == 200
    assert tagged.headers["Docker-Content-Digest"] == result.manifest_digest
    assert copied == base.layers[0].blob


def test_a_push_that_cannot_finish_leaves_no_tag_and_a_rerun_completes_it(
    pushing: Pushing, make_registry: Callable[..., RunningRegistry]
) -> None:
    pushing.planned_base("fail")
    target = make_registry("none")
    quick = RegistryClient(retry_policy=RetryPolicy(max_attempts=2, sleep=lambda _: None))
    with FaultProxy(target.host) as proxy:
        # Every chunk of the big layer fails: the retries run out in the middle of the push.
        proxy.set_faults(Fault("status", method="PATCH", path=r"/blobs/uploads/", times=-1))
        repo = f"{proxy.host}/imagekit-test/fail"
        with pytest.raises(RetriesExhausted):
            pushing.build("fail", repo, client=quick, tag="v1")
        assert proxy.fired("status") >= 2
        # No manifest was put, so no tag either.
        assert not any(e.method == "PUT" and "/manifests/" in e.path for e in proxy.log)
        direct = Writer(target.host)
        assert direct.get_manifest("imagekit-test/fail", "v1").status_code == 404
        proxy.set_faults()
        result = pushing.build("fail", repo, tag="v1")
    quick.close()
    # The blobs that made it the first time are not sent again.
    assert result.push.blobs_existing >= 1
    assert direct.get_manifest("imagekit-test/fail", "v1").headers["Docker-Content-Digest"] == (
        result.manifest_digest
    )
    with RegistryClient() as client:
        image = client.resolve(parse_reference(f"{target.host}/imagekit-test/fail:v1"))
    assert str(image.manifest_digest) == result.manifest_digest
    direct.close()


def test_a_registry_build_through_a_registry_like_ghcr_harbor_and_nexus_at_once(
    pushing: Pushing, registry: RunningRegistry
) -> None:
    """Issue 24's done case for the registry builder, with its default uploads: mounts
    refused (Nexus, Harbor), PATCH bodies over 4 MiB refused with 416 (GHCR: the builder
    used to PATCH 8 MiB chunks), and a session cookie no write may carry (Harbor)."""
    repo = "imagekit-test/quirks-base"
    noise = random.Random(repo).randbytes(9 * MiB)  # noqa: S311 - test data
    base = pushing.writer.image(
        repo,
        "1",
        [
            Blob.gzip([M("opt", "dir"), M("opt/big.bin", data=noise)]),
            Blob.gzip([M("etc", "dir"), M("etc/app.conf", data=b"a = 1\n")]),
        ],
    )
    with FaultProxy(registry.host) as proxy:
        proxy.set_faults(
            Fault("status", method="POST", path=r"mount=", status=401, times=-1),
            Fault("chunk_limit", method="PATCH", path=r"/blobs/uploads/", limit=4 * MiB, times=-1),
            Fault("csrf", method="*", path=r"/", times=-1),
        )
        pushing.plan("quirks", base.reference.replace(registry.host, proxy.host))
        options = AssembleOptions(
            push=f"{proxy.host}/imagekit-test/quirks", cache_dir=pushing.cache_dir
        )
        result = assemble_plan(pushing.workspace, "quirks", options)
        assert proxy.fired("status") == 2  # both base layers' mounts were refused
        assert all(e.cookie is None for e in proxy.log)
    assert result.push.blobs_mounted == 0 and result.push.blobs_uploaded == 4
    assert result.push.bytes_uploaded > 9 * MiB
    with RegistryClient() as client:
        image = client.resolve(parse_reference(f"{registry.host}/{result.tag.partition('/')[2]}"))
    assert str(image.manifest_digest) == result.manifest_digest


def test_a_registry_build_bump_and_watch_reach_a_registry_with_its_own_ca_through_certs_d(
    pushing: Pushing,
    registry: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The base and the push both on a registry serving TLS with a CA the test made, trusted
    through Docker's certs.d only (IMAGEKIT_CERTS_D), as on a machine where `docker push`
    to it works: the registry builder, then `plans bump` and `nightly --watch-only`."""
    cert = make_server_certificate(tmp_path / "tls")
    secure = make_registry(tls=cert)
    folder = tmp_path / "certs.d" / secure.host
    folder.mkdir(parents=True)
    (folder / "ca.crt").write_bytes(cert.ca_path.read_bytes())
    monkeypatch.setenv("IMAGEKIT_CERTS_D", str(tmp_path / "certs.d"))
    base = pushing.base("tls")
    tagged = parse_reference(f"{secure.host}/imagekit-test/tls-base:1")
    with RegistryClient() as client:
        copied = copy_image(client, parse_reference(base.reference), tagged)
    pushing.plan("tls", f"{secure.host}/imagekit-test/tls-base@{copied.digest}")
    options = AssembleOptions(push=f"{secure.host}/imagekit-test/tls", cache_dir=pushing.cache_dir)
    result = assemble_plan(pushing.workspace, "tls", options)
    assert result.push.blobs_mounted == 2  # the base's layers, within the TLS registry
    with RegistryClient() as client:
        image = client.resolve(parse_reference(result.pushed))
    assert str(image.manifest_digest) == result.manifest_digest
    # `plans bump` and `nightly --watch-only` ask the same registry the same way.
    path = pushing.workspace.plans_dir / "tls.yaml"
    plan = yaml.safe_load(path.read_text())
    plan["base"]["found_as"] = "1"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    bump = CliRunner().invoke(plans_command, ["bump", "tls", "--dry-run", "--json"])
    assert bump.exit_code == 0, bump.output
    assert json.loads(bump.stdout)["status"] == "current"
    night = CliRunner().invoke(nightly_command, ["--plans", "tls", "--watch-only", "--json"])
    assert night.exit_code == 0, night.output
    assert json.loads(night.stdout)["plans"][0]["status"] == "base-current"
