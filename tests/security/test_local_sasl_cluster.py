"""`pybroker cluster --security sasl_ssl`: three nodes with SASL_SSL on every listener (SCRAM-SHA-512
for clients and between brokers, PLAIN between controllers), the broker and admin users' SCRAM
credentials in the bootstrap metadata, an authorizer. The printed client properties are all a
client needs: the CLI (--command-config DIR/client.properties), confluent-kafka
(DIR/client-librdkafka.properties), kafka-python and aiokafka (the same settings in their names)
create a replicated topic, produce and consume through it; a client without the login, or with
another password, is refused; a restart keeps the users and their passwords."""

from __future__ import annotations

import io
import re
import ssl
import time
from pathlib import Path

import pytest

from pybroker.cli.admin import main as tool
from pybroker.config import load_properties
from tests.cli.test_cluster_command import free_bases, start, stop
from tests.clients import adapters
from tests.clients.helpers import assert_same_records, numbered

pytestmark = pytest.mark.slow


def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return tool(list(argv), stdout=out, stderr=err, stdin=io.StringIO(stdin)), out.getvalue(), err.getvalue()


def python_client_settings(props: dict[str, str]) -> dict[str, str]:
    """client.properties (Kafka's names) in kafka-python's / aiokafka's keyword names."""
    jaas = props["sasl.jaas.config"]
    user = re.search(r'username="([^"]*)"', jaas)
    password = re.search(r'password="([^"]*)"', jaas)
    assert user and password, jaas
    return {"security_protocol": props["security.protocol"], "sasl_mechanism": props["sasl.mechanism"],
            "sasl_plain_username": user.group(1), "sasl_plain_password": password.group(1)}


def test_a_local_sasl_ssl_cluster_serves_every_client_with_the_printed_properties(tmp_path: Path):
    base, _ = free_bases(3)
    directory = tmp_path / "cluster"
    proc, bootstrap = start(directory, base, "--security", "sasl_ssl")
    try:
        client_props = directory / "client.properties"
        props = load_properties(str(client_props))
        assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
        assert (client_props.stat().st_mode & 0o077) == 0  # it holds a password
        cli = ["--bootstrap-server", bootstrap, "--command-config", str(client_props)]
        deadline = time.monotonic() + 60
        while True:  # every node registered and the admin's login accepted
            code, out, err = run("topics", "create", "--topic", "secured", "--partitions", "3",
                                 "--replication-factor", "3", *cli)
            if code == 0:
                break
            assert time.monotonic() < deadline, f"topics create never succeeded: {err}"
            time.sleep(0.5)
        code, out, err = run("topics", "list", *cli)
        assert code == 0 and "secured" in out.split(), err
        # the CLI, on a topic of its own
        assert run("topics", "create", "--topic", "by-cli", "--replication-factor", "3", *cli)[0] == 0
        assert run("produce", "--topic", "by-cli", "--producer.config", str(client_props), "--bootstrap-server",
                   bootstrap, stdin="cli-1\ncli-2\n")[0] == 0
        code, out, err = run("consume", "--topic", "by-cli", "--from-beginning", "--max-messages", "2",
                             "--timeout-ms", "30000", "--consumer.config", str(client_props), "--bootstrap-server",
                             bootstrap)
        assert code == 0 and out.split() == ["cli-1", "cli-2"], err
        # confluent-kafka with the librdkafka file
        rd = load_properties(str(directory / "client-librdkafka.properties"))
        recs = numbered(30)
        assert len(adapters.confluent_produce(bootstrap, "secured", recs[:10], partition=0, **rd)) == 10
        # kafka-python and aiokafka with the same settings in their names
        py = python_client_settings(props)
        cafile = props["ssl.truststore.location"]
        assert len(adapters.kafka_python_produce(bootstrap, "secured", recs[10:20], partition=1, ssl_cafile=cafile,
                                                 **py)) == 10
        assert len(adapters.aiokafka_produce(bootstrap, "secured", recs[20:], partition=2,
                                             ssl_context=ssl.create_default_context(cafile=cafile), **py)) == 10
        # every client reads back what the others wrote
        assert_same_records(recs[:10], adapters.confluent_consume(bootstrap, "secured", count=10, partition=0, **rd))
        assert_same_records(recs[10:20], adapters.kafka_python_consume(bootstrap, "secured", count=10, partition=1,
                                                                       ssl_cafile=cafile, **py))
        assert_same_records(recs[20:], adapters.aiokafka_consume(
            bootstrap, "secured", count=10, partition=2, ssl_context=ssl.create_default_context(cafile=cafile), **py))
        # and the CLI reads what they wrote
        code, out, err = run("consume", "--topic", "secured", "--from-beginning", "--max-messages", "30",
                             "--timeout-ms", "30000", "--group", "cli-readers", *cli)
        assert code == 0 and sorted(out.split()) == sorted(r.value.decode() for r in recs), err
        # another password is refused; so is a client without SASL
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(client_props.read_text().replace(python_client_settings(props)["sasl_plain_password"],
                                                          "not-the-password"))
        code, _, err = run("topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(wrong))
        assert code == 1 and "SASL_AUTHENTICATION_FAILED" in err, err
        code, _, err = run("topics", "list", "--bootstrap-server", bootstrap, "--request-timeout-ms", "3000")
        assert code == 1, err
        assert stop(proc) == 0
        # a restart keeps the credentials (DIR/credentials.properties) and the SCRAM users
        proc, bootstrap = start(directory, base, "--security", "sasl_ssl")
        assert load_properties(str(client_props)) == props
        deadline = time.monotonic() + 60
        while (result := run("topics", "describe", "--topic", "secured", *cli))[0] != 0:
            assert time.monotonic() < deadline, result[2]
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            stop(proc)
