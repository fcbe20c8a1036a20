"""A single node's crash recovery (kill -9, then a new process on the same data) elects a
leader for each of its partitions uncleanly, as Kafka does; the controller says so in one
summary line naming the topics and counts, not one line per partition (issue 23)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.clients.broker import BrokerProcess

SUMMARY = re.compile(r"handleBrokerUnfenced: changing (\d+) partition\(s\), (\d+) of them with a leader from an "
                     r"unclean election \((.*)\)")


def test_crash_recovery_logs_one_summary_line(tmp_path: Path):
    from pybroker.client.admin import AdminClient

    node = BrokerProcess(tmp_path / "data", start_timeout=60)
    try:
        node.start()
        with AdminClient(node.bootstrap) as admin:
            admin.create_topic("many", 40, 1)
            admin.create_topic("few", 3, 1)
        node.kill()
        node.start()
        output = node.output_tail(100000)
        recovery = output[output.rindex("unclean shutdown"):]
        assert "using an unclean election" not in recovery  # Kafka's per-partition line
        summaries = [m for m in map(SUMMARY.search, recovery.splitlines()) if m]
        assert len(summaries) == 1, recovery
        changed, unclean, topics = summaries[0].groups()
        assert int(changed) == int(unclean) == 43
        assert topics == "few: 3, many: 40"
    finally:
        node.close()
