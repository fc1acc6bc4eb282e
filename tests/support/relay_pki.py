"""Keys, certificates and the admin token the relay tests run with, made in the test with `cryptography`.

- `signing_keys(folder)`: the origin's Ed25519 key pair (`composer-prime relay keygen`'s files), made once per folder;
- `tls_files(folder)`: a throwaway CA, a server certificate for 127.0.0.1 and a client certificate it signed;
- `ADMIN_TOKEN`, `admin_token_file(folder)`: the orchestrator's token for the client's admin proxy;
- `RUN_ID`: the run every origin signs for and every client serves, unless a test says otherwise.

Secrets (private keys, the token) are written readable by their owner only, as the relay requires.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from composer_prime.relay.signing import write_key_pair

ADMIN_TOKEN = "orchestrator-token-0123456789abcdef"
RUN_ID = "test-run"


def signing_keys(folder: Path) -> tuple[Path, Path]:
    """(private, public) key files in `folder`, made on first use."""
    private, public = folder / "relay.key", folder / "relay.pub"
    if not private.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_key_pair(private, public)
    return private, public


def admin_token_file(folder: Path, token: str = ADMIN_TOKEN) -> Path:
    path = folder / "admin.token"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def tls_files(folder: Path, ca_name: str = "relay test CA") -> TlsFiles:
    """A CA and, signed by it, a server certificate for 127.0.0.1 and a client certificate, valid for a day."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        common: str, usage: x509.ObjectIdentifier, san: bool
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if san:
            alt = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(alt, critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH, san=True)
    client, client_key = leaf("relay client", ExtendedKeyUsageOID.CLIENT_AUTH, san=False)
    files = TlsFiles(
        folder / "ca.pem", folder / "server.pem", folder / "server.key", folder / "client.pem", folder / "client.key"
    )
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files.client_cert.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, files.key)
    _write_key(client_key, files.client_key)
    return files
