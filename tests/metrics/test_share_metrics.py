"""The share partitions' metrics on the Prometheus endpoint, under Kafka's MBean names as Strimzi
renders them (share/share_group_metrics.py): ShareGroupMetrics' RecordAcknowledgementsPerSec per
ackType and PartitionLoadTimeMs, SharePartitionMetrics' in-flight gauges, and BrokerTopicMetrics'
share fetch / acknowledgement counters, after raw ShareFetch / ShareAcknowledge requests of a
member that joined by ShareGroupHeartbeat (the broker's real share coordinator behind it)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import ShareAcknowledgeRequest
from pybroker.testing import EmbeddedBroker
from tests.metrics.scrape import scrape
from tests.server.test_share_group_configs_wire import (
    acquired_offsets,
    alter,
    create_topic,
    fetch,
    join,
    produce,
)
from tests.server.wire import WireClient

ACCEPT, RELEASE, REJECT = 1, 2, 3
SGM = "kafka_server_sharegroupmetrics_"
SPM = "kafka_server_sharepartitionmetrics_"
BTM = "kafka_server_brokertopicmetrics_"


@pytest.fixture
def node(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides={"metrics.listener": "http://127.0.0.1:0"}) as b:
        yield b


def acknowledge(wire, group, member, epoch, topic_id, batches):
    R = ShareAcknowledgeRequest
    req = R(group_id=group, member_id=member, share_session_epoch=epoch, is_renew_ack=False,
            topics=[R.AcknowledgeTopic(topic_id=topic_id, partitions=[R.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=[
                    R.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=t) for a, b, t in batches])])])
    resp = wire.request(ApiKey.SHARE_ACKNOWLEDGE, 2, req)
    assert resp.error_code == 0, resp
    return resp.responses[0].partitions[0].error_code


def test_share_partition_metrics_follow_fetches_and_acknowledgements(node):
    assert node.metrics_url is not None
    wire = WireClient("127.0.0.1", node.port)
    try:
        topic, group = "sm-topic", "sm-group"
        topic_id = create_topic(wire, topic)
        alter(AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"}), group, share_auto_offset_reset="earliest")
        member = join(wire, group, topic, topic_id)
        m = scrape(node.metrics_url)
        assert [m.value(f"{SGM}recordacknowledgements_total", ackType=t)
                for t in ("Accept", "Release", "Reject", "Renew")] == [0, 0, 0, 0]
        assert m.value(f"{BTM}totalsharefetchrequests_total") == 0
        produce(node, topic, 4, one_per_batch=True)
        got: list[int] = []
        fetches = 0
        while len(got) < 4 and fetches < 20:
            got += acquired_offsets(fetch(wire, group, member, fetches, topic_id))
            fetches += 1
        assert got == [0, 1, 2, 3]
        m = scrape(node.metrics_url)
        assert m.value(f"{BTM}totalsharefetchrequests_total") == fetches  # one topic per request
        assert m.value(f"{BTM}failedsharefetchrequests_total") == 0
        assert m.value(f"{SGM}partitionloadtimems_count") == 1  # loaded once, at the first fetch
        labels = {"group": group, "topic": topic, "partition": "0"}
        assert m.value(f"{SPM}inflightmessagecount", **labels) == 4
        assert m.value(f"{SPM}inflightbatchcount", **labels) >= 1

        epoch = fetches
        # one type for a range counts the range; a type per offset counts one each
        assert acknowledge(wire, group, member, epoch, topic_id, [(0, 1, [ACCEPT]), (2, 3, [RELEASE, REJECT])]) == 0
        # offset 2 was released (available, acquired by nobody): refused, counted as failed, not as an ACCEPT
        assert acknowledge(wire, group, member, epoch + 1, topic_id, [(2, 2, [ACCEPT])]) == Errors.INVALID_RECORD_STATE
        m = scrape(node.metrics_url)
        assert [m.value(f"{SGM}recordacknowledgements_total", ackType=t)
                for t in ("Accept", "Release", "Reject", "Renew")] == [2, 1, 1, 0]
        assert m.value(f"{BTM}totalshareacknowledgementrequests_total") == 2
        assert m.value(f"{BTM}failedshareacknowledgementrequests_total") == 1
        # 0-1 acknowledged and 3 archived: the window keeps the released record 2 (and what follows it)
        assert 1 <= m.value(f"{SPM}inflightmessagecount", **labels) < 4
    finally:
        wire.close()
