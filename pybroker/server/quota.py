"""Client byte-rate quotas (KIP-13) with client-side throttling (KIP-219): Kafka's
ClientQuotaManager, its DefaultQuotaCallback and the sampled Rate it measures with.

Each quota type (Produce: producer_byte_rate, Fetch: consumer_byte_rate) has one manager.
A request records its bytes in the sensor of its (user, client-id) metric tags; when the
measured rate then exceeds the quota that applies, the throttle time is the delay X that
brings the rate back to the quota if nothing else is recorded, O * W / (W + X) = T, i.e.

    X = (O - T) / T * W        (Kafka's QuotaUtils.throttleTime, rounded half up)

where W is the rate's current window. The response carries X as throttle_time_ms and the
connection reads no further request for X ms after the response is written (Kafka mutes
the channel). A throttled fetch answers with no partitions and its bytes are unrecorded.

Rate (Kafka's Rate over a WindowedSum, pybroker/metrics/stats.py): quota.window.num samples
of quota.window.size.seconds each (11 x 1 s by default). A sample older than num * size
without events is reset; the window is now - (oldest sample start), but never less than
num - 1 whole windows, so a burst right after start-up is measured over 10 s, not over the
few ms it took. Worked
example, quota 1000 B/s, a client's first request carries 21000 bytes at t=0: W = 10 s,
O = 2100 B/s, X = (2100 - 1000) / 1000 * 10000 ms = 11000 ms.

Which quota applies (DefaultQuotaCallback): the user is the name of the connection's
authenticated principal (`User:alice` -> `alice`: a SASL username, a token's owner, a TLS
certificate's mapped subject; `ANONYMOUS` on an unauthenticated listener), the client-id is the
request header's. Most specific first: <user, client-id>,
<user, default client-id>, <user>, <default user, client-id>, <default user, default
client-id>, <default user>, <client-id>, <default client-id>. Clients whose quota comes
from the same entity share one sensor when only one level of quotas was ever configured,
as in Kafka (the metric tags decide).

Cost with no quota configured: `enabled` is False and the produce/fetch handlers test it
and nothing else. Like Kafka's quotasEnabled it stays True once a quota of that type was
set, until restart.

Concurrency: trio thread only; handlers call the managers between awaits. Time is passed
in (`now_ms`, milliseconds of trio's clock).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from pybroker.controller import client_quotas as cq
from pybroker.metrics.stats import Rate
from pybroker.net.connection_quotas import Address, address_of

if TYPE_CHECKING:
    from pybroker.server.request_context import RequestContext

# ClientQuotaManager.InactiveSensorExpirationTimeSeconds
INACTIVE_SENSOR_EXPIRATION_MS = 3600 * 1000
_PURGE_INTERVAL_MS = 60 * 1000

# QuotaTypes bits
_CLIENT_ID_ENABLED = 1
_USER_ENABLED = 2
_USER_CLIENT_ID_ENABLED = 4

# A quota entity as the managers key it: (user, client-id) where "" is absent, None the
# default entity, a string an explicit name (Kafka never accepts an empty name).
QuotaEntity = tuple[str | None, str | None]


class ClientQuotaManager:
    """One quota type's overrides, sensors and throttle computation."""

    def __init__(self, quota_type: str, num_samples: int = 11, window_seconds: int = 1) -> None:
        self.quota_type = quota_type
        self.num_samples = num_samples
        self.window_ms = window_seconds * 1000
        self.enabled = False  # Kafka's quotasEnabled: sticky until restart
        self._types = 0
        self._overrides: dict[QuotaEntity, float] = {}
        self._sensors: dict[tuple[str, str], Rate] = {}
        # (user, client-id) -> (metric tags, quota or None); cleared when overrides change
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float | None]] = {}
        self._next_purge_ms = 0

    # ------------------------------------------------------------------ configuration

    def set_overrides(self, overrides: Mapping[QuotaEntity, float]) -> None:
        """Replace every override of this type (from the metadata image)."""
        for user, client_id in overrides:
            if user != "":
                self._types |= _USER_CLIENT_ID_ENABLED if client_id != "" else _USER_ENABLED
            elif client_id != "":
                self._types |= _CLIENT_ID_ENABLED
        self._overrides = dict(overrides)
        self._resolved.clear()
        if self._types:
            self.enabled = True

    def _metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """DefaultQuotaCallback.quotaMetricTags."""
        types = self._types
        if types in (0, _CLIENT_ID_ENABLED):
            return "", client_id
        if types == _USER_ENABLED:
            return user, ""
        if types == _USER_CLIENT_ID_ENABLED:
            return user, client_id
        o = self._overrides
        if (user, client_id) in o or (user, None) in o:
            return user, client_id
        if (user, "") in o:
            return user, ""
        if (None, client_id) in o or (None, None) in o:
            return user, client_id
        if (None, "") in o:
            return user, ""
        return "", client_id

    def _quota_limit(self, tags: tuple[str, str]) -> float | None:
        """DefaultQuotaCallback.quotaLimit: the most specific override for these tags."""
        user, client_id = tags
        o = self._overrides
        if user and client_id:
            candidates: tuple[QuotaEntity, ...] = ((user, client_id), (user, None), (None, client_id), (None, None))
        elif user:
            candidates = ((user, ""), (None, ""))
        elif client_id:
            candidates = (("", client_id), ("", None))
        else:
            return None
        for entity in candidates:
            q = o.get(entity)
            if q is not None:
                return q
        return None

    def _resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        key = (user, client_id)
        hit = self._resolved.get(key)
        if hit is None:
            tags = self._metric_tags(user, client_id)
            hit = self._resolved[key] = (tags, self._quota_limit(tags))
        return hit

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to this user and client-id, None if unlimited."""
        return self._resolve(user, client_id)[1]

    # ------------------------------------------------------------------ recording

    def _sensor(self, tags: tuple[str, str], now_ms: int) -> Rate:
        if now_ms >= self._next_purge_ms:
            self._next_purge_ms = now_ms + _PURGE_INTERVAL_MS
            horizon = now_ms - INACTIVE_SENSOR_EXPIRATION_MS
            for k in [k for k, r in self._sensors.items() if r.last_record_ms < horizon]:
                del self._sensors[k]
        rate = self._sensors.get(tags)
        if rate is None:
            rate = self._sensors[tags] = Rate(self.num_samples, self.window_ms)
        return rate

    def record_and_get_throttle_time_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` (bytes) and return the throttle time in ms, 0 within quota."""
        if not self.enabled:
            return 0
        tags, limit = self._resolve(user, client_id)
        rate = self._sensor(tags, now_ms)
        rate.record(value, now_ms)
        if limit is None:
            return 0
        observed = rate.measure(now_ms)
        if observed <= limit:
            return 0
        return int(math.floor((observed - limit) / limit * rate.window_size(now_ms) + 0.5))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a value recorded for a response that was not sent (a throttled fetch)."""
        tags, _ = self._resolve(user, client_id)
        self._sensor(tags, now_ms).record(-value, now_ms)

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without certain throttling: quota x
        (samples - 1) x window (Kafka caps a consumer's fetch max bytes with it)."""
        if not self.enabled:
            return math.inf
        limit = self._resolve(user, client_id)[1]
        if limit is None:
            return math.inf
        return limit * (self.num_samples - 1) * (self.window_ms / 1000.0)


def _manager_entity(entity: cq.Entity) -> QuotaEntity | None:
    """An image entity as a (user, client-id) manager key; None for ip entities."""
    as_map = dict(entity)
    if cq.IP in as_map:
        return None
    return (as_map[cq.USER] if cq.USER in as_map else "",
            as_map[cq.CLIENT_ID] if cq.CLIENT_ID in as_map else "")


class QuotaManagers:
    """The broker's client quota managers (Kafka's QuotaFactory.QuotaManagers, byte rates)."""

    def __init__(self, num_samples: int = 11, window_seconds: int = 1) -> None:
        self.produce = ClientQuotaManager("Produce", num_samples, window_seconds)
        self.fetch = ClientQuotaManager("Fetch", num_samples, window_seconds)
        self._by_key = {cq.PRODUCER_BYTE_RATE: self.produce, cq.CONSUMER_BYTE_RATE: self.fetch}

    def apply_image(self, client_quotas: Mapping[cq.Entity, Mapping[str, float]]) -> None:
        """Kafka's ClientQuotaMetadataManager: push the image's user/client-id quotas to the
        manager of each key (ip entities are connection quotas, not enforced here)."""
        per_key: dict[str, dict[QuotaEntity, float]] = {k: {} for k in self._by_key}
        for entity, values in client_quotas.items():
            key = _manager_entity(entity)
            if key is None:
                continue
            for name, value in values.items():
                if name in per_key:
                    per_key[name][key] = value
        for name, manager in self._by_key.items():
            if per_key[name] or manager.enabled:
                manager.set_overrides(per_key[name])

    def on_metadata(self, image: Any, records: list[Any]) -> None:
        """Controller listener: re-apply when a commit carried ClientQuotaRecords."""
        if any(type(r).__name__ == "ClientQuotaRecord" for r in records):
            self.apply_image(image.client_quotas)


def ip_connection_rates(client_quotas: Mapping[cq.Entity, Mapping[str, float]]
                        ) -> tuple[float | None, dict[Address, float]]:
    """KIP-612: the connection_creation_rate of the image's ip entities, as the SocketServer's
    ConnectionQuotas takes them: (the default ip entity's, {address: rate})."""
    default: float | None = None
    per_address: dict[Address, float] = {}
    for entity, values in client_quotas.items():
        as_map = dict(entity)
        if set(as_map) != {cq.IP} or cq.IP_CONNECTION_RATE not in values:
            continue
        name = as_map[cq.IP]
        if name is None:
            default = values[cq.IP_CONNECTION_RATE]
            continue
        address = address_of((name, 0))
        if address is not None:
            per_address[address] = values[cq.IP_CONNECTION_RATE]
    return default, per_address


# ---------------------------------------------------------------------- request-path helpers

def quota_user(ctx: RequestContext) -> str:
    """The user a request's quotas are looked up by: KafkaPrincipal.getName of its principal."""
    principal = ctx.principal
    _, sep, name = principal.partition(":")
    return name if sep else principal


def throttle_connection(ctx: RequestContext, throttle_ms: int, now: float) -> None:
    """Mute the request's connection for throttle_ms from `now` (trio time), after its
    response is written (KIP-219; Kafka's ThrottledChannel starts when throttling is decided)."""
    conn = ctx.conn
    deadline = now + throttle_ms / 1000.0
    if conn is not None and deadline > conn.throttle_deadline:
        conn.throttle_deadline = deadline


def record_produce(manager: ClientQuotaManager, ctx: RequestContext) -> int:
    """KafkaApis.handleProduceRequest's bandwidth quota: the request's size is recorded;
    returns the throttle time (the connection is muted for it)."""
    now = trio.current_time()
    throttle_ms = manager.record_and_get_throttle_time_ms(quota_user(ctx), ctx.client_id or "",
                                                          ctx.request_size, int(now * 1000))
    if throttle_ms > 0:
        throttle_connection(ctx, throttle_ms, now)
    return throttle_ms


def record_fetch(manager: ClientQuotaManager, ctx: RequestContext, response_size: int) -> int:
    """KafkaApis.handleFetchRequest's bandwidth quota: record the response size; when that
    violates the quota, unrecord it (the caller answers an empty response) and mute."""
    now = trio.current_time()
    now_ms = int(now * 1000)
    client_id = ctx.client_id or ""
    user = quota_user(ctx)
    throttle_ms = manager.record_and_get_throttle_time_ms(user, client_id, response_size, now_ms)
    if throttle_ms > 0:
        manager.unrecord(user, client_id, response_size, now_ms)
        throttle_connection(ctx, throttle_ms, now)
    return throttle_ms


def fetch_max_bytes(manager: ClientQuotaManager, ctx: RequestContext, max_bytes: int) -> int:
    """Cap a consumer fetch to what its quota window can take without certain throttling."""
    cap = manager.max_value_in_quota_window(quota_user(ctx), ctx.client_id or "")
    return max_bytes if cap >= max_bytes else int(cap)
