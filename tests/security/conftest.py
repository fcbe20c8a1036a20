"""Fixtures for the TLS suites: a PKI in a temporary directory and brokers with an SSL listener.

- ``pki`` (module): a CA, the broker's certificate (127.0.0.1 / localhost), client "alice"
  (CN=alice,OU=clients,O=pybroker-tests,C=US), and "mallory", whose certificate comes from a
  second CA the broker does not trust; PEM files (key + chain in one keystore file), PKCS12 files.
- ``tls_broker_factory`` (function): ``make(**overrides) -> TlsBroker``, a broker process with a
  PLAINTEXT and an SSL listener on free ports (the SSL one keyed from the PEM keystore unless the
  overrides say otherwise); stopped by PID after the test.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.broker import BrokerProcess, BrokerStartError

from .certs import CertificateAuthority, Issued

PASSWORD = "test-secret"
_LISTENING = re.compile(rb"listening on (\w+)://([^\s]+):(\d+)")


@dataclass
class Pki:
    dir: Path
    ca: CertificateAuthority
    ca_pem: Path
    broker: Issued
    broker_keystore: Path  # PEM: key + certificate
    broker_p12: Path
    ca_p12: Path
    alice: Issued
    alice_keystore: Path
    alice_cert: Path
    alice_key: Path
    mallory_cert: Path
    mallory_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority("pybroker test CA")
    broker = ca.issue("broker", ou="brokers", server=True)
    alice = ca.issue("alice", ou="clients")
    rogue = CertificateAuthority("rogue CA")
    mallory = rogue.issue("mallory", ou="clients")
    broker_keystore, _, _ = broker.write_pem(d, "broker")
    alice_keystore, alice_cert, alice_key = alice.write_pem(d, "alice")
    _, mallory_cert, mallory_key = mallory.write_pem(d, "mallory")
    return Pki(dir=d, ca=ca, ca_pem=ca.write_pem(d / "ca.pem"), broker=broker, broker_keystore=broker_keystore,
               broker_p12=broker.write_p12(d / "broker.p12", PASSWORD), ca_p12=ca.write_p12(d / "ca.p12", PASSWORD),
               alice=alice, alice_keystore=alice_keystore, alice_cert=alice_cert, alice_key=alice_key,
               mallory_cert=mallory_cert, mallory_key=mallory_key)


class TlsBroker:
    """A started broker process and the ports of its listeners by name."""

    def __init__(self, node: BrokerProcess) -> None:
        self.node = node
        self.ports: dict[str, int] = {}
        # start() returns at the first "listening on" line; the others may still be on their way
        wanted = {item.split("://", 1)[0].strip().upper() for item in node.overrides.get("listeners", "").split(",")
                  if "://" in item} - {"CONTROLLER"}
        deadline = time.monotonic() + 20
        while True:
            for m in _LISTENING.finditer(node._read_output(0)):
                self.ports[m.group(1).decode()] = int(m.group(3))
            if wanted <= set(self.ports) or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    @property
    def plain(self) -> str:
        return f"127.0.0.1:{self.ports['PLAINTEXT']}"

    @property
    def ssl(self) -> str:
        return f"127.0.0.1:{self.ports['SSL']}"


def broker_ssl_overrides(pki: Pki, **extra: str) -> dict[str, str]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem), **extra}


@pytest.fixture
def tls_broker_factory(pki: Pki, tmp_path: Path) -> Iterator[Callable[..., TlsBroker]]:
    started: list[BrokerProcess] = []

    def make(*, base: bool = True, **overrides: str) -> TlsBroker:
        settings = broker_ssl_overrides(pki, **overrides) if base else overrides
        node = BrokerProcess(tmp_path / f"data{len(started)}", overrides=settings)
        started.append(node)
        try:
            node.start()
        except BrokerStartError as exc:
            pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
        return TlsBroker(node)

    yield make
    for node in started:
        node.close()


@pytest.fixture(scope="module")
def tls_broker(request: pytest.FixtureRequest, pki: Pki,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """One broker per module with the PEM keystore, plus the module's ``TLS_OVERRIDES``."""
    overrides = broker_ssl_overrides(pki, **getattr(request.module, "TLS_OVERRIDES", {}))
    name = request.module.__name__.rsplit(".", 1)[-1]
    node = BrokerProcess(tmp_path_factory.mktemp(name) / "data", overrides=overrides)
    request.addfinalizer(node.close)
    try:
        node.start()
    except BrokerStartError as exc:
        pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
    yield TlsBroker(node)
