"""A local certificate authority for ``ferryman up --tls`` and tests: a CA and one
certificate for this machine's loopback names, signed by it (PEM files, 0600 keys)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 365
KEY_BITS = 2048
LOCAL_NAMES = ("localhost",)
LOCAL_IPS = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class LocalPki:
    ca: Path
    cert: Path
    key: Path


def _write(path: Path, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def local_pki(directory: Path) -> LocalPki:
    """The CA and loopback certificate in ``directory``, created on first use."""
    pki = LocalPki(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    if pki.ca.exists() and pki.cert.exists() and pki.key.exists():
        return pki
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Ferryman local CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in LOCAL_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in LOCAL_IPS]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ferryman")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        # One certificate serves as server and, under mutual TLS, as client of peers.
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca, ca.public_bytes(serialization.Encoding.PEM))
    _write(pki.cert, cert.public_bytes(serialization.Encoding.PEM))
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write(pki.key, pem_key, private=True)
    return pki
