"""Docker Hub mirrors: the engine's registry-mirrors (daemon.json), containerd's hosts.toml and
--registry-mirror, each a real registry on loopback holding a docker.io image, read first;
a failing mirror is said and the next one asked, and registry-1.docker.io is the last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from imagekit.errors import RegistryError
from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient, RetryPolicy
from imagekit.registry.upload import copy_image
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.oci_layout import Layer, make_tar, push_new_image
from tests.support.registries import RunningRegistry
from tests.support.tls import make_client_certificate, make_server_certificate

pytestmark = pytest.mark.integration
HUB_REF = "docker.io/library/imagekit-mirror-test:1"
_ENVS = (
    "IMAGEKIT_REGISTRY_MIRRORS",
    "IMAGEKIT_DOCKER_DAEMON_JSON",
    "IMAGEKIT_CONTAINERD_CERTS_D",
)


@pytest.fixture(scope="module")
def hub_mirror(
    make_registry: Callable[..., RunningRegistry], tmp_path_factory: pytest.TempPathFactory
) -> RunningRegistry:
    """A registry holding what Docker Hub would serve as library/imagekit-mirror-test:1."""
    mirror = make_registry()
    tmp = tmp_path_factory.mktemp("hub-mirror")
    push_new_image(
        tmp, f"{mirror.host}/library/imagekit-mirror-test:1", [Layer.gzip(make_tar(800))]
    )
    return mirror


@pytest.fixture
def no_mirrors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No mirror configured anywhere (the machine's own files are not read)."""
    for name in _ENVS:
        monkeypatch.delenv(name, raising=False)
    env = {
        "IMAGEKIT_DOCKER_DAEMON_JSON": str(tmp_path / "none.json"),
        "IMAGEKIT_CONTAINERD_CERTS_D": str(tmp_path / "none"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_the_engines_registry_mirrors_serve_docker_io_and_the_output_says_so(
    hub_mirror: RunningRegistry, no_mirrors: dict[str, str], tmp_path: Path
) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"registry-mirrors": [f"http://{hub_mirror.host}"]}))
    env = {
        **{k: v for k, v in os.environ.items() if k not in _ENVS},
        **no_mirrors,
        "IMAGEKIT_DOCKER_DAEMON_JSON": str(daemon),
    }
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "inspect", "--json", HUB_REF],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reference"] == HUB_REF
    assert f"docker.io: reading through the mirror {hub_mirror.host}" in done.stderr


def test_containerds_hosts_toml_names_a_mirror(
    hub_mirror: RunningRegistry,
    no_mirrors: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hosts = tmp_path / "certs.d" / "docker.io" / "hosts.toml"
    hosts.parent.mkdir(parents=True)
    hosts.write_text(
        'server = "https://registry-1.docker.io"\n\n'
        f'[host."http://{hub_mirror.host}"]\n  capabilities = ["pull", "resolve"]\n'
    )
    monkeypatch.setenv("IMAGEKIT_CONTAINERD_CERTS_D", str(tmp_path / "certs.d"))
    said: list[str] = []
    with RegistryClient(log=said.append) as client:
        image = client.resolve(parse_reference(HUB_REF))
    assert len(image.layers) == 1
    assert said == [f"docker.io: reading through the mirror {hub_mirror.host}"]


def test_hosts_toml_headers_go_to_the_mirror_and_not_where_it_redirects(
    hub_mirror: RunningRegistry,
    no_mirrors: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mirror whose hosts.toml gives it headers (a token, a team): every request to the
    mirror carries them, its blob downloads are sent to an "object store" (another origin)
    that never sees them, and no output shows the token."""
    hosts = tmp_path / "certs.d" / "docker.io" / "hosts.toml"
    hosts.parent.mkdir(parents=True)
    monkeypatch.setenv("IMAGEKIT_CONTAINERD_CERTS_D", str(tmp_path / "certs.d"))
    with FaultProxy(hub_mirror.host, [Fault("redirect", times=-1)]) as proxy:
        hosts.write_text(
            f'[host."http://{proxy.host}"]\n  capabilities = ["pull", "resolve"]\n'
            f'  [host."http://{proxy.host}".header]\n'
            '    x-mirror-token = "t0ken-for-the-mirror"\n    x-team = ["infer", "serving"]\n'
        )
        said: list[str] = []
        with RegistryClient(log=said.append) as client:
            image = client.resolve(parse_reference(HUB_REF))
            repr_text = repr(client)
    assert len(image.layers) == 1
    assert proxy.fired("redirect") >= 1  # the config came from the "object store"
    own = [e for e in proxy.log if not e.offsite]
    offsite = [e for e in proxy.log if e.offsite]
    assert own and offsite
    for exchange in own:
        sent = dict(exchange.headers)
        assert sent.get("x-mirror-token") == "t0ken-for-the-mirror", exchange
        assert sent.get("x-team") == "infer, serving", exchange
    for exchange in offsite:
        names = {name for name, _ in exchange.headers}
        assert not names & {"x-mirror-token", "x-team"}, exchange
    assert "t0ken" not in " ".join(said) + repr_text


def test_a_failing_mirror_is_said_and_the_next_one_asked(
    hub_mirror: RunningRegistry, no_mirrors: dict[str, str]
) -> None:
    said: list[str] = []
    policy = RetryPolicy(max_attempts=2, initial_wait=0.01)
    mirrors = ("http://127.0.0.1:1", f"http://{hub_mirror.host}")
    with RegistryClient(registry_mirrors=mirrors, retry_policy=policy, log=said.append) as c:
        image = c.resolve(parse_reference(HUB_REF))
    assert len(image.layers) == 1
    assert said[0].startswith("docker.io: mirror 127.0.0.1:1 failed (")
    assert f"docker.io: reading through the mirror {hub_mirror.host}" in said


def test_an_image_no_mirror_has_falls_back_to_docker_hub_and_says_so(
    hub_mirror: RunningRegistry, no_mirrors: dict[str, str]
) -> None:
    """Here Docker Hub is out of reach, so the fallback ends in an error naming it."""
    said: list[str] = []
    policy = RetryPolicy(max_attempts=1, initial_wait=0.01)
    mirrors = (f"http://{hub_mirror.host}",)
    with (
        RegistryClient(registry_mirrors=mirrors, retry_policy=policy, log=said.append) as c,
        pytest.raises(RegistryError) as caught,
    ):
        c.resolve(parse_reference("docker.io/library/imagekit-not-mirrored:1"))
    assert said[0].startswith(f"docker.io: mirror {hub_mirror.host} failed (")
    assert "the reference names nothing here (HTTP 404" in said[0]
    assert said[1].startswith("docker.io: no mirror served GET ")
    assert said[1].endswith("falling back to registry-1.docker.io")
    assert "registry-1.docker.io" in caught.value.message


def test_hosts_toml_ca_client_and_override_path_are_read_as_containerd_reads_them(
    hub_mirror: RunningRegistry,
    make_registry: Callable[..., RunningRegistry],
    no_mirrors: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Harbor-like proxy project: the real registry serving TLS with its own CA, asking for
    a client certificate, and holding Hub's images under hub/ (its API root /v2/hub)."""
    cert = make_server_certificate(tmp_path / "tls")
    client = make_client_certificate(tmp_path / "client")
    mirror = make_registry(tls=cert, client_ca=client.ca_path)
    seed = tmp_path / "seed-certs.d" / mirror.host
    seed.mkdir(parents=True)
    for source, name in ((cert.ca_path, "ca.crt"), (client.cert_path, "client.cert"),
                         (client.key_path, "client.key")):  # fmt: skip
        (seed / name).write_bytes(source.read_bytes())
    monkeypatch.setenv("IMAGEKIT_CERTS_D", str(seed.parent))
    with RegistryClient() as seeding:
        copy_image(
            seeding,
            parse_reference(f"{hub_mirror.host}/library/imagekit-mirror-test:1"),
            parse_reference(f"{mirror.host}/hub/library/imagekit-mirror-test:1"),
        )
    # From here on Docker's certs.d knows nothing of the mirror: only hosts.toml does.
    monkeypatch.setenv("IMAGEKIT_CERTS_D", str(tmp_path / "empty-certs.d"))
    folder = tmp_path / "certs.d" / "docker.io"
    folder.mkdir(parents=True)
    (folder / "mirror-ca.pem").write_bytes(cert.ca_path.read_bytes())
    (folder / "mine.cert").write_bytes(client.cert_path.read_bytes())
    (folder / "mine.key").write_bytes(client.key_path.read_bytes())
    monkeypatch.setenv("IMAGEKIT_CONTAINERD_CERTS_D", str(tmp_path / "certs.d"))
    entry = (
        'server = "https://registry-1.docker.io"\n\n'
        f'[host."https://{mirror.host}/v2/hub"]\n'
        '  capabilities = ["pull", "resolve"]\n  override_path = true\n'
    )
    policy = RetryPolicy(max_attempts=1, initial_wait=0.01)

    # Without its ca the mirror's certificate is not trusted: said, and Hub asked instead.
    (folder / "hosts.toml").write_text(entry)
    said: list[str] = []
    with (
        RegistryClient(retry_policy=policy, log=said.append) as c,
        pytest.raises(RegistryError),
    ):
        c.resolve(parse_reference(HUB_REF))
    assert said[0].startswith(f"docker.io: mirror {mirror.host} failed (")
    assert "could not be verified" in said[0]

    # With ca and client (relative to the hosts.toml, a [cert, key] pair), it serves; and
    # without its ca but with skip_verify, the certificate is not checked: it serves too.
    for trust in ('  ca = "mirror-ca.pem"\n', "  skip_verify = true\n"):
        (folder / "hosts.toml").write_text(
            entry + trust + '  client = [["mine.cert", "mine.key"]]\n'
        )
        said.clear()
        with RegistryClient(retry_policy=policy, log=said.append) as c:
            image = c.resolve(parse_reference(HUB_REF))
        assert len(image.layers) == 1
        assert said == [f"docker.io: reading through the mirror {mirror.host}"]
