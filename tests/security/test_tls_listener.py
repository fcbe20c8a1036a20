"""The SSL listener itself: keystore and truststore formats, hostile and mistaken peers, and
configurations refused at start (exit 2, one line).

Each case that starts a broker uses its own (tls_broker_factory); peers are plain sockets or
Python's ssl module, so the test sees exactly what the listener does.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.clients.adapters import confluent_consume, confluent_produce
from tests.clients.broker import REPO_ROOT
from tests.clients.helpers import numbered

from .conftest import PASSWORD, Pki, broker_ssl_overrides

# ApiVersions v0, correlation id 1, client id "t": what a plaintext client opens with
API_VERSIONS_V0 = struct.pack(">ihhih", 11, 18, 0, 1, 1) + b"t"


def tls_serial(address: str, pki: Pki) -> int:
    """The serial number of the certificate the listener at `address` presents."""
    from cryptography import x509

    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    """Does the peer close `sock` (EOF or reset) within `within_s`? Bytes it sends are skipped."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not sock.recv(4096):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def ssl_conf(pki: Pki) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)}


def test_plaintext_client_on_the_tls_port_is_closed_and_others_are_served(tls_broker_factory, pki):
    b = tls_broker_factory()
    host, port = b.ssl.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(API_VERSIONS_V0)
        assert closed_by_peer(s, 10), "the TLS listener kept a plaintext client's connection"
    topic = "after-plaintext-probe"
    assert confluent_produce(b.ssl, topic, numbered(5), **ssl_conf(pki)) == list(range(5))
    assert len(confluent_consume(b.plain, topic, count=5)) == 5


def test_never_finished_handshake_is_reaped(tls_broker_factory, pki):
    """connections.max.idle.ms=2000 bounds the handshake at 2 s (the smaller of it and 10 s)."""
    b = tls_broker_factory(**{"connections.max.idle.ms": "2000"})
    host, port = b.ssl.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as silent:
        started = time.monotonic()
        assert closed_by_peer(silent, 15), "a connection that never sent a ClientHello was kept"
        assert time.monotonic() - started < 8
    assert confluent_produce(b.ssl, "after-silent-peer", numbered(2), **ssl_conf(pki)) == [0, 1]


def test_pkcs12_keystore_and_truststore(tls_broker_factory, pki):
    b = tls_broker_factory(**{"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.broker_p12),
                              "ssl.keystore.password": PASSWORD, "ssl.truststore.type": "PKCS12",
                              "ssl.truststore.location": str(pki.ca_p12), "ssl.truststore.password": PASSWORD,
                              "ssl.client.auth": "required"})
    assert tls_serial_with_client_cert(b.ssl, pki) == pki.broker.serial
    conf = ssl_conf(pki) | {"ssl.certificate.location": str(pki.alice_cert), "ssl.key.location": str(pki.alice_key)}
    assert confluent_produce(b.ssl, "pkcs12", numbered(3), **conf) == [0, 1, 2]


def tls_serial_with_client_cert(address: str, pki: Pki) -> int:
    from cryptography import x509

    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
    ctx.load_cert_chain(str(pki.alice_cert), str(pki.alice_key))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_inline_pem_keystore_with_encrypted_key_and_inline_truststore(tls_broker_factory, pki):
    # as a properties file carries them: line breaks folded into spaces
    b = tls_broker_factory(**{
        "ssl.keystore.location": "", "ssl.truststore.location": "",
        "listener.name.ssl.ssl.keystore.key": pki.broker.key_pem("k-pass").replace("\n", " "),
        "listener.name.ssl.ssl.keystore.certificate.chain": pki.broker.cert_pem().replace("\n", " "),
        "listener.name.ssl.ssl.key.password": "k-pass",
        "listener.name.ssl.ssl.truststore.certificates": pki.ca.pem().replace("\n", " ")})
    assert tls_serial(b.ssl, pki) == pki.broker.serial


def test_tls12_only_listener_negotiates_tls12(tls_broker_factory, pki):
    b = tls_broker_factory(**{"ssl.enabled.protocols": "TLSv1.2",
                              "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    host, port = b.ssl.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.version() == "TLSv1.2"
        assert tls.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"


def start_exit(tmp_path: Path, overrides: dict[str, str]) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pybroker", "--override", f"log.dirs={tmp_path / 'data'}"]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, timeout=60, cwd=str(REPO_ROOT))
    return proc.returncode, proc.stderr.decode()


BAD_CONFIGS = {
    "jks keystore": ({"ssl.keystore.type": "JKS"}, "pybroker reads PEM and PKCS12"),
    "no keystore": ({"ssl.keystore.location": ""}, "SSL key store is not specified for listener SSL"),
    "missing keystore file": ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "ssl.keystore.location"),
    "pem with store password": ({"ssl.keystore.password": "x"}, "SSL key store password cannot be specified with PEM"),
    "wrong pkcs12 password": ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "{p12}",
                               "ssl.keystore.password": "wrong"}, "Failed to load SSL keystore"),
    "bad client auth": ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
    "old protocol": ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    "bad mapping rule": ({"ssl.principal.mapping.rules": "RULE:x/y/Q"}, "ssl.principal.mapping.rules"),
    "unmapped listener": ({"listeners": "PLAINTEXT://127.0.0.1:0,TLS://127.0.0.1:0"},
                          "no security protocol defined for listener TLS"),
    "both inter-broker keys": ({"inter.broker.listener.name": "PLAINTEXT",
                                "security.inter.broker.protocol": "PLAINTEXT"},
                               "Only one of inter.broker.listener.name and security.inter.broker.protocol"),
}


# through the command line (exit status and stderr); the others in process, through the same
# start-up step (Broker._build_tls raises the StartupError the command prints), which saves a
# Python start per case
THROUGH_CLI = ("jks keystore", "wrong pkcs12 password", "unmapped listener")


@pytest.mark.parametrize("case", THROUGH_CLI)
def test_bad_tls_config_exits_2_with_one_line(case, pki, tmp_path):
    extra, expected = BAD_CONFIGS[case]
    extra = {k: v.replace("{p12}", str(pki.broker_p12)) for k, v in extra.items()}
    rc, err = start_exit(tmp_path, broker_ssl_overrides(pki, **extra))
    lines = [ln for ln in err.splitlines() if ln.startswith("pybroker:")]
    assert rc == 2, err[-2000:]
    assert len(lines) == 1 and expected in lines[0], err[-2000:]


@pytest.mark.parametrize("case", sorted(set(BAD_CONFIGS) - set(THROUGH_CLI)))
def test_bad_tls_config_is_refused_at_start_with_one_line(case, pki, tmp_path):
    from pybroker.config import BrokerConfig, ConfigError
    from pybroker.server.broker import Broker, StartupError

    extra, expected = BAD_CONFIGS[case]
    overrides = broker_ssl_overrides(pki, **extra) | {"log.dirs": str(tmp_path / "data")}
    with pytest.raises((ConfigError, StartupError)) as info:
        Broker(BrokerConfig(overrides))._build_tls()
    assert expected in str(info.value) and "\n" not in str(info.value)
