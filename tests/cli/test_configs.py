"""`pybroker configs` and `pybroker quotas` against a live node: what the CLI alters,
confluent-kafka's AdminClient describes (and the other way round); quotas are checked on
the wire with a raw DescribeClientQuotas (no admin client in between)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient as RdAdmin
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.messages import DescribeClientQuotasRequest

from .conftest import one_error_line


def rd_topic_configs(bootstrap: str, topic: str) -> dict[str, object]:
    admin = RdAdmin({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(30)


def test_alter_topic_configs_is_seen_by_librdkafka_and_delete_reverts(cli, broker, topic):
    rc, out, err = cli("configs", "alter", "--entity-type", "topics", "--entity-name", topic,
                       "--add-config", "retention.ms=123456,cleanup.policy=[compact,delete]")
    assert (rc, out, err) == (0, f"Completed updating config for topic {topic}.\n", "")
    cfg = rd_topic_configs(broker.bootstrap_servers, topic)
    assert cfg["retention.ms"].value == "123456" and not cfg["retention.ms"].is_default
    assert cfg["cleanup.policy"].value == "compact,delete"

    rc, out, _ = cli("configs", "describe", "--topic", topic)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={"
                               "DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete")
    assert lines[2] == "  retention.ms=123456 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=123456}"
    assert len(lines) == 3

    rc, out, _ = cli("configs", "alter", "--topic", topic, "--delete-config", "retention.ms")
    assert rc == 0
    cfg = rd_topic_configs(broker.bootstrap_servers, topic)
    assert cfg["retention.ms"].is_default and cfg["cleanup.policy"].value == "compact,delete"


def test_describe_all_lists_every_config_with_its_source(cli, topic):
    rc, out, _ = cli("configs", "describe", "--topic", topic, "--all")
    assert rc == 0 and out.splitlines()[0] == f"All configs for topic {topic} are:"
    entries = {line.split("=", 1)[0].strip(): line for line in out.splitlines()[1:]}
    assert "segment.bytes" in entries and "min.insync.replicas" in entries
    assert "DEFAULT_CONFIG:log.segment.bytes=" in entries["segment.bytes"]


def test_configs_set_by_librdkafka_are_described_by_the_cli(cli, broker, topic):
    admin = RdAdmin({"bootstrap.servers": broker.bootstrap_servers})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    rc, out, _ = cli("configs", "describe", "--entity-type", "topics", "--entity-name", topic)
    assert rc == 0
    assert "  max.message.bytes=2048 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=2048, " \
           "DEFAULT_CONFIG:message.max.bytes=" in out


def test_broker_and_cluster_default_configs(cli, broker):
    rc, out, err = cli("configs", "alter", "--entity-type", "brokers", "--entity-default",
                       "--add-config", "log.retention.ms=7200000")
    assert (rc, out, err) == (0, "Completed updating default config for brokers in the cluster.\n", "")
    rc, out, err = cli("configs", "alter", "--broker", "1", "--add-config", "log.retention.ms=3600000")
    assert (rc, out) == (0, "Completed updating config for broker 1.\n"), err
    admin = RdAdmin({"bootstrap.servers": broker.bootstrap_servers})
    res = ConfigResource(ResourceType.BROKER, "1")
    cfg = admin.describe_configs([res])[res].result(30)
    assert cfg["log.retention.ms"].value == "3600000" and cfg["log.retention.ms"].source == 2  # DYNAMIC_BROKER
    # librdkafka keys synonyms by name, so the same-named cluster default shows through the list form
    assert "7200000" in {s.value for s in cfg["log.retention.ms"].synonyms.values()}
    rc, out, _ = cli("configs", "describe", "--broker-defaults")
    assert rc == 0 and out.splitlines()[0] == "Default configs for brokers in the cluster are:"
    assert "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" \
           "log.retention.ms=7200000" in out
    rc, out, _ = cli("configs", "describe", "--broker", "1")
    assert out.splitlines()[0] == "Dynamic configs for broker 1 are:"
    assert "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, " \
           "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000" in out
    for args in (["--broker", "1"], ["--broker-defaults"]):
        assert cli("configs", "alter", *args, "--delete-config", "log.retention.ms")[0] == 0
    cfg = admin.describe_configs([res])[res].result(30)
    assert cfg["log.retention.ms"].source != 2


def test_group_configs(cli):
    group = f"g-{uuid.uuid4().hex[:8]}"
    rc, out, err = cli("configs", "alter", "--entity-type", "groups", "--entity-name", group,
                       "--add-config", "consumer.session.timeout.ms=50000")
    assert (rc, out) == (0, f"Completed updating config for group {group}.\n"), err
    rc, out, _ = cli("configs", "describe", "--group", group)
    assert out.splitlines()[0] == f"Dynamic configs for group {group} are:"
    assert "  consumer.session.timeout.ms=50000 sensitive=false" in out


@pytest.mark.parametrize("args, fragment", [
    (["--add-config", "retention.ms=-5x"], "retention.ms"),
    (["--add-config", "no.such.config=1"], "no.such.config"),
    (["--delete-config", "retention.ms"], "Invalid config(s): retention.ms"),
    (["--add-config", "novalue"], 'all configs to be added must be in the format "key=val"'),
    ([], "At least one of --add-config"),
])
def test_bad_alterations_are_one_line_exit_2(cli, topic, args, fragment):
    rc, out, err = cli("configs", "alter", "--topic", topic, *args)
    assert rc == 2 and out == ""
    assert fragment in one_error_line(err)


def test_entity_errors_are_usage_errors(cli, topic):
    rc, _, err = cli("configs", "describe", "--topic", "missing-topic-x")
    assert rc == 2 and one_error_line(err) == "pybroker: topic 'missing-topic-x' does not exist"
    rc, _, err = cli("configs", "alter", "--entity-type", "topics", "--add-config", "a=b")
    assert rc == 2 and "An entity name must be specified" in one_error_line(err)
    rc, _, err = cli("configs", "describe", "--entity-type", "topics", "--entity-type", "groups")
    assert rc == 2 and "Only 'users' and 'clients'" in one_error_line(err)
    rc, _, err = cli("configs", "describe", "--broker", "one")
    assert rc == 2 and "valid integer broker id" in one_error_line(err)


def wire_quotas(broker) -> dict[tuple, dict[str, float]]:
    with BrokerConnection("127.0.0.1", broker.port) as c:
        resp = c.send(DescribeClientQuotasRequest(components=[], strict=False))
    assert resp.error_code == 0
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
            for entry in resp.entries}


def test_user_and_client_quotas_through_configs_and_the_quotas_alias(cli, broker):
    user, client = f"alice-{uuid.uuid4().hex[:6]}", f"app-{uuid.uuid4().hex[:6]}"
    rc, out, err = cli("configs", "alter", "--entity-type", "users", "--entity-name", user,
                       "--add-config", "producer_byte_rate=1024,consumer_byte_rate=10000000")
    assert (rc, out, err) == (0, f"Completed updating config for user {user}.\n", "")
    rc, out, err = cli("quotas", "alter", "--user", user, "--client", client, "--add-config", "request_percentage=50")
    assert rc == 0, err
    rc, out, err = cli("quotas", "alter", "--client-defaults", "--add-config", "producer_byte_rate=4096")
    assert (rc, out) == (0, "Completed updating default config for clients in the cluster.\n"), err
    quotas = wire_quotas(broker)
    assert quotas[(("user", user),)] == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 10000000.0}
    assert quotas[(("client-id", client), ("user", user))] == {"request_percentage": 50.0}
    assert quotas[(("client-id", None),)] == {"producer_byte_rate": 4096.0}

    rc, out, _ = cli("configs", "describe", "--entity-type", "users", "--entity-name", user)
    assert (rc, out) == (0, f"Quota configs for user-principal '{user}' are "
                            "consumer_byte_rate=1.0E7, producer_byte_rate=1024.0\n")
    rc, out, _ = cli("quotas", "describe", "--user", user, "--client", client)
    assert out == f"Quota configs for user-principal '{user}', client-id '{client}' are request_percentage=50.0\n"
    rc, out, _ = cli("quotas", "describe")
    assert "Quota configs for the default client-id are producer_byte_rate=4096.0\n" in out
    assert f"Quota configs for user-principal '{user}' are" in out

    rc, out, err = cli("quotas", "alter", "--user", user, "--delete-config", "producer_byte_rate")
    assert rc == 0, err
    assert wire_quotas(broker)[(("user", user),)] == {"consumer_byte_rate": 10000000.0}
    rc, _, err = cli("quotas", "alter", "--user", user, "--delete-config", "producer_byte_rate")
    assert rc == 2 and one_error_line(err) == "pybroker: Invalid config(s): producer_byte_rate"
    rc, _, err = cli("quotas", "alter", "--user", user, "--add-config", "retention.ms=5")
    assert rc == 2 and "Unexpected config names: retention.ms" in one_error_line(err)
    rc, _, err = cli("quotas", "alter", "--user", user, "--add-config", "producer_byte_rate=fast")
    assert rc == 2 and "Cannot parse quota configuration value for producer_byte_rate: fast" in one_error_line(err)


def test_quotas_help_says_it_is_an_alias(cli):
    rc, out, _ = cli("quotas", "describe", "--help")
    assert rc == 0 and "Kafka has no separate quota tool" in out


def test_user_scram_credentials(cli, broker):
    from pybroker.protocol.messages import DescribeUserScramCredentialsRequest

    user = f"scram-{uuid.uuid4().hex[:6]}"
    rc, out, err = cli("configs", "alter", "--entity-type", "users", "--entity-name", user, "--add-config",
                       "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]")
    assert (rc, out, err) == (0, f"Completed updating config for user {user}.\n", "")
    with BrokerConnection("127.0.0.1", broker.port) as c:
        resp = c.send(DescribeUserScramCredentialsRequest(users=[DescribeUserScramCredentialsRequest.UserName(
            name=user)]))
    (result,) = resp.results
    assert result.error_code == 0
    assert sorted((i.mechanism, i.iterations) for i in result.credential_infos) == [(1, 8192), (2, 4096)]
    rc, out, _ = cli("configs", "describe", "--user", user)
    assert out == (f"SCRAM credential configs for user-principal '{user}' are "
                   "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n")
    assert cli("configs", "alter", "--user", user, "--delete-config", "SCRAM-SHA-512")[0] == 0
    rc, out, _ = cli("configs", "describe", "--user", user)
    assert out.endswith("are SCRAM-SHA-256=iterations=8192\n")
    for args, fragment in [
        (["--add-config", "SCRAM-SHA-256=[iterations=100,password=p]"], "Iterations 100 is less than the minimum 4096"),
        (["--add-config", "SCRAM-SHA-256=[password=p],producer_byte_rate=5"], "Cannot alter both quota and SCRAM"),
    ]:
        rc, out, err = cli("configs", "alter", "--user", user, *args)
        assert rc == 2 and fragment in one_error_line(err)
    rc, _, err = cli("configs", "alter", "--user-defaults", "--add-config", "SCRAM-SHA-256=[password=p]")
    assert rc == 2 and "--entity-default or --user-defaults is not allowed" in one_error_line(err)
