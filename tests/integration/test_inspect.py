"""`imagekit inspect` on real registries, checked against skopeo on the same images."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_docker_auths
from tests.support.base_image import BaseImage
from tests.support.oci_layout import Layout, write_layout
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

IMAGEKIT = str(Path(sys.executable).with_name("imagekit"))


def imagekit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IMAGEKIT, *args], capture_output=True, text=True, timeout=300, check=False
    )


def inspect_json(*args: str) -> dict[str, Any]:
    done = imagekit("inspect", "--json", *args)
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)  # exactly one JSON document
    return document


def skopeo(ref: str, *extra: str, creds: str | None = None) -> bytes:
    argv = ["skopeo", "inspect", "--raw", "--tls-verify=false", *extra]
    if creds:
        argv += ["--creds", creds]
    return subprocess.run(
        [*argv, f"docker://{ref}"], capture_output=True, check=True, timeout=120
    ).stdout


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def assert_matches_skopeo(doc: dict[str, Any], pinned: str, creds: str | None = None) -> None:
    raw = skopeo(pinned, creds=creds)
    manifest = json.loads(raw)
    config_raw = skopeo(pinned, "--config", creds=creds)
    assert doc["manifest_digest"] == sha256(raw)
    assert doc["manifest_media_type"] == manifest["mediaType"]
    assert doc["config_digest"] == manifest["config"]["digest"] == sha256(config_raw)
    assert doc["layer_digests"] == [layer["digest"] for layer in manifest["layers"]]
    assert [(x["media_type"], x["size"], x["digest"]) for x in doc["layers"]] == [
        (x["mediaType"], x["size"], x["digest"]) for x in manifest["layers"]
    ]
    assert doc["compressed_layer_bytes"] == sum(x["size"] for x in manifest["layers"])
    assert doc["diff_ids"] == json.loads(config_raw)["rootfs"]["diff_ids"]


def test_inspect_base_image_matches_skopeo(base_image: BaseImage) -> None:
    doc = inspect_json(base_image.reference)
    assert doc["manifest_digest"] == base_image.digest
    assert doc["index_digest"] is None
    assert doc["platform"] == "linux/amd64"
    assert doc["source_tag"] == base_image.reference
    assert len(doc["layer_digests"]) == 1 and doc["compressed_layer_bytes"] > 50_000_000
    assert_matches_skopeo(doc, base_image.reference)
    # The lock entry's keys, as the public MiniMax-M3 image lock names them.
    for key in (
        "source_tag",
        "index_digest",
        "platform",
        "manifest_digest",
        "config_digest",
        "compressed_layer_bytes",
        "layer_digests",
    ):
        assert key in doc


def test_inspect_human_output(base_image: BaseImage) -> None:
    done = imagekit("inspect", base_image.reference)
    assert done.returncode == 0, done.stderr
    assert base_image.digest in done.stdout
    assert "linux/amd64" in done.stdout
    assert "diff_id" in done.stdout


@pytest.fixture(scope="module")
def multi(
    tmp_path_factory: pytest.TempPathFactory, registry: RunningRegistry
) -> tuple[Layout, str]:
    layout = write_layout(tmp_path_factory.mktemp("inspect-layout"), salt=secrets.token_hex(4))
    return layout, layout.push(
        f"{registry.host}/imagekit-test/inspect-{secrets.token_hex(3)}:multi"
    )


def test_inspect_index_and_platforms(multi: tuple[Layout, str]) -> None:
    layout, ref = multi
    doc = inspect_json(ref)
    assert doc["index_digest"] == layout.index_digest == sha256(skopeo(ref))
    assert doc["platform"] == "linux/amd64"
    assert doc["manifest_digest"] == layout.images["linux/amd64"].manifest_digest
    assert_matches_skopeo(doc, ref.rsplit(":", 1)[0] + "@" + doc["manifest_digest"])
    # Every entry of the index, as skopeo reads it (the attestation manifest too).
    entries = json.loads(skopeo(ref))["manifests"]
    assert [m["digest"] for m in doc["index_manifests"]] == [m["digest"] for m in entries]
    assert doc["index_manifests"][1]["platform"] == "linux/arm64/v8"
    assert len(entries) == 3
    human = imagekit("inspect", ref)
    assert f"in the index  linux/arm64/v8  {entries[1]['digest']}" in human.stdout
    arm = inspect_json(ref, "--platform", "linux/arm64/v8")
    assert arm["manifest_digest"] == layout.images["linux/arm64/v8"].manifest_digest
    assert arm["index_digest"] == layout.index_digest
    done = imagekit("inspect", "--json", ref, "--platform", "linux/s390x")
    assert done.returncode == 1  # the index answered, without that platform: a no, named
    assert "no matching manifest for linux/s390x" in done.stderr
    assert "(available: linux/amd64, linux/arm64/v8)" in done.stderr
    assert json.loads(done.stdout)["error"]["type"] == "PlatformNotFound"


@pytest.mark.parametrize("flavour", ["basic", "token"])
def test_inspect_with_credentials(
    flavour: str,
    base_image: BaseImage,
    basic_registry: RunningRegistry,
    token_registry: RunningRegistry,
    docker_config: Path,
) -> None:
    reg = basic_registry if flavour == "basic" else token_registry
    creds = f"{reg.username}:{reg.password}"
    dest = f"{reg.host}/imagekit-test/base-{flavour}:{secrets.token_hex(3)}"
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--preserve-digests",
            "--dest-creds",
            creds,
            f"docker://{base_image.reference}",
            f"docker://{dest}",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # Without credentials: exit 3, naming the registry and how to log in.
    done = imagekit("inspect", dest)
    assert done.returncode == 3
    assert reg.host in done.stderr and f"docker login {reg.host}" in done.stderr
    # Wrong password: exit 3 too, and the password never shows.
    wrong = base64.b64encode(f"{reg.username}:wrong-{reg.password}".encode()).decode()
    (docker_config / "config.json").write_text(json.dumps({"auths": {reg.host: {"auth": wrong}}}))
    done = imagekit("inspect", "--json", dest)
    assert done.returncode == 3
    assert json.loads(done.stdout)["error"]["type"] == "RegistryUnauthorized"
    assert f"wrong-{reg.password}" not in done.stdout + done.stderr
    # With the right `auths` entry (base64 user:pass) in DOCKER_CONFIG.
    write_docker_auths(docker_config, reg)
    doc = inspect_json(dest)
    assert doc["manifest_digest"] == base_image.digest
    assert reg.password is not None and reg.password not in json.dumps(doc)
    assert_matches_skopeo(doc, dest, creds=creds)


def test_malformed_reference_exits_2() -> None:
    done = imagekit("inspect", "--json", "127.0.0.1:5000/a@sha256:../../x")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["type"] == "ReferenceFormatError"
    done = imagekit("inspect", "127.0.0.1:5000/a", "--platform", "linux")
    assert done.returncode == 2


@pytest.fixture
def web_server() -> Iterator[str]:
    """A real HTTP server that is not a registry (a misconfigured port, a login page)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def do_GET(self) -> None:  # noqa: N802
            body = b"<html><head><title>Welcome to nginx!</title></head></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_html_answer_exits_3_quoting_it(web_server: str) -> None:
    done = imagekit("inspect", f"{web_server}/some/image:tag")
    assert done.returncode == 3
    assert "HTML" in done.stderr and "Welcome to nginx!" in done.stderr


def test_tampered_manifest_exits_1(make_registry: Any, multi: tuple[Layout, str]) -> None:
    layout, _ = multi
    reg: RunningRegistry = make_registry("none")
    layout.push(f"{reg.host}/imagekit-test/tampered:multi")
    digest = layout.images["linux/amd64"].manifest_digest
    hexpart = digest.split(":")[1]
    [stored] = list(reg.storage.rglob(f"blobs/sha256/{hexpart[:2]}/{hexpart}/data"))
    stored.write_bytes(stored.read_bytes().replace(b"tar+gzip", b"tar+gzjp"))
    done = imagekit("inspect", "--json", f"{reg.host}/imagekit-test/tampered@{digest}")
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "DigestMismatch" and error["expected"] == digest
