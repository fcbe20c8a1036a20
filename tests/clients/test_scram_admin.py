"""SCRAM credential admin (KIP-554) and DescribeTopicPartitions (KIP-966) through real clients.

- confluent-kafka 2.16 AdminClient: alter_user_scram_credentials (UserScramCredentialUpsertion /
  UserScramCredentialDeletion; librdkafka salts and hashes the password itself) and
  describe_user_scram_credentials (all users: one future of a dict; named users: a future each).
- kafka-python 3.0.12 KafkaAdminClient: alter_user_scram_credentials (a dict user -> error
  message or None: the error code is not reported), describe_user_scram_credentials (a dict
  user -> {'error', 'credential_infos'}), describe_topic_partitions (api 75, with a cursor).
  librdkafka's describe_topics uses Metadata, not DescribeTopicPartitions.

The credentials each client sends are checked in the metadata log after a clean stop: the
stored key and server key must be what RFC 5802 derives from the password, salt and
iterations, so the client's salting and the broker's derivation agree.
librdkafka appends stray bytes to DescribeUserScramCredentials error messages (FINDINGS.md).
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from pybroker.controller.metadata_log import MetadataLog
from pybroker.protocol.messages import UserScramCredentialRecord

from .adapters import confluent_admin, kafka_python_admin

REQ = {"request_timeout": 15}
NOT_FOUND_DELETE = "Attempt to delete a user credential that does not exist"
DUP_ALTER = "A user credential cannot be altered twice in the same request"


def expected_keys(digest: str, password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    salted = hashlib.pbkdf2_hmac(digest, password, salt, iterations)
    stored = hashlib.new(digest, hmac.new(salted, b"Client Key", digest).digest()).digest()
    return stored, hmac.new(salted, b"Server Key", digest).digest()


def stored_credentials(log_dir) -> dict[tuple[str, int], UserScramCredentialRecord]:
    """The live credential records of a stopped node's metadata log."""
    mlog = MetadataLog(log_dir)
    try:
        out: dict[tuple[str, int], UserScramCredentialRecord] = {}
        for _, r in mlog.read_all():
            if isinstance(r, UserScramCredentialRecord):
                out[(r.name, r.mechanism)] = r
            elif type(r).__name__ == "RemoveUserScramCredentialRecord":
                out.pop((r.name, r.mechanism), None)
        return out
    finally:
        mlog.close()


def error_of(future) -> KafkaError | None:
    try:
        future.result(20)
    except KafkaException as exc:
        return exc.args[0]
    return None


# --------------------------------------------------------------------------------------------
# confluent-kafka


def test_confluent_alter_and_describe(broker):
    admin = confluent_admin(broker.bootstrap)
    sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("ck-alice", sha256, b"alice-secret"),
        UserScramCredentialUpsertion("ck-bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"pw"),
        UserScramCredentialUpsertion("ck-eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 20000), b"pw"),
        UserScramCredentialDeletion("ck-carol", ScramMechanism.SCRAM_SHA_256),
    ], **REQ)
    errors = {user: error_of(f) for user, f in futures.items()}
    assert errors["ck-alice"] is None
    assert (errors["ck-bob"].code(), errors["ck-bob"].str()) == (
        KafkaError.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert (errors["ck-eve"].code(), errors["ck-eve"].str()) == (
        KafkaError.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert (errors["ck-carol"].code(), errors["ck-carol"].str()) == (KafkaError.RESOURCE_NOT_FOUND, NOT_FOUND_DELETE)

    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("ck-alice", sha512, b"x")], **REQ)
    assert error_of(futures["ck-alice"]) is None

    everyone = admin.describe_user_scram_credentials(**REQ).result(20)
    assert sorted((i.mechanism, i.iterations) for i in everyone["ck-alice"].scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]
    assert "ck-bob" not in everyone and "ck-carol" not in everyone

    named = admin.describe_user_scram_credentials(["ck-alice", "ck-nobody"], **REQ)
    assert named["ck-alice"].result(20).user == "ck-alice"
    err = error_of(named["ck-nobody"])
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND
    # librdkafka reads the message past its end (FINDINGS.md); Kafka's text is the prefix
    assert err.str().startswith("Attempt to describe a user credential that does not exist: ck-nobody")

    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("ck-alice", ScramMechanism.SCRAM_SHA_256)], **REQ)
    assert error_of(futures["ck-alice"]) is None
    (info,) = admin.describe_user_scram_credentials(["ck-alice"], **REQ)["ck-alice"].result(20).scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 8192)


def test_confluent_a_user_altered_twice_is_a_duplicate(broker):
    admin = confluent_admin(broker.bootstrap)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("ck-dup", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"a"),
        UserScramCredentialUpsertion("ck-dup", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"b"),
        UserScramCredentialUpsertion("ck-single", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"c"),
    ], **REQ)
    err = error_of(futures["ck-dup"])
    assert (err.code(), err.str()) == (KafkaError.DUPLICATE_RESOURCE, DUP_ALTER)
    assert error_of(futures["ck-single"]) is None
    err = error_of(admin.describe_user_scram_credentials(["ck-dup"], **REQ)["ck-dup"])
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND


def test_confluent_credentials_are_stored_as_rfc5802_keys(broker_factory):
    node = broker_factory()
    admin = confluent_admin(node.bootstrap)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("ck-s256", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                     b"pencil", b"fixed-salt"),
        UserScramCredentialUpsertion("ck-s512", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 5000), b"pw2"),
    ], **REQ)
    assert {u: error_of(f) for u, f in futures.items()} == {"ck-s256": None, "ck-s512": None}
    node.stop()
    creds = stored_credentials(node.log_dir)
    r256, r512 = creds[("ck-s256", 1)], creds[("ck-s512", 2)]
    assert (bytes(r256.salt), r256.iterations) == (b"fixed-salt", 4096)
    assert (bytes(r256.stored_key), bytes(r256.server_key)) == expected_keys("sha256", b"pencil", b"fixed-salt", 4096)
    # librdkafka picked a random salt: the record keeps it, and the keys follow from it
    assert r512.iterations == 5000 and len(r512.salt) > 0
    assert (bytes(r512.stored_key), bytes(r512.server_key)) == expected_keys("sha512", b"pw2", bytes(r512.salt), 5000)
    # survives the restart
    node.start()
    admin = confluent_admin(node.bootstrap)
    everyone = admin.describe_user_scram_credentials(**REQ).result(20)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in everyone.items()} == {
        "ck-s256": [(ScramMechanism.SCRAM_SHA_256, 4096)], "ck-s512": [(ScramMechanism.SCRAM_SHA_512, 5000)]}


# --------------------------------------------------------------------------------------------
# kafka-python


@pytest.fixture
def kp_admin(broker):
    admin = kafka_python_admin(broker.bootstrap)
    yield admin
    admin.close()


def test_kafka_python_alter_and_describe(kp_admin):
    from kafka.admin import ScramMechanism as KpMech
    from kafka.admin import UserScramCredentialDeletion as KpDel
    from kafka.admin import UserScramCredentialUpsertion as KpUp

    got = kp_admin.alter_user_scram_credentials([
        KpUp("kp-alice", "SCRAM-SHA-256", "secret"),
        KpUp("kp-alice2", KpMech.SCRAM_SHA_512, "secret", iterations=16384),
        KpUp("kp-bob", KpMech.SCRAM_SHA_512, "pw", iterations=16385),
        KpDel("kp-carol", "SCRAM-SHA-256"),
        KpUp("kp-dup", "SCRAM-SHA-256", "a"),
        KpUp("kp-dup", "SCRAM-SHA-512", "b"),
    ])
    assert got == {"kp-alice": None, "kp-alice2": None, "kp-bob": "Too many iterations",
                   "kp-carol": NOT_FOUND_DELETE, "kp-dup": DUP_ALTER}

    everyone = kp_admin.describe_user_scram_credentials()
    assert everyone["kp-alice"] == {"error": None, "credential_infos": [
        {"mechanism": KpMech.SCRAM_SHA_256, "iterations": 4096}]}
    assert everyone["kp-alice2"] == {"error": None, "credential_infos": [
        {"mechanism": KpMech.SCRAM_SHA_512, "iterations": 16384}]}
    assert not {"kp-bob", "kp-carol", "kp-dup"} & set(everyone)
    assert kp_admin.describe_user_scram_credentials([]) == everyone  # an empty list is every user too

    assert kp_admin.describe_user_scram_credentials(["kp-alice", "kp-nobody", "kp-alice2", "kp-alice2"]) == {
        "kp-alice": everyone["kp-alice"],
        "kp-nobody": {"error": "Attempt to describe a user credential that does not exist: kp-nobody",
                      "credential_infos": []},
        "kp-alice2": {"error": "Cannot describe SCRAM credentials for the same user twice in a single request: "
                               "kp-alice2", "credential_infos": []},
    }
    assert kp_admin.alter_user_scram_credentials([KpDel("kp-alice", "SCRAM-SHA-256")]) == {"kp-alice": None}
    assert kp_admin.describe_user_scram_credentials(["kp-alice"])["kp-alice"]["error"] == (
        "Attempt to describe a user credential that does not exist: kp-alice")


def test_kafka_python_credentials_are_stored_as_rfc5802_keys(broker_factory):
    from kafka.admin import UserScramCredentialUpsertion as KpUp

    node = broker_factory()
    admin = kafka_python_admin(node.bootstrap)
    try:
        assert admin.alter_user_scram_credentials([
            KpUp("kp-s512", "SCRAM-SHA-512", "pencil", iterations=4500, salt=b"kp-salt"),
            KpUp("kp-s256", "SCRAM-SHA-256", "pw", iterations=4096),
        ]) == {"kp-s512": None, "kp-s256": None}
    finally:
        admin.close()
    node.stop()
    creds = stored_credentials(node.log_dir)
    r512, r256 = creds[("kp-s512", 2)], creds[("kp-s256", 1)]
    assert (bytes(r512.salt), r512.iterations) == (b"kp-salt", 4500)
    assert (bytes(r512.stored_key), bytes(r512.server_key)) == expected_keys("sha512", b"pencil", b"kp-salt", 4500)
    assert (bytes(r256.stored_key), bytes(r256.server_key)) == expected_keys("sha256", b"pw", bytes(r256.salt), 4096)


def test_kafka_python_describe_topic_partitions_pages_with_a_cursor(kp_admin, topic):
    from kafka.admin import NewTopic

    a, b = topic + "-a", topic + "-b"
    kp_admin.create_topics([NewTopic(a, 3, 1), NewTopic(b, 2, 1)])
    seen: list[tuple[str, int]] = []
    pages = 0
    cursor = None
    while True:
        page = kp_admin.describe_topic_partitions([b, topic + "-missing", a], response_partition_limit=2,
                                                  cursor=cursor)
        pages += 1
        for t in page["topics"]:
            if t["name"] == topic + "-missing":
                assert (t["error_code"], t["partitions"], t["topic_id"]) == (3, [], None)
                continue
            assert t["error_code"] == 0 and t["topic_id"] is not None and t["is_internal"] is False
            assert t["topic_authorized_operations"] == 3576  # every topic operation: no authorizer
            for p in t["partitions"]:
                assert (p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"],
                        p["offline_replicas"]) == (1, 0, [1], [1], [])
                seen.append((t["name"], p["partition_index"]))
        cursor = page["next_cursor"]
        if cursor is None or pages > 10:
            break
    assert seen == [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1)]
    assert pages == 3
    # a cursor naming a topic outside the list: INVALID_REQUEST (42) for every topic asked for
    bad = kp_admin.describe_topic_partitions([a], cursor={"topic_name": topic + "-zz", "partition_index": 0})
    assert [(t["name"], t["error_code"], t["partitions"]) for t in bad["topics"]] == [(a, 42, [])]
    assert bad["next_cursor"] is None
