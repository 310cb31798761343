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
    now = datetime.now(UTC)
    ca_key, ca, ca_ski = _make_ca("imagekit test client CA", now)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    made = ClientCertificate(
        ca_path=directory / "client-ca.pem",
        cert_path=directory / "client.cert",
        key_path=directory / "client.key",
    )
    made.ca_path.write_bytes(ca.public_bytes(pem))
    made.cert_path.write_bytes(leaf.public_bytes(pem))
    made.key_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return made


def _make_ca(
    common_name: str, now: datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, x509.SubjectKeyIdentifier]:
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
    return ca_key, ca, ca_ski


def make_server_certificate(
    directory: Path,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    *,
    client_auth: bool = False,
) -> ServerCertificate:
    """Write a new CA and a server certificate for ``hosts`` (IPs or DNS names) under
    ``directory``; with ``client_auth`` the certificate serves as a client's too (mutual TLS,
    as buildkitd asks of its clients when it is given a CA)."""
    now = datetime.now(UTC)
    ca_key, ca, ca_ski = _make_ca("imagekit test CA", now)
    ca_name = ca.subject
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH]
                + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    certificate = ServerCertificate(
        ca_path=directory / "ca.pem",
        chain_path=directory / "server-chain.pem",
        key_path=directory / "server-key.pem",
    )
    certificate.ca_path.write_bytes(ca.public_bytes(pem))
    certificate.chain_path.write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    certificate.key_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certificate
