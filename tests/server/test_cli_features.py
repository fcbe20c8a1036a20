"""`pybroker features` (kafka-features.sh) against a live EmbeddedBroker: describe's lines, a dry
run that changes nothing, disable / upgrade of share.version with Kafka's messages, and a
refused level with the controller's message and exit code 1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pybroker.cli.main import main
from pybroker.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def cli(broker, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(["features", *args, "--bootstrap-server", broker.bootstrap_servers])
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def described(cli) -> dict[str, dict[str, str]]:
    rc, out, _ = cli("describe")
    assert rc == 0
    table = {}
    for line in out.strip().splitlines():
        fields = dict(f.split(": ", 1) for f in line.split("\t"))
        table[fields.pop("Feature")] = fields
    return table


def test_describe_prints_kafkas_lines(cli):
    table = described(cli)
    assert sorted(table) == ["eligible.leader.replicas.version", "group.version", "metadata.version",
                             "share.version"]
    assert table["metadata.version"] | {"Epoch": "x"} == {
        "SupportedMinVersion": "3.3-IV3", "SupportedMaxVersion": "4.2-IV1", "FinalizedVersionLevel": "4.2-IV1",
        "Epoch": "x"}
    assert table["share.version"] | {"Epoch": "x"} == {
        "SupportedMinVersion": "0", "SupportedMaxVersion": "1", "FinalizedVersionLevel": "1", "Epoch": "x"}
    assert int(table["share.version"]["Epoch"]) >= 0


def test_disable_and_upgrade_share_version(cli):
    rc, out, _ = cli("downgrade", "--feature", "share.version=0", "--dry-run")
    assert (rc, out) == (0, "share.version can be downgraded to 0.\n")
    assert described(cli)["share.version"]["FinalizedVersionLevel"] == "1"
    rc, out, _ = cli("disable", "--feature", "share.version")
    assert (rc, out) == (0, "share.version was disabled.\n")
    assert described(cli)["share.version"]["FinalizedVersionLevel"] == "-"
    rc, out, _ = cli("upgrade", "--feature", "share.version=1")
    assert (rc, out) == (0, "share.version was upgraded to 1.\n")
    assert described(cli)["share.version"]["FinalizedVersionLevel"] == "1"


def test_a_refused_level_prints_the_controllers_message(cli):
    rc, out, err = cli("upgrade", "--feature", "share.version=2")
    assert rc == 1
    assert out == ("Could not upgrade share.version to 2. The update failed for all features since the following "
                   "feature had an error: Invalid update version 2 for feature share.version. Local controller 1 "
                   "only supports versions 0-1\n")
    assert err == "1 out of 1 operation(s) failed.\n"
    rc, _out, err = cli("upgrade", "--feature", "share.version")
    assert rc == 2 and "Can't parse feature=share.version" in err
