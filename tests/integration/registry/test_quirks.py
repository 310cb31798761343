"""The public registries' quirks, each made by the fault proxy in front of the real registry.

Every registry test elsewhere talks to Debian's distribution registry, the friendliest there
is. Here tests/support/faultproxy.py makes it behave the way GHCR (416 to PATCH chunks over
4 MiB), Harbor (a session cookie, then 403 "CSRF token invalid" to writes carrying it),
Docker Hub (429 TOOMANYREQUESTS with its RateLimit headers), Nexus and Artifactory (HEAD 404
for a manifest a GET serves; 401/403 to a cross-repository mount) and lscr.io (its whole API
redirected to another registry with its own login) behave, and each test checks both that
the quirk fired and that the client came through it with the right answer, or with one
line naming the registry, what it said and what to do. docs/registries.md tabulates them.
"""

from __future__ import annotations

import base64
import json
import os
import random
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from imagekit.errors import RegistryError
from imagekit.kinds.mirror import MirrorVerdict as Verdict
from imagekit.mirror import MirrorOptions, MirrorReport, mirror
from imagekit.refs import Digest, Reference, parse_reference
from imagekit.registry import Descriptor, RegistryClient, RetryPolicy
from imagekit.registry.blob_upload import BlobSource
from imagekit.registry.manifest import OCI_CONFIG, OCI_MANIFEST
from imagekit.registry.upload import copy_image, push_manifest
from imagekit.workspace import Workspace
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.media_types import OCI_TAR
from tests.support.oci_layout import (
    Layer,
    make_tar,
    push_new_image,
    tar_of,
)
from tests.support.registries import MakeRegistry, RunningRegistry

pytestmark = pytest.mark.integration
MiB = 1 << 20
BIG = 17 * MiB  # over the 16 MiB chunks mirror --copy PATCHed, and GHCR's 4 MiB
HUB_429 = json.dumps(
    {
        "errors": [
            {
                "code": "TOOMANYREQUESTS",
                "message": "You have reached your pull rate limit. You may increase the limit "
                "by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
            }
        ]
    }
).encode()
HUB_LIMITS = {"RateLimit-Limit": "100;w=21600", "RateLimit-Remaining": "0;w=21600"}
DENIED = b'{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}'
DIGEST_INVALID = (
    b'{"errors":[{"code":"DIGEST_INVALID","message":"provided digest did not match uploaded '
    b'content"}]}'
)


def _random_layer(seed: int, size: int) -> Layer:
    """An uncompressed layer of ``size`` random bytes: no compression can shrink it."""
    data = tar_of({f"random{seed}.bin": random.Random(seed).randbytes(size)})  # noqa: S311
    return Layer(data, data, OCI_TAR)


def _push_image(registry: RunningRegistry, tmp: Path, repo: str, layers: list[Layer]) -> str:
    return push_new_image(tmp, f"{registry.host}/{repo}:1", layers)


@pytest.fixture(scope="module")
def ten_layers(
    registry: RunningRegistry, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str]:
    """A 10-layer image in the anonymous registry, one layer of 17 MiB: (reference, repo)."""
    layers = [Layer.gzip(make_tar(300 + i, size=60_000)) for i in range(9)]
    layers.append(_random_layer(7, BIG))
    repo = "quirks/ten"
    return _push_image(registry, tmp_path_factory.mktemp("ten"), repo, layers), repo


@pytest.fixture
def proxy(registry: RunningRegistry) -> Iterator[FaultProxy]:
    running = FaultProxy(registry.host).start()
    yield running
    running.stop()


def _client(**policy: float) -> RegistryClient:
    return RegistryClient(retry_policy=RetryPolicy(initial_wait=0.05, **policy))  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Copy:
    """A one-layer image to copy (``src``) to a fresh registry behind the fault proxy
    (``dst``), and the client that copies it."""

    proxy: FaultProxy
    client: RegistryClient
    src: Reference
    dst: Reference


class CopyThrough(Protocol):
    def __call__(self, name: str, layer: Layer, *faults: Fault) -> AbstractContextManager[_Copy]:
        """``quirks/NAME`` of ``layer`` pushed to the anonymous registry, a new registry
        behind the fault proxy with ``faults`` set, and ``copy/NAME`` there to copy it to."""
        ...


@pytest.fixture
def copy_through(
    registry: RunningRegistry, make_registry: MakeRegistry, tmp_path: Path
) -> CopyThrough:
    @contextmanager
    def made(name: str, layer: Layer, *faults: Fault) -> Iterator[_Copy]:
        src = _push_image(registry, tmp_path, f"quirks/{name}", [layer])
        target = make_registry()
        with FaultProxy(target.host) as proxy, _client() as client:
            proxy.set_faults(*faults)
            dst = parse_reference(f"{proxy.host}/copy/{name}:1")
            yield _Copy(proxy, client, parse_reference(src), dst)

    return made


class MirrorThrough(Protocol):
    def __call__(
        self, name: str, *faults: Fault
    ) -> AbstractContextManager[tuple[MirrorReport, FaultProxy]]:
        """`mirror --copy` of the ten-layer image to ``copy/NAME:1`` on a new registry behind
        the fault proxy with ``faults`` set: its report, and the proxy (its log, in the block)."""
        ...


@pytest.fixture
def mirror_ten_through(
    ten_layers: tuple[str, str], make_registry: MakeRegistry, workspace: Workspace
) -> MirrorThrough:
    @contextmanager
    def copied(name: str, *faults: Fault) -> Iterator[tuple[MirrorReport, FaultProxy]]:
        src, _ = ten_layers
        target = make_registry()
        with FaultProxy(target.host) as proxy:
            proxy.set_faults(*faults)
            dst = f"{proxy.host}/copy/{name}:1"
            yield mirror(src, dst, options=MirrorOptions(copy=True), workspace=workspace), proxy

    return copied


# ---------------------------------------------------------------------- uploads (GHCR)


def test_a_copy_to_a_registry_with_ghcrs_chunk_limit_puts_each_blob_whole(
    mirror_ten_through: MirrorThrough,
) -> None:
    """GHCR answers 416 to PATCH bodies over 4 MiB; one PUT of known length fits it."""
    limit = Fault("chunk_limit", method="PATCH", path=r"/blobs/uploads/", limit=4 * MiB, times=-1)
    with mirror_ten_through("ten", limit) as (report, ghcr):
        assert report.verdict is Verdict.IDENTICAL, report.message
        assert report.copy is not None and report.copy["blobs_uploaded"] == 11
        puts = [e for e in ghcr.log if e.method == "PUT" and "/blobs/uploads/" in e.path]
        assert max(e.length for e in puts) >= BIG  # the big layer went in one PUT
        assert not [e for e in ghcr.log if e.method == "PATCH" and e.status != 202]


def test_chunks_take_the_size_ghcrs_416_states_at_once(copy_through: CopyThrough) -> None:
    # GHCR's words for this limit: "request body is too large, max size is 0.09MiB", 94371
    # bytes once rounded down, under the 96000 the proxy takes.
    limit = Fault("chunk_limit", method="PATCH", path=r"/blobs/uploads/", limit=96_000, times=-1)
    layer = _random_layer(11, 600_000)
    with copy_through("stated", layer, limit) as copy:
        result = copy_image(copy.client, copy.src, copy.dst, chunk_size=256 * 1024)
        ghcr = copy.proxy
        assert ghcr.fired("chunk_limit") == 1  # 256 KiB refused once, never halved
        taken = [e.length for e in ghcr.log if e.method == "PATCH" and e.status == 202]
        assert taken[:-1] == [94_371] * (len(taken) - 1) and 0 < taken[-1] <= 94_371
        assert any("sending 94371-byte chunks (the most it says it takes)" in line
                   for line in result.log)  # fmt: skip
        assert copy.client.get_manifest(copy.dst, "1") == copy.client.get_manifest(copy.src, "1")


def test_a_put_refused_with_a_stated_size_goes_on_in_chunks_of_that_size(
    copy_through: CopyThrough,
) -> None:
    # The monolithic PUT is refused with GHCR's words ("max size is 0.19MiB"); the closing
    # PUT of the chunked upload has no body, so it passes.
    limit = Fault("chunk_limit", method="PUT", path=r"/blobs/uploads/", limit=200_000, times=-1)
    layer = _random_layer(14, 600_000)
    with copy_through("stated-put", layer, limit) as copy:
        copy_image(copy.client, copy.src, copy.dst)
        strict = copy.proxy
        assert strict.fired("chunk_limit") == 1
        patches = [e.length for e in strict.log if e.method == "PATCH"]
        assert len(patches) >= 2 and patches[:-1] == [199_229] * (len(patches) - 1)
        assert copy.client.get_manifest(copy.dst, "1") == copy.client.get_manifest(copy.src, "1")


def test_chunks_halve_on_a_416_that_states_no_size(copy_through: CopyThrough) -> None:
    silent = b'{"errors":[{"code":"SIZE_INVALID","message":"request body is too large"}]}'
    limit = Fault("chunk_limit", method="PATCH", path=r"/blobs/uploads/", limit=96_000,
                  times=-1, body=silent)  # fmt: skip
    layer = _random_layer(11, 600_000)
    with copy_through("shrink", layer, limit) as copy:
        result = copy_image(copy.client, copy.src, copy.dst, chunk_size=256 * 1024)
        ghcr = copy.proxy
        assert ghcr.fired("chunk_limit") >= 2  # 256 KiB, then 128 KiB, were refused
        taken = [e.length for e in ghcr.log if e.method == "PATCH" and e.status == 202]
        assert taken and max(taken) <= 96_000
        assert any("refused a chunk" in line and "(halved)" in line for line in result.log)
        assert copy.client.get_manifest(copy.dst, "1") == copy.client.get_manifest(copy.src, "1")


def test_chunks_are_never_shorter_than_the_registrys_minimum(copy_through: CopyThrough) -> None:
    minimum = Fault("header", method="POST", path=r"/blobs/uploads/$",
                    headers={"OCI-Chunk-Min-Length": "150000"}, times=-1)  # fmt: skip
    layer = _random_layer(12, 500_000)
    with copy_through("minimum", layer, minimum) as copy:
        copy_image(copy.client, copy.src, copy.dst, chunk_size=32 * 1024)
        strict = copy.proxy
        assert strict.fired("header") >= 1
        patches = [e.length for e in strict.log if e.method == "PATCH"]
        assert len(patches) >= 2
        assert min(patches[:-1]) >= 150_000  # the last chunk may be shorter


def test_a_416_no_chunk_size_satisfies_ends_in_one_line_naming_the_registry(
    copy_through: CopyThrough,
) -> None:
    limit = Fault("chunk_limit", method="PATCH", limit=1000, path=r"/", times=-1)
    layer = _random_layer(13, 300_000)
    with copy_through("nofit", layer, limit) as copy:
        tiny = copy.proxy
        with pytest.raises(RegistryError) as caught:
            copy_image(copy.client, copy.src, copy.dst, chunk_size=256 * 1024)
    error = caught.value
    assert error.exit_code == 3 and error.status == 416
    assert tiny.host in error.message and "request body is too large" in error.message
    assert "\n" not in error.diagnostics().replace("\nhint: ", " hint: ")
    assert error.hint and "limits" in error.hint


# ---------------------------------------------------------------------- Harbor's cookie


def test_no_cookie_is_ever_sent_back_so_harbors_csrf_check_never_refuses_a_write(
    mirror_ten_through: MirrorThrough,
) -> None:
    csrf = Fault("csrf", method="*", path=r"/", times=-1)
    with mirror_ten_through("harbor", csrf) as (report, harbor):
        assert report.verdict is Verdict.IDENTICAL, report.message
        assert any(e.method in ("POST", "PUT") for e in harbor.log)
        assert all(e.cookie is None for e in harbor.log)
        assert harbor.fired("csrf") == 0


# ---------------------------------------------------------------------- Hub's 429


def test_a_429_outlasting_the_retries_says_what_the_registry_said_and_how_long_to_wait(
    ten_layers: tuple[str, str], proxy: FaultProxy, workspace: Workspace
) -> None:
    _, repo = ten_layers
    proxy.set_faults(
        Fault(
            "status",
            status=429,
            path=r"/manifests/",
            body=HUB_429,
            headers=HUB_LIMITS,
            retry_after="3600",
            times=-1,
        )  # fmt: skip
    )
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "inspect", f"{proxy.host}/{repo}:1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert proxy.fired("status") == 1  # asked to wait an hour: not asked again
    first, *rest = done.stderr.strip().splitlines()
    assert first.startswith(f"error: {proxy.host} is rate-limiting us")
    assert "TOOMANYREQUESTS: You have reached your pull rate limit" in first
    assert "limit 100 per 21600 s, 0 left" in first
    assert rest and "wait 3600 s" in rest[0] and "docker login" in rest[0]


def test_a_429_is_waited_out_as_the_registry_asks(
    ten_layers: tuple[str, str], proxy: FaultProxy
) -> None:
    _, repo = ten_layers
    proxy.set_faults(
        Fault(
            "status", status=429, path=r"/manifests/", body=HUB_429, headers=HUB_LIMITS, times=2
        )  # fmt: skip
    )
    sleeps: list[float] = []
    policy = RetryPolicy(initial_wait=0.01, rate_limit_wait=0.2, sleep=sleeps.append)
    with RegistryClient(retry_policy=policy) as client:
        image = client.resolve(parse_reference(f"{proxy.host}/{repo}:1"))
    assert len(image.layers) == 10
    assert proxy.fired("status") == 2
    assert sleeps == [0.2, 0.4]  # no Retry-After: the rate-limit pause, doubled


# ---------------------------------------------------------------------- mounts, HEAD 404


def test_a_refused_mount_falls_back_to_an_upload(
    ten_layers: tuple[str, str], proxy: FaultProxy, workspace: Workspace
) -> None:
    _, repo = ten_layers
    proxy.set_faults(
        Fault("status", method="POST", path=r"mount=", status=403, body=DENIED, times=-1)
    )
    report = mirror(
        f"{proxy.host}/{repo}:1", f"{proxy.host}/quirks/mount-refused:1",
        options=MirrorOptions(copy=True), workspace=workspace,
    )  # fmt: skip
    assert report.verdict is Verdict.IDENTICAL, report.message
    assert report.copy is not None
    assert report.copy["blobs_mounted"] == 0 and report.copy["blobs_uploaded"] == 11
    assert proxy.fired("status") == 11


def test_a_head_404_is_confirmed_by_a_get_before_a_tag_is_called_gone(
    ten_layers: tuple[str, str], proxy: FaultProxy
) -> None:
    _, repo = ten_layers
    proxy.set_faults(Fault("status", method="HEAD", path=r"/manifests/", status=404, times=-1))
    with _client() as client:
        head = client.head_manifest(parse_reference(f"{proxy.host}/{repo}:1"), "1")
        real = client.head_manifest(parse_reference(f"{proxy.upstream}/{repo}:1"), "1")
        assert head.digest == real.digest and head.from_get
        from imagekit.errors import RegistryNotFound

        with pytest.raises(RegistryNotFound):  # a GET says 404 too: gone it is
            client.head_manifest(parse_reference(f"{proxy.host}/{repo}:never"), "never")
    assert proxy.fired("status") == 2


# ---------------------------------------------------------------------- logins per host


def test_a_redirect_to_another_registry_logs_in_there_with_that_registrys_credentials(
    make_registry: MakeRegistry, docker_config: Path, tmp_path: Path
) -> None:
    """lscr.io sends its whole API to ghcr.io: ghcr.io's login, never lscr.io's."""
    ghcr = make_registry("token")
    creds = f"{ghcr.username}:{ghcr.password}"
    layers = [Layer.gzip(make_tar(400))]
    push_new_image(tmp_path, f"{ghcr.host}/team/app:1", layers, "--dest-creds", creds)
    with FaultProxy(ghcr.host) as lscr:
        lscr.set_faults(Fault("redirect", method="*", path=r"^/v2/", target=ghcr.host, times=-1))
        own = base64.b64encode(b"lscr-user:lscr-secret").decode()
        auths = {lscr.host: {"auth": own}, **ghcr.docker_auth_entry()}
        (docker_config / "config.json").write_text(json.dumps({"auths": auths}))
        with RegistryClient(docker_config=docker_config) as client:
            image = client.resolve(parse_reference(f"{lscr.host}/team/app:1"))
        assert len(image.layers) == 1
        assert lscr.fired("redirect") >= 1
    assert ghcr.token_server is not None
    assert ("lscr-user", False) not in ghcr.token_server.logins
    assert (ghcr.username, True) in ghcr.token_server.logins
    assert all(e.authorization is None for e in lscr.log)  # lscr itself never challenged


# ---------------------------------------------------------------------- helper rotation


def write_helper(bin_dir: Path, secret_file: Path, calls_file: Path, username: str) -> None:
    """A docker-credential-imagekit-test that answers the secret in ``secret_file``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    helper = bin_dir / "docker-credential-imagekit-test"
    helper.write_text(
        "#!/bin/sh\n"
        f'echo get >> "{calls_file}"\n'
        "read -r server\n"
        f'printf \'{{"ServerURL":"%s","Username":"{username}","Secret":"%s"}}\' '
        f'"$server" "$(cat "{secret_file}")"\n'
    )
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)


def test_a_helper_is_asked_again_after_a_401_and_a_rotated_secret_is_used(
    make_registry: MakeRegistry,
    docker_config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg = make_registry("token")
    assert reg.token_server is not None and reg.username and reg.password
    creds = f"{reg.username}:{reg.password}"
    for repo in ("rot/a", "rot/b"):
        layers = [Layer.gzip(make_tar(500 + len(repo)))]
        push_new_image(tmp_path / repo, f"{reg.host}/{repo}:1", layers, "--dest-creds", creds)
    secret, calls = tmp_path / "secret", tmp_path / "calls"
    secret.write_text(reg.password)
    write_helper(tmp_path / "bin", secret, calls, reg.username)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (docker_config / "config.json").write_text(json.dumps({"credsStore": "imagekit-test"}))
    with RegistryClient(docker_config=docker_config) as client:
        client.resolve(parse_reference(f"{reg.host}/rot/a:1"))
        asked = len(calls.read_text().splitlines())
        # The secret rotates while we run (a gcloud or ACR token expiring).
        reg.token_server.password = "rotated-" + reg.password
        secret.write_text(reg.token_server.password)
        image = client.resolve(parse_reference(f"{reg.host}/rot/b:1"))
    assert len(image.layers) == 1
    assert len(calls.read_text().splitlines()) == asked + 1
    assert (reg.username, False) in reg.token_server.logins  # the old secret was refused


# ---------------------------------------------------------------------- all at once


def test_a_copy_through_a_registry_that_is_ghcr_harbor_hub_and_nexus_at_once(
    ten_layers: tuple[str, str],
    proxy: FaultProxy,
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registry that is GHCR, Harbor, Hub and Nexus at once: a same-registry copy of a
    10-layer image whose mounts are refused, chunks over 4 MiB refused, cookies set, a 429 on
    the way and HEAD 404s; the verification downloads stay bounded on a machine with many
    cores."""
    _, repo = ten_layers
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    proxy.count_in_flight = r"^GET .*/quirks/all-at-once/blobs/sha256:"  # the verification
    proxy.set_faults(
        Fault("status", method="POST", path=r"mount=", status=401, body=DENIED, times=-1),
        Fault("chunk_limit", method="PATCH", path=r"/blobs/uploads/", limit=4 * MiB, times=-1),
        Fault(
            "status",
            status=429,
            path=r"/blobs/sha256:",
            body=HUB_429,
            headers=HUB_LIMITS,
            retry_after="0",
            times=2,
        ),  # fmt: skip
        Fault("status", method="HEAD", path=r"/manifests/", status=404, times=-1),
        Fault("drip", piece=8192, delay=0.001, times=-1),
        Fault("csrf", method="*", path=r"/", times=-1),
    )
    report = mirror(
        f"{proxy.host}/{repo}:1", f"{proxy.host}/quirks/all-at-once:1",
        options=MirrorOptions(copy=True), workspace=workspace,
    )  # fmt: skip
    assert report.verdict is Verdict.IDENTICAL, report.message
    assert report.copy is not None and report.copy["blobs_uploaded"] == 11
    assert proxy.fired("status") >= 11 + 2  # refused mounts and the 429s
    assert all(e.cookie is None for e in proxy.log)
    assert 1 < proxy.max_in_flight <= 4


# ------------------------------------------------- a blob commit racing a manifest PUT


def _small_image(client: RegistryClient, repo: Reference, salt: str) -> Digest:
    """A manifest of one config blob, pushed to REPO through CLIENT; its digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "salt": salt}).encode()
    desc = Descriptor(OCI_CONFIG, Digest.of_bytes(config), len(config))
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": str(desc.digest), "size": desc.size},
            "layers": [],
        }
    ).encode()
    push_manifest(client, repo, body, OCI_MANIFEST, [BlobSource(desc, data=lambda: [config])])
    return Digest.of_bytes(body)


def test_a_manifest_refused_digest_invalid_is_sent_once_more_and_a_second_refusal_stands(
    proxy: FaultProxy,
) -> None:
    """Distribution answers a manifest PUT 400 DIGEST_INVALID while another process commits
    one of its blobs (the link file rewritten; docs/registries.md); imagekit hashed what it
    sent, so one more PUT is worth it, said on the log. The registry cannot be made to do
    this on demand: the proxy answers for it, once, then twice."""
    repo = Reference(proxy.host, f"quirks/race-{os.getpid()}-{time.monotonic_ns()}")
    proxy.set_faults(
        Fault("status", method="PUT", path=r"/manifests/", status=400, body=DIGEST_INVALID)
    )
    said: list[str] = []
    with RegistryClient(log=said.append) as client:
        digest = _small_image(client, repo, "once")
        assert client.head_manifest(repo, str(digest)).digest == digest  # it is there
    puts = [e.status for e in proxy.log if e.method == "PUT" and "/manifests/" in e.path]
    assert puts == [400, 201] and proxy.fired("status") == 1
    assert len(said) == 1 and "sending it once more" in said[0], said
    proxy.log.clear()
    proxy.set_faults(
        Fault("status", method="PUT", path=r"/manifests/", status=400, body=DIGEST_INVALID,
              times=2)
    )  # fmt: skip
    with RegistryClient() as client, pytest.raises(RegistryError) as caught:
        _small_image(client, repo, "twice")
    assert "HTTP 400: DIGEST_INVALID" in caught.value.message
    puts = [e.status for e in proxy.log if e.method == "PUT" and "/manifests/" in e.path]
    assert puts == [400, 400]
