"""Attestations and signatures stored by imagekit's registry client, read by the real
cosign (verify-attestation, verify) and oras (discover) against the real registry."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import pytest

from imagekit.attest.attach import attest
from imagekit.attest.cosign_tags import att_tag, attach_signature, attached_layers
from imagekit.attest.keys import generate_key_pair
from imagekit.attest.signer import KeyFileSigner
from imagekit.refs import Reference, parse_reference
from imagekit.registry import RegistryClient
from imagekit.registry.referrers import list_referrers
from imagekit.workspace import Workspace
from tests.support.faultproxy import FaultProxy
from tests.support.gotools import cosign_verify, cosign_verify_attestation, run_tool
from tests.support.images import Pushed
from tests.support.registries import RunningRegistry

PREDICATE = "https://imagekit.dev/test/storage/v1"
PASSWORD = {"COSIGN_PASSWORD": "storage-test-password"}


@pytest.fixture
def cosign_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A key pair made by `cosign generate-key-pair` (its encrypted sigstore format)."""
    made = run_tool(
        "cosign",
        "generate-key-pair",
        "--output-key-prefix",
        str(tmp_path / "cosign"),
        env=PASSWORD,
    )
    assert made.returncode == 0, made.stderr
    key = tmp_path / "cosign.key"
    assert b"ENCRYPTED SIGSTORE PRIVATE KEY" in key.read_bytes()
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD["COSIGN_PASSWORD"])
    return key, tmp_path / "cosign.pub"


def _ref(image: Pushed) -> Reference:
    return parse_reference(image.reference)


def test_cosign_accepts_what_imagekit_stored_with_a_cosign_key(
    make_image: Callable[[str], Pushed], cosign_pair: tuple[Path, Path]
) -> None:
    key, pub = cosign_pair
    image = _ref(make_image("storage/cosignkey"))
    assert image.digest is not None
    signer = KeyFileSigner.from_file(key)
    with RegistryClient() as client:
        stored = attest(client, image, [image.digest], PREDICATE, {"verdict": "ok"}, signer)
        attach_signature(client, image, image.digest, signer)
    assert any(att_tag(image.digest) in where for where in stored.stored)
    accepted = cosign_verify_attestation(str(image), pub, PREDICATE)
    assert accepted.returncode == 0, accepted.stderr
    payloads = [json.loads(line) for line in accepted.stdout.splitlines() if line.strip()]
    assert len(payloads) == 1 and payloads[0]["payloadType"] == "application/vnd.in-toto+json"
    signed = cosign_verify(str(image), pub)
    assert signed.returncode == 0, signed.stderr
    claims = json.loads(signed.stdout)
    assert claims[0]["critical"]["image"]["docker-manifest-digest"] == str(image.digest)
    # another type than the one attested: cosign finds nothing to accept
    other = cosign_verify_attestation(str(image), pub, "https://imagekit.dev/other/v1")
    assert other.returncode != 0


def test_imagekit_keys_are_accepted_by_cosign_and_oras_lists_the_referrers(
    make_image: Callable[[str], Pushed], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGEKIT_KEY_PASSWORD", "pw-for-this-test")
    pair = generate_key_pair(tmp_path / "ik")
    image = _ref(make_image("storage/imagekitkey"))
    assert image.digest is not None
    signer = KeyFileSigner.from_file(pair.private)
    with RegistryClient() as client:
        first = attest(client, image, [image.digest], PREDICATE, {"n": 1}, signer)
        second = attest(client, image, [image.digest], PREDICATE + "#2", {"n": 2}, signer)
        layers = attached_layers(client, image, att_tag(image.digest))
        referrers, source = list_referrers(client, image, image.digest)
    assert [layer.digest for layer in layers] == [first.envelope_digest, second.envelope_digest]
    assert source == f"fallback tag sha256-{image.digest.hex}"  # registry 2.8 has no API
    assert {r.annotations["in-toto.io/predicate-type"] for r in referrers} == {
        PREDICATE,
        PREDICATE + "#2",
    }
    for predicate_type in (PREDICATE, PREDICATE + "#2"):
        accepted = cosign_verify_attestation(str(image), pair.public, predicate_type)
        assert accepted.returncode == 0, accepted.stderr
    listed = run_tool("oras", "discover", "--plain-http", "--format", "json", str(image))
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    found = document.get("referrers") or document.get("manifests") or []
    assert {entry["digest"] for entry in found} == {str(r.digest) for r in referrers}
    assert all(entry["artifactType"] == "application/vnd.dsse.envelope.v1+json" for entry in found)


def test_two_writers_at_once_both_end_up_in_the_tag(
    make_image: Callable[[str], Pushed], tmp_path: Path
) -> None:
    """Each writer reads, merges and puts the .att tag; the one whose put was replaced
    sees it and merges again: every attestation of both writers is there at the end."""
    pair = generate_key_pair(tmp_path / "w")
    image = _ref(make_image("storage/race"))
    assert image.digest is not None
    digest = image.digest
    signer = KeyFileSigner.from_file(pair.private)
    envelopes: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(name: str) -> None:
        try:
            with RegistryClient() as client:
                start.wait()
                for round_ in range(3):
                    stored = attest(
                        client, image, [digest], PREDICATE, {"w": name, "r": round_}, signer
                    )
                    envelopes[name].append(str(stored.envelope_digest))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread's assert
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in envelopes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    with RegistryClient() as client:
        layers = {str(layer.digest) for layer in attached_layers(client, image, att_tag(digest))}
        referrers, _ = list_referrers(client, image, digest)
    expected = set(envelopes["a"]) | set(envelopes["b"])
    assert len(expected) == 6 and layers == expected
    assert len(referrers) == 6
    accepted = cosign_verify_attestation(str(image), pair.public, PREDICATE)
    assert accepted.returncode == 0, accepted.stderr
    assert len([line for line in accepted.stdout.splitlines() if line.strip()]) == 6


def test_each_blob_of_an_attestation_is_written_once_though_its_forms_are_written_at_once(
    make_image: Callable[[str], Pushed], tmp_path: Path, registry: RunningRegistry
) -> None:
    """The envelope is a layer of each subject's cosign tag and of each subject's referrer:
    four writers of one blob on four threads. Two commits of one blob at once make the real
    registry rewrite its link file while a manifest PUT reads it (refused DIGEST_INVALID,
    seen once in CI), so the client writes each blob once and the others find it there."""
    pair = generate_key_pair(tmp_path / "once")
    first = _ref(make_image("storage/once"))
    second = _ref(make_image("storage/once"))
    assert first.digest is not None and second.digest is not None
    signer = KeyFileSigner.from_file(pair.private)
    with FaultProxy(registry.host) as proxy:
        repo = Reference(proxy.host, first.repository)
        with RegistryClient() as client:
            stored = attest(
                client, repo, [first.digest, second.digest], PREDICATE, {"once": 1}, signer
            )
    envelope = str(stored.envelope_digest)
    commits = [
        e for e in proxy.log if e.method == "PUT" and f"digest={envelope}" in unquote(e.path)
    ]
    checks = [e for e in proxy.log if e.method == "HEAD" and e.path.endswith(f"/{envelope}")]
    assert len(commits) == 1, [(e.method, e.path, e.status) for e in proxy.log]
    assert commits[0].status == 201
    assert len(checks) == 4  # every writer asked; three found it there
    assert len(stored.stored) == 4
    with RegistryClient() as client:
        for subject in (first.digest, second.digest):
            layers = attached_layers(client, first, att_tag(subject))
            assert [str(layer.digest) for layer in layers] == [envelope]
            referrers, _ = list_referrers(client, first, subject)
            assert len(referrers) == 1


def test_a_cosign_key_with_the_wrong_password_is_exit_2_naming_the_file(
    cosign_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, workspace: Workspace
) -> None:
    from click.testing import CliRunner

    from imagekit.cli import main

    key, _ = cosign_pair
    monkeypatch.setenv("COSIGN_PASSWORD", "not-the-password")
    result = CliRunner().invoke(
        main, ["build", "demo", "--push", "127.0.0.1:1/x", "--sign-key", str(key)]
    )
    assert result.exit_code == 2, result.output
    assert f"{key}: wrong password" in result.stderr
    assert "not-the-password" not in result.output
