"""Keystore reload without a restart (Kafka's reconfigurable SslFactory through the dynamic
listener.name.<l>.ssl.keystore.* configs): IncrementalAlterConfigs on the node's BROKER resource
points the SSL listener at a new keystore; the next connection is served with the new
certificate (its serial tells), an open connection goes on working, and a keystore that does not
load, or whose certificate names another subject, is refused with INVALID_REQUEST and changes
nothing. Re-setting the same location after replacing the file reloads it too.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.clients.adapters import confluent_admin, confluent_producer
from tests.clients.helpers import wait_until

from .test_tls_listener import tls_serial


def set_broker_config(admin, name: str, value: str) -> None:
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)


def test_keystore_reload_serves_new_connections_with_the_new_certificate(tls_broker_factory, pki):
    b = tls_broker_factory()
    assert tls_serial(b.ssl, pki) == pki.broker.serial
    producer = confluent_producer(b.ssl, **{"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)})
    delivered: list[object] = []

    def produce_one() -> None:
        producer.produce("reload", b"v", partition=0, on_delivery=lambda err, _m: delivered.append(err))
        assert producer.flush(15) == 0

    produce_one()
    renewed = pki.ca.issue("broker", ou="brokers", server=True)
    store, _, _ = renewed.write_pem(pki.dir, "broker-renewed")
    admin = confluent_admin(b.plain)
    set_broker_config(admin, "listener.name.ssl.ssl.keystore.location", str(store))
    wait_until(lambda: tls_serial(b.ssl, pki) == renewed.serial, what="the renewed certificate on new connections")
    produce_one()  # the connection opened before the reload still works
    assert delivered == [None, None]

    garbage = pki.dir / "garbage.pem"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    other = pki.ca.issue("somebody-else", ou="brokers", server=True)
    other_store, _, _ = other.write_pem(pki.dir, "other")
    for bad, expected in ((garbage, "Validation of dynamic config update of SSLFactory failed"),
                          (other_store, "Keystore DistinguishedName does not match")):
        with pytest.raises(KafkaException) as info:
            set_broker_config(admin, "listener.name.ssl.ssl.keystore.location", str(bad))
        err = info.value.args[0]
        assert err.name() == "INVALID_REQUEST" and expected in err.str(), err
    assert tls_serial(b.ssl, pki) == renewed.serial

    # the file replaced under the same name, the same value set again: every BROKER change writes
    # a record (KAFKA-14136), and the replaced file is loaded
    third = pki.ca.issue("broker", ou="brokers", server=True)
    store.write_text(third.key_pem() + third.cert_pem())
    set_broker_config(admin, "listener.name.ssl.ssl.keystore.location", str(store))
    wait_until(lambda: tls_serial(b.ssl, pki) == third.serial, what="the replaced keystore file on new connections")
