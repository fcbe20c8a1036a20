"""A Kafka client's security properties -> pybroker's own clients' ClientSecurity (Kafka's
ChannelBuilders.clientChannelBuilder with its SslFactory and the JAAS login of
SaslClientAuthenticator). The tools' `--command-config` / `--producer.config` /
`--consumer.config` files and the Spark connector's `kafka.*` options go through here.

Keys (Kafka's CommonClientConfigs, SslConfigs and SaslConfigs names; other keys are the caller's):
- `security.protocol`: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL (any case).
- `ssl.*` for SSL and SASL_SSL: the client side of security/ssl_factory.build_context, so the
  same stores load as on a broker: a truststore (`ssl.truststore.type` PEM with
  `ssl.truststore.location` or inline `ssl.truststore.certificates`, or PKCS12; none: the
  system's CAs), a keystore for a client certificate (`ssl.keystore.*`, `ssl.key.password`),
  `ssl.endpoint.identification.algorithm` (https, the default, checks the broker's host name;
  empty turns that off), `ssl.protocol`, `ssl.enabled.protocols`, `ssl.cipher.suites`. The store
  types default to JKS as in Kafka, and JKS is refused with one line naming PEM and PKCS12.
- `sasl.mechanism` (Kafka's default GSSAPI is refused: pybroker's client speaks PLAIN,
  SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER) and `sasl.jaas.config`, one login module:
  PlainLoginModule or ScramLoginModule with `username` and `password`, or OAuthBearerLoginModule
  with `unsecuredLoginStringClaim_sub` (Kafka's unsecured token; `unsecuredLoginLifetimeSeconds`
  too). The login itself is protocol/sasl_client.py, the inter-node client's, so SCRAM checks
  the broker's server signature.
librdkafka's names for the same settings (ssl.ca.location, sasl.username, ...) are not Kafka's:
they are reported as warnings, since a Kafka tool would ignore them too.

Errors: ConfigError, one line naming the key (the tools print it and exit 2).
Concurrency: pure functions, except reading the store files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybroker.config import SSL_CONFIG_DEFS, ConfigError, load_properties
from pybroker.protocol.client_security import ClientSecurity
from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.security.sasl.jaas import parse_one
from pybroker.security.ssl_factory import build_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# the login module each mechanism takes its credentials from (Kafka's own classes)
LOGIN_MODULES = {
    "PLAIN": ("org.apache.kafka.common.security.plain.PlainLoginModule",),
    "SCRAM-SHA-256": ("org.apache.kafka.common.security.scram.ScramLoginModule",),
    "SCRAM-SHA-512": ("org.apache.kafka.common.security.scram.ScramLoginModule",),
    "OAUTHBEARER": ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",),
}
_CREDENTIAL_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                       "org.apache.kafka.common.security.scram.ScramLoginModule")
# librdkafka's names -> Kafka's (a file written for confluent-kafka or kcat)
LIBRDKAFKA_NAMES = {
    "ssl.ca.location": "ssl.truststore.location (with ssl.truststore.type=PEM)",
    "ssl.certificate.location": "ssl.keystore.location (ssl.keystore.type=PEM, key and certificate in one file)",
    "ssl.key.location": "ssl.keystore.location (ssl.keystore.type=PEM, key and certificate in one file)",
    "sasl.username": "sasl.jaas.config",
    "sasl.password": "sasl.jaas.config",
    "sasl.mechanisms": "sasl.mechanism",
}
_SSL_DEFS = {d.name: d for d in SSL_CONFIG_DEFS}


def load_client_properties(path: str) -> dict[str, str]:
    """A Java-properties file (Kafka's Utils.loadProps); ConfigError when it cannot be read."""
    return load_properties(path)


def ssl_values(props: Mapping[str, str]) -> dict[str, Any]:
    """The ssl.* values for build_context: Kafka's client defaults, the given values parsed as the
    broker parses them; an empty value counts as unset (but an empty endpoint algorithm is "off")."""
    values: dict[str, Any] = {}
    for name, d in _SSL_DEFS.items():
        if name in props:
            raw = props[name]
            values[name] = None if raw.strip() == "" and name != "ssl.endpoint.identification.algorithm" \
                else d.parse(raw)
        else:
            values[name] = d.default
    return values


def warnings_for(props: Mapping[str, str]) -> list[str]:
    return [f"{k} is librdkafka's name, not Kafka's; it is ignored (use {v})"
            for k, v in LIBRDKAFKA_NAMES.items() if k in props]


def sasl_config(props: Mapping[str, str]) -> SaslClientConfig:
    """The login of `sasl.mechanism` with the credentials of `sasl.jaas.config`."""
    mech = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mech not in MECHANISMS:
        raise ConfigError(f"Invalid value {props.get('sasl.mechanism', 'GSSAPI')} for configuration sasl.mechanism: "
                          f"pybroker's clients speak {', '.join(MECHANISMS)}")
    line = props.get("sasl.jaas.config")
    if not line or not line.strip():
        raise ConfigError(f"sasl.jaas.config is not set: security.protocol {props.get('security.protocol')} with "
                          f"sasl.mechanism {mech} needs a login module line, e.g. "
                          f"{LOGIN_MODULES[mech][0]} required username=\"...\" password=\"...\";")
    entry = parse_one(line)
    options = dict(entry.options)
    if mech == "OAUTHBEARER":
        if entry.login_module not in LOGIN_MODULES[mech]:
            raise ConfigError(f"sasl.jaas.config: sasl.mechanism OAUTHBEARER needs {LOGIN_MODULES[mech][0]}, not "
                              f"{entry.login_module}")
        if not options.get("unsecuredLoginStringClaim_sub"):
            raise ConfigError("sasl.jaas.config: OAuthBearerLoginModule needs unsecuredLoginStringClaim_sub (the "
                              "principal of Kafka's unsecured token; pybroker's clients mint no other tokens)")
        lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
        if not lifetime.isdigit():
            raise ConfigError(f"sasl.jaas.config: unsecuredLoginLifetimeSeconds={lifetime} is not a number")
        return SaslClientConfig(mech, options=options)
    if entry.login_module not in _CREDENTIAL_MODULES:
        raise ConfigError(f"sasl.jaas.config: sasl.mechanism {mech} takes its username and password from "
                          f"{LOGIN_MODULES[mech][0]}, not {entry.login_module}")
    username, password = options.pop("username", ""), options.pop("password", "")
    if not username or not password:
        raise ConfigError(f"sasl.jaas.config: {entry.login_module} needs username and password for "
                          f"sasl.mechanism {mech}")
    return SaslClientConfig(mech, username, password, options)


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """ConfigError (one line) for a bad value or a store that does not load."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"Invalid value {props['security.protocol']} for configuration security.protocol: "
                          f"String must be one of: {', '.join(PROTOCOLS)}")
    context = build_context(ssl_values(props), server=False) if protocol in ("SSL", "SASL_SSL") else None
    sasl = sasl_config(props) if protocol.startswith("SASL_") else None
    return ClientSecurity(protocol, context, sasl)
