"""Every `pybroker` tool that talks to a broker connects through `--command-config` (and the
console and perf tools through Kafka's `--producer.config` / `--consumer.config`) to a secured
node: SASL_SSL with SCRAM-SHA-512, SSL with a client certificate, SASL_PLAINTEXT with PLAIN and
SASL_SSL with an unsecured OAUTHBEARER token. The identity reaches the authorizer (an ACL for
one principal lets it in and keeps another out), a wrong password is refused with one line, and
a bad properties file stops every tool with one line and exit code 2 before anything connects.

The module's broker: PLAINTEXT (inter-broker), SSL (client certificates required), SASL_SSL and
SASL_PLAINTEXT; PLAIN users admin and alice from the JAAS line, the SCRAM user carol created with
`pybroker configs` over SASL_SSL as admin; StandardAuthorizer, super.users=User:admin, and
allow.everyone.if.no.acl.found=true, so only resources that carry ACLs are restricted.
"""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import pytest

from pybroker.cli.admin import main
from tests.clients.adapters import DEADLINE_S

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
TLS_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
                                      "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.name.ssl.ssl.client.auth": "required",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
    "plain.sasl.jaas.config": PLAIN_JAAS,
    "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "oauthbearer.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "super.users": "User:admin",
    "group.initial.rebalance.delay.ms": "0",  # the console and perf consumers join groups
}
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
ALICE_DN = "User:CN=alice,OU=clients,O=pybroker-tests,C=US"


def write_props(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="latin-1")
    return path


def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


def ok(*argv: str, stdin: str = "") -> str:
    code, out, err = run(*argv, stdin=stdin)
    assert code == 0, f"pybroker {' '.join(argv)} exited {code}: {err}"
    return out


class Secured:
    """The module's broker and one client properties file per way in."""

    def __init__(self, broker, pki, d: Path) -> None:
        self.broker = broker
        trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem)}
        self.files = {
            "scram": (f"127.0.0.1:{broker.ports['SASL_SSL']}", write_props(d / "scram.properties", {
                "security.protocol": "SASL_SSL", **trust, "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": f'{SCRAM} required username="carol" password="carol-secret";'})),
            "cert": (broker.ssl, write_props(d / "cert.properties", {
                "security.protocol": "SSL", **trust, "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pki.alice_keystore)})),
            "plain": (f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}", write_props(d / "plain.properties", {
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f'{PLAIN} required username="alice" password="alice-secret";'})),
            "oauth": (f"127.0.0.1:{broker.ports['SASL_SSL']}", write_props(d / "oauth.properties", {
                "security.protocol": "SASL_SSL", **trust, "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": f'{OAUTH} required unsecuredLoginStringClaim_sub="erin";'})),
            "admin": (f"127.0.0.1:{broker.ports['SASL_SSL']}", write_props(d / "admin.properties", {
                "security.protocol": "SASL_SSL", **trust, "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f'{PLAIN} required username="admin" password="admin-secret";'})),
        }

    def args(self, way: str, flag: str = "--command-config") -> list[str]:
        bootstrap, path = self.files[way]
        return ["--bootstrap-server", bootstrap, flag, str(path)]


@pytest.fixture(scope="module")
def secured(tls_broker, pki, tmp_path_factory) -> Secured:
    s = Secured(tls_broker, pki, tmp_path_factory.mktemp("client-props"))
    # carol's SCRAM credential, created by the configs tool itself over SASL_SSL as admin
    ok("configs", "alter", "--entity-type", "users", "--entity-name", "carol",
       "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carol-secret]", *s.args("admin"))
    deadline = time.monotonic() + DEADLINE_S
    while run("topics", "list", *s.args("scram"))[0] != 0:  # the broker's image has it once carol logs in
        assert time.monotonic() < deadline, "carol's SCRAM credential never took effect"
        time.sleep(0.1)
    return s


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("way", ["scram", "cert", "plain", "oauth"])
def test_every_tool_through_command_config(secured, way):
    topic = topic_name(f"tools-{way}")
    group = f"g-{topic}"
    ok("topics", "create", "--topic", topic, "--partitions", "2", "--replication-factor", "1", *secured.args(way))
    assert topic in ok("topics", "list", *secured.args(way)).split()
    assert topic in ok("topics", "describe", "--topic", topic, *secured.args(way))
    ok("produce", "--topic", topic, *secured.args(way, "--producer.config"), stdin="one\ntwo\nthree\n")
    ok("produce", "--topic", topic, *secured.args(way), stdin="four\n")
    got = ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "4", "--group", group,
             *secured.args(way, "--consumer.config"))
    assert sorted(got.split()) == ["four", "one", "three", "two"]
    assert group in ok("groups", "list", *secured.args(way)).split()
    assert topic in ok("groups", "describe", "--group", group, *secured.args(way))
    assert "retention.ms=" in ok("configs", "describe", "--entity-type", "topics", "--entity-name", topic, "--all",
                                 *secured.args(way))
    ok("quotas", "describe", *secured.args(way))
    ok("acls", "--list", *secured.args(way))
    perf = ok("perf", "produce", "--topic", topic, "--num-records", "50", "--record-size", "20", "--throughput", "-1",
              *secured.args(way, "--producer.config"))
    assert "50 records sent" in perf
    perf = ok("perf", "consume", "--topic", topic, "--messages", "54", "--timeout", "20000", "--hide-header",
              *secured.args(way, "--consumer.config"))
    assert perf.strip()
    ok("topics", "delete", "--topic", topic, *secured.args(way))


def test_the_login_is_the_principal_the_authorizer_judges(secured):
    """An ACL on a topic for carol (SCRAM): carol writes; alice, by certificate or by PLAIN, may not."""
    topic = topic_name("acl-tools")
    ok("topics", "create", "--topic", topic, "--partitions", "1", "--replication-factor", "1", *secured.args("admin"))
    ok("acls", "--add", "--allow-principal", "User:carol", "--operation", "Write", "--operation", "Describe",
       "--topic", topic, *secured.args("admin"))
    listed = ok("acls", "--list", "--topic", topic, *secured.args("scram"))
    assert "principal=User:carol" in listed
    deadline = time.monotonic() + DEADLINE_S
    while run("produce", "--topic", topic, *secured.args("scram"), stdin="by carol\n")[0] != 0:
        assert time.monotonic() < deadline, "carol's ACL never took effect"
        time.sleep(0.1)
    for way in ("cert", "plain"):
        code, _, err = run("produce", "--topic", topic, *secured.args(way), stdin="by alice\n")
        assert code != 0 and "TOPIC_AUTHORIZATION_FAILED" in err, (way, err)
    got = ok("consume", "--topic", topic, "--from-beginning", "--max-messages", "1", "--timeout-ms", "20000",
             *secured.args("admin"))
    assert got.split("\n")[0] == "by carol"
    # the certificate's subject is the principal too: an ACL for alice's DN lets her in
    ok("acls", "--add", "--allow-principal", ALICE_DN, "--operation", "Write", "--topic", topic,
       *secured.args("admin"))
    while run("produce", "--topic", topic, *secured.args("cert"), stdin="by alice's cert\n")[0] != 0:
        assert time.monotonic() < deadline, "alice's ACL never took effect"
        time.sleep(0.1)


def test_a_wrong_password_is_one_line_and_exit_1(secured, tmp_path):
    bootstrap, good = secured.files["scram"]
    bad = write_props(tmp_path / "wrong.properties",
                      {**dict(line.split("=", 1) for line in good.read_text().splitlines()),
                       "sasl.jaas.config": f'{SCRAM} required username="carol" password="not-hers";'})
    code, _, err = run("topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(bad))
    assert code == 1
    assert err.count("\n") == 1 and "authentication failed" in err and "SASL_AUTHENTICATION_FAILED" in err, err
    # a mechanism the listener does not offer names the ones it does
    code, _, err = run("topics", "list", "--bootstrap-server", f"127.0.0.1:{secured.broker.ports['SSL']}",
                       "--command-config", str(secured.files["plain"][1]), "--request-timeout-ms", "3000")
    assert code == 1 and err.count("\n") == 1, err


def test_a_client_without_a_certificate_is_refused_by_the_ssl_listener(secured, pki, tmp_path):
    no_cert = write_props(tmp_path / "nocert.properties", {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                                           "ssl.truststore.location": str(pki.ca_pem)})
    code, _, err = run("topics", "list", "--bootstrap-server", secured.broker.ssl, "--command-config", str(no_cert),
                       "--request-timeout-ms", "5000")
    assert code == 1 and err.count("\n") == 1, err
    # an untrusted broker certificate: the system CAs do not know the test CA
    system = write_props(tmp_path / "system.properties", {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                                                          "ssl.keystore.location": str(pki.alice_keystore)})
    code, _, err = run("topics", "list", "--bootstrap-server", secured.broker.ssl, "--command-config", str(system))
    assert code == 1 and "CERTIFICATE_VERIFY_FAILED" in err and err.count("\n") == 1, err


BAD_FILES = {
    "protocol": ({"security.protocol": "TLS"}, "security.protocol"),
    "gssapi": ({"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM"}, "sasl.mechanism"),
    "no-jaas": ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    "jaas-syntax": ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.jaas.config": f'{SCRAM} required username="carol" password="x"'}, "JAAS"),
    "no-password": ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                     "sasl.jaas.config": f'{PLAIN} required username="alice";'}, "password"),
    "oauth-module": ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                      "sasl.jaas.config": f'{PLAIN} required username="a" password="b";'}, "OAuthBearerLoginModule"),
    "jks": ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/truststore.jks"},
            "ssl.truststore.type"),
    "missing-store": ({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                       "ssl.truststore.location": "/nonexistent/ca.pem"}, "ssl.truststore.location"),
    "endpoint": ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
                 "ssl.endpoint.identification.algorithm"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_properties_file_is_one_line_and_exit_2(case, tmp_path):
    """Checked before anything connects: the bootstrap server here does not even exist."""
    props, names = BAD_FILES[case]
    path = write_props(tmp_path / "bad.properties", props)
    code, out, err = run("topics", "list", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path))
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"pybroker: {path}: ") and names in err, err


TOOL_ARGVS = [
    ["topics", "list"], ["topics", "describe"], ["groups", "list"],
    ["configs", "describe", "--entity-type", "brokers", "--entity-name", "1"], ["quotas", "describe"],
    ["acls", "--list"], ["produce", "--topic", "t"], ["consume", "--topic", "t"],
    ["perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"],
    ["perf", "consume", "--topic", "t", "--messages", "1"],
]


LEGACY_FLAGS = {"produce": "--producer.config", "consume": "--consumer.config"}
TOOL_FLAGS = [(argv, "--command-config") for argv in TOOL_ARGVS] + [
    (argv, LEGACY_FLAGS[argv[1] if argv[0] == "perf" else argv[0]]) for argv in TOOL_ARGVS
    if (argv[1] if argv[0] == "perf" else argv[0]) in LEGACY_FLAGS]


@pytest.mark.parametrize("argv,flag", TOOL_FLAGS, ids=lambda v: "-".join(v[:2]) if isinstance(v, list) else v)
def test_every_tool_refuses_a_bad_file_and_an_unreadable_one(argv, flag, tmp_path):
    bad = write_props(tmp_path / "bad.properties", {"security.protocol": "SASL_SSL", "sasl.mechanism": "NOPE"})
    for path in (bad, tmp_path / "missing.properties"):
        code, _, err = run(*argv, "--bootstrap-server", "127.0.0.1:1", flag, str(path))
        assert code == 2 and err.count("\n") == 1 and str(path) in err, (argv, err)


def test_librdkafka_names_get_a_warning(tmp_path):
    path = write_props(tmp_path / "rdkafka.properties", {"security.protocol": "PLAINTEXT", "sasl.username": "x"})
    code, _, err = run("topics", "list", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path),
                       "--request-timeout-ms", "1000")
    assert code == 1  # nothing listens there
    assert "sasl.username is librdkafka's name" in err
