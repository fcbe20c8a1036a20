"""How one of pybroker's own Kafka clients secures its connections (the client half of Kafka's
ChannelBuilders.clientChannelBuilder): the listener's security protocol, the TLS context for an
SSL / SASL_SSL listener, and the SASL login for a SASL_PLAINTEXT / SASL_SSL one.

Built from a Kafka client's properties (security.protocol, ssl.*, sasl.mechanism,
sasl.jaas.config) by security/client_properties.py; read by client/connection.py, which wraps
each socket in `ssl_context` and logs in with `sasl` after ApiVersions, as Kafka's clients do.
Concurrency: immutable; one value is shared by every connection of a client (an SSLContext is
safe to share between sockets).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from pybroker.protocol.sasl_client import SaslClientConfig


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslClientConfig | None = None


PLAINTEXT = ClientSecurity()
