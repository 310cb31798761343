"""Documents the real registry stores and serves that imagekit must refuse, not crash on.

Distribution 2.8 stores a manifest carrying an extra field nested 2,000 deep (Go's decoder
allows 10,000): every command that reads it (inspect, mirror, sbom, verify) answered exit 70,
a RecursionError. It is now the registry's answer refused in one line (exit 3, naming the
registry), and the same for such a manifest under an image's cosign ``.att`` tag. The
documents are pushed with httpx, as any client could push them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from imagekit.attest.keys import generate_key_pair
from tests.support.faultproxy import Fault, FaultProxy
from tests.support.registries import RunningRegistry

pytestmark = pytest.mark.integration

IMAGEKIT = str(Path(sys.executable).with_name("imagekit"))
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DEEP = 2000


def _imagekit(root: Path, registry: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_")}
    env["IMAGEKIT_INSECURE_REGISTRIES"] = registry
    env["IMAGEKIT_ROOT"] = str(root)
    return subprocess.run(
        [IMAGEKIT, *args], capture_output=True, text=True, timeout=300, check=False, env=env
    )


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _put_blob(http: httpx.Client, repo: str, data: bytes) -> dict[str, object]:
    started = http.post(f"/v2/{repo}/blobs/uploads/")
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    separator = "&" if "?" in location else "?"
    put = http.put(
        f"{location}{separator}digest={_digest(data)}",
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 201, put.text
    return {"mediaType": "", "digest": _digest(data), "size": len(data)}


def _push(registry: RunningRegistry, repo: str, tag: str, *, deep: bool) -> str:
    """A one-layer image pushed as ``repo:tag``; with ``deep``, its manifest carries an
    extra field nested 2,000 deep. Returns the manifest's digest."""
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        info = tarfile.TarInfo("hello.txt")
        info.size = 5
        archive.addfile(info, io.BytesIO(b"hello"))
    layer = gzip.compress(tar.getvalue(), mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [_digest(tar.getvalue())]},
            "config": {},
        }
    ).encode()
    with httpx.Client(base_url=f"http://{registry.host}", timeout=30) as http:
        config_desc = _put_blob(http, repo, config)
        layer_desc = _put_blob(http, repo, layer)
        config_desc["mediaType"] = "application/vnd.oci.image.config.v1+json"
        layer_desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": config_desc,
                "layers": [layer_desc],
            }
        ).encode()
        if deep:
            body = body[:-1] + b',"x-extra":' + b"[" * DEEP + b"]" * DEEP + b"}"
        put = http.put(
            f"/v2/{repo}/manifests/{tag}", content=body, headers={"Content-Type": OCI_MANIFEST}
        )
        assert put.status_code == 201, put.text  # the real registry stores it
    return _digest(body)


def _refused_in_one_line(done: subprocess.CompletedProcess[str], registry: str) -> None:
    assert "crashed" not in done.stderr, done.stderr
    assert done.returncode == 3, (done.returncode, done.stderr)
    # mirror prints its verdict (an error among them) on stdout, every other command on stderr
    said = (done.stdout + done.stderr).splitlines()
    errors = [line for line in said if line.startswith("error:")]
    assert len(errors) == 1, (done.args, done.stdout, done.stderr)
    assert registry in errors[0] and "nested deeper than 100 levels" in errors[0], errors


def test_a_manifest_nested_2000_deep_is_the_registrys_fault_not_a_crash(
    registry: RunningRegistry, tmp_path: Path
) -> None:
    digest = _push(registry, "hostile/deep", "v1", deep=True)
    ref = f"{registry.host}/hostile/deep:v1"
    _push(registry, "hostile/plain", "v1", deep=False)
    pair = generate_key_pair(tmp_path / "k")
    for args in (
        ("inspect", ref),
        ("inspect", f"{registry.host}/hostile/deep@{digest}"),
        ("mirror", ref, f"{registry.host}/hostile/plain:v1"),
        ("mirror", "--copy", ref, f"{registry.host}/hostile/copy:v1"),
        ("sbom", ref),
        ("verify", "--key", str(pair.public), ref),
    ):
        _refused_in_one_line(_imagekit(tmp_path, registry.host, *args), registry.host)


def test_an_att_manifest_nested_2000_deep_is_the_registrys_fault_not_a_crash(
    registry: RunningRegistry, tmp_path: Path
) -> None:
    digest = _push(registry, "hostile/att", "v1", deep=False)
    _push(registry, "hostile/att", digest.replace(":", "-") + ".att", deep=True)
    ref = f"{registry.host}/hostile/att:v1"
    pair = generate_key_pair(tmp_path / "k")
    for args in (
        ("verify", "--key", str(pair.public), ref),
        ("mirror", "--copy", ref, f"{registry.host}/hostile/att-copy:v1"),
    ):
        _refused_in_one_line(_imagekit(tmp_path, registry.host, *args), registry.host)


def _att_with(registry: RunningRegistry, repo: str, digest: str, layer: dict[str, object]) -> None:
    """An .att manifest for ``digest`` whose one layer is ``layer`` (its blob pushed)."""
    with httpx.Client(base_url=f"http://{registry.host}", timeout=30) as http:
        config = _put_blob(http, repo, b"{}")
        config["mediaType"] = "application/vnd.oci.image.config.v1+json"
        body = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer]}
        ).encode()
        tag = digest.replace(":", "-") + ".att"
        put = http.put(
            f"/v2/{repo}/manifests/{tag}", content=body, headers={"Content-Type": OCI_MANIFEST}
        )
        assert put.status_code == 201, put.text  # the real registry stores it


@pytest.mark.parametrize("missing", ["size", "mediaType"])
def test_an_att_layer_without_a_size_or_media_type_is_the_registrys_fault(
    registry: RunningRegistry, tmp_path: Path, missing: str
) -> None:
    """`mirror --copy` raised KeyError after the copy was in place, with no evidence and no
    record; now the verdict is error (exit 3) naming the entry, evidence and record kept."""
    repo = f"hostile/att-{missing.lower()}"
    digest = _push(registry, repo, "v1", deep=False)
    with httpx.Client(base_url=f"http://{registry.host}", timeout=30) as http:
        envelope = _put_blob(http, repo, b'{"payloadType":"x","payload":"","signatures":[]}')
    envelope["mediaType"] = "application/vnd.dsse.envelope.v1+json"
    del envelope[missing]
    _att_with(registry, repo, digest, envelope)
    done = _imagekit(
        tmp_path,
        registry.host,
        "mirror",
        "--copy",
        "--json",
        f"{registry.host}/{repo}:v1",
        f"{registry.host}/{repo}-copy:v1",
    )
    assert "crashed" not in done.stderr and done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "error", report
    assert f"lists an entry that cannot be copied ({missing}: Field required)" in done.stdout
    assert list((tmp_path / "evidence" / "mirror").rglob("mirror-report.json"))
    records = (tmp_path / "manifests" / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in records] == ["error"]


def test_a_malformed_layer_digest_served_for_an_att_tag_is_the_registrys_fault(
    registry: RunningRegistry, tmp_path: Path
) -> None:
    """The real registry refuses to store a malformed digest, so the fault proxy serves one
    in front of it: that was ReferenceFormatError, bad input (exit 2); it is what the
    registry served, so exit 3 with the verdict error, and a record kept."""
    repo = "hostile/att-digest"
    digest = _push(registry, repo, "v1", deep=False)
    served = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": "sha256:" + "0" * 64, "size": 2},
            "layers": [{"mediaType": "application/vnd.dsse.envelope.v1+json",
                        "digest": "sha256:zz", "size": 3}],
        }
    ).encode()  # fmt: skip
    tag = digest.replace(":", "-") + ".att"
    with FaultProxy(registry.host) as proxy:
        proxy.set_faults(
            Fault(
                "status",
                path=rf"/manifests/{tag}$",
                status=200,
                body=served,
                headers={"Docker-Content-Digest": _digest(served)},
                times=-1,
            )
        )
        done = _imagekit(
            tmp_path,
            f"{proxy.host},{registry.host}",
            "mirror",
            "--copy",
            "--json",
            f"{proxy.host}/{repo}:v1",
            f"{registry.host}/{repo}-copy:v1",
        )
        assert any(fault.fired for fault in proxy.faults)
    assert "crashed" not in done.stderr and done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["verdict"] == "error"
    assert f"{tag} lists an entry that cannot be copied (digest:" in done.stdout
    records = (tmp_path / "manifests" / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in records] == ["error"]
