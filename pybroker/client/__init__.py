"""Blocking Kafka clients on pybroker's own codec (the admin tools' client).

Imports pybroker.protocol and pybroker.records only, never the server, so it talks to any
Kafka-compatible broker. `AdminClient` is the public entry point; `BrokerConnection` is
one negotiated connection.
"""

from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import BrokerConnection, BrokerConnectionError, RequestTimeoutError

__all__ = ["AdminClient", "BrokerConnection", "BrokerConnectionError", "RequestTimeoutError", "TopicPartition"]
