"""`pybroker topics ...` against a live EmbeddedBroker: what a user sees (stdout tables, one
error line on stderr, exit codes 0 / 1 runtime failure / 2 bad input), cross-checked with
the broker's own answers through the admin client. Group commands: test_cli_groups.py."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time

import pytest

from pybroker.cli.main import main
from pybroker.client import AdminClient, BrokerConnection, TopicPartition
from pybroker.protocol.messages import ProduceRequest
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

_n = [0]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides={"num.partitions": 2}) as b:
        yield b


@pytest.fixture
def admin(broker):
    with AdminClient(broker.bootstrap_servers) as a:
        yield a


@pytest.fixture
def cli(broker, capsys):
    """cli("topics", "list", ...) -> (exit code, stdout, stderr) with --bootstrap-server added."""
    def run(*args: str, bootstrap: str | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([*args, "--bootstrap-server", bootstrap or broker.bootstrap_servers])
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def new_name(prefix: str = "cli") -> str:
    _n[0] += 1
    return f"{prefix}-{_n[0]}"


def table(out: str) -> list[list[str]]:
    """Rows of a printed table (header first), split on runs of blanks."""
    return [line.split() for line in out.strip().splitlines() if line.strip()]


def produce(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> int:
    """Append one record per timestamp; returns the base offset."""
    host, port = bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port)) as conn:
        batch = build_batch([(ts, None, b"v%d" % i, ()) for i, ts in enumerate(timestamps)])
        req = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        resp = conn.send(req)
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == 0, p
        return p.base_offset


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pybroker: "), err
    return lines[0]


# -- topics -----------------------------------------------------------------------------------


def test_create_describe_list_delete_round_trip(cli, admin):
    name = new_name()
    rc, out, err = cli("topics", "create", "--topic", name, "--partitions", "3", "--replication-factor", "1",
                       "--config", "retention.ms=123456", "--config", "cleanup.policy=compact")
    assert (rc, out, err) == (0, f"Created topic {name}.\n", "")

    rc, out, _ = cli("topics", "list")
    assert rc == 0 and name in out.split()

    rc, out, err = cli("topics", "describe", "--topic", name)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    described = admin.describe_topics([name])[name]
    topic_id = base64.urlsafe_b64encode(described.topic_id).rstrip(b"=").decode()
    head = lines[0].split("\t")
    assert head[:4] == [f"Topic: {name}", f"TopicId: {topic_id}", "PartitionCount: 3", "ReplicationFactor: 1"]
    configs = head[4].removeprefix("Configs: ").split(",")
    assert {"cleanup.policy=compact", "retention.ms=123456"} <= set(configs)
    expected = [f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader}\tReplicas: "
                f"{','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\tElr: \tLastKnownElr: "
                for p in described.partitions]
    assert lines[1:] == expected and len(expected) == 3

    rc, out, err = cli("topics", "delete", "--topic", name)
    assert (rc, out, err) == (0, f"Deleted topic {name}.\n", "")
    assert name not in admin.list_topics()
    rc, out, _ = cli("topics", "list")
    assert name not in out.split()


def test_create_without_sizes_takes_the_broker_defaults(cli, admin):
    name = new_name()
    assert cli("topics", "create", "--topic", name)[0] == 0
    described = admin.describe_topics([name])[name]
    assert len(described.partitions) == 2  # the module broker's num.partitions
    assert all(len(p.replicas) == 1 for p in described.partitions)


def test_describe_without_topic_lists_every_topic(cli):
    a, b = new_name(), new_name()
    for n in (a, b):
        assert cli("topics", "create", "--topic", n, "--partitions", "1")[0] == 0
    rc, out, _ = cli("topics", "describe")
    names = [line.split("\t")[0].removeprefix("Topic: ") for line in out.splitlines() if line.startswith("Topic: ")]
    assert {a, b} <= set(names) and names == sorted(names)
    assert sum(line.startswith(f"\tTopic: {a}\t") for line in out.splitlines()) == 1


def test_creating_an_existing_topic_is_bad_input_unless_if_not_exists(cli):
    name = new_name()
    assert cli("topics", "create", "--topic", name)[0] == 0
    rc, out, err = cli("topics", "create", "--topic", name)
    assert rc == 2 and out == ""
    assert one_error_line(err) == f"pybroker: topic '{name}' already exists"
    assert cli("topics", "create", "--topic", name, "--if-not-exists") == (0, "", "")


@pytest.mark.parametrize("args, fragment", [
    (["--partitions", "0"], "--partitions must be at least 1"),
    (["--replication-factor", "-3"], "--replication-factor must be at least 1"),
    (["--config", "retention.ms"], "KEY=VALUE"),
    (["--partitions", "many"], "invalid int value"),
])
def test_bad_create_arguments_are_one_line_exit_2(cli, admin, args, fragment):
    name = new_name()
    rc, out, err = cli("topics", "create", "--topic", name, *args)
    assert rc == 2 and out == ""
    assert fragment in one_error_line(err)
    assert name not in admin.list_topics()


def test_broker_refusals_are_reported_with_kafkas_error_name(cli, admin):
    rc, _, err = cli("topics", "create", "--topic", "bad name!")
    assert rc == 2 and "INVALID_TOPIC_EXCEPTION" in one_error_line(err)
    name = new_name()
    rc, _, err = cli("topics", "create", "--topic", name, "--replication-factor", "3")
    assert rc == 2 and "INVALID_REPLICATION_FACTOR" in one_error_line(err)
    assert name not in admin.list_topics()


def test_unknown_topics_are_bad_input(cli):
    missing = new_name("missing")
    rc, out, err = cli("topics", "describe", "--topic", missing)
    assert (rc, out) == (2, "") and one_error_line(err) == f"pybroker: topic '{missing}' does not exist"
    rc, out, err = cli("topics", "delete", "--topic", missing)
    assert (rc, out) == (2, "") and one_error_line(err) == f"pybroker: topic '{missing}' does not exist"
    assert cli("topics", "delete", "--topic", missing, "--if-exists") == (0, "", "")


def test_describe_does_not_create_topics(cli, admin):
    missing = new_name("missing")
    assert cli("topics", "describe", "--topic", missing)[0] == 2
    assert missing not in admin.list_topics()


def test_unreachable_broker_is_a_runtime_failure(cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # nothing listens on `port` any more
    rc, out, err = cli("topics", "list", bootstrap=f"127.0.0.1:{port}")
    assert (rc, out) == (1, "")
    line = one_error_line(err)
    assert f"127.0.0.1:{port}" in line and "cannot connect" in line


def test_a_broker_that_never_answers_times_out(cli):
    with socket.socket() as s:  # accepts connections (kernel backlog) but never replies
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        rc, out, err = cli("topics", "list", "--timeout-ms", "300", bootstrap=f"127.0.0.1:{s.getsockname()[1]}")
    assert (rc, out) == (1, "")
    assert "no response within 0.3s" in one_error_line(err)


@pytest.mark.parametrize("bootstrap", ["nohostport", "127.0.0.1:notaport", "127.0.0.1:0"])
def test_bad_bootstrap_server_is_bad_input(cli, bootstrap):
    rc, out, err = cli("topics", "list", bootstrap=bootstrap)
    assert (rc, out) == (2, "") and "bootstrap server" in one_error_line(err)


def test_missing_or_unknown_subcommands_are_bad_input(capsys):
    for argv in (["topics"], ["topics", "frobnicate"], ["groups", "describe"], ["topics", "create"]):
        assert main(argv) == 2, argv
        one_error_line(capsys.readouterr().err)


def test_list_offsets_earliest_latest_and_by_time(broker, admin, cli):
    name = new_name()
    assert cli("topics", "create", "--topic", name, "--partitions", "1")[0] == 0
    base = int(time.time() * 1000) - 60_000
    produce(broker.bootstrap_servers, name, 0, [base, base + 10, base + 20])
    tp = TopicPartition(name, 0)
    assert admin.log_start_offsets([tp]) == {tp: 0}
    assert admin.log_end_offsets([tp]) == {tp: 3}
    assert admin.list_offsets({tp: base + 5})[tp].offset == 1
    assert admin.list_offsets({tp: base + 21})[tp].offset == -1  # nothing at or after: Kafka says -1


# -- the command itself -------------------------------------------------------------------------


def test_python_m_pybroker_topics_runs_the_admin_tool(broker):
    name = new_name()
    env_cmd = [sys.executable, "-m", "pybroker", "topics"]
    r = subprocess.run([*env_cmd, "create", "--topic", name, "--bootstrap-server", broker.bootstrap_servers],
                       capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"Created topic {name}.\n", "")
    r = subprocess.run([*env_cmd, "describe", "--topic", "nope-" + name, "--bootstrap-server",
                        broker.bootstrap_servers], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and r.stderr == f"pybroker: topic 'nope-{name}' does not exist\n"


def test_broker_options_still_start_the_broker_not_a_tool(tmp_path):
    # --help of the bare command is the broker's (config/override), and names the tools
    r = subprocess.run([sys.executable, "-m", "pybroker", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--override" in r.stdout and "pybroker topics --help" in r.stdout
    r = subprocess.run([sys.executable, "-m", "pybroker", "--override", "node.id=notanumber"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "node.id" in r.stderr
