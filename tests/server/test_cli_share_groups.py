"""`pybroker groups ... --type share` against a live EmbeddedBroker (kafka-share-groups.sh's verbs):
list, describe (offsets / members / state), reset-offsets, delete-offsets and delete. The
members are driven with raw ShareGroupHeartbeats; the share state is the broker's own share
coordinator's (__share_group_state through its DefaultStatePersister)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from pybroker.cli.main import main
from pybroker.testing import EmbeddedBroker

from .test_cli_admin import produce
from .test_share_group_wire import Member, create_topic, hb, wait_until
from .wire import WireClient


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(overrides={"offsets.topic.num.partitions": 4}) as b:
        assert b._broker.group_coordinator.share_persister is b._broker.share_persister
        yield b


@pytest.fixture
def wire(broker) -> Iterator[WireClient]:
    c = WireClient("127.0.0.1", broker.port)
    yield c
    c.close()


@pytest.fixture
def cli(broker, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([*args, "--bootstrap-server", broker.bootstrap_servers])
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def rows(out: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in out.strip().splitlines() if line.strip()]


def test_share_group_verbs(broker, wire, cli):
    create_topic(wire, "cli-sg", 2)
    produce(broker.bootstrap_servers, "cli-sg", 0, [1000, 2000, 3000])
    group = "cli-sg-g"
    a, b = Member(wire, group, ["cli-sg"]), Member(wire, group, ["cli-sg"])
    wait_until(lambda: a.assignment and b.assignment and a.epoch == b.epoch, [a, b], "both assigned")

    rc, out, _ = cli("groups", "list", "--type", "share")
    assert rc == 0 and [group, "Stable", "share", "share"] in rows(out)

    rc, out, _ = cli("groups", "describe", "--type", "share", "--group", group, "--members", "--verbose")
    table = rows(out)
    assert rc == 0 and table[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
                                    "ASSIGNMENT"]
    assert {r[1] for r in table[1:]} == {a.id, b.id} and all(r[4] == "1" for r in table[1:])
    assert {r[6] for r in table[1:]} == {"cli-sg:0", "cli-sg:1"}

    rc, out, _ = cli("groups", "describe", "--type", "share", "--group", group, "--state")
    table = rows(out)
    assert table[0] == ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"] and table[1][2:] == ["Stable", "2"]

    rc, out, _ = cli("groups", "describe", "--type", "share", "--group", group)
    assert rows(out) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET"],
                         [group, "cli-sg", "0", "-"], [group, "cli-sg", "1", "-"]]

    rc, _out, err = cli("groups", "reset-offsets", "--type", "share", "--group", group, "--topic", "cli-sg",
                        "--to-latest", "--execute")
    assert rc != 0 and "Share group 'cli-sg-g' is not empty." in err
    for m in (a, b):
        assert hb(wire, group, m.id, -1).error_code == 0

    rc, out, _ = cli("groups", "reset-offsets", "--type", "share", "--group", group, "--topic", "cli-sg",
                     "--to-latest", "--execute")
    assert rc == 0 and rows(out)[1:] == [[group, "cli-sg", "0", "3"], [group, "cli-sg", "1", "0"]]
    rc, out, err = cli("groups", "describe", "--type", "share", "--group", group)
    assert rows(out)[1:] == [[group, "cli-sg", "0", "3"], [group, "cli-sg", "1", "0"]]
    assert "Share group 'cli-sg-g' has no active members." in err

    rc, out, _ = cli("groups", "delete-offsets", "--type", "share", "--group", group, "--topic", "cli-sg")
    assert rc == 0 and rows(out) == [["TOPIC", "STATUS"], ["cli-sg", "Successful"]]
    rc, out, _ = cli("groups", "describe", "--type", "share", "--group", group)
    assert rows(out) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET"]]

    rc, out, _ = cli("groups", "delete", "--type", "share", "--group", group)
    assert rc == 0 and out.strip() == f"Deletion of requested share groups ('{group}') was successful."
    rc, _out, err = cli("groups", "describe", "--type", "share", "--group", group)
    assert rc != 0 and f"Share group '{group}' does not exist." in err
