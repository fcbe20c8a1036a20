"""The protocol fuzzer on a SASL listener, unauthenticated and authenticated (issue 20).

One broker process with a PLAINTEXT and a SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256), the
StandardAuthorizer on (allow.everyone.if.no.acl.found=true, so an authenticated frame reaches its
handler). Three campaigns, each seeded:

- unauthenticated: the fuzzed frames of tests/fuzz/frames.py straight at the SASL port, where all
  but ApiVersions and SaslHandshake close the connection;
- the SASL exchange itself: a handshake naming a drawn mechanism (enabled, disabled, garbage), then
  SaslAuthenticate frames (v0-2, sometimes the unframed v0 exchange) carrying mutated PLAIN and
  SCRAM tokens, random bytes, and oversized or negative size prefixes;
- authenticated: each connection logs in with PLAIN first, then sends the fuzzed frames.

Whatever they hold: the process lives and logs no traceback or ERROR, memory stays bounded, every
fuzzer connection is let go of once the fuzzer drops it, and a normal client round-trips through
the PLAINTEXT listener and logs in through the SASL one afterwards.
The slow run repeats it at five times the size with fresh seeds while its budget lasts.
`PYBROKER_FUZZ_SEED=<n>` replays one seed.
"""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from clients.broker import BrokerProcess

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from tests.budget import Budget

from .campaign import Stats, run_campaign
from .harness import (
    connections_from,
    judged,
    reset,
    rss_kib,
    wait_until,
)

SEEDS = [int(os.environ["PYBROKER_FUZZ_SEED"])] if os.environ.get("PYBROKER_FUZZ_SEED") else [21]
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
_LISTENING = re.compile(rb"listening on SASL_PLAINTEXT://[^\s]+:(\d+)")


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _round_trip(sock: socket.socket, api_key: int, version: int, cid: int, body) -> object:
    sock.sendall(encode_request(api_key, version, cid, "fuzz-login", body))
    size = struct.unpack(">i", _read_exact(sock, 4))[0]
    got, resp = decode_response(api_key, version, _read_exact(sock, size))
    assert got == cid
    return resp


def plain_login(sock: socket.socket) -> None:
    """SaslHandshake v1 PLAIN, SaslAuthenticate v2 as alice; raises if refused."""
    sock.settimeout(5)
    hs = _round_trip(sock, ApiKey.SASL_HANDSHAKE, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert hs.error_code == 0, hs
    auth = _round_trip(sock, ApiKey.SASL_AUTHENTICATE, 2, 2,
                       SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
    assert auth.error_code == 0, auth


class SaslExchangeFuzzer:
    """Connections that each run one drawn, mostly broken, SASL exchange; 16 at a time (a refused
    one is answered after connection.failed.authentication.delay.ms). Connection i draws from its
    own Random(seed, i), so a seed replays whatever the threads' interleaving."""

    MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER", "", "plain", "X" * 300]
    TOKENS = [b"\0alice\0alice-secret", b"\0alice\0wrong", b"alice\0alice\0alice-secret", b"\0\0", b"",
              b"n,,n=alice,r=abc", b"n,,n=nobody,r=" + b"x" * 64, b"p=,,n=alice,r=x", b"c=biws,r=x,p=AAAA",
              b"n,a=bob,n=alice,r=abc", b"y,,n=alice,r=abc"]

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def run(self, port: int, connections: int) -> Stats:
        stats = Stats()
        lock = threading.Lock()

        def one(i: int) -> None:
            rng = random.Random(self.seed * 100_003 + i)
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            with lock:
                stats.ports.add(sock.getsockname()[1])
            try:
                self._exchange(sock, rng)
                outcome = "answered"
            except (OSError, ConnectionError, AssertionError, ValueError):
                outcome = "closed"
            finally:
                if rng.random() < 0.5:
                    reset(sock)
                else:
                    sock.close()
            with lock:
                stats.sent += 1
                setattr(stats, outcome, getattr(stats, outcome) + 1)

        with ThreadPoolExecutor(16) as pool:
            for f in [pool.submit(one, i) for i in range(connections)]:
                f.result()
        return stats

    def _token(self, rng: random.Random) -> bytes:
        if rng.random() < 0.5:
            t = bytearray(rng.choice(self.TOKENS))
            for _ in range(rng.randint(0, 3)):
                if t:
                    t[rng.randrange(len(t))] = rng.getrandbits(8)
            return bytes(t)
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 16, 200, 5000])))

    def _exchange(self, sock: socket.socket, rng: random.Random) -> None:
        if rng.random() < 0.1:  # a size prefix alone: huge, negative, or promising more than comes
            sock.sendall(struct.pack(">i", rng.choice([2**31 - 1, -1, 524289, 100])) + b"\0" * rng.randint(0, 8))
            sock.recv(64)
            return
        version = rng.choice([0, 1, 1, 1, 2])
        hs = _round_trip(sock, ApiKey.SASL_HANDSHAKE, min(version, 1), 1,
                         SaslHandshakeRequest(mechanism=rng.choice(self.MECHANISMS)))
        if hs.error_code:
            return
        for step in range(rng.randint(1, 3)):
            token = self._token(rng)
            if version == 0:  # the unframed exchange
                sock.sendall(struct.pack(">i", len(token)) + token)
                size = struct.unpack(">i", _read_exact(sock, 4))[0]
                _read_exact(sock, size)
            else:
                resp = _round_trip(sock, ApiKey.SASL_AUTHENTICATE, rng.choice([0, 1, 2]), 2 + step,
                                   SaslAuthenticateRequest(auth_bytes=token))
                if resp.error_code:
                    return


def sasl_node(tmp_path) -> tuple[BrokerProcess, int]:
    node = BrokerProcess(tmp_path / "data", overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": "0",
    })
    node.start()
    m = _LISTENING.search(node._read_output(0))
    assert m, node.output_tail()
    return node, int(m.group(1))


def fuzz_sasl(tmp_path, seed: int, scale: int = 1) -> None:
    node, sasl_port = sasl_node(tmp_path)
    with judged(node, seed):
        assert node.pid is not None
        campaigns = {
            "unauthenticated": lambda: run_campaign(sasl_port, seed, 600 * scale),
            "sasl-exchange": lambda: SaslExchangeFuzzer(seed).run(sasl_port, 300 * scale),
            "authenticated": lambda: run_campaign(sasl_port, seed + 1, 900 * scale, login=plain_login),
        }
        for name, campaign in campaigns.items():
            started = time.monotonic()
            stats = campaign()
            print(f"seed {seed} {name}: {time.monotonic() - started:.1f}s, {stats.sent} sent, "
                  f"{stats.answered} answered, {stats.closed} closed, {stats.timed_out} reset unanswered; "
                  f"rss {rss_kib(node.pid)} KiB")
            assert node.is_running(), f"{name}: the broker died\n" + node.output_tail()
            wait_until(lambda s=stats, pid=node.pid: connections_from(pid, s.ports) == 0, 20,
                       f"the broker to let go of the {name} campaign's connections")
            if name == "authenticated":  # logged in, the frames reach the handlers as on PLAINTEXT
                assert stats.answered > stats.sent // 10, stats
        with socket.create_connection(("127.0.0.1", sasl_port), timeout=5) as sock:
            plain_login(sock)  # the SASL listener still logs a client in


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_on_a_sasl_listener_unauthenticated_and_authenticated(tmp_path, seed: int) -> None:
    fuzz_sasl(tmp_path, seed)


@pytest.mark.slow
def test_long_sasl_fuzz(tmp_path, request: pytest.FixtureRequest) -> None:
    """Fresh seeds, five times the default campaigns each, while PYBROKER_FUZZ_BUDGET_S lasts (30 s)."""
    budget = Budget.start(request, "FUZZ", default_s=30.0)
    n = 0
    for seed in budget.seeds(at_least=1):
        with budget.replaying(seed):
            fuzz_sasl(tmp_path / str(seed), seed, scale=5)
        n += 1
    budget.covered(f"{n} SASL campaigns of {(600 + 300 + 900) * 5} frames and exchanges in {budget.elapsed():.0f}s")
