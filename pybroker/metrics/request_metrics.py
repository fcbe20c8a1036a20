"""Per-API request counts and times (Kafka's kafka.network RequestMetrics).

One `RequestMeter` per request name: each API by Kafka's name ("Produce", "ListOffsets", ...),
except that a Fetch is recorded once, as "FetchConsumer" or "FetchFollower" according to who sent
it, and the "Fetch" series (which Kafka updates together with one of those two,
RequestChannel.updateRequestMetrics) is their sum, made at scrape time: the same counts, and
percentiles over the union of the two rings, for half the per-request work. A meter holds:

- `requests[version]`: RequestsPerSec's Count per request version (the `version` tag);
- five histograms in parallel rings, one slot per request (see histogram.py), in milliseconds
  except RequestBytes:
    TotalTimeMs        frame fully read -> response fully written
    LocalTimeMs        handling on the event loop (TotalTime - RemoteTime - ResponseSendTime)
    RemoteTimeMs       parked in a purgatory (`Connection.park`: acks=all, fetch.min.bytes)
    ResponseSendTimeMs writing the response
    RequestBytes       the request's size (header + body)

Not kept: RequestQueueTimeMs and ResponseQueueTimeMs (pybroker has no request or response queue:
a connection's task handles its request the moment it is read, so both would be identically 0),
ThrottleTimeMs, MessageConversionsTimeMs (no down-conversion), TemporaryMemoryBytes, and
ErrorsPerSec (it needs every response's error codes walked; not done on the hot path).

Hot path, per request (only when the metrics endpoint is on): the dispatcher's `on_request`
(one list lookup, one increment) and the connection's `record` (three clock reads in the caller,
five ring stores and sums here). Meters are created on an API's first request; nothing is
allocated per request.

Concurrency: trio thread only; `snapshot` copies the rings for a scrape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybroker.metrics.histogram import MASK, HistogramSnapshot, new_ring, snapshot_ring

FETCH = 1  # the Fetch API key (pybroker.protocol.api_keys.ApiKey.FETCH; metrics sits below protocol)
CONSUMER_FETCH = "FetchConsumer"  # Kafka's RequestMetrics.CONSUMER_FETCH_METRIC_NAME
FOLLOWER_FETCH = "FetchFollower"
HISTOGRAMS = ("TotalTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseSendTimeMs", "RequestBytes")


class RequestMeter:
    """Kafka's RequestMetrics for one request name."""

    __slots__ = ("name", "requests", "count", "total", "local", "remote", "send", "size",
                 "total_sum", "local_sum", "remote_sum", "send_sum", "size_sum")

    def __init__(self, name: str, max_version: int) -> None:
        self.name = name
        self.requests = [0] * (max_version + 1)
        self.count = 0
        self.total, self.local, self.remote, self.send, self.size = (
            new_ring(), new_ring(), new_ring(), new_ring(), new_ring())
        self.total_sum = self.local_sum = self.remote_sum = self.send_sum = self.size_sum = 0.0

    def record(self, start: float, handled: float, end: float, remote_s: float, size: int) -> None:
        """One request: read at `start`, handler done at `handled`, answer written at `end`
        (seconds, one clock), `remote_s` of it parked in a purgatory; `size` bytes on the wire."""
        i = self.count & MASK
        self.count += 1
        total = (end - start) * 1000.0
        remote = remote_s * 1000.0
        send = (end - handled) * 1000.0
        local = total - remote - send
        self.total[i] = total
        self.local[i] = local
        self.remote[i] = remote
        self.send[i] = send
        self.size[i] = size
        self.total_sum += total
        self.local_sum += local
        self.remote_sum += remote
        self.send_sum += send
        self.size_sum += size

    def snapshot(self) -> tuple[list[tuple[int, int]], dict[str, HistogramSnapshot]]:
        """([(version, count) ...] for versions seen, {histogram name: snapshot})."""
        n = self.count
        versions = [(v, c) for v, c in enumerate(self.requests) if c]
        return versions, {
            "TotalTimeMs": snapshot_ring(self.total, n, self.total_sum),
            "LocalTimeMs": snapshot_ring(self.local, n, self.local_sum),
            "RemoteTimeMs": snapshot_ring(self.remote, n, self.remote_sum),
            "ResponseSendTimeMs": snapshot_ring(self.send, n, self.send_sum),
            "RequestBytes": snapshot_ring(self.size, n, self.size_sum),
        }


def _merged(meters: list[RequestMeter]) -> tuple[list[tuple[int, int]], dict[str, HistogramSnapshot]]:
    """The "Fetch" series: FetchConsumer + FetchFollower."""
    versions: dict[int, int] = {}
    hists: dict[str, HistogramSnapshot] = {}
    for m in meters:
        vs, hs = m.snapshot()
        for v, n in vs:
            versions[v] = versions.get(v, 0) + n
        for name, h in hs.items():
            have = hists.get(name)
            hists[name] = h if have is None else HistogramSnapshot(have.values + h.values, have.count + h.count,
                                                                   have.sum + h.sum)
    return sorted(versions.items()), hists


def _from_follower(body: Any) -> bool:
    """Kafka's FetchRequest.isFromFollower: a replica id >= 0 (v15+: in replica_state)."""
    state = getattr(body, "replica_state", None)
    replica_id = state.replica_id if state is not None and state.replica_id >= 0 else body.replica_id
    return bool(replica_id >= 0)


class RequestMetrics:
    """Every request meter of the node (Kafka's RequestChannel.Metrics)."""

    def __init__(self, names: Mapping[int, str], versions: Mapping[int, tuple[int, int]]) -> None:
        """names: api key -> Kafka's API name; versions: api key -> (lowest, highest) served."""
        self.names = dict(names)
        self.max_versions = {k: hi for k, (_lo, hi) in versions.items()}
        self._meters: list[RequestMeter | None] = [None] * (max(self.names) + 1)
        self.by_name: dict[str, RequestMeter] = {}  # every meter created so far, for scrapes

    def _meter(self, name: str, max_version: int) -> RequestMeter:
        m = self.by_name.get(name)
        if m is None:
            m = self.by_name[name] = RequestMeter(name, max_version)
        return m

    def on_request(self, api_key: int, version: int, body: Any) -> RequestMeter:
        """Count one decoded request; returns the meter its `record` updates once answered."""
        if api_key == FETCH:
            m = self._meter(FOLLOWER_FETCH if _from_follower(body) else CONSUMER_FETCH, self.max_versions[FETCH])
        else:
            found = self._meters[api_key]
            if found is None:
                found = self._meters[api_key] = self._meter(self.names[api_key], self.max_versions[api_key])
            m = found
        m.requests[version] += 1
        return m

    def snapshot(self) -> list[tuple[str, list[tuple[int, int]], dict[str, HistogramSnapshot]]]:
        out = [(name, *m.snapshot()) for name, m in self.by_name.items()]
        fetches = [m for name, m in self.by_name.items() if name in (CONSUMER_FETCH, FOLLOWER_FETCH)]
        if fetches:
            out.append((self.names[FETCH], *_merged(fetches)))
        return sorted(out, key=lambda row: row[0])
