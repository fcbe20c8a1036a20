"""Test certificates made with the `cryptography` package: a CA, a broker certificate for
127.0.0.1/localhost, client certificates, written as PEM (key + chain in one file, Kafka's PEM
keystore layout), PKCS12, and a second CA nobody trusts.

Every certificate gets a fresh random serial, so a test can tell which one a TLS peer presents.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

_NOW = datetime.datetime.now(datetime.UTC)


def _name(cn: str, ou: str | None = None, o: str = "pybroker-tests", c: str = "US") -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COUNTRY_NAME, c), x509.NameAttribute(NameOID.ORGANIZATION_NAME, o)]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass
class Issued:
    """A key and its certificate (chain up to, not including, the CA)."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    ca: x509.Certificate

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    def key_pem(self, password: str | None = None) -> str:
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      enc).decode()

    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write_pem(self, directory: Path, stem: str, password: str | None = None) -> tuple[Path, Path, Path]:
        """(key+chain keystore file, cert-only file, key-only file)."""
        store = directory / f"{stem}.keystore.pem"
        store.write_text(self.key_pem(password) + self.cert_pem())
        cert = directory / f"{stem}.crt"
        cert.write_text(self.cert_pem())
        key = directory / f"{stem}.key"
        key.write_text(self.key_pem(password))
        return store, cert, key

    def write_p12(self, path: Path, password: str) -> Path:
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"key", self.key, self.cert, [self.ca], serialization.BestAvailableEncryption(password.encode())))
        return path


class CertificateAuthority:
    def __init__(self, cn: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = _name(cn)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(_NOW - datetime.timedelta(minutes=5))
                     .not_valid_after(_NOW + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False,
                                                  key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def write_pem(self, path: Path) -> Path:
        path.write_text(self.pem())
        return path

    def write_p12(self, path: Path, password: str) -> Path:
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            None, None, None, [self.cert], serialization.BestAvailableEncryption(password.encode())))
        return path

    def issue(self, cn: str, ou: str | None = None, server: bool = False, ips: tuple[str, ...] = ()) -> Issued:
        """A certificate for `cn`; `server`: with SANs localhost, 127.0.0.1 and the `ips`."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(_name(cn, ou)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(_NOW - datetime.timedelta(minutes=5))
                   .not_valid_after(_NOW + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                 *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips)]), critical=False)
        return Issued(key, builder.sign(self.key, hashes.SHA256()), self.cert)
