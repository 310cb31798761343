"""The signer seam: what signs an attestation, behind one protocol.

A key file is the first implementation. A KMS key or a keyless signer (Fulcio certificate,
Rekor entry) plugs in later behind the same three members, without the stages or the
storage knowing which one signed: they ask for a signature over bytes, the public key to
name, and a key id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.attest.keys import PublicKey, load_private_key, public_key_of
from imagekit.errors import UsageError


@runtime_checkable
class Signer(Protocol):
    """Signs bytes with ECDSA P-256 / SHA-256 (DER signatures, as cosign writes them)."""

    @property
    def public_key(self) -> PublicKey: ...

    @property
    def key_id(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


class KeyFileSigner:
    """A signer holding a private key read from a file (imagekit's or cosign's format).

    The key stays in this object; its repr names the file only.
    """

    def __init__(self, key: ec.EllipticCurvePrivateKey, source: str) -> None:
        self._key = key
        self._public = public_key_of(key, source)
        self._source = source

    @classmethod
    def from_file(cls, path: Path) -> KeyFileSigner:
        return cls(load_private_key(path), str(path))

    def __repr__(self) -> str:
        return f"KeyFileSigner({self._source!r})"

    @property
    def public_key(self) -> PublicKey:
        return self._public

    @property
    def key_id(self) -> str:
        return self._public.key_id

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data, ec.ECDSA(hashes.SHA256()))


def verify_signature(key: PublicKey, data: bytes, signature: bytes) -> bool:
    """Whether SIGNATURE (DER ECDSA) is KEY's over DATA; never raises on a bad signature."""
    try:
        key.key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


def signer_of(
    sign_key: Path | None, *, nothing_to_attest: str | None = None, hint: str = ""
) -> Signer | None:
    """The signer of a command's ``--sign-key`` (None without one), read before any work, so
    a key that cannot sign is exit 2 up front. NOTHING_TO_ATTEST says why this invocation has
    no image in a registry for the key to attest (a --host run, a build not pushed): the key
    is then refused (exit 2, with HINT) rather than silently not used."""
    if sign_key is None:
        return None
    if nothing_to_attest is not None:
        raise UsageError(nothing_to_attest, hint=hint)
    return KeyFileSigner.from_file(sign_key)
