"""One TLS story for every command, against the real registry serving TLS with a CA the
tests make (tests/support/tls.py): Docker's certs.d, --ca-file, --insecure as Docker means
it (TLS without verification, then plain HTTP), IMAGEKIT_INSECURE_REGISTRIES, client
certificates; and a TLS failure is one line naming the registry and what to do, exit 3.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.refs import parse_reference
from imagekit.registry import RegistryClient
from imagekit.registry.upload import copy_image
from tests.support.cli import without_tls_settings
from tests.support.forward_proxy import RunningProxy, start_tinyproxy
from tests.support.oci_layout import Layer, make_tar, push_new_image
from tests.support.registries import MakeRegistry, RunningRegistry
from tests.support.tls import ServerCertificate, make_client_certificate, make_server_certificate

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> ServerCertificate:
    return make_server_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_registry(make_registry: MakeRegistry, cert: ServerCertificate) -> RunningRegistry:
    return make_registry(tls=cert)


def _certs_d(root: Path, host: str, *files: Path, names: tuple[str, ...] = ()) -> Path:
    """A certs.d root with a folder for ``host`` holding ``files`` (as ``names``)."""
    folder = root / host
    folder.mkdir(parents=True, exist_ok=True)
    for i, file in enumerate(files):
        shutil.copy(file, folder / (names[i] if names else file.name))
    return root


def _with_client_certificate(
    root: Path, host: str, cert: ServerCertificate, client_files: Path
) -> Path:
    """A certs.d root trusting ``cert``'s CA for ``host``, and showing it the client
    certificate and key in ``client_files``."""
    files = (cert.ca_path, client_files / "client.cert", client_files / "client.key")
    return _certs_d(root, host, *files, names=("ca.crt", "client.cert", "client.key"))


@pytest.fixture(scope="module")
def image(
    registry: RunningRegistry,
    tls_registry: RunningRegistry,
    cert: ServerCertificate,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """An image in the TLS registry, put there by imagekit's own copy through certs.d."""
    tmp = tmp_path_factory.mktemp("tls-image")
    layers = [Layer.gzip(make_tar(600 + i)) for i in range(2)]
    plain = push_new_image(tmp / "layout", f"{registry.host}/tls/src:1", layers)
    certs = _certs_d(tmp / "certs.d", tls_registry.host, cert.ca_path, names=("ca.crt",))
    target = f"{tls_registry.host}/tls/app:1"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IMAGEKIT_CERTS_D", str(certs))
        with RegistryClient() as client:
            copy_image(client, parse_reference(plain), parse_reference(target))
    return target


def _imagekit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return without_tls_settings(*args, env=env)


@pytest.fixture
def empty_certs_d(tmp_path: Path, tls_registry: RunningRegistry) -> Path:
    """A certs.d whose folder for the TLS registry holds no CA: HTTPS, and nothing trusted."""
    return _certs_d(tmp_path / "certs.d", tls_registry.host)


def test_certs_d_makes_inspect_and_mirror_reach_a_registry_with_its_own_ca(
    image: str,
    tls_registry: RunningRegistry,
    cert: ServerCertificate,
    tmp_path: Path,
    workspace: object,
) -> None:
    certs = _certs_d(tmp_path / "certs.d", tls_registry.host, cert.ca_path, names=("ca.crt",))
    env = {"IMAGEKIT_CERTS_D": str(certs)}
    shown = _imagekit("inspect", "--json", image, env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["reference"] == image
    copy = f"{tls_registry.host}/tls/copy:1"
    mirrored = _imagekit("mirror", "--copy", "--json", image, copy, env=env)
    assert mirrored.returncode == 0, mirrored.stderr
    assert json.loads(mirrored.stdout)["verdict"] == "identical"


def test_an_untrusted_certificate_is_one_line_naming_the_registry_and_what_to_do(
    image: str, tls_registry: RunningRegistry, empty_certs_d: Path
) -> None:
    done = _imagekit("inspect", image, env={"IMAGEKIT_CERTS_D": str(empty_certs_d)})
    assert done.returncode == 3, done.stderr
    error, hint = done.stderr.strip().splitlines()
    assert error.startswith(f"error: {tls_registry.host}: the TLS certificate of ")
    assert "could not be verified" in error
    assert "--ca-file" in hint and "ca.crt" in hint and f"--insecure {tls_registry.host}" in hint


def test_ca_file_trusts_the_registrys_ca(
    image: str, cert: ServerCertificate, empty_certs_d: Path
) -> None:
    env = {"IMAGEKIT_CERTS_D": str(empty_certs_d)}
    done = _imagekit("inspect", "--ca-file", str(cert.ca_path), image, env=env)
    assert done.returncode == 0, done.stderr
    by_env = _imagekit("inspect", image, env={**env, "IMAGEKIT_CA_FILE": str(cert.ca_path)})
    assert by_env.returncode == 0, by_env.stderr


def test_insecure_speaks_tls_without_verifying_it(
    image: str, tls_registry: RunningRegistry, tmp_path: Path
) -> None:
    """No CA anywhere; the registry speaks only TLS, so an answer proves TLS was used."""
    env = {"IMAGEKIT_CERTS_D": str(tmp_path / "none")}
    done = _imagekit("inspect", "--insecure", tls_registry.host, image, env=env)
    assert done.returncode == 0, done.stderr
    by_env = _imagekit(
        "inspect",
        image,
        env={**env, "IMAGEKIT_INSECURE_REGISTRIES": f"x.example,{tls_registry.host}"},
    )
    assert by_env.returncode == 0, by_env.stderr


def test_insecure_falls_back_to_plain_http_for_a_registry_without_tls(
    registry: RunningRegistry, image: str, tmp_path: Path
) -> None:
    plain = f"{registry.host}/tls/src:1"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IMAGEKIT_CERTS_D", str(tmp_path / "none"))
        with RegistryClient(insecure=(registry.host,)) as client:
            assert client._transport.scheme_for(registry.host) == "https"  # noqa: SLF001
            resolved = client.resolve(parse_reference(plain))
            assert client._transport.scheme_for(registry.host) == "http"  # noqa: SLF001
    assert len(resolved.layers) == 2


@pytest.fixture(scope="module")
def mtls(
    make_registry: MakeRegistry, cert: ServerCertificate, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningRegistry, Path]]:
    """A registry that requires a client certificate, and a folder holding one."""
    client = make_client_certificate(tmp_path_factory.mktemp("client-cert"))
    yield make_registry(tls=cert, client_ca=client.ca_path), client.cert_path.parent


def test_a_client_certificate_in_certs_d_is_shown_to_a_registry_that_asks(
    mtls: tuple[RunningRegistry, Path], cert: ServerCertificate, tmp_path: Path
) -> None:
    registry, client_files = mtls
    without = _certs_d(tmp_path / "without", registry.host, cert.ca_path, names=("ca.crt",))
    refused = _imagekit(
        "inspect", f"{registry.host}/none/x:1", env={"IMAGEKIT_CERTS_D": str(without)}
    )
    assert refused.returncode == 3, refused.stderr
    assert f"error: {registry.host}:" in refused.stderr and "client.cert" in refused.stderr
    with_cert = _with_client_certificate(tmp_path / "with", registry.host, cert, client_files)
    # The handshake passes: what is left is the registry's own answer (no such image).
    shown = _imagekit(
        "inspect", f"{registry.host}/none/x:1", env={"IMAGEKIT_CERTS_D": str(with_cert)}
    )
    assert shown.returncode == 2  # the reference names nothing there: bad input, not a fault
    assert "none/x:1: the reference names nothing here (HTTP 404" in shown.stderr, shown.stderr


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[RunningProxy]:
    proxy = start_tinyproxy(tmp_path / "tinyproxy")
    yield proxy
    proxy.stop()


# An empty variable unsets its proxy (urllib's rules, which httpx follows), lower case too.
_NO_OTHER_PROXY = dict.fromkeys(
    ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"), ""
)


def test_certs_d_ca_file_and_client_certificates_apply_through_an_https_proxy(
    image: str,
    tls_registry: RunningRegistry,
    mtls: tuple[RunningRegistry, Path],
    cert: ServerCertificate,
    tinyproxy: RunningProxy,
    empty_certs_d: Path,
    tmp_path: Path,
) -> None:
    """Through a real forward proxy (CONNECT), the TLS inside the tunnel is the registry's:
    verified with certs.d and --ca-file, a client certificate shown, as without a proxy."""
    proxied = {**_NO_OTHER_PROXY, "HTTPS_PROXY": tinyproxy.url, "https_proxy": tinyproxy.url}
    certs = _certs_d(tmp_path / "trusted", tls_registry.host, cert.ca_path, names=("ca.crt",))
    through_certs_d = _imagekit("inspect", image, env={**proxied, "IMAGEKIT_CERTS_D": str(certs)})
    assert through_certs_d.returncode == 0, through_certs_d.stderr
    by_ca_file = _imagekit(
        "inspect", "--ca-file", str(cert.ca_path), image,
        env={**proxied, "IMAGEKIT_CERTS_D": str(empty_certs_d)},
    )  # fmt: skip
    assert by_ca_file.returncode == 0, by_ca_file.stderr
    untrusted = _imagekit("inspect", image, env={**proxied, "IMAGEKIT_CERTS_D": str(empty_certs_d)})
    assert untrusted.returncode == 3 and "could not be verified" in untrusted.stderr
    registry, client_files = mtls
    with_cert = _with_client_certificate(tmp_path / "with", registry.host, cert, client_files)
    shown = _imagekit(
        "inspect", f"{registry.host}/none/x:1", env={**proxied, "IMAGEKIT_CERTS_D": str(with_cert)}
    )
    assert "the reference names nothing here (HTTP 404" in shown.stderr, shown.stderr  # handshake
    # Every one of them went through the proxy, as a tunnel to the registry.
    log = tinyproxy.log()
    assert log.count(f"CONNECT {tls_registry.host}") >= 3, log[-3000:]
    assert f"CONNECT {registry.host}" in log, log[-3000:]
