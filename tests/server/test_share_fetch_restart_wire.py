"""A share partition across a broker restart: the restarted node loads the persisted state (the
in-memory persister of the unit tests stands in for the share coordinator and outlives the node),
never redelivers an acknowledged record and redelivers at once what was in flight."""

from __future__ import annotations

import uuid

import pytest
import trio

from pybroker.testing import EmbeddedBroker
from tests.unit.share.memory_persister import MemoryPersister

from .test_live_versions import create_topic
from .test_share_fetch_wire import AB, ACCEPT, REJECT, RELEASE, delivered, part, share_fetch
from .wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")


def start(log_dir: str, persister: MemoryPersister, port: int = 0) -> EmbeddedBroker:
    b = EmbeddedBroker(log_dir=log_dir, port=port).start()

    def install() -> None:
        b._broker.share_partition_manager.persister = persister
    trio.from_thread.run_sync(install, trio_token=b._token)
    return b


def test_a_restarted_broker_resumes_the_share_partition(tmp_path):
    persister = MemoryPersister()
    b = start(str(tmp_path / "data"), persister)
    try:
        w = WireClient("127.0.0.1", b.port)
        tid = create_topic(w, "restarting")
        assert share_fetch(w, "m1", 0, tid).error_code == 0
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(8):
            producer.produce("restarting", b"r%d" % i, partition=0)
        assert producer.flush(15) == 0
        assert delivered(share_fetch(w, "m1", 1, tid, max_wait_ms=5000)) == {o: 1 for o in range(8)}
        # 0-2 accepted, 3 rejected, 4 released (delivered once, persisted), 5-7 in flight
        resp = share_fetch(w, "m1", 2, tid, max_records=0, acks=[AB(
            first_offset=0, last_offset=4, acknowledge_types=[ACCEPT, ACCEPT, ACCEPT, REJECT, RELEASE])])
        assert part(resp).acknowledge_error_code == 0
        w.close()
    finally:
        b.stop()
    b = start(str(tmp_path / "data"), persister)
    try:
        w = WireClient("127.0.0.1", b.port)
        got = delivered(share_fetch(w, "m2", 0, tid, max_wait_ms=5000))
        # the released record counts its delivery; the in-flight ones were never written as delivered
        assert got == {4: 2, 5: 1, 6: 1, 7: 1}
        st = persister.states[("sg", uuid.UUID(bytes=tid), 0)]
        assert st.start_offset <= 4 and all(st.offsets[o][0] in (2, 4) for o in range(4) if o >= st.start_offset)
        w.close()
    finally:
        b.close()
