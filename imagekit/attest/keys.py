"""Key files: imagekit's own (PEM PKCS#8, ECDSA P-256) and those `cosign generate-key-pair`
writes, read into keys the signer and the verifier use.

Why ECDSA P-256 only: it is what cosign, Kyverno and the sigstore policy-controller verify
by default with a public key, so every attestation imagekit signs can be checked by them.

Formats read:

- ``-----BEGIN PRIVATE KEY-----``: PKCS#8, unencrypted;
- ``-----BEGIN ENCRYPTED PRIVATE KEY-----``: PKCS#8 encrypted (PBES2), the password from
  IMAGEKIT_KEY_PASSWORD;
- ``-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----`` (and the older ``ENCRYPTED COSIGN
  PRIVATE KEY``): cosign's format, a JSON document holding a PKCS#8 DER key sealed with
  NaCl secretbox under a key derived by scrypt from the password (go-securesystemslib's
  ``encrypted`` package); the password from COSIGN_PASSWORD, else IMAGEKIT_KEY_PASSWORD;
- ``-----BEGIN PUBLIC KEY-----``: a SubjectPublicKeyInfo, for verification.

Passwords come from the environment only (never an argument a process list shows) and
never reach a message, a log or a record.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import nacl.exceptions
import nacl.secret
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, ValidationError

from imagekit import jsondoc
from imagekit.errors import KeyFileError
from imagekit.files import read_regular

KEY_PASSWORD_ENV = "IMAGEKIT_KEY_PASSWORD"  # noqa: S105 - a variable name
COSIGN_PASSWORD_ENV = "COSIGN_PASSWORD"  # noqa: S105 - a variable name
_COSIGN_PEM_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
_MAX_KEY_FILE = 64 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ScryptParams(_Strict):
    N: int
    r: int
    p: int


class _Kdf(_Strict):
    name: str
    params: _ScryptParams
    salt: str


class _Cipher(_Strict):
    name: str
    nonce: str


class _SealedKey(_Strict):
    """go-securesystemslib's ``encrypted`` document, as cosign writes it."""

    kdf: _Kdf
    cipher: _Cipher
    ciphertext: str


@dataclass(frozen=True)
class PublicKey:
    """A P-256 verification key and its id (sha256 of its DER SubjectPublicKeyInfo)."""

    key: ec.EllipticCurvePublicKey
    source: str

    @property
    def der(self) -> bytes:
        return self.key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def pem(self) -> bytes:
        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def key_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.der).hexdigest()


@dataclass(frozen=True)
class KeyPairFiles:
    private: Path
    public: Path
    encrypted: bool
    key_id: str
    #: the .gitignore that now names the private key, where it was written in a git work tree
    ignored_by: Path | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "private_key": str(self.private),
            "public_key": str(self.public),
            "encrypted": self.encrypted,
            "key_id": self.key_id,
            "ignored_by": str(self.ignored_by) if self.ignored_by else None,
        }


def _in_work_tree(folder: Path) -> bool:
    """Whether FOLDER is inside a git work tree (a ``.git`` folder, or a worktree's file,
    in it or above it)."""
    here = folder.resolve()
    return any((place / ".git").exists() for place in (here, *here.parents))


def ignore_private_key(private_path: Path) -> Path | None:
    """In a git work tree, name the private key in the .gitignore beside it (made or added
    to), so that no `git add -A` commits it; None outside a work tree. The rule is the
    file's own name, anchored to its folder, so it ignores that key and nothing else."""
    folder = private_path.parent
    if not _in_work_tree(folder):
        return None
    ignore = folder / ".gitignore"
    rule = f"/{private_path.name}"
    try:
        said = ignore.read_text(encoding="utf-8") if ignore.exists() else ""
        if rule not in said.splitlines():
            ending = "" if not said or said.endswith("\n") else "\n"
            with ignore.open("a", encoding="utf-8") as handle:
                handle.write(f"{ending}# a private signing key: never committed\n{rule}\n")
    except OSError as exc:
        raise KeyFileError(
            f"{ignore}: cannot add an ignore rule for the private key ({exc.strerror})",
            path=str(ignore),
            hint=f"add {rule} to {ignore} yourself before any `git add`",
        ) from None
    return ignore


def _password(*names: str) -> bytes | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value.encode()
    return None


def _read(path: Path) -> bytes:
    try:
        return read_regular(path, "key file", limit=_MAX_KEY_FILE)
    except OSError as exc:
        raise KeyFileError(
            f"{path}: cannot read the key file ({exc.strerror})",
            path=str(path),
            hint="check the path and its permissions",
        ) from None


def _p256_private(key: object, path: Path) -> ec.EllipticCurvePrivateKey:
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise KeyFileError(
            f"{path}: not an ECDSA P-256 private key",
            path=str(path),
            hint="make one with `imagekit keys generate PREFIX` or `cosign generate-key-pair`",
        )
    return key


def generate_key_pair(prefix: Path) -> KeyPairFiles:
    """Write PREFIX.key (PKCS#8, encrypted when IMAGEKIT_KEY_PASSWORD is set) and PREFIX.pub.

    Never overwrites: a key already there may be the only copy of someone's signing key.
    The private key file is created with mode 0600.
    """
    private_path = prefix.with_name(prefix.name + ".key")
    public_path = prefix.with_name(prefix.name + ".pub")
    for path in (private_path, public_path):
        if path.exists():
            raise KeyFileError(
                f"{path}: already exists; imagekit never overwrites a key",
                path=str(path),
                hint="choose another PREFIX or move the old key away",
            )
    password = _password(KEY_PASSWORD_ENV)
    key = ec.generate_private_key(ec.SECP256R1())
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    public = PublicKey(key.public_key(), str(public_path))
    try:
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        public_path.write_bytes(public.pem)
    except OSError as exc:
        raise KeyFileError(
            f"{private_path}: cannot write the key pair ({exc.strerror})",
            path=str(private_path),
            hint="check that the folder exists and is writable",
        ) from None
    ignored = ignore_private_key(private_path)
    return KeyPairFiles(private_path, public_path, password is not None, public.key_id, ignored)


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The P-256 private key in PATH (imagekit's PKCS#8 or cosign's sealed format)."""
    data = _read(path)
    text = data.decode("ascii", errors="replace")
    if "PUBLIC KEY-----" in text and "PRIVATE KEY-----" not in text:
        raise KeyFileError(
            f"{path}: is a public key; signing needs the private key",
            path=str(path),
            hint="give the .key file of the pair (its .pub is for `imagekit verify --key`)",
        )
    for pem_type in _COSIGN_PEM_TYPES:
        if f"-----BEGIN {pem_type}-----" in text:
            return _p256_private(_open_cosign(text, pem_type, path), path)
    encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----" in text
    password = _password(KEY_PASSWORD_ENV) if encrypted else None
    if encrypted and password is None:
        raise KeyFileError(
            f"{path}: the key is encrypted and {KEY_PASSWORD_ENV} is not set",
            path=str(path),
            hint=f"export {KEY_PASSWORD_ENV} with the key's password",
        )
    try:
        key = serialization.load_pem_private_key(data, password)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        if encrypted:
            raise KeyFileError(
                f"{path}: wrong password (or a damaged key file)",
                path=str(path),
                hint=f"check {KEY_PASSWORD_ENV}",
            ) from None
        raise KeyFileError(
            f"{path}: not a PEM private key",
            path=str(path),
            hint="give a PKCS#8 PEM key or one made by `cosign generate-key-pair`",
        ) from None
    return _p256_private(key, path)


def _open_cosign(text: str, pem_type: str, path: Path) -> object:
    begin, end = f"-----BEGIN {pem_type}-----", f"-----END {pem_type}-----"
    body = text.split(begin, 1)[1].split(end, 1)[0]
    try:
        sealed = _SealedKey.model_validate(
            jsondoc.loads(base64.b64decode("".join(body.split())), limit=_MAX_KEY_FILE)
        )
        salt = base64.b64decode(sealed.kdf.salt)
        nonce = base64.b64decode(sealed.cipher.nonce)
        ciphertext = base64.b64decode(sealed.ciphertext)
    except (ValidationError, binascii.Error, ValueError):
        raise KeyFileError(
            f"{path}: a damaged {pem_type.lower()}",
            path=str(path),
            hint="make a new pair with `cosign generate-key-pair`",
        ) from None
    if sealed.kdf.name != "scrypt" or sealed.cipher.name != "nacl/secretbox":
        raise KeyFileError(
            f"{path}: sealed with {sealed.kdf.name}/{sealed.cipher.name}, not "
            "scrypt/nacl-secretbox",
            path=str(path),
        )
    password = _password(COSIGN_PASSWORD_ENV, KEY_PASSWORD_ENV)
    if password is None:
        raise KeyFileError(
            f"{path}: a cosign key needs its password and {COSIGN_PASSWORD_ENV} is not set",
            path=str(path),
            hint=f"export {COSIGN_PASSWORD_ENV} (the password given to cosign generate-key-pair)",
        )
    params = sealed.kdf.params
    if not (2 <= params.N <= 1 << 20 and 1 <= params.r <= 32 and 1 <= params.p <= 16):
        raise KeyFileError(f"{path}: scrypt parameters out of range", path=str(path))
    derived = hashlib.scrypt(
        password,
        salt=salt,
        n=params.N,
        r=params.r,
        p=params.p,
        maxmem=256 * params.r * params.N + (1 << 20),
        dklen=32,
    )
    try:
        der = nacl.secret.SecretBox(derived).decrypt(ciphertext, nonce)
    except (nacl.exceptions.CryptoError, ValueError):
        raise KeyFileError(
            f"{path}: wrong password (or a damaged key file)",
            path=str(path),
            hint=f"check {COSIGN_PASSWORD_ENV}",
        ) from None
    try:
        return serialization.load_der_private_key(der, None)
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFileError(f"{path}: the sealed key is not a PKCS#8 key", path=str(path)) from None


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)
_PEM_SPACE = re.compile(rb"[ \t\r\n]")


def load_public_key(path: Path, *, named: str = "--key") -> PublicKey:
    """The P-256 public key in PATH, read as Go's crypto/x509 reads one for cosign: one PEM
    block ``PUBLIC KEY`` holding a DER SubjectPublicKeyInfo (a named curve, an uncompressed
    point, nothing after it); text around the block is ignored, as Go's pem package ignores
    it. A file of two PEM blocks is refused: cosign would read the first key alone, and
    whoever wrote the second meant it to count. NAMED says where the path was given (an
    option, or a policy's key), for the message."""
    what = "key file" if named == "--key" else f"key file ({named})"
    try:  # a FIFO, a device, a folder or a file over the limit: InputFileError, exit 2
        data = read_regular(path, what, limit=_MAX_KEY_FILE)
    except OSError as exc:
        raise KeyFileError(
            f"{named} {path}: cannot read it ({exc.strerror})",
            path=str(path),
            hint="give the path of an existing public key file",
        ) from None

    def refused(problem: str, hint: str) -> KeyFileError:
        return KeyFileError(f"{named} {path}: {problem}", path=str(path), hint=hint)

    blocks = _PEM_BLOCK.findall(data)
    if b"PRIVATE KEY-----" in data:
        raise refused(
            "is a private key; verification takes the public key",
            "give the .pub file of the pair, and keep the .key off the verifying side",
        )
    if len(blocks) > 1:
        raise refused(
            f"holds {len(blocks)} PEM blocks; a key file holds one key",
            "give each key in a file of its own (cosign would read the first alone)",
        )
    pub_hint = "give the .pub file written by `imagekit keys generate` or cosign"
    if not blocks:
        raise refused("not a PEM public key", pub_hint)
    label, body = blocks[0]
    if label != b"PUBLIC KEY":
        raise refused(f"a PEM {label.decode()}, not a PUBLIC KEY", pub_hint)
    try:
        der = base64.b64decode(_PEM_SPACE.sub(b"", body), validate=True)
        key = serialization.load_der_public_key(der)
    except (binascii.Error, ValueError, UnsupportedAlgorithm):
        raise refused("not a PEM public key", pub_hint) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise refused(
            "not an ECDSA P-256 public key",
            "imagekit signs and verifies with ECDSA P-256 keys only (as cosign's default)",
        )
    found = PublicKey(key, str(path))
    if found.der != der:
        raise refused(
            "a public key in a form Go's crypto/x509 refuses (a compressed point, explicit "
            "curve parameters or bytes after the key)",
            "write the key as a SubjectPublicKeyInfo with a named curve, as cosign does",
        )
    return found


def public_key_of(key: ec.EllipticCurvePrivateKey, source: str) -> PublicKey:
    return PublicKey(key.public_key(), source)


__all__ = [
    "COSIGN_PASSWORD_ENV",
    "KEY_PASSWORD_ENV",
    "KeyPairFiles",
    "PublicKey",
    "generate_key_pair",
    "load_private_key",
    "load_public_key",
    "public_key_of",
]
