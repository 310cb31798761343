"""--sign-key bad input is exit 2 before any work: a public key, a key without --push, a
--host audit, a registry build."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from imagekit.attest.keys import generate_key_pair
from imagekit.cli import main
from imagekit.workspace import Workspace


def test_build_sign_key_needs_push_and_a_private_key(workspace: Workspace, tmp_path: Path) -> None:
    pair = generate_key_pair(tmp_path / "k")
    alone = CliRunner().invoke(main, ["build", "demo", "--sign-key", str(pair.private)])
    assert alone.exit_code == 2 and "give --push REPO too" in alone.stderr
    public = CliRunner().invoke(
        main,
        ["build", "demo", "--push", "127.0.0.1:1/x", "--sign-key", str(pair.public)],
    )
    assert public.exit_code == 2 and "is a public key" in public.stderr
    assert str(pair.public) in public.stderr


def test_the_signing_key_comes_from_the_environment_too(
    workspace: Workspace, tmp_path: Path
) -> None:
    pair = generate_key_pair(tmp_path / "k")
    result = CliRunner().invoke(
        main, ["build", "demo"], env={"IMAGEKIT_SIGNING_KEY": str(pair.public)}
    )
    assert result.exit_code == 2 and "give --push REPO too" in result.stderr


def test_a_host_audit_has_nothing_to_attest(workspace: Workspace, tmp_path: Path) -> None:
    pair = generate_key_pair(tmp_path / "k")
    result = CliRunner().invoke(main, ["audit", "--host", "--sign-key", str(pair.private)])
    assert result.exit_code == 2 and "--host audit has none" in result.stderr


def test_verify_refuses_a_key_that_is_not_p256(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = tmp_path / "ed.pub"
    key.write_bytes(
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    result = CliRunner().invoke(
        main, ["verify", "--json", "127.0.0.1:1/x@sha256:" + "a" * 64, "--key", str(key)]
    )
    assert result.exit_code == 2 and "not an ECDSA P-256 public key" in result.stderr
