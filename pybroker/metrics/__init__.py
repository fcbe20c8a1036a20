"""A node's metrics and its Prometheus endpoint (`metrics.listener`).

- histogram.py           Kafka-style histograms (a ring of recent samples, percentiles at read)
- request_metrics.py     per-API request counts and times (Kafka's RequestMetrics), the dispatcher's and
                         connection's only metrics calls
- broker_topic_stats.py  per-topic traffic counters bumped in place (Kafka's BrokerTopicStats)
- event_loop.py          event-loop idle time from the loop thread's CPU clock (Kafka's idle percents)
- registry.py            providers read at scrape time into plain `Family` data
- prometheus.py          the HTTP endpoint (served on the loop, formatted in one worker thread)

Which numbers a node exports, under Strimzi's names, is pybroker/server/broker_metrics.py (it reads
the whole broker). Layering: the bottom layer; nothing here imports another pybroker package.
"""

from pybroker.metrics.broker_topic_stats import BrokerTopicStats, TopicStats
from pybroker.metrics.histogram import Histogram
from pybroker.metrics.request_metrics import RequestMetrics

__all__ = ["BrokerTopicStats", "Histogram", "RequestMetrics", "TopicStats"]
