"""The certificates and keys of one test cluster (tests/support/cluster.py), made per cluster.

One CA signs everything: the API server's serving certificate (127.0.0.1), the kubelet's
(127.0.0.1 and the node's name), and a client certificate per identity, whose subject is
what the API server authenticates (CN the user, O the groups: ``system:masters`` for the
admin, ``system:node:NAME`` in ``system:nodes`` for the kubelet, as the Node authorizer and
the NodeRestriction admission plugin expect). The service-account tokens are signed with a
key of their own. EC P-256 keys: fast to make, and every component reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.tls import general_names

_LIFETIME = timedelta(days=7)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


class ClusterPKI:
    """The CA of one cluster, written under ``folder``, and the certificates it signs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._now = datetime.now(UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imagekit test cluster CA")])
        self._ski = x509.SubjectKeyIdentifier.from_public_key(self._key.public_key())
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - timedelta(minutes=5))
            .not_valid_after(self._now + _LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(self._ski, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca = folder / "ca.crt"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    @property
    def ca_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        groups: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
    ) -> KeyPair:
        """A key and certificate ``name``.crt/.key: a server's when ``hosts`` are given
        (also usable as a client's), else a client's for user ``common_name`` in ``groups``."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
            + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        )
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - timedelta(minutes=5))
            .not_valid_after(self._now + _LIFETIME)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ski),
                critical=False,
            )
        )
        if hosts:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            builder = builder.add_extension(
                x509.SubjectAlternativeName(general_names(hosts)), critical=False
            )
        cert = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False).sign(
            self._key, hashes.SHA256()
        )
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    def signing_key(self, name: str) -> KeyPair:
        """A bare key pair (``name``.pub, ``name``.key): the service-account token signer."""
        key = ec.generate_private_key(ec.SECP256R1())
        pair = KeyPair(self.folder / f"{name}.pub", self.folder / f"{name}.key")
        pair.cert.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        _write_key(pair.key, key)
        return pair
