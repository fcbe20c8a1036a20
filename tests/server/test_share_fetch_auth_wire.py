"""ShareFetch / ShareAcknowledge authorization on a live pybroker with Kafka's StandardAuthorizer
(Kafka's KafkaApis): READ on the group for the whole request (GROUP_AUTHORIZATION_FAILED), READ
on each topic per partition (TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import pytest
import trio

from pybroker.protocol.errors import Errors
from pybroker.security.authorizer import Op
from pybroker.testing import EmbeddedBroker
from tests.unit.share.memory_persister import MemoryPersister

from .test_authorizer_wire import DENY, GROUP, LITERAL, ME, OPEN, TOPIC, create, creation
from .test_live_versions import create_topic
from .test_share_fetch_wire import part, share_ack, share_fetch
from .wire import WireClient


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OPEN) as b:
        def install() -> None:
            b._broker.share_partition_manager.persister = MemoryPersister()
        trio.from_thread.run_sync(install, trio_token=b._token)
        yield b


@pytest.fixture
def wire(broker):
    c = WireClient("127.0.0.1", broker.port)
    yield c
    c.close()


def test_no_read_on_the_group_fails_the_whole_request(wire):
    tid = create_topic(wire, "auth-open")
    assert create(wire, creation(GROUP, "denied-group", LITERAL, ME, Op.READ, DENY)) == [(0, None)]
    resp = share_fetch(wire, "m", 0, tid, group="denied-group")
    assert resp.error_code == Errors.GROUP_AUTHORIZATION_FAILED and resp.responses == []
    resp = share_ack(wire, "m", 1, tid, [(0, 0, [1])], group="denied-group")
    assert resp.error_code == Errors.GROUP_AUTHORIZATION_FAILED
    # another group may fetch the topic
    assert share_fetch(wire, "m", 0, tid, group="allowed-group").error_code == 0


def test_no_read_on_a_topic_fails_its_partitions(wire):
    tid = create_topic(wire, "auth-closed")
    assert create(wire, creation(TOPIC, "auth-closed", LITERAL, ME, Op.READ, DENY)) == [(0, None)]
    resp = share_fetch(wire, "m", 0, tid, group="g-closed")
    assert resp.error_code == 0 and part(resp).error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    resp = share_ack(wire, "m", 1, tid, [(0, 0, [1])], group="g-closed")
    assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == Errors.TOPIC_AUTHORIZATION_FAILED

