"""Delegation tokens (KIP-48) on a live broker: Create/Renew/Expire/DescribeDelegationToken and
logins with a token.

No real client has the token admin API (confluent-kafka 2.16 and kafka-python 3 have no
delegation-token calls), so those requests travel over a SASL connection driven by pybroker's own
protocol code (`Sasl`: SaslHandshake + SaslAuthenticate, then requests). No real client sends the
SCRAM `tokenauth=true` extension either (librdkafka, kafka-python and aiokafka have no option for
it), so the token logins of kafka-python and aiokafka get it added to their client-first message
(`tokenauth_patch`): the rest of their SCRAM exchange, and everything after it, is theirs. The
HMAC a test expects is computed here with Python's hmac, independently of the broker.

The module's broker: PLAINTEXT (admin calls as User:ANONYMOUS), SASL_PLAINTEXT and SASL_SSL with
PLAIN users alice, bob, carol, erin and SCRAM-SHA-256/512 enabled (no SCRAM users: token logins
only); the authorizer with allow.everyone.if.no.acl.found=true, so only resources carrying ACLs
are restricted; `delegation.token.secret.key` set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import (
    CreateDelegationTokenRequest,
    DescribeDelegationTokenRequest,
    ExpireDelegationTokenRequest,
    MetadataRequest,
    RenewDelegationTokenRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from pybroker.protocol.sasl_client import SaslClientConfig, tokens
from tests.clients.adapters import (
    DEADLINE_S,
    aiokafka_consume,
    aiokafka_produce,
    confluent_admin,
    kafka_python_admin,
    kafka_python_produce,
)
from tests.clients.helpers import assert_same_records, numbered
from tests.cluster.harness import free_ports

from .test_sasl_clients import Raw
from .test_tls_clients import allow_only, topic_name

SECRET = "token-secret-key"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" '
              'user_carol="carol-secret" user_erin="erin-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
TLS_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                      "CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "plain.sasl.jaas.config": PLAIN_JAAS,
    "scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "delegation.token.secret.key": SECRET,
}
# Kafka's error codes
AUTH_DISABLED, NOT_FOUND, OWNER_MISMATCH, NOT_ALLOWED, AUTHORIZATION_FAILED, EXPIRED, INVALID_PRINCIPAL_TYPE = \
    61, 62, 63, 64, 65, 66, 67
SASL_AUTHENTICATION_FAILED = 58


def expected_hmac(token_id: str, secret: str = SECRET) -> bytes:
    return hmac.new(secret.encode(), token_id.encode(), hashlib.sha512).digest()


def sasl_plaintext(b) -> str:
    return f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"


class Sasl(Raw):
    """A blocking connection that logs in (PLAIN, or SCRAM with `tokenauth`) before its requests;
    `login` again re-authenticates (KIP-368). `auth_error` / `lifetime_ms`: the last login's."""

    def __init__(self, address: str, mechanism: str, user: str, password: str, tokenauth: bool = False) -> None:
        super().__init__(address)
        self.login(mechanism, user, password, tokenauth)

    def login(self, mechanism: str, user: str, password: str, tokenauth: bool = False) -> None:
        self.auth_error, self.auth_message, self.lifetime_ms = 0, None, 0
        _, hs = self.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
        self.handshake_error = hs.error_code
        if hs.error_code:
            return
        options = {"tokenauth": "true"} if tokenauth else {}
        gen = tokens(SaslClientConfig(mechanism, user, password, options))
        token = next(gen)
        while True:
            _, auth = self.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
            if auth.error_code:
                self.auth_error, self.auth_message = auth.error_code, auth.error_message
                return
            self.lifetime_ms = auth.session_lifetime_ms
            try:
                token = gen.send(bytes(auth.auth_bytes))
            except StopIteration:
                return


def plain(b, user: str) -> Sasl:
    s = Sasl(sasl_plaintext(b), "PLAIN", user, f"{user}-secret")
    assert s.auth_error == 0
    return s


def token_login(b, token_id: str, hmac_bytes: bytes, mechanism: str = "SCRAM-SHA-512") -> Sasl:
    return Sasl(sasl_plaintext(b), mechanism, token_id, base64.b64encode(hmac_bytes).decode(), tokenauth=True)


def create(conn: Raw, renewers: list[str] = (), max_lifetime_ms: int = -1, owner: str | None = None,
           version: int = 3):
    kind, _, name = (owner or ":").partition(":")
    req = CreateDelegationTokenRequest(
        owner_principal_type=kind if owner else None, owner_principal_name=name if owner else None,
        renewers=[CreateDelegationTokenRequest.CreatableRenewers(principal_type=r.partition(":")[0],
                                                                 principal_name=r.partition(":")[2])
                  for r in renewers],
        max_lifetime_ms=max_lifetime_ms)
    return conn.request(ApiKey.CREATE_DELEGATION_TOKEN, version, req)[1]


def describe(conn: Raw, owners: list[str] | None = None):
    req = DescribeDelegationTokenRequest(owners=None if owners is None else [
        DescribeDelegationTokenRequest.DescribeDelegationTokenOwner(principal_type=o.partition(":")[0],
                                                                    principal_name=o.partition(":")[2])
        for o in owners])
    return conn.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, req)[1]


def renew(conn: Raw, hmac_bytes: bytes, period_ms: int = -1):
    return conn.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                        RenewDelegationTokenRequest(hmac=hmac_bytes, renew_period_ms=period_ms))[1]


def expire(conn: Raw, hmac_bytes: bytes, period_ms: int = -1):
    return conn.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                        ExpireDelegationTokenRequest(hmac=hmac_bytes, expiry_time_period_ms=period_ms))[1]


def described_ids(conn: Raw, owners: list[str] | None = None) -> set[str]:
    resp = describe(conn, owners)
    assert resp.error_code == 0, resp
    return {t.token_id for t in resp.tokens}


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def tokenauth_patch(monkeypatch) -> Iterator[None]:
    """kafka-python's and aiokafka's SCRAM clients send `tokenauth=true` in client-first (no
    option of theirs does): the extension is appended to client-first-bare, which is also part of
    the AuthMessage both sides sign, as RFC 5802 extensions are."""
    from aiokafka.conn import ScramAuthenticator
    from kafka.net.sasl.scram import ScramClient

    kp_first = ScramClient.first_message

    def kp_first_message(self):
        message = kp_first(self)
        self.auth_message += b",tokenauth=true"
        return message + b",tokenauth=true"

    aio_first = ScramAuthenticator.first_message

    def aio_first_message(self):
        message = aio_first(self)
        self._auth_message += ",tokenauth=true"
        return message + ",tokenauth=true"

    monkeypatch.setattr(ScramClient, "first_message", kp_first_message)
    monkeypatch.setattr(ScramAuthenticator, "first_message", aio_first_message)
    yield


def kafka_python_acl(b, resource_type: ResourceType, name: str, principal: str, op: ACLOperation) -> None:
    admin = kafka_python_admin(b.plain)
    try:
        acl = ACL(principal=principal, host="*", operation=op, permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(resource_type, name))
        result = admin.create_acls([acl])
        assert not result["failed"], result
    finally:
        admin.close()


# ------------------------------------------------------------------ the token APIs


def test_create_describe_renew_expire(tls_broker):
    alice, bob, carol = plain(tls_broker, "alice"), plain(tls_broker, "bob"), plain(tls_broker, "carol")
    before = int(time.time() * 1000)
    created = create(alice, renewers=["User:bob"], max_lifetime_ms=3_600_000)
    assert created.error_code == 0, created
    assert (created.principal_type, created.principal_name) == ("User", "alice")
    assert (created.token_requester_principal_type, created.token_requester_principal_name) == ("User", "alice")
    uuid.UUID(created.token_id)  # a random UUID, as Kafka's
    assert bytes(created.hmac) == expected_hmac(created.token_id)
    # max = issue + min(max lifetime asked, 7 d); expiry = min(max, issue + 1 d)
    assert before <= created.issue_timestamp_ms <= int(time.time() * 1000)
    assert created.max_timestamp_ms == created.issue_timestamp_ms + 3_600_000
    assert created.expiry_timestamp_ms == created.max_timestamp_ms

    wait_for(lambda: created.token_id in described_ids(alice), "the token in alice's describe")
    [token] = [t for t in describe(alice).tokens if t.token_id == created.token_id]
    assert bytes(token.hmac) == expected_hmac(created.token_id)
    assert [(r.principal_type, r.principal_name) for r in token.renewers] == [("User", "bob")]
    assert (token.token_requester_principal_type, token.token_requester_principal_name) == ("User", "alice")
    assert created.token_id in described_ids(bob)  # a renewer sees it
    assert created.token_id in described_ids(alice, ["User:alice"])
    assert created.token_id not in described_ids(alice, ["User:carol"])
    assert describe(alice, []).tokens == []  # an empty owner list: no tokens

    # renew: the owner or a renewer; the period is capped by delegation.token.expiry.time.ms and max
    renewed = renew(bob, bytes(created.hmac), 60_000)
    assert renewed.error_code == 0
    now = int(time.time() * 1000)
    assert now + 55_000 <= renewed.expiry_timestamp_ms <= now + 60_000
    assert renew(carol, bytes(created.hmac)).error_code == OWNER_MISMATCH
    assert renew(alice, b"not-a-token-hmac").error_code == NOT_FOUND
    assert expire(carol, bytes(created.hmac)).error_code == OWNER_MISMATCH
    wait_for(lambda: [t.expiry_timestamp for t in describe(alice).tokens if t.token_id == created.token_id]
             == [renewed.expiry_timestamp_ms], "the renewed expiry in describe")

    # expire with a period: the new expiry; with a negative one: the token is gone
    later = expire(alice, bytes(created.hmac), 30_000)
    assert later.error_code == 0 and later.expiry_timestamp_ms <= int(time.time() * 1000) + 30_000
    gone = expire(alice, bytes(created.hmac), -1)
    assert gone.error_code == 0 and gone.expiry_timestamp_ms == -1
    wait_for(lambda: created.token_id not in described_ids(alice), "the expired token to leave describe")
    assert renew(alice, bytes(created.hmac)).error_code == NOT_FOUND


def test_refusals(tls_broker):
    alice = plain(tls_broker, "alice")
    assert create(alice, renewers=["Group:ops"]).error_code == INVALID_PRINCIPAL_TYPE
    # PLAINTEXT (User:ANONYMOUS): no token requests at all
    raw = Raw(tls_broker.plain)
    assert create(raw).error_code == NOT_ALLOWED
    assert describe(raw).error_code == NOT_ALLOWED
    assert renew(raw, b"x").error_code == NOT_ALLOWED
    assert expire(raw, b"x").error_code == NOT_ALLOWED
    # an expired token can be neither renewed nor expired
    created = create(alice, max_lifetime_ms=1)
    assert created.error_code == 0
    wait_for(lambda: int(time.time() * 1000) > created.max_timestamp_ms + 5, "the token's max timestamp")
    assert renew(alice, bytes(created.hmac)).error_code == EXPIRED
    assert expire(alice, bytes(created.hmac)).error_code == EXPIRED


def test_create_for_another_owner_needs_create_tokens_on_the_user(tls_broker):
    """KIP-373: carol may not create a token owned by User:alice; erin, granted CREATE_TOKENS on
    the User:alice resource, may, and the token names her as requester."""
    kafka_python_acl(tls_broker, ResourceType.USER, "User:alice", "User:erin", ACLOperation.CREATE_TOKENS)
    carol, erin = plain(tls_broker, "carol"), plain(tls_broker, "erin")

    def erin_creates():
        return create(erin, owner="User:alice")

    wait_for(lambda: create(carol, owner="User:alice").error_code == AUTHORIZATION_FAILED,
             "carol refused for another owner")
    wait_for(lambda: erin_creates().error_code == 0, "erin's token for alice")
    created = erin_creates()
    assert (created.principal_name, created.token_requester_principal_name) == ("alice", "erin")
    # the requester describes it (KIP-373 ownerOrRenewer)
    wait_for(lambda: created.token_id in described_ids(erin), "erin's describe")
    # owner and requester both set by the caller when they are the same principal: no ACL needed
    assert create(carol, owner="User:carol").error_code == 0


def test_describe_of_others_tokens_follows_the_acls(tls_broker):
    alice, bob, carol, erin = (plain(tls_broker, u) for u in ("alice", "bob", "carol", "erin"))
    created = create(alice)
    assert created.error_code == 0
    # ACLs on the token (DESCRIBE for bob) and on its owner (DESCRIBE_TOKENS for erin): carol has neither
    kafka_python_acl(tls_broker, ResourceType.DELEGATION_TOKEN, created.token_id, "User:bob", ACLOperation.DESCRIBE)
    kafka_python_acl(tls_broker, ResourceType.USER, "User:alice", "User:erin", ACLOperation.DESCRIBE_TOKENS)
    wait_for(lambda: created.token_id in described_ids(bob), "bob's describe through the token ACL")
    wait_for(lambda: created.token_id in described_ids(erin), "erin's describe through DESCRIBE_TOKENS")
    wait_for(lambda: created.token_id not in described_ids(carol), "carol not seeing alice's token")


def test_disabled_without_secret_key(tls_broker_factory):
    overrides = {k: v for k, v in TLS_OVERRIDES.items() if k != "delegation.token.secret.key"}
    b = tls_broker_factory(**overrides)
    alice = plain(b, "alice")
    assert create(alice).error_code == AUTH_DISABLED
    assert describe(alice).error_code == AUTH_DISABLED
    assert renew(alice, b"x").error_code == AUTH_DISABLED
    assert expire(alice, b"x").error_code == AUTH_DISABLED


def test_the_controller_sweeps_expired_tokens(tls_broker_factory):
    """Every delegation.token.expiry.check.interval.ms the active controller removes the tokens
    past their expiry (RemoveDelegationTokenRecord): describe stops listing them."""
    b = tls_broker_factory(**TLS_OVERRIDES | {"delegation.token.expiry.check.interval.ms": "300"})
    alice = plain(b, "alice")
    short, kept = create(alice), create(alice)
    assert short.error_code == 0 and kept.error_code == 0
    assert expire(alice, bytes(short.hmac), 0).error_code == 0  # expired now, still listed until swept
    wait_for(lambda: described_ids(alice) == {kept.token_id}, "the sweep to remove only the expired token")


# ------------------------------------------------------------------ logins with a token


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_token_login_is_the_owner_and_may_not_touch_tokens(tls_broker, mechanism):
    alice = plain(tls_broker, "alice")
    created = create(alice)
    assert created.error_code == 0
    wait_for(lambda: token_login(tls_broker, created.token_id, bytes(created.hmac), mechanism).auth_error == 0,
             "a token login")
    conn = token_login(tls_broker, created.token_id, bytes(created.hmac), mechanism)
    _, meta = conn.request(ApiKey.METADATA, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False))
    assert meta.brokers  # a served request after the login
    # a token-authenticated session may not create, renew, expire or describe tokens
    assert create(conn).error_code == NOT_ALLOWED
    assert describe(conn).error_code == NOT_ALLOWED
    assert renew(conn, bytes(created.hmac)).error_code == NOT_ALLOWED
    # a wrong HMAC, an unknown token id, and a user's password with tokenauth all fail
    assert token_login(tls_broker, created.token_id, b"wrong", mechanism).auth_error == SASL_AUTHENTICATION_FAILED
    assert token_login(tls_broker, str(uuid.uuid4()), bytes(created.hmac), mechanism).auth_error == \
        SASL_AUTHENTICATION_FAILED
    assert token_login(tls_broker, "alice", b"alice-secret", mechanism).auth_error == SASL_AUTHENTICATION_FAILED


def test_kafka_python_and_aiokafka_with_a_token_act_as_its_owner(tls_broker, pki, tokenauth_patch):
    """The token's principal is its owner: on a topic only User:alice may use, a token of alice's
    produces and consumes; a token of bob's is refused."""
    topic = topic_name("token-acl")
    admin = confluent_admin(tls_broker.plain)
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    allow_only(admin, topic, "User:alice")
    alice_token = create(plain(tls_broker, "alice"))
    bob_token = create(plain(tls_broker, "bob"))
    assert alice_token.error_code == 0 and bob_token.error_code == 0
    wait_for(lambda: token_login(tls_broker, bob_token.token_id, bytes(bob_token.hmac)).auth_error == 0,
             "the tokens on the broker")

    def conf(token, mechanism: str = "SCRAM-SHA-512") -> dict:
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                "sasl_plain_username": token.token_id,
                "sasl_plain_password": base64.b64encode(bytes(token.hmac)).decode()}

    recs = numbered(10)
    assert kafka_python_produce(sasl_plaintext(tls_broker), topic, recs, idempotent=False,
                                **conf(alice_token, "SCRAM-SHA-256")) == list(range(10))
    assert_same_records(recs, aiokafka_consume(sasl_plaintext(tls_broker), topic, count=10, **conf(alice_token)))
    more = numbered(5, prefix=b"more")
    assert aiokafka_produce(sasl_plaintext(tls_broker), topic, more, **conf(alice_token)) == list(range(10, 15))

    from kafka.errors import TopicAuthorizationFailedError

    with pytest.raises(TopicAuthorizationFailedError):
        kafka_python_produce(sasl_plaintext(tls_broker), topic, numbered(1), idempotent=False, **conf(bob_token))


def test_expired_and_removed_tokens_are_refused(tls_broker, tokenauth_patch):
    alice = plain(tls_broker, "alice")
    short = create(alice)
    assert short.error_code == 0
    wait_for(lambda: token_login(tls_broker, short.token_id, bytes(short.hmac)).auth_error == 0, "a token login")
    assert expire(alice, bytes(short.hmac), 0).error_code == 0  # expires now, stays until swept
    wait_for(lambda: int(time.time() * 1000) > short.issue_timestamp_ms + 5
             and token_login(tls_broker, short.token_id, bytes(short.hmac)).auth_error == SASL_AUTHENTICATION_FAILED,
             "the expired token refused")
    removed = create(alice)
    wait_for(lambda: token_login(tls_broker, removed.token_id, bytes(removed.hmac)).auth_error == 0, "a token login")
    assert expire(alice, bytes(removed.hmac), -1).error_code == 0
    wait_for(lambda: token_login(tls_broker, removed.token_id, bytes(removed.hmac)).auth_error ==
             SASL_AUTHENTICATION_FAILED, "the removed token refused")


# ------------------------------------------------------------------ durability


def test_tokens_survive_a_restart(tls_broker_factory):
    """The records in the metadata log rebuild the tokens: after a restart the token logs in, as
    its owner, and describes with the same timestamps and HMAC."""
    ports = free_ports(3)
    b = tls_broker_factory(**TLS_OVERRIDES | {"listeners": f"PLAINTEXT://127.0.0.1:{ports[0]},"
                                              f"SASL_PLAINTEXT://127.0.0.1:{ports[1]},SASL_SSL://127.0.0.1:{ports[2]}"})
    alice = plain(b, "alice")
    created = create(alice, renewers=["User:bob"])
    assert created.error_code == 0
    wait_for(lambda: created.token_id in described_ids(alice), "the token in describe")
    alice.close()
    b.node.restart()
    conn = token_login(b, created.token_id, bytes(created.hmac))
    assert conn.auth_error == 0
    assert create(conn).error_code == NOT_ALLOWED  # still a token session
    [token] = [t for t in describe(plain(b, "bob")).tokens if t.token_id == created.token_id]
    assert (token.principal_name, token.expiry_timestamp) == ("alice", created.expiry_timestamp_ms)
    assert bytes(token.hmac) == expected_hmac(created.token_id)


@pytest.mark.slow
def test_tokens_on_a_three_node_cluster_survive_a_controller_failover(tmp_path):
    """A token created through a node whose controller is not the active one (forwarded), logs
    in on every node; the active controller is killed; the new one renews and expires it; the
    killed node, restarted, rebuilds the token from the metadata log."""
    from tests.cluster.harness import Cluster, wait_until

    sasl_ports = free_ports(3)
    overrides = {k: v for k, v in TLS_OVERRIDES.items() if k not in ("listeners", "listener.security.protocol.map")}
    overrides["listener.security.protocol.map"] = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    cluster = Cluster(tmp_path, nodes=3, overrides=overrides)
    for i, node in enumerate(cluster.nodes.values()):
        node.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{cluster.client_ports[i]},"
                                       f"SASL_PLAINTEXT://127.0.0.1:{sasl_ports[i]},"
                                       f"CONTROLLER://127.0.0.1:{cluster.controller_ports[i]}")

    class Node:  # what `plain` / `token_login` read of a broker
        def __init__(self, node_id: int) -> None:
            self.ports = {"SASL_PLAINTEXT": sasl_ports[node_id - 1]}

    try:
        cluster.start()
        active = cluster.active_controller()
        other = next(i for i in cluster.nodes if i != active)
        created = wait_until(lambda: (r := create(plain(Node(other), "alice"), renewers=["User:bob"])).error_code
                             == 0 and r, timeout=30, what="a token created through a non-controller node")
        for node_id in cluster.nodes:
            wait_until(lambda n=node_id: token_login(Node(n), created.token_id, bytes(created.hmac)).auth_error == 0,
                       timeout=30, what=f"the token on node {node_id}")

        cluster.kill(active)
        new_active = cluster.active_controller(exclude=active, timeout=60)
        survivor = next(i for i in cluster.nodes if i not in (active, new_active))
        renewed = wait_until(lambda: (r := renew(plain(Node(survivor), "bob"), bytes(created.hmac), 120_000))
                             .error_code == 0 and r, timeout=30, what="a renewal by the new controller")
        for node_id in (new_active, survivor):
            wait_until(lambda n=node_id: [t.expiry_timestamp for t in describe(plain(Node(n), "alice")).tokens]
                       == [renewed.expiry_timestamp_ms], timeout=30, what=f"the renewal on node {node_id}")
            assert token_login(Node(node_id), created.token_id, bytes(created.hmac)).auth_error == 0

        cluster.restart(active)
        wait_until(lambda: [t.expiry_timestamp for t in describe(plain(Node(active), "alice")).tokens]
                   == [renewed.expiry_timestamp_ms], timeout=60, what="the token on the restarted node")
        assert token_login(Node(active), created.token_id, bytes(created.hmac)).auth_error == 0
        assert expire(plain(Node(active), "alice"), bytes(created.hmac), -1).error_code == 0
        for node_id in cluster.nodes:
            wait_until(lambda n=node_id: token_login(Node(n), created.token_id, bytes(created.hmac)).auth_error
                       == SASL_AUTHENTICATION_FAILED, timeout=30, what=f"the expired token refused on node {node_id}")
    finally:
        cluster.close()


# ------------------------------------------------------------------ the tool


def test_pybroker_delegation_tokens_tool(tls_broker, tmp_path, tokenauth_patch):
    """`pybroker delegation-tokens` over a SASL login (--command-config): create for alice with bob
    as renewer, describe, renew, expire; the token it printed logs kafka-python and pybroker's own
    tool in."""
    import io
    import re

    from pybroker.cli.admin import main

    def props(user: str) -> str:
        path = tmp_path / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                        f'username="{user}" password="{user}-secret";\n')
        return str(path)

    def run(user: str, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = main(["delegation-tokens", "--bootstrap-server", sasl_plaintext(tls_broker),
                     "--command-config", props(user), *argv], stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    code, out, err = run("alice", "--create", "--renewer-principal", "User:bob", "--max-life-time-period", "3600000")
    assert code == 0, err
    token_id = re.search(r"Created delegation token with tokenId : (\S+)", out).group(1)
    row = next(line.split() for line in out.splitlines() if line.startswith(token_id))
    hmac_b64, owner, requester, renewers = row[1], row[2], row[3], row[4]
    assert base64.b64decode(hmac_b64) == expected_hmac(token_id)
    assert (owner, requester, renewers) == ("User:alice", "User:alice", "[User:bob]")

    wait_for(lambda: token_id in run("bob", "--describe", "--owner-principal", "User:alice")[1], "bob's describe")
    code, out, _ = run("bob", "--renew", "--hmac", hmac_b64, "--renew-time-period", "60000")
    assert code == 0 and "Completed renew operation. New expiry date : " in out
    code, _, err = run("carol", "--renew", "--hmac", hmac_b64)
    assert code == 1 and "DELEGATION_TOKEN_OWNER_MISMATCH" in err
    assert kafka_python_produce(sasl_plaintext(tls_broker), topic_name("tool-token"), numbered(1), idempotent=False,
                                security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                                sasl_plain_username=token_id, sasl_plain_password=hmac_b64) == [0]
    # pybroker's own tools log in with the token too (ScramLoginModule's tokenauth=true), as its owner,
    # and a token session may not touch tokens
    token_props = tmp_path / "token.properties"
    token_props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                           "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                           f'username="{token_id}" password="{hmac_b64}" tokenauth=true;\n')
    out, err = io.StringIO(), io.StringIO()
    code = main(["delegation-tokens", "--bootstrap-server", sasl_plaintext(tls_broker), "--command-config",
                 str(token_props), "--describe"], stdout=out, stderr=err)
    assert code == 1 and "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED" in err.getvalue(), err.getvalue()
    code, out, _ = run("alice", "--expire", "--hmac", hmac_b64)
    assert code == 0 and "Completed expire operation." in out
    wait_for(lambda: token_id not in run("alice", "--describe")[1], "the expired token gone")
    code, _, err = run("alice", "--renew")
    assert code == 2 and "--hmac" in err
