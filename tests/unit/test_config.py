import subprocess
import sys

import pytest

from pybroker.config import (
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    build_config,
    parse_properties,
    validate_topic_configs,
)


def test_properties_parser_follows_java_rules():
    text = (
        "# comment\n! also comment\n"
        "a=1\n  b : 2\nc 3\n"
        "d=first\\\n   second\n"
        "e=tab\\there\n"
        "f=\\u0041\n"
        "g=\n"
    )
    props = parse_properties(text)
    assert props == {"a": "1", "b": "2", "c": "3", "d": "firstsecond", "e": "tab\there", "f": "A", "g": ""}


def test_defaults_are_kafkas_with_embedded_node_identity():
    cfg = BrokerConfig()
    assert cfg.node_id == 1
    assert cfg["num.partitions"] == 1
    assert cfg["log.segment.bytes"] == 1073741824
    assert cfg["log.index.interval.bytes"] == 4096
    assert cfg["log.index.size.max.bytes"] == 10485760
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["queued.max.requests"] == 500
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["log.flush.interval.messages"] == LONG_MAX
    assert cfg.log_roll_ms == 168 * 3600 * 1000
    assert [str(e) for e in cfg.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.log_dirs == ["./pybroker-data"]


def test_roll_ms_overrides_roll_hours():
    assert build_config(overrides=["log.roll.hours=2"]).log_roll_ms == 7200000
    assert build_config(overrides=["log.roll.hours=2", "log.roll.ms=5"]).log_roll_ms == 5


def test_overrides_win_over_file(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=3\nlog.dirs=/a,/b\n")
    cfg = build_config(str(f), ["num.partitions=5"])
    assert cfg["num.partitions"] == 5
    assert cfg.log_dirs == ["/a", "/b"]


@pytest.mark.parametrize("override,fragment", [
    ("num.partitions=abc", "num.partitions"),
    ("num.partitions=0", "at least 1"),
    ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
    ("listeners=localhost:9092", "listeners"),
    ("listeners=PLAINTEXT://127.0.0.1:70000", "port"),
    ("log.message.timestamp.type=Never", "log.message.timestamp.type"),
])
def test_invalid_values_raise_one_line_errors(override, fragment):
    with pytest.raises(ConfigError) as e:
        build_config(overrides=[override])
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_key_is_a_warning():
    cfg = build_config(overrides=["no.such.key=1"])
    assert any("no.such.key" in w for w in cfg.warnings)


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        build_config(str(tmp_path / "missing.properties"))


def test_topic_config_validation():
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "compact,delete"}) == {
        "retention.ms": 1000, "cleanup.policy": ["compact", "delete"]}
    with pytest.raises(ConfigError):
        validate_topic_configs({"retention.ms": "soon"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"no.such.topic.config": "1"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"cleanup.policy": "shred"})


def test_topic_defaults_follow_broker_synonyms():
    cfg = build_config(overrides=["log.segment.bytes=12345", "log.retention.hours=1"])
    d = cfg.topic_defaults()
    assert d["segment.bytes"] == 12345
    assert d["retention.ms"] == 3600000
    assert d["cleanup.policy"] == ["delete"]


@pytest.mark.parametrize("args", [
    ["--override", "num.partitions=-5"],
    ["--config", "/nonexistent/server.properties"],
    ["--override", "novalue"],
    ["--bogus-flag"],
])
def test_cli_bad_input_exits_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "pybroker", *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pybroker:")
