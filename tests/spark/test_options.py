"""Option parsing: Spark's Kafka option names, defaults and messages (no SparkSession)."""

from __future__ import annotations

import pytest

from pybroker.client.admin import TopicPartition
from pybroker.records import compression
from pybroker_spark.options import (
    DEFAULT_BATCH_BYTES,
    OptionError,
    parse_read_options,
    parse_write_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def write_opts(**kw: str):
    return parse_write_options({**BOOT, **kw})


def read_opts(streaming: bool = False, **kw: str):
    return parse_read_options({**BOOT, **kw}, streaming=streaming)


def test_write_defaults():
    o = write_opts(topic=" t ")
    assert o.topic == "t"
    assert o.delivery_guarantee == "at-least-once" and not o.exactly_once
    assert o.producer.acks == -1 and o.producer.enable_idempotence
    assert o.producer.compression == compression.NONE
    assert o.max_section_bytes == DEFAULT_BATCH_BYTES
    assert o.include_headers


def test_write_options_are_case_insensitive_and_pass_kafka_properties():
    o = parse_write_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "DeliveryGuarantee": "EXACTLY-ONCE",
                             "kafka.compression.type": "LZ4", "kafka.batch.size": "5000",
                             "kafka.transaction.timeout.ms": "60000", "kafka.client.id": "me"})
    assert o.exactly_once and o.bootstrap_servers == "h:1"
    assert o.producer.compression == compression.LZ4
    assert o.max_section_bytes == 5000
    assert o.producer.transaction_timeout_ms == 60000 and o.producer.client_id == "me"


@pytest.mark.parametrize("options, message", [
    ({}, "Option 'kafka.bootstrap.servers' must be specified"),
    ({**BOOT, "kafka.bootstrap.servers": "nohostport"}, "expected host:port"),
    ({**BOOT, "deliveryGuarantee": "twice"}, "must be 'at-least-once' or 'exactly-once'"),
    ({**BOOT, "deliveryGuarantee": "exactly-once", "kafka.acks": "1",
      "kafka.enable.idempotence": "true"}, "Must set acks to all"),
    ({**BOOT, "deliveryGuarantee": "exactly-once", "kafka.enable.idempotence": "false"},
     "exactly-once needs an idempotent producer"),
    ({**BOOT, "deliveryGuarantee": "exactly-once", "kafka.acks": "1"}, "needs an idempotent producer"),
    ({**BOOT, "transactionalIdPrefix": "x"}, "needs deliveryGuarantee=exactly-once"),
    ({**BOOT, "kafka.transactional.id": "x"}, "use deliveryGuarantee=exactly-once"),
    ({**BOOT, "kafka.acks": "0"}, "acks'=0 is not supported"),
    ({**BOOT, "kafka.acks": "2"}, "must be all, -1, 1 or 0"),
    ({**BOOT, "kafka.compression.type": "brotli"}, "compression.type' must be one of"),
    ({**BOOT, "kafka.key.serializer": "x"}, "keys are serialized with ByteArraySerializer"),
    ({**BOOT, "kafka.partitioner.class": "x"}, "partitioner.class' is not supported"),
    ({**BOOT, "kafka.security.protocol": "TLS"}, "security.protocol: String must be one of"),
    ({**BOOT, "kafka.security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),
    ({**BOOT, "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    ({**BOOT, "kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/nonexistent.jks"},
     "ssl.truststore.type"),
    ({**BOOT, "topic": "  "}, "option 'topic' is empty"),
    ({**BOOT, "kafka.batch.size": "big"}, "must be an integer"),
])
def test_write_option_errors(options, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("'", "'")):
        parse_write_options(options)


def test_acks_1_without_idempotence_is_allowed_at_least_once():
    o = write_opts(**{"kafka.acks": "1"})
    assert o.producer.acks == 1 and not o.producer.enable_idempotence


def test_read_strategies():
    assert read_opts(subscribe="a, b,").topics == ["a", "b"]
    assert read_opts(subscribePattern="t.*").pattern == "t.*"
    o = read_opts(assign='{"a":[0,2],"b":[1]}')
    assert o.strategy == "assign"
    assert o.assigned == [TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("b", 1)]


@pytest.mark.parametrize("options, message", [
    ({}, "One of the following options must be specified"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
    ({"subscribe": " , "}, "No topics to subscribe to"),
    ({"subscribePattern": " "}, "Pattern to subscribe is empty"),
    ({"subscribePattern": "("}, "not a valid regex"),
    ({"assign": "a:0"}, "No topicpartitions to assign"),
    ({"assign": '{"a": 0}'}, "must look like"),
    ({"subscribe": "a", "startingOffsets": "latest"}, "starting offset can't be latest for batch"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets for a-0 can't be latest"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "ending offset can't be earliest"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "ending offset for a-0 can't be earliest"),
    ({"subscribe": "a", "startingOffsets": "{bad"}, "is not valid JSON"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "is invalid"),
    ({"subscribe": "a", "startingTimestamp": "soon"}, "Expected a single long value"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be positive"),
    ({"subscribe": "a", "maxRecordsPerPartition": "0"}, "maxrecordsperpartition must be positive"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "auto.offset.reset' is not supported"),
    ({"subscribe": "a", "kafka.value.deserializer": "x"}, "values are deserialized as byte arrays"),
    ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "isolation.level' must be"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
     "minOffsetPerTrigger\\(10\\) is higher than the maxOffsetsPerTrigger\\(5\\)"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "must be true or false"),
])
def test_read_option_errors(options, message):
    with pytest.raises(OptionError, match=message):
        parse_read_options({**BOOT, **options}, streaming=False)


def test_streaming_rejects_ending_offsets():
    with pytest.raises(OptionError, match="ending offset not valid in streaming queries"):
        read_opts(streaming=True, subscribe="a", endingOffsets="latest")
    with pytest.raises(OptionError, match="ending timestamp not valid in streaming queries"):
        read_opts(streaming=True, subscribe="a", endingTimestamp="5")


def test_read_defaults_and_precedence():
    o = read_opts(subscribe="a")
    assert o.starting.kind == "earliest" and o.ending.kind == "latest"
    assert o.fail_on_data_loss and not o.include_headers and o.isolation_level == 0
    s = read_opts(streaming=True, subscribe="a")
    assert s.starting.kind == "latest" and s.ending is None
    # Spark's preference: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets
    o = read_opts(subscribe="a", startingTimestamp="100", startingOffsets="earliest",
                  startingOffsetsByTimestamp='{"a":{"0":5}}')
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 100
    o = read_opts(subscribe="a", startingOffsets='{"a":{"0":7,"1":-2}}',
                  **{"kafka.isolation.level": "read_committed"}, maxTriggerDelay="2s")
    assert o.starting.offsets == {TopicPartition("a", 0): 7, TopicPartition("a", 1): -2}
    assert o.isolation_level == 1 and o.max_trigger_delay_ms == 2000


SECURE = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
          "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                    'username="alice" password="a;b";'}


def test_security_options_are_kept_as_text_for_the_executors_both_ways():
    """An SSLContext does not pickle: the options keep the keys, client_security builds them once."""
    import pickle

    from pybroker_spark.options import client_security

    w = write_opts(topic="t", **SECURE)
    r = read_opts(subscribe="t", **SECURE)
    for o in (w, r):
        assert o.security == {k[len("kafka."):]: v for k, v in SECURE.items()}
        back = pickle.loads(pickle.dumps(o))
        security = client_security(back)
        assert security.protocol == "SASL_PLAINTEXT" and security.ssl_context is None
        assert security.sasl is not None and (security.sasl.mechanism, security.sasl.username,
                                              security.sasl.password) == ("SCRAM-SHA-512", "alice", "a;b")
        assert client_security(back) is security  # once per process
