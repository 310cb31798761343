"""Key files: imagekit's pair, encrypted or not; bad input is exit 2 naming the file."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from imagekit.attest.keys import generate_key_pair, load_private_key, load_public_key
from imagekit.attest.signer import KeyFileSigner, verify_signature
from imagekit.cli import main
from imagekit.errors import InputFileError, KeyFileError
from tests.support.bounded_cli import run_bounded


def test_an_unencrypted_pair_signs_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IMAGEKIT_KEY_PASSWORD", raising=False)
    pair = generate_key_pair(tmp_path / "k")
    assert not pair.encrypted
    assert b"BEGIN PRIVATE KEY" in pair.private.read_bytes()
    assert pair.private.stat().st_mode & 0o777 == 0o600
    signer = KeyFileSigner.from_file(pair.private)
    public = load_public_key(pair.public)
    assert signer.key_id == public.key_id == pair.key_id
    signature = signer.sign(b"payload")
    assert verify_signature(public, b"payload", signature)
    assert not verify_signature(public, b"payloaD", signature)


def test_an_encrypted_pair_needs_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGEKIT_KEY_PASSWORD", "correct horse")
    pair = generate_key_pair(tmp_path / "k")
    assert pair.encrypted and b"ENCRYPTED PRIVATE KEY" in pair.private.read_bytes()
    assert load_private_key(pair.private).curve.name == "secp256r1"
    monkeypatch.setenv("IMAGEKIT_KEY_PASSWORD", "wrong")
    with pytest.raises(KeyFileError, match="wrong password") as caught:
        load_private_key(pair.private)
    assert caught.value.path == str(pair.private) and caught.value.exit_code == 2
    assert "wrong" not in caught.value.diagnostics().replace("wrong password", "")
    monkeypatch.delenv("IMAGEKIT_KEY_PASSWORD")
    with pytest.raises(KeyFileError, match="is not set"):
        load_private_key(pair.private)


def test_keys_are_never_overwritten(tmp_path: Path) -> None:
    generate_key_pair(tmp_path / "k")
    before = (tmp_path / "k.key").read_bytes()
    with pytest.raises(KeyFileError, match="never overwrites"):
        generate_key_pair(tmp_path / "k")
    assert (tmp_path / "k.key").read_bytes() == before


def test_a_public_key_given_to_sign_is_refused(tmp_path: Path) -> None:
    pair = generate_key_pair(tmp_path / "k")
    with pytest.raises(KeyFileError, match="is a public key") as caught:
        load_private_key(pair.public)
    assert caught.value.exit_code == 2


def test_a_public_key_that_is_not_p256_is_refused(tmp_path: Path) -> None:
    rsa_path = tmp_path / "rsa.pub"
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    rsa_path.write_bytes(
        rsa_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    p384_path = tmp_path / "p384.pub"
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    p384_path.write_bytes(
        p384.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for path in (rsa_path, p384_path):
        with pytest.raises(KeyFileError, match="not an ECDSA P-256 public key") as caught:
            load_public_key(path)
        assert caught.value.path == str(path)
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("hello")
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public_key(garbage)


def test_keys_generate_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGEKIT_KEY_PASSWORD", "pw")
    result = CliRunner().invoke(main, ["keys", "generate", "--json", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["encrypted"] is True and document["key_id"].startswith("sha256:")
    assert "pw" not in result.output.replace(str(tmp_path), "")
    again = CliRunner().invoke(main, ["keys", "generate", str(tmp_path / "demo")])
    assert again.exit_code == 2 and "demo.key" in again.stderr


def _pem(der: bytes, label: str = "PUBLIC KEY") -> bytes:
    body = base64.encodebytes(der).decode()
    return f"-----BEGIN {label}-----\n{body}-----END {label}-----\n".encode()


def test_public_keys_are_read_as_go_s_crypto_x509_reads_them(tmp_path: Path) -> None:
    """One PEM block PUBLIC KEY holding a SubjectPublicKeyInfo with a named curve and an
    uncompressed point, as cosign writes it; text around the block is ignored, as Go's pem
    package ignores it. Two blocks, another label, a compressed point or bytes after the
    key are refused, each naming the file."""
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    point = key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
    )
    algorithm = der[2:23]  # SEQUENCE { id-ecPublicKey, prime256v1 }
    spki_compressed = b"\x30\x39" + algorithm + b"\x03\x22\x00" + point
    good = tmp_path / "good.pub"
    good.write_bytes(b"a comment cosign would skip\n" + _pem(der) + b"\ntrailing words\n")
    assert load_public_key(good).der == der
    cases = {
        "two.pub": (_pem(der) * 2, "holds 2 PEM blocks; a key file holds one key"),
        "cert.pub": (_pem(der, "CERTIFICATE"), "a PEM CERTIFICATE, not a PUBLIC KEY"),
        "trailing.pub": (_pem(der + b"\x00"), "not a PEM public key"),
        "compressed.pub": (_pem(spki_compressed), "a public key in a form Go's crypto/x509"),
    }
    for name, (data, said) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(KeyFileError, match=said) as caught:
            load_public_key(path)
        assert caught.value.exit_code == 2 and str(path) in caught.value.message


def test_a_key_file_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"audit.keys\[0\]\) is a folder, not a regular file"):
        load_public_key(tmp_path, named="policy.yaml: audit.keys[0]")
    with pytest.raises(KeyFileError, match=r"policy.yaml: audit.keys\[0\] .*cannot read it"):
        load_public_key(tmp_path / "nobody.pub", named="policy.yaml: audit.keys[0]")


@pytest.mark.parametrize(
    ("name", "make", "kind"),
    [
        ("zero", lambda p: p.symlink_to("/dev/zero"),
         "a character device (a symbolic link to /dev/zero)"),
        ("fifo", lambda p: os.mkfifo(p), "a FIFO"),
    ],
)  # fmt: skip
def test_a_key_path_that_is_no_file_is_exit_2_naming_it(
    tmp_path: Path, name: str, make: Callable[[Path], None], kind: str
) -> None:
    """/dev/zero was read until the kernel killed imagekit, a FIFO blocked forever."""
    key = tmp_path / name
    make(key)
    for argv in (
        ["verify", f"127.0.0.1:9/x@sha256:{'0' * 64}", "--key", str(key)],
        ["sbom", f"127.0.0.1:9/x@sha256:{'0' * 64}", "--sign-key", str(key)],
    ):
        done = run_bounded(*argv)
        assert done.returncode == 2, done.stderr
        assert f"{key}: the key file is {kind}, not a regular file" in done.stderr


def test_a_key_file_over_64_kib_is_refused_from_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.pub"
    big.write_bytes(b"-----BEGIN PUBLIC KEY-----\n" + b"A" * (64 << 10))
    with pytest.raises(InputFileError, match="is 65563 bytes, more than the 64 KiB"):
        load_public_key(big)


def test_a_private_key_made_in_a_git_work_tree_is_ignored_there(tmp_path: Path) -> None:
    import subprocess

    from imagekit.attest.keys import generate_key_pair as make

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / ".gitignore").write_text("*.tmp")  # a rule of the team's, no newline at its end
    pair = make(keys / "ci")
    assert pair.ignored_by == keys / ".gitignore"
    lines = (keys / ".gitignore").read_text().splitlines()
    assert lines[0] == "*.tmp" and lines[-1] == "/ci.key" and "/ci.pub" not in lines
    make(keys / "ci2")
    assert (keys / ".gitignore").read_text().count("/ci.key") == 1
    assert pair.to_json()["ignored_by"] == str(keys / ".gitignore")

    def ignored(name: str) -> bool:
        argv = ["git", "-C", str(tmp_path), "check-ignore", "-q", f"keys/{name}"]
        return subprocess.run(argv, check=False, timeout=60).returncode == 0

    # git itself, the judge: the private keys are ignored, the public ones are not.
    assert ignored("ci.key") and ignored("ci2.key")
    assert not ignored("ci.pub") and not ignored("ci2.pub")


def test_outside_a_work_tree_nothing_is_added(tmp_path: Path) -> None:
    from imagekit.attest.keys import generate_key_pair as make

    pair = make(tmp_path / "ci")
    assert pair.ignored_by is None and not (tmp_path / ".gitignore").exists()
