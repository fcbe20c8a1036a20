"""SASL listener settings refused at start with one line (security/sasl/listener.py,
Broker._channels and the node's own inter-node logins, Broker._build_tls), and the settings that
start."""

from __future__ import annotations

import pytest

from pybroker.config import BrokerConfig, ConfigError
from pybroker.server.broker import Broker, StartupError

from .test_tls_listener import start_exit

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"a\";"
BASE = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN}

BAD = {
    "gssapi by default": ({"sasl.enabled.mechanisms": None},
                          "No JAAS configuration for SASL mechanism GSSAPI on listener SASL_PLAINTEXT"),
    "unknown mechanism": ({"sasl.enabled.mechanisms": "PLAIN,DIGEST-MD5"}, "DIGEST-MD5"),
    "no jaas line": ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": None},
                     "No JAAS configuration for SASL mechanism PLAIN on listener SASL_PLAINTEXT"),
    "jaas line without flag": ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "PlainLoginModule;"},
                               "Invalid JAAS config"),
    "two login modules": ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "A required; B required;"},
                          "contains 2 login modules, should be 1 module"),
    "negative clock skew": ({"sasl.enabled.mechanisms": "OAUTHBEARER",
                             "oauthbearer.sasl.jaas.config": "O required unsecuredValidatorAllowableClockSkewMs=\"-5\";"},
                            "clock skew"),
    "inter-broker mechanism gssapi by default": ({"inter.broker.listener.name": "SASL_PLAINTEXT"},
                                                 "sasl.mechanism.inter.broker.protocol must be included in "
                                                 "sasl.enabled.mechanisms of listener SASL_PLAINTEXT"),
    "inter-broker mechanism not enabled": ({"inter.broker.listener.name": "SASL_PLAINTEXT",
                                            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
                                           "must be included in sasl.enabled.mechanisms of listener SASL_PLAINTEXT"),
    "inter-broker login without username": ({"inter.broker.listener.name": "SASL_PLAINTEXT",
                                             "sasl.mechanism.inter.broker.protocol": "PLAIN"},
                                            "needs username and password for this node's own login"),
}


def overrides(extra: dict[str, str | None]) -> dict[str, str]:
    merged = {**BASE, **extra}
    return {k: v for k, v in merged.items() if v is not None}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_sasl_config_is_refused_at_start_with_one_line(case, tmp_path):
    extra, expected = BAD[case]
    broker = Broker(BrokerConfig(overrides(extra) | {"log.dirs": str(tmp_path / "data")}))
    with pytest.raises((ConfigError, StartupError)) as info:
        broker._build_tls()
        broker._channels(None)  # type: ignore[arg-type]
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_bad_sasl_config_exits_2_through_the_command(tmp_path):
    rc, err = start_exit(tmp_path, overrides(BAD["no jaas line"][0]))
    lines = [ln for ln in err.splitlines() if ln.startswith("pybroker:")]
    assert rc == 2, err[-2000:]
    assert len(lines) == 1 and BAD["no jaas line"][1] in lines[0], err[-2000:]


def test_sasl_listeners_with_every_mechanism_build():
    broker = Broker(BrokerConfig(overrides({
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "scram-sha-256.sasl.jaas.config": "S required;", "scram-sha-512.sasl.jaas.config": "S required;",
        "oauthbearer.sasl.jaas.config": "O required unsecuredValidatorRequiredScope=\"a b\";"})))
    broker._build_tls()
    channels = broker._channels(None)  # type: ignore[arg-type]
    sasl = channels["SASL_PLAINTEXT"].sasl  # type: ignore[attr-defined]
    assert sasl.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert sasl.max_receive_size == 524288 and sasl.failed_authentication_delay_ms == 100
    assert "PLAINTEXT" not in channels


def test_inter_broker_login_comes_from_the_listeners_jaas_line():
    jaas = PLAIN.replace("required", 'required username="broker" password="b-secret"')
    broker = Broker(BrokerConfig(overrides({"inter.broker.listener.name": "SASL_PLAINTEXT",
                                            "sasl.mechanism.inter.broker.protocol": "PLAIN",
                                            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})))
    broker._build_tls()
    login = broker.inter_broker_client_sasl
    assert login is not None and (login.mechanism, login.username, login.password) == ("PLAIN", "broker", "b-secret")
    assert broker.controller_client_sasl is None  # CONTROLLER stays PLAINTEXT


def test_per_listener_mechanisms_override_the_broker_wide_list():
    broker = Broker(BrokerConfig(overrides({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": "S required;"})))
    broker._build_tls()
    channels = broker._channels(None)  # type: ignore[arg-type]
    assert channels["SASL_PLAINTEXT"].sasl.mechanisms == ["PLAIN"]  # type: ignore[attr-defined]
    assert channels["INTERNAL"].sasl.mechanisms == ["SCRAM-SHA-512"]  # type: ignore[attr-defined]
