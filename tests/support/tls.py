"""A throwaway certificate authority and a server certificate it signed, for TLS tests.

The certificate names 127.0.0.1 and localhost in its subjectAltName (hostname checks ignore
the common name), and both certificates carry the extensions that strict X.509 verification
asks for (OpenSSL's ``VERIFY_X509_STRICT``, on by default from Python 3.13), so a client that
trusts the CA verifies the server with its default settings and nothing switched off.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServerCertificate:
    """PEM files: the CA a client must trust, and the server's chain and key."""

    ca_path: Path
    chain_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.chain_path, self.key_path)
        return context

    def client_context(self) -> ssl.SSLContext:
        """The default client context, trusting this CA (and only it)."""
        return ssl.create_default_context(cafile=str(self.ca_path))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class ClientCertificate:
    """PEM files: the CA a server must trust for client certificates, and one it signed."""

    ca_path: Path
    cert_path: Path
    key_path: Path


def make_client_certificate(directory: Path, name: str = "imagekit-client") -> ClientCertificate:
    """Write a new client CA and a client certificate (clientAuth) it signed under
    ``directory``, for a registry that asks for one (distribution's http.tls.clientcas)."""
    ca = _make_ca("imagekit test client CA")
    key, leaf = _leaf(ca, name, [ExtendedKeyUsageOID.CLIENT_AUTH])
    made = ClientCertificate(
        ca_path=directory / "client-ca.pem",
        cert_path=directory / "client.cert",
        key_path=directory / "client.key",
    )
    _write(directory, (made.ca_path, _pem(ca.cert)), (made.cert_path, _pem(leaf)))
    _write_key(made.key_path, key)
    return made


@dataclass(frozen=True)
class _CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    ski: x509.SubjectKeyIdentifier
    now: datetime


def _make_ca(common_name: str) -> _CA:
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(common_name)
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return _CA(ca_key, ca, ca_ski, now)


def _leaf(
    ca: _CA,
    subject: str,
    usages: list[x509.ObjectIdentifier],
    names: list[x509.GeneralName] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and a certificate for it that ``ca`` signed: ``usages`` its extended key usages;
    with ``names`` (a server's), its subjectAltName and its own key identifier too."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(ca.now - timedelta(minutes=5))
        .not_valid_after(ca.now + timedelta(days=2))
    )
    if names is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(
        x509.BasicConstraints(ca=False, path_length=None), critical=True
    ).add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if names is not None:
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    leaf = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca.ski), critical=False
    ).sign(ca.key, hashes.SHA256())
    return key, leaf


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write(directory: Path, *files: tuple[Path, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for path, data in files:
        path.write_bytes(data)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    path.write_bytes(key.private_bytes(pem, pkcs8, serialization.NoEncryption()))


def general_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    """A subjectAltName's entries for ``hosts``: IP addresses as such, the rest DNS names."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def make_server_certificate(
    directory: Path,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    *,
    client_auth: bool = False,
) -> ServerCertificate:
    """Write a new CA and a server certificate for ``hosts`` (IPs or DNS names) under
    ``directory``; with ``client_auth`` the certificate serves as a client's too (mutual TLS,
    as buildkitd asks of its clients when it is given a CA)."""
    ca = _make_ca("imagekit test CA")
    names = general_names(hosts)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH]
    key, leaf = _leaf(
        ca, hosts[0], usages + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else []), names
    )
    certificate = ServerCertificate(
        ca_path=directory / "ca.pem",
        chain_path=directory / "server-chain.pem",
        key_path=directory / "server-key.pem",
    )
    _write(
        directory,
        (certificate.ca_path, _pem(ca.cert)),
        (certificate.chain_path, _pem(leaf) + _pem(ca.cert)),
    )
    _write_key(certificate.key_path, key)
    return certificate
