"""`pybroker storage` (kafka-storage.sh): random-uuid, format, info; and a node that refuses
storage of another cluster with one line and exit code 2."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from pybroker.cli.storage import main
from pybroker.controller.bootstrap_metadata import read_bootstrap_records, read_bootstrap_voters
from pybroker.log.meta_properties import read_meta_properties, uuid_from_str

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(args), out, err), out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def properties(tmp_path: Path, **props: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text("\n".join(f"{k}={v}" for k, v in props.items()) + "\n")
    return path


def test_random_uuid_prints_a_kafka_uuid():
    rc, out, err = run("random-uuid")
    assert rc == 0 and not err
    assert len(uuid_from_str(out.strip())) == 16


def test_format_writes_meta_properties_and_bootstrap_metadata_and_refuses_to_do_it_twice(tmp_path: Path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = properties(tmp_path, **{"node.id": "3", "log.dirs": ",".join(map(str, dirs))})
    rc, out, err = run("format", "-t", CLUSTER_ID, "-c", str(config))
    assert rc == 0 and not err
    assert "Formatting metadata directory" in out
    ids = set()
    for d in dirs:
        meta = read_meta_properties(d)
        assert meta is not None and (meta.cluster_id, meta.node_id, meta.version) == (CLUSTER_ID, 3, 1)
        ids.add(meta.directory_id)
    assert len(ids) == 2  # a directory id each
    levels = {r.name: r.feature_level for r in read_bootstrap_records(dirs[0]) or []}
    assert levels["metadata.version"] == 29
    rc, out, err = run("format", "-t", CLUSTER_ID, "-c", str(config))
    assert rc == 2 and one_line(err) == (f"pybroker: Log directory {dirs[0]} is already formatted. Use "
                                         "--ignore-formatted to ignore this directory and format the others.")
    rc, out, err = run("format", "-t", CLUSTER_ID, "-c", str(config), "--ignore-formatted")
    assert rc == 0 and "already formatted" in out
    rc, out, err = run("info", "-c", str(config))
    assert rc == 0 and f"cluster.id={CLUSTER_ID}, node.id=3" in out and "metadata.version=29" in out


@pytest.mark.parametrize("args,message", [
    (["-t", "not-a-uuid"], "does not appear to be a valid UUID"),
    (["-t", CLUSTER_ID, "--release-version", "2.8"], "Unknown release version '2.8'"),
    (["-t", CLUSTER_ID, "--feature", "group.version=7"], "Unsupported feature: group.version at level 7"),
])
def test_format_refuses_bad_arguments_with_one_line(tmp_path: Path, args: list[str], message: str):
    config = properties(tmp_path, **{"log.dirs": str(tmp_path / "d")})
    rc, _, err = run("format", "-c", str(config), *args)
    assert rc == 2 and message in one_line(err)
    assert read_meta_properties(tmp_path / "d") is None if (tmp_path / "d").exists() else True


def test_a_dynamic_controller_needs_an_initial_voter_set_and_standalone_writes_it(tmp_path: Path):
    config = properties(tmp_path, **{
        "node.id": "1", "log.dirs": str(tmp_path / "d"), "controller.quorum.bootstrap.servers": "127.0.0.1:19093",
        "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        "controller.listener.names": "CONTROLLER"})
    rc, _, err = run("format", "-t", CLUSTER_ID, "-c", str(config))
    assert rc == 2 and "you must specify one of the following: --standalone, --initial-controllers" in one_line(err)
    rc, _, err = run("format", "-t", CLUSTER_ID, "-c", str(config), "--standalone")
    assert rc == 0, err
    assert read_bootstrap_voters(tmp_path / "d" / "__cluster_metadata-0", "CONTROLLER") == {1: ("127.0.0.1", 19093)}
    rc, out, _ = run("info", "-c", str(config))
    assert "Found initial voters: 1@127.0.0.1:19093" in out


def test_static_voters_and_a_voter_option_do_not_mix(tmp_path: Path):
    config = properties(tmp_path, **{
        "log.dirs": str(tmp_path / "d"), "controller.quorum.voters": "1@127.0.0.1:19093",
        "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        "controller.listener.names": "CONTROLLER"})
    rc, _, err = run("format", "-t", CLUSTER_ID, "-c", str(config), "--standalone")
    assert rc == 2 and "You cannot specify controller.quorum.voters" in one_line(err)


def test_info_reports_an_unformatted_directory(tmp_path: Path):
    (tmp_path / "d").mkdir()
    config = properties(tmp_path, **{"log.dirs": str(tmp_path / "d")})
    rc, out, _ = run("info", "-c", str(config))
    assert rc == 1 and f"{tmp_path / 'd'} is not formatted." in out


def node(*overrides: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pybroker"]
    for o in overrides:
        cmd += ["--override", o]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_a_node_whose_storage_has_another_cluster_id_refuses_to_start(tmp_path: Path):
    config = properties(tmp_path, **{"log.dirs": str(tmp_path / "d")})
    assert run("format", "-t", CLUSTER_ID, "-c", str(config))[0] == 0
    proc = node(f"log.dirs={tmp_path / 'd'}", "listeners=PLAINTEXT://127.0.0.1:0", "cluster.id=AAAAAAAAAAAAAAAAAAAAAA")
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("pybroker:")]
    assert CLUSTER_ID in line and "AAAAAAAAAAAAAAAAAAAAAA" in line


def test_a_cluster_node_with_unformatted_storage_refuses_to_start(tmp_path: Path):
    proc = node(f"log.dirs={tmp_path / 'd'}", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                "controller.quorum.voters=1@127.0.0.1:1", "controller.listener.names=CONTROLLER")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(lines) == 1 and "pybroker storage format" in lines[0]


def test_bad_arguments_and_help_reach_the_callers_streams():
    rc, out, err = run("format", "--no-such-flag")
    assert rc == 2 and not out
    assert one_line(err).startswith("pybroker: ")
    rc, out, err = run("--help")
    assert rc == 0 and "random-uuid" in out and not err
