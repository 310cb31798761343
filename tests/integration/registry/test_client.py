"""RegistryClient against the three real registries (anonymous, htpasswd, bearer token)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.errors import (
    DigestMismatch,
    PlatformNotFound,
    ReferenceFormatError,
    RegistryNotFound,
    RegistryUnauthorized,
)
from imagekit.refs import Digest, Reference, parse_platform, parse_reference
from imagekit.registry import Descriptor, RegistryClient
from tests.conftest import write_docker_auths
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.oci_layout import Layout, write_layout
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return write_layout(
        tmp_path_factory.mktemp("layout"), salt=secrets.token_hex(4), amd64_payload=3 << 20
    )


@pytest.fixture(scope="module")
def pushed(
    layout: Layout,
    registry: RunningRegistry,
    basic_registry: RunningRegistry,
    token_registry: RunningRegistry,
) -> dict[str, str]:
    """The layout pushed (skopeo, byte for byte) to all three registries."""
    repo = f"imagekit-test/multi-{secrets.token_hex(3)}"
    refs = {}
    for name, reg in (("none", registry), ("basic", basic_registry), ("token", token_registry)):
        creds = ("--dest-creds", f"{reg.username}:{reg.password}") if reg.username else ()
        refs[name] = layout.push(f"{reg.host}/{repo}:multi", *creds)
    return refs


def _skopeo_raw(ref: str, *extra: str, creds: str | None = None) -> bytes:
    argv = ["skopeo", "inspect", "--raw", "--tls-verify=false", *extra]
    if creds:
        argv += ["--creds", creds]
    done = subprocess.run([*argv, f"docker://{ref}"], capture_output=True, check=True, timeout=60)
    return done.stdout


def test_resolve_index_picks_amd64_never_the_attestation(
    layout: Layout, pushed: dict[str, str]
) -> None:
    with RegistryClient() as client:
        image = client.resolve(parse_reference(pushed["none"]))
    amd64 = layout.images["linux/amd64"]
    assert image.index_digest == layout.index_digest
    assert image.manifest_digest == amd64.manifest_digest != layout.attestation_digest
    assert str(image.platform) == "linux/amd64"
    assert image.config_digest == amd64.config_digest
    assert [layer.digest for layer in image.layers] == [amd64.layer_digest]
    assert image.diff_ids == (amd64.diff_id,)
    assert image.compressed_layer_bytes == amd64.layer_size
    # The index bytes as skopeo reads them hash to the index digest we report.
    raw_index = _skopeo_raw(pushed["none"])
    assert "sha256:" + hashlib.sha256(raw_index).hexdigest() == image.index_digest
    raw = _skopeo_raw(f"{image.reference.name}@{image.manifest_digest}")
    assert raw == image.manifest_bytes


def test_resolve_other_platform_and_missing_platform(
    layout: Layout, pushed: dict[str, str]
) -> None:
    ref = parse_reference(pushed["none"])
    with RegistryClient() as client:
        arm = client.resolve(ref, parse_platform("linux/arm64"))
        assert arm.manifest_digest == layout.images["linux/arm64/v8"].manifest_digest
        assert str(arm.platform) == "linux/arm64/v8"
        # The registry answered; the index lacks the platform: a named no (exit 1), not a 404.
        with pytest.raises(PlatformNotFound) as info:
            client.resolve(ref, parse_platform("linux/s390x"))
        with pytest.raises(PlatformNotFound):
            client.resolve(ref, parse_platform("unknown/unknown"))
    assert info.value.message == (
        f"no matching manifest for linux/s390x in {ref} (available: linux/amd64, linux/arm64/v8)"
    )


def test_manifest_by_digest_and_blob_stream(layout: Layout, pushed: dict[str, str]) -> None:
    ref = parse_reference(pushed["none"])
    amd64 = layout.images["linux/amd64"]
    with RegistryClient() as client:
        body, media_type, digest = client.get_manifest(ref, amd64.manifest_digest)
        assert digest == amd64.manifest_digest == Digest.of_bytes(body)
        assert media_type == "application/vnd.oci.image.manifest.v1+json"
        desc = Descriptor(
            "application/vnd.oci.image.layer.v1.tar+gzip",
            Digest(amd64.layer_digest),
            amd64.layer_size,
        )
        hasher = hashlib.sha256()
        chunks = 0
        for chunk in client.stream_blob(ref, desc, chunk_size=256 * 1024):
            assert len(chunk) <= 256 * 1024
            hasher.update(chunk)
            chunks += 1
        assert "sha256:" + hasher.hexdigest() == amd64.layer_digest
        assert chunks > 1
        stored = (layout.path / "blobs" / "sha256" / amd64.layer_digest.split(":")[1]).read_bytes()
        assert len(stored) == amd64.layer_size
        assert client.blob_exists(ref, amd64.layer_digest)
        assert not client.blob_exists(ref, Digest.of_bytes(b"never pushed"))
        with pytest.raises(ReferenceFormatError):
            client.get_manifest(ref, "sha256:../../../v2/_catalog")
        with pytest.raises(RegistryNotFound):
            client.get_manifest(ref, Digest.of_bytes(b"no such manifest"))
        # Asking with a descriptor whose size lies is refused (we read at most size+1).
        short = Descriptor(desc.media_type, desc.digest, desc.size - 1)
        with pytest.raises(Exception, match="longer than its descriptor|announces"):
            b"".join(client.stream_blob(ref, short))
        client.ping(ref.registry)


@pytest.fixture(params=["basic", "token"])
def protected(
    request: pytest.FixtureRequest,
    pushed: dict[str, str],
    basic_registry: RunningRegistry,
    token_registry: RunningRegistry,
) -> tuple[str, RunningRegistry, Reference]:
    """Each registry that asks for credentials, in turn: (its auth, it, the layout there)."""
    flavour: str = request.param
    reg = basic_registry if flavour == "basic" else token_registry
    return flavour, reg, parse_reference(pushed[flavour])


def test_credentials_from_docker_config(
    protected: tuple[str, RunningRegistry, Reference], layout: Layout, docker_config: Path
) -> None:
    flavour, reg, ref = protected
    write_docker_auths(docker_config, reg)
    before = len(reg.token_server.issued) if reg.token_server is not None else 0
    with RegistryClient() as client:  # DOCKER_CONFIG from the fixture's environment
        image = client.resolve(ref)
        client.ping(reg.host)
    assert image.manifest_digest == layout.images["linux/amd64"].manifest_digest
    if flavour == "token":
        assert reg.token_server is not None
        granted = [a for t in reg.token_server.issued[before:] for a in t["access"]]
        assert {"type": "repository", "name": ref.repository, "actions": ["pull"]} in granted
        # Only the repository asked for, only pull: the scope is per repository.
        assert all(a["name"] == ref.repository and a["actions"] == ["pull"] for a in granted)


def test_no_or_wrong_credentials(
    protected: tuple[str, RunningRegistry, Reference], docker_config: Path
) -> None:
    _, reg, ref = protected
    with RegistryClient() as client, pytest.raises(RegistryUnauthorized) as info:
        client.resolve(ref)
    assert reg.host in info.value.message and "no credentials" in info.value.message
    assert info.value.hint is not None and f"docker login {reg.host}" in info.value.hint
    wrong = base64.b64encode(f"{reg.username}:not-the-password".encode()).decode()
    (docker_config / "config.json").write_text(json.dumps({"auths": {reg.host: {"auth": wrong}}}))
    with RegistryClient() as client, pytest.raises(RegistryUnauthorized) as info:
        client.resolve(ref)
    assert "not-the-password" not in json.dumps(info.value.to_json())
    assert info.value.exit_code == 3


def test_dropped_connection_resumes_against_the_real_registry(
    layout: Layout, pushed: dict[str, str], registry: RunningRegistry
) -> None:
    amd64 = layout.images["linux/amd64"]
    with FaultProxy(registry.host, [Fault("drop", after=1_000_000, only_full=True)]) as proxy:
        ref = parse_reference(pushed["none"].replace(registry.host, proxy.host))
        desc = Descriptor("x", Digest(amd64.layer_digest), amd64.layer_size)
        restarts: list[int] = []
        with RegistryClient() as client:
            data = b"".join(client.stream_blob(ref, desc, on_restart=lambda: restarts.append(1)))
    assert Digest.of_bytes(data) == amd64.layer_digest
    assert proxy.fired("drop") == 1 and restarts == []
    ranges = [e.range for e in proxy.log if e.method == "GET" and "/blobs/sha256:" in e.path]
    assert ranges[0] is None
    assert ranges[1] is not None and ranges[1].startswith("bytes=")
    assert int(ranges[1][6:].rstrip("-")) >= 1  # resumed where it stopped, not from 0


def test_authorization_does_not_follow_a_redirect_to_another_host(
    layout: Layout,
    pushed: dict[str, str],
    basic_registry: RunningRegistry,
    docker_config: Path,
) -> None:
    write_docker_auths(docker_config, basic_registry)
    amd64 = layout.images["linux/amd64"]
    entry = basic_registry.docker_auth_entry()[basic_registry.host]["auth"]
    with FaultProxy(
        basic_registry.host,
        [Fault("redirect", times=-1)],
        offsite_authorization=f"Basic {entry}",
    ) as proxy:
        write_docker_auths(docker_config, basic_registry)
        config = json.loads((docker_config / "config.json").read_text())
        config["auths"][proxy.host] = config["auths"][basic_registry.host]
        (docker_config / "config.json").write_text(json.dumps(config))
        ref = parse_reference(pushed["basic"].replace(basic_registry.host, proxy.host))
        with RegistryClient() as client:
            image = client.resolve(ref)
            desc = image.layers[0]
            data = b"".join(client.stream_blob(ref, desc))
    assert Digest.of_bytes(data) == amd64.layer_digest
    offsite = [e for e in proxy.log if e.offsite]
    blob_gets = [
        e for e in proxy.log if e.method == "GET" and "/blobs/sha256:" in e.path and not e.offsite
    ]
    assert any(e.authorization for e in blob_gets)  # the registry got it
    assert offsite, "the redirect was not followed"
    assert all(e.authorization is None for e in offsite)


def test_corrupted_storage_is_a_digest_mismatch(
    make_registry: Callable[..., RunningRegistry], layout: Layout
) -> None:
    """A real registry serving other bytes under a digest (its storage was tampered with)."""
    reg = make_registry("none")
    pushed = layout.push(f"{reg.host}/imagekit-test/corrupt:multi")
    amd64 = layout.images["linux/amd64"]
    hexpart = amd64.manifest_digest.split(":")[1]
    [stored] = list(reg.storage.rglob(f"blobs/sha256/{hexpart[:2]}/{hexpart}/data"))
    original = stored.read_bytes()
    tampered = original.replace(b"tar+gzip", b"tar+gzjp")  # same length, other bytes
    assert tampered != original
    stored.write_bytes(tampered)
    ref = parse_reference(pushed)
    with RegistryClient() as client, pytest.raises(DigestMismatch) as info:
        client.resolve(ref)
    assert info.value.expected == amd64.manifest_digest
    assert info.value.exit_code == 1
