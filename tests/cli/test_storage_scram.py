"""`pybroker storage format --add-scram` (Kafka's ScramParser): SCRAM credentials written into the
bootstrap metadata as UserScramCredentialRecords, so the users exist before the first node serves.
A credential is checked by a whole SCRAM login against the broker's mechanism server (the client
proves the password, the server proves it holds the stored keys); bad specs are one line, exit 2."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from pybroker.controller.bootstrap_metadata import read_bootstrap_records
from pybroker.errors import SaslError
from pybroker.metadata.image import ScramCredential
from pybroker.protocol import messages as m
from pybroker.protocol.sasl_client import ScramClient
from pybroker.security.sasl.scram import ScramSaslServer

from .test_storage import CLUSTER_ID, one_line, properties, run

MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def login(records: list, mechanism: str, user: str, password: str) -> bool:
    """A full SCRAM exchange between pybroker's client and server over the records' credentials."""
    creds = {(r.name, r.mechanism): ScramCredential(bytes(r.salt), bytes(r.stored_key), bytes(r.server_key),
                                                    r.iterations) for r in records}
    server = ScramSaslServer(mechanism, lambda name, type_id: creds.get((name, type_id)))
    client = ScramClient(mechanism, user, password)
    try:
        server_first = server.evaluate(client.first())
        server_final = server.evaluate(client.final(server_first))
    except SaslError:
        return False
    client.check(server_final)  # raises if the server's signature is wrong
    return server.complete


def scram_records(d: Path) -> list:
    return [r for r in read_bootstrap_records(d) or [] if isinstance(r, m.UserScramCredentialRecord)]


def test_add_scram_writes_credentials_a_login_accepts(tmp_path: Path):
    config = properties(tmp_path, **{"node.id": "1", "log.dirs": str(tmp_path / "data")})
    salt = base64.b64encode(b"0123456789abcdef").decode()
    rc, out, err = run("format", "-t", CLUSTER_ID, "-c", str(config),
                       "--add-scram", "SCRAM-SHA-512=[name=admin,password=s3cret]",
                       "--add-scram", f'SCRAM-SHA-256=[name="bob",password="a,b=c",iterations=8192,salt="{salt}"]')
    assert rc == 0, err
    records = scram_records(tmp_path / "data")
    assert sorted((r.name, r.mechanism, r.iterations) for r in records) == [("admin", 2, 4096), ("bob", 1, 8192)]
    bob = next(r for r in records if r.name == "bob")
    assert bytes(bob.salt) == b"0123456789abcdef"
    assert len(bytes(next(r for r in records if r.name == "admin").salt)) == 32  # a random salt
    # the metadata.version record comes first, as the first active controller writes them
    assert isinstance((read_bootstrap_records(tmp_path / "data") or [])[0], m.FeatureLevelRecord)
    assert login(records, "SCRAM-SHA-512", "admin", "s3cret")
    assert login(records, "SCRAM-SHA-256", "bob", "a,b=c")
    assert not login(records, "SCRAM-SHA-512", "admin", "wrong")
    assert not login(records, "SCRAM-SHA-256", "admin", "s3cret")  # admin has only SCRAM-SHA-512
    rc, out, err = run("info", "-c", str(config))
    assert rc == 0 and "Found bootstrap SCRAM credentials for: admin, bob" in out, out


def test_add_scram_with_a_salted_password(tmp_path: Path):
    config = properties(tmp_path, **{"node.id": "1", "log.dirs": str(tmp_path / "data")})
    salt = b"pepper-and-salt!"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    spec = (f"SCRAM-SHA-512=[name=carol,salt={base64.b64encode(salt).decode()},"
            f"saltedpassword={base64.b64encode(salted).decode()},iterations=4096]")
    rc, _, err = run("format", "-t", CLUSTER_ID, "-c", str(config), "--add-scram", spec)
    assert rc == 0, err
    assert login(scram_records(tmp_path / "data"), "SCRAM-SHA-512", "carol", "pw")


@pytest.mark.parametrize("spec,message", [
    ("SCRAM-SHA-1=[name=a,password=b]", "the mechanism must be one of SCRAM-SHA-256, SCRAM-SHA-512"),
    ("SCRAM-SHA-512=name=a,password=b", "expected SCRAM-SHA-512=[name=USER,password=PASSWORD]"),
    ("SCRAM-SHA-512=[password=b]", "you must supply 'name' to add-scram"),
    ("SCRAM-SHA-512=[name=a]", "you must supply one of 'password' or 'saltedpassword'"),
    ("SCRAM-SHA-512=[name=a,password=b,iterations=100]", "iterations must be between 4096 and 16384"),
    ("SCRAM-SHA-512=[name=a,password=b,colour=red]", "unknown key 'colour'"),
    ("SCRAM-SHA-512=[name=a,password=\"b]", "unterminated quoted value"),
    ("SCRAM-SHA-512=[name=a,salt=!!,password=b]", "bad --add-scram"),
])
def test_bad_add_scram_is_one_line_and_exit_2(tmp_path: Path, spec: str, message: str):
    config = properties(tmp_path, **{"node.id": "1", "log.dirs": str(tmp_path / "data")})
    rc, _, err = run("format", "-t", CLUSTER_ID, "-c", str(config), "--add-scram", spec)
    assert rc == 2 and message in one_line(err), err
    assert not (tmp_path / "data" / "meta.properties").exists()  # nothing formatted


def test_add_scram_needs_metadata_version_3_5_iv2(tmp_path: Path):
    config = properties(tmp_path, **{"node.id": "1", "log.dirs": str(tmp_path / "data")})
    rc, _, err = run("format", "-t", CLUSTER_ID, "-c", str(config), "--release-version", "3.4",
                     "--add-scram", "SCRAM-SHA-512=[name=a,password=b]")
    assert rc == 2 and one_line(err) == "pybroker: SCRAM is only supported in metadata.version 3.5-IV2 or later."
