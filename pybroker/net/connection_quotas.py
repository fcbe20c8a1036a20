"""Connection limits of one SocketServer (Kafka's ConnectionQuotas): how many connections, from
whom, how fast.

Configs (all dynamic broker configs, applied by `configure` on every change):

    max.connections.per.ip            (Int.MaxValue) per client address, every listener together
    max.connections.per.ip.overrides  ("")  "host:count,..." per address; hostnames resolved
    max.connections                   (Int.MaxValue) broker-wide, the inter-broker listener aside
    listener.name.<l>.max.connections (max.connections) per listener
    max.connection.creation.rate      (Int.MaxValue) per second, broker-wide, inter-broker aside
    listener.name.<l>.max.connection.creation.rate (max.connection.creation.rate) per listener

A listener's own limits default to the broker-wide values (Kafka configures each listener's quota
from valuesWithPrefixOverride): the inter-broker listener, exempt from the broker-wide count, is
still held to max.connections connections of its own unless listener.name.<l>.max.connections
says otherwise.

What happens to a new connection, as Kafka's Acceptor does it (`admit`, right after accept()):

1. Creation rate: the connection is recorded in the listener's rate and (unless the listener is
   the protected inter-broker one) the broker-wide rate, Kafka's Rate over quota.window.num
   windows of quota.window.size.seconds. Over either quota, accepting on that listener waits the
   throttle time, (rate - quota) / quota x window, capped at one window; the connection waits
   with it. Nothing is refused: the backlog holds the rest.
2. Slots: while the listener is at its listener.name.<l>.max.connections, or the broker at
   max.connections, accepting on that listener waits until a connection closes (or the limit is
   raised). The inter-broker listener, when the server has more than one listener, is
   protected: it ignores max.connections, and when it takes the broker over the limit, the
   least recently active connection of another listener is closed (SocketServer._evict, Kafka's
   closeExcessConnections / lowestPriorityChannel). So is the excess when max.connections is
   lowered under the open count. A lowered per-address or per-listener limit closes nothing.
3. Per address rate (KIP-612): with a connection_creation_rate client quota on the ip entity of
   the address (or the default ip entity), a connection over it is taken back out of the rates,
   kept for the throttle time and then closed (Kafka's ConnectionThrottledException and
   delayed close), never served.
4. Per address count: the connection is counted, and if its address already had its maximum
   (max.connections.per.ip or its override) it is refused at once: closed, counted out,
   logged ("Rejected connection from ..., address already has the configured maximum of N
   connections.").

A waiting listener blocks only its own accept loop: the others and every open connection go on.
Counts are per address, so IPv4-mapped IPv6 addresses count as their IPv4 address.

Metrics (Kafka's socket-server-metrics and Acceptor meters, read at scrape): per listener the
connections accepted and closed, seconds its accept loop was blocked (AcceptorBlockedPercent),
connections refused per address limit, and the current accept rates.

Concurrency: trio thread only; `admit` is awaited by accept loops, the rest is synchronous.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import trio

from pybroker.config import INT_MAX, BrokerConfig, parse_connection_overrides
from pybroker.metrics.stats import Rate

log = logging.getLogger("pybroker.net")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class ConnectionThrottled(Exception):
    """Over its address's connection_creation_rate quota (KIP-612): the new connection is closed
    `throttle_ms` later, not counted."""

    def __init__(self, address: Address, throttle_ms: int) -> None:
        super().__init__(f"Throttling {address} for {throttle_ms} ms")
        self.address = address
        self.throttle_ms = throttle_ms


class TooManyConnections(Exception):
    """The address already has its maximum: the new connection is closed at once."""

    def __init__(self, address: Address, limit: int) -> None:
        super().__init__(f"Rejected connection from {address}, address already has the configured maximum of "
                         f"{limit} connections.")
        self.address = address
        self.limit = limit


def address_of(peer: Any) -> Address | None:
    """The client address of a getpeername() result (IPv4-mapped IPv6 as IPv4); None if unknown."""
    if not isinstance(peer, tuple) or not peer:
        return None
    try:
        addr = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@dataclass
class ListenerStats:
    """One listener's numbers (exported by server/broker_metrics.py)."""

    max_connections: int = INT_MAX
    max_rate: int = INT_MAX
    rate: Rate = field(default_factory=lambda: Rate(11, 1000))  # connections accepted per second
    count: int = 0
    accepted: int = 0  # connections admitted (Kafka's connection-creation-total)
    closed: int = 0  # admitted connections since closed (connection-close-total)
    refused_per_ip: int = 0  # closed at once for max.connections.per.ip
    blocked_s: float = 0.0  # accept loop waiting for a slot or the rate (AcceptorBlockedPercent)
    throttled: int = 0  # connections delayed by a creation rate quota
    ip_throttled: int = 0  # connections closed late for their address's connection_creation_rate
    authenticated: int = 0  # TLS / SASL handshakes that succeeded (successful-authentication-total)
    failed_authentication: int = 0  # ... that failed or timed out (failed-authentication-total)


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig | None, listener_names: Iterable[str], *,
                 now_ms: Callable[[], int] | None = None) -> None:
        """`config` None: no limits (a SocketServer built without a broker config, in tests)."""
        self._now_ms = now_ms or (lambda: int(trio.current_time() * 1000))
        self.listeners: dict[str, ListenerStats] = {name: ListenerStats() for name in listener_names}
        self.inter_broker_listener = getattr(config, "inter_broker_listener_name", "")
        self.counts: dict[Address, int] = {}
        self.total = 0
        self.max_per_ip = INT_MAX
        self.overrides: dict[Address, int] = {}
        self.unresolved: dict[str, int] = {}  # override hostnames waiting for `resolve_overrides`
        self._resolved: dict[str, list[Address]] = {}  # hostname -> its addresses, once looked up
        self.max_connections = INT_MAX
        self.max_rate = INT_MAX
        self.broker_rate = Rate(11, 1000)
        self.num_samples = 11
        self.window_ms = 1000
        # KIP-612 ip-entity quotas (connection_creation_rate from the client quotas): the default
        # entity's value (None: unlimited), per address values, and each address's Rate
        self.ip_default_rate: float | None = None
        self.ip_rates: dict[Address, float] = {}
        self.ip_sensors: dict[Address, Rate] = {}
        self._ip_records = 0
        self._changed = trio.Event()  # set (and replaced) whenever a slot may have freed
        if config is not None:
            self.configure(config)

    # ------------------------------------------------------------------ configuration

    def configure(self, config: BrokerConfig) -> None:
        """(Re)read the limits; waiting accept loops look again. Hostname overrides are kept in
        `unresolved` until `resolve_overrides` (a DNS lookup must not run on the event loop)."""
        self.num_samples = config["quota.window.num"]
        self.window_ms = config["quota.window.size.seconds"] * 1000
        self.max_per_ip = config["max.connections.per.ip"]
        self.overrides, self.unresolved = {}, {}
        for host, limit in parse_connection_overrides("max.connections.per.ip.overrides",
                                                      config["max.connections.per.ip.overrides"]).items():
            try:
                addr = ipaddress.ip_address(host)
            except ValueError:
                if host in self._resolved:  # looked up before: no window without the override
                    self.overrides.update(dict.fromkeys(self._resolved[host], limit))
                self.unresolved[host] = limit  # looked up (again) by resolve_overrides
                continue
            self.overrides[addr.ipv4_mapped or addr if isinstance(addr, ipaddress.IPv6Address) else addr] = limit
        self.max_connections = config["max.connections"]
        self.max_rate = config["max.connection.creation.rate"]
        if (self.broker_rate.num_samples, self.broker_rate.window_ms) != (self.num_samples, self.window_ms):
            self.broker_rate = Rate(self.num_samples, self.window_ms)
        for name, stats in self.listeners.items():
            stats.max_connections = config.listener_config(name, "max.connections")
            stats.max_rate = config.listener_config(name, "max.connection.creation.rate")
            if (stats.rate.num_samples, stats.rate.window_ms) != (self.num_samples, self.window_ms):
                stats.rate = Rate(self.num_samples, self.window_ms)
        self._wake()

    async def resolve_overrides(self) -> None:
        """Resolve the hostnames of max.connections.per.ip.overrides (off the loop, in trio's
        resolver thread); one that does not resolve is logged and left out."""
        for host, limit in list(self.unresolved.items()):
            try:
                infos = await trio.socket.getaddrinfo(host, None, type=trio.socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("max.connections.per.ip.overrides: cannot resolve %s: %s", host, exc)
                continue
            if self.unresolved.get(host) != limit:
                continue  # reconfigured meanwhile
            addresses = [a for a in (address_of(info[4]) for info in infos) if a is not None]
            for addr in self._resolved.get(host, []):
                if addr not in addresses and self.overrides.get(addr) == limit:
                    del self.overrides[addr]  # the name no longer resolves to it
            self._resolved[host] = addresses
            self.overrides.update(dict.fromkeys(addresses, limit))
            del self.unresolved[host]

    def set_ip_quotas(self, default: float | None, per_address: dict[Address, float]) -> None:
        """The connection_creation_rate of ip entities (Kafka's updateIpConnectionRateQuota): a
        specific address's value, else the default entity's, else unlimited."""
        self.ip_default_rate = default
        self.ip_rates = dict(per_address)

    def _record_ip(self, listener: str, address: Address | None, now_ms: int) -> int:
        """Kafka's recordIpConnectionMaybeThrottle: the ms this connection is over its address's
        quota (then taken back out of every rate it was counted in), 0 within it."""
        quota = self.ip_rates.get(address, self.ip_default_rate) if address is not None else None
        if quota is None or quota >= INT_MAX or address is None:
            return 0
        self._ip_records += 1
        if self._ip_records % 1000 == 0:  # forget the addresses that have gone quiet
            horizon = now_ms - self.num_samples * self.window_ms
            self.ip_sensors = {a: r for a, r in self.ip_sensors.items() if r.last_record_ms >= horizon}
        rate = self.ip_sensors.get(address)
        if rate is None:
            rate = self.ip_sensors[address] = Rate(self.num_samples, self.window_ms)
        throttle = self._throttle_ms(rate, int(quota), now_ms)
        if throttle > 0:
            rate.record(-1.0, now_ms)
            self.listeners[listener].rate.record(-1.0, now_ms)
            if not self.protected(listener):
                self.broker_rate.record(-1.0, now_ms)
            self.listeners[listener].ip_throttled += 1
        return throttle

    def limit_for(self, address: Address | None) -> int:
        if address is None:
            return self.max_per_ip
        return self.overrides.get(address, self.max_per_ip)

    # ------------------------------------------------------------------ admission

    def protected(self, listener: str) -> bool:
        """Kafka's protectedListener: the inter-broker listener of a server with several."""
        return listener == self.inter_broker_listener and len(self.listeners) > 1

    def slot_available(self, listener: str) -> bool:
        stats = self.listeners[listener]
        if stats.count >= stats.max_connections:
            return False
        return self.protected(listener) or self.total < self.max_connections

    def _throttle_ms(self, rate: Rate, quota: int, now_ms: int) -> int:
        rate.record(1.0, now_ms)
        if quota >= INT_MAX:
            return 0
        observed = rate.measure(now_ms)
        if observed <= quota:
            return 0
        if quota <= 0:
            return self.window_ms
        # QuotaUtils.boundedThrottleTime, capped at one quota window as Kafka caps it
        return min(self.window_ms, int(math.floor((observed - quota) / quota * rate.window_size(now_ms) + 0.5)))

    def record_creation(self, listener: str, now_ms: int) -> int:
        """Record one new connection; the ms accepting must wait (Kafka's
        recordConnectionAndGetThrottleTimeMs: the larger of the broker-wide and listener delays)."""
        stats = self.listeners[listener]
        throttle = 0
        if not self.protected(listener):
            throttle = self._throttle_ms(self.broker_rate, self.max_rate, now_ms)
        throttle = max(throttle, self._throttle_ms(stats.rate, stats.max_rate, now_ms))
        if throttle:
            stats.throttled += 1
        return throttle

    async def admit(self, listener: str, address: Address | None) -> None:
        """Wait for the creation rate and a slot, then count the connection; ConnectionThrottled
        (not counted) over its address's connection_creation_rate, TooManyConnections (already
        counted out) when its address is at its maximum."""
        stats = self.listeners[listener]
        start = trio.current_time()
        throttle_ms = self.record_creation(listener, self._now_ms())
        if throttle_ms > 0 or not self.slot_available(listener):
            end = start + throttle_ms / 1000
            while True:
                remaining = end - trio.current_time()
                if remaining <= 0 and self.slot_available(listener):
                    break
                changed = self._changed
                with trio.move_on_after(remaining if remaining > 0 else math.inf):
                    await changed.wait()
            stats.blocked_s += trio.current_time() - start
        ip_throttle_ms = self._record_ip(listener, address, self._now_ms())
        if ip_throttle_ms > 0:
            assert address is not None
            raise ConnectionThrottled(address, ip_throttle_ms)
        count = self.counts.get(address, 0) if address is not None else 0
        self._count(listener, address, +1)
        limit = self.limit_for(address)
        if address is not None and count >= limit:
            stats.refused_per_ip += 1
            self._count(listener, address, -1)
            raise TooManyConnections(address, limit)
        stats.accepted += 1

    def release(self, listener: str, address: Address | None) -> None:
        """An admitted connection closed: its slot is free for the next one."""
        self.listeners[listener].closed += 1
        self._count(listener, address, -1)

    def over_limit(self) -> int:
        """How many connections of unprotected listeners to close (Kafka's maxConnectionsExceeded)."""
        return max(0, self.total - self.max_connections)

    def _count(self, listener: str, address: Address | None, delta: int) -> None:
        self.total += delta
        self.listeners[listener].count += delta
        if address is not None:
            n = self.counts.get(address, 0) + delta
            if n > 0:
                self.counts[address] = n
            else:
                self.counts.pop(address, None)
        if delta < 0:
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ metrics

    def accept_rate(self, listener: str) -> float:
        return self.listeners[listener].rate.measure(self._now_ms())

    def broker_accept_rate(self) -> float:
        return self.broker_rate.measure(self._now_ms())
