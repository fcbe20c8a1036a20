"""ConnectionQuotas on trio's virtual clock (no sockets): the per-address count and its overrides
(IPv4-mapped IPv6 counted as IPv4, hostnames resolved off the loop), listener limits that default
to max.connections, the protected inter-broker listener, the creation-rate throttle (Kafka's
bounded throttle time, at most one quota window), and waiting admissions woken by a release or a
reconfiguration. The live behaviour is tested in tests/security/test_connection_limits.py."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.net.connection_quotas import (
    ConnectionQuotas,
    ConnectionThrottled,
    TooManyConnections,
    address_of,
)

LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
             "inter.broker.listener.name": "PLAINTEXT"}
A = ipaddress.ip_address("10.0.0.1")
B = ipaddress.ip_address("10.0.0.2")


def config(**props: str) -> BrokerConfig:
    return BrokerConfig({**LISTENERS, **props})


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))


def test_address_of_maps_ipv4_in_ipv6_and_strips_scopes():
    assert address_of(("::ffff:10.0.0.1", 5, 0, 0)) == A
    assert address_of(("fe80::1%eth0", 5, 0, 2)) == ipaddress.ip_address("fe80::1")
    assert address_of(None) is None and address_of(("not-an-ip", 1)) is None


def test_per_address_limit_and_overrides():
    async def main() -> None:
        q = ConnectionQuotas(config(**{"max.connections.per.ip": "2",
                                       "max.connections.per.ip.overrides": "10.0.0.2:0,localhost:5"}),
                             ["PLAINTEXT", "EXTERNAL"])
        assert q.unresolved == {"localhost": 5}
        await q.admit("EXTERNAL", A)
        await q.admit("PLAINTEXT", A)  # every listener counts for the address
        with pytest.raises(TooManyConnections, match="maximum of 2 connections"):
            await q.admit("EXTERNAL", A)
        with pytest.raises(TooManyConnections, match="maximum of 0 connections"):
            await q.admit("EXTERNAL", B)
        assert q.counts == {A: 2} and q.total == 2 and q.listeners["EXTERNAL"].refused_per_ip == 2
        q.release("EXTERNAL", A)
        await q.admit("EXTERNAL", A)
        await q.resolve_overrides()
        assert q.limit_for(ipaddress.ip_address("127.0.0.1")) == 5 and not q.unresolved
        # a reconfiguration keeps what the name resolved to until it is looked up again
        q.configure(config(**{"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "localhost:7"}))
        assert q.limit_for(ipaddress.ip_address("127.0.0.1")) == 7 and q.unresolved == {"localhost": 7}
        assert q.limit_for(B) == 2  # its override is gone
    run(main)


def test_listener_limit_defaults_to_max_connections_and_the_inter_broker_listener_is_protected():
    async def main() -> None:
        q = ConnectionQuotas(config(**{"max.connections": "2", "listener.name.external.max.connections": "5"}),
                             ["PLAINTEXT", "EXTERNAL"])
        assert q.listeners["PLAINTEXT"].max_connections == 2 and q.listeners["EXTERNAL"].max_connections == 5
        assert q.protected("PLAINTEXT") and not q.protected("EXTERNAL")
        await q.admit("EXTERNAL", A)
        await q.admit("EXTERNAL", A)
        assert not q.slot_available("EXTERNAL")  # the broker is full
        await q.admit("PLAINTEXT", B)  # the inter-broker listener is not held by the broker count
        assert q.over_limit() == 1
        await q.admit("PLAINTEXT", B)
        assert not q.slot_available("PLAINTEXT")  # ... but by its own limit, max.connections by default
    run(main)


def test_a_waiting_admission_is_woken_by_a_release_and_by_a_raised_limit():
    async def main() -> None:
        q = ConnectionQuotas(config(**{"max.connections": "1"}), ["PLAINTEXT", "EXTERNAL"])
        await q.admit("EXTERNAL", A)
        admitted: list[float] = []

        async def wait_for_slot() -> None:
            await q.admit("EXTERNAL", B)
            admitted.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_slot)
            await trio.sleep(30)
            assert not admitted
            q.release("EXTERNAL", A)
        assert admitted == [30]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_slot)
            await trio.sleep(5)
            assert len(admitted) == 1
            q.configure(config(**{"max.connections": "3"}))
        assert admitted == [30, 35]
        assert q.listeners["EXTERNAL"].blocked_s == 35
    run(main)


def test_creation_rate_delays_by_the_bounded_throttle_time():
    """10/s over 2 windows of 1 s: the first 10 go at once (the rate is measured over at least one
    whole window), the 11th waits (11 - 10) / 10 x 1 s; the delay is capped at one window."""
    async def main() -> None:
        q = ConnectionQuotas(config(**{"max.connection.creation.rate": "10", "quota.window.num": "2",
                                       "quota.window.size.seconds": "1"}), ["PLAINTEXT", "EXTERNAL"])
        for _ in range(10):
            await q.admit("EXTERNAL", A)
        assert trio.current_time() == 0
        await q.admit("EXTERNAL", A)
        assert trio.current_time() == pytest.approx(0.1)
        assert q.listeners["EXTERNAL"].throttled == 1
        # the inter-broker listener is outside the broker-wide rate; its own limit (defaulting to
        # max.connection.creation.rate) counts its own connections only, so 10 more go at once
        for _ in range(10):
            await q.admit("PLAINTEXT", B)
        assert trio.current_time() == pytest.approx(0.1)
        q.configure(config(**{"max.connection.creation.rate": "1", "quota.window.num": "2",
                              "quota.window.size.seconds": "1"}))
        before = trio.current_time()
        await q.admit("EXTERNAL", A)
        assert trio.current_time() - before == pytest.approx(1.0)  # capped at one window
    run(main)


def test_ip_connection_rate_quotas_close_late_and_take_the_connection_back():
    """KIP-612: over its address's connection_creation_rate a connection is not counted and is
    taken back out of the listener and broker rates; the default ip entity covers the others."""
    async def main() -> None:
        q = ConnectionQuotas(config(**{"quota.window.num": "2", "quota.window.size.seconds": "1"}),
                             ["PLAINTEXT", "EXTERNAL"])
        q.set_ip_quotas(2.0, {A: 1.0})
        await q.admit("EXTERNAL", A)
        with pytest.raises(ConnectionThrottled) as throttled:
            await q.admit("EXTERNAL", A)
        assert 0 < throttled.value.throttle_ms <= 1000
        assert q.counts == {A: 1} and q.listeners["EXTERNAL"].ip_throttled == 1
        assert q.accept_rate("EXTERNAL") == 1.0 and q.broker_accept_rate() == 1.0  # taken back
        await q.admit("EXTERNAL", B)
        await q.admit("EXTERNAL", B)  # the default, 2/s
        with pytest.raises(ConnectionThrottled):
            await q.admit("EXTERNAL", B)
        q.set_ip_quotas(None, {})
        await q.admit("EXTERNAL", B)
        assert q.counts == {A: 1, B: 3}
    run(main)
