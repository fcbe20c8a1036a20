"""metrics.listener: off unless set, one-line errors for a bad value or a taken port, IPv6, shutdown."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from pybroker.config import BrokerConfig, ConfigError
from pybroker.testing import EmbeddedBroker

from .scrape import scrape


def run_to_exit(args: list[str], cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("value", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1:70000",
                                   "http://127.0.0.1", "tcp://x:1"])
def test_a_bad_metrics_listener_is_a_config_error_naming_the_key(value):
    with pytest.raises(ConfigError, match="metrics.listener"):
        BrokerConfig({"metrics.listener": value})


def test_a_bad_metrics_listener_exits_2_with_one_line(tmp_path):
    r = run_to_exit(["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}",
                     "--override", "metrics.listener=localhost:9404"], tmp_path)
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(errors) == 1 and "metrics.listener" in errors[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_taken_metrics_port_exits_2_with_one_line(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        r = run_to_exit(["--override", "listeners=PLAINTEXT://127.0.0.1:0",
                         "--override", f"log.dirs={tmp_path / 'd'}",
                         "--override", f"metrics.listener=http://127.0.0.1:{port}"], tmp_path)
    finally:
        holder.close()
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(errors) == 1 and "cannot bind metrics.listener" in errors[0], r.stderr
    assert "Traceback" not in r.stderr


def test_without_metrics_listener_nothing_is_served_or_timed():
    with EmbeddedBroker() as b:
        assert b.metrics_url is None
        node = b._broker
        assert node.request_metrics is None
        assert node.server.request_timer is None


def test_ipv6_loopback_listener_serves_and_stops_with_the_node():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    b = EmbeddedBroker(overrides={"metrics.listener": "http://[::1]:0"}).start()
    try:
        url = b.metrics_url
        assert url is not None and url.startswith("http://[::1]:")
        assert scrape(url).value("kafka_server_kafkaserver_brokerstate") == 3
    finally:
        b.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
