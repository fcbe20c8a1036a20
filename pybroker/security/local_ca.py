"""A throwaway certificate authority for local clusters (`pybroker cluster --security ssl`).

Files, all PEM, written into one directory (0700) and reused when they exist:
  ca.pem               the CA certificate (the truststore of nodes and clients)
  ca.key               its private key (kept so later runs can issue more certificates)
  broker.keystore.pem  the nodes' private key and certificate (CN=broker, SAN 127.0.0.1, localhost)
  client.key / client.pem  a client key and certificate (CN=client)
  client.keystore.pem  the same key and certificate in one file, Kafka's PEM keystore
                       (ssl.keystore.type=PEM for --command-config and Java clients)
ECDSA P-256 keys, SHA-256 signatures, certificates valid for a year. Not for production: the CA
key sits next to what it signs.
Concurrency: plain blocking file I/O, called before any node starts.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

CA_CERT = "ca.pem"
NODE_KEYSTORE = "broker.keystore.pem"
CLIENT_CERT = "client.pem"
CLIENT_KEY = "client.key"
CLIENT_KEYSTORE = "client.keystore.pem"


def ensure_local_ca(directory: Path) -> Path:
    """Create the files above unless they exist; returns `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    if all((directory / f).exists() for f in (CA_CERT, NODE_KEYSTORE, CLIENT_CERT, CLIENT_KEY)):
        if not (directory / CLIENT_KEYSTORE).exists():  # a directory made before the keystore file
            _write(directory / CLIENT_KEYSTORE, (directory / CLIENT_KEY).read_bytes()
                   + (directory / CLIENT_CERT).read_bytes())
        return directory
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pybroker local cluster"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("pybroker local CA")).issuer_name(name("pybroker local CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=365))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def issue(cn: str, server: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return key_pem(key), cert.public_bytes(serialization.Encoding.PEM)

    _write(directory / "ca.key", key_pem(ca_key))
    _write(directory / CA_CERT, ca.public_bytes(serialization.Encoding.PEM))
    node_key, node_cert = issue("broker", server=True)
    _write(directory / NODE_KEYSTORE, node_key + node_cert)
    client_key, client_cert = issue("client", server=False)
    _write(directory / CLIENT_KEY, client_key)
    _write(directory / CLIENT_CERT, client_cert)
    _write(directory / CLIENT_KEYSTORE, client_key + client_cert)
    return directory


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "wb") as f:
        f.write(data)
