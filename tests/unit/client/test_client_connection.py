"""BrokerConnection framing, version negotiation, correlation ids and timeouts against a
scripted fake socket; retry_call's policy with an injected clock and sleep."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.client.connection import (
    CLIENT_MAX_VERSIONS,
    BrokerConnection,
    BrokerConnectionError,
    RequestTimeoutError,
    parse_bootstrap_servers,
    retry_call,
)
from pybroker.protocol.api_keys import VALID_VERSIONS, ApiKey
from pybroker.protocol.errors import Errors, KafkaError, ProtocolError, UnsupportedVersionError
from pybroker.protocol.frame import encode_api_versions_unsupported, encode_response
from pybroker.protocol.messages import MetadataRequest, MetadataResponse

from .fakes import FakeSocket, api_versions_body, serve


def connect(sock: FakeSocket, **kw) -> BrokerConnection:
    conn = BrokerConnection("h", 1, socket_factory=lambda addr, t: sock, **kw)
    conn.connect()
    return conn


def test_negotiation_picks_the_highest_version_both_sides_speak():
    sock = FakeSocket(serve({ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 7), ApiKey.FETCH: (4, 99),
                             ApiKey.DESCRIBE_CONFIGS: (0, 99)}))
    conn = connect(sock)
    assert conn.version_for(ApiKey.METADATA) == 7  # theirs is lower
    assert conn.version_for(ApiKey.DESCRIBE_CONFIGS) == VALID_VERSIONS[ApiKey.DESCRIBE_CONFIGS][1]  # ours is lower
    # what these clients build: Fetch 13+ names topics by id only
    assert conn.version_for(ApiKey.FETCH) == CLIENT_MAX_VERSIONS[ApiKey.FETCH] == 12
    assert conn.version_for(ApiKey.METADATA, max_version=3) == 3
    resp = conn.send(MetadataRequest(topics=None))
    header, _ = sock.requests[-1]
    assert (header.request_api_key, header.request_api_version) == (ApiKey.METADATA, 7)
    assert resp.cluster_id == "c1"


def test_no_shared_version_is_unsupported_version():
    conn = connect(FakeSocket(serve({ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 3)})))
    with pytest.raises(UnsupportedVersionError):
        conn.version_for(ApiKey.METADATA, min_version=4)
    with pytest.raises(UnsupportedVersionError) as info:
        conn.version_for(ApiKey.FIND_COORDINATOR)  # not advertised at all
    assert info.value.code == Errors.UNSUPPORTED_VERSION


def test_api_versions_falls_back_to_the_version_the_broker_names():
    asked = []

    def responder(header, body):
        asked.append(header.request_api_version)
        if header.request_api_version > 2:
            return b"".join(encode_api_versions_unsupported(header.correlation_id, 0, 2))
        return b"".join(encode_response(ApiKey.API_VERSIONS, header.request_api_version, header.correlation_id,
                                        api_versions_body({ApiKey.API_VERSIONS: (0, 2), ApiKey.METADATA: (0, 5)})))
    conn = connect(FakeSocket(responder))
    assert asked == [VALID_VERSIONS[ApiKey.API_VERSIONS][1], 2]
    assert conn.api_versions[ApiKey.METADATA] == (0, 5)


def test_correlation_ids_count_up_and_a_mismatch_closes_the_connection():
    ranges = {ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12)}
    good = serve(ranges)
    state = {"lie": False}

    def responder(header, body):
        if state["lie"]:
            header.correlation_id += 7
        return good(header, body)
    sock = FakeSocket(responder)
    conn = connect(sock)
    conn.send(MetadataRequest(topics=None))
    conn.send(MetadataRequest(topics=None))
    assert [h.correlation_id for h, _ in sock.requests] == [1, 2, 3]
    state["lie"] = True
    with pytest.raises(ProtocolError):
        conn.send(MetadataRequest(topics=None))
    assert sock.closed and not conn.connected


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=8),
       names=st.lists(st.text(alphabet="abcxyz-._", min_size=1, max_size=30), max_size=20))
def test_responses_survive_any_split_of_the_byte_stream(chunks, names):
    body = MetadataResponse(cluster_id="c", controller_id=1, topics=[
        MetadataResponse.MetadataResponseTopic(name=n, topic_id=bytes(16)) for n in names])
    conn = connect(FakeSocket(serve({ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12)}, body), chunks))
    resp = conn.send(MetadataRequest(topics=None))
    assert [t.name for t in resp.topics] == names


def test_peer_closing_mid_response_is_a_connection_error():
    def responder(header, body):
        full = serve({ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12)})(header, body)
        return full if header.request_api_key == ApiKey.API_VERSIONS else full[:7]
    sock = FakeSocket(responder)
    conn = connect(sock)
    with pytest.raises(BrokerConnectionError) as info:
        conn.send(MetadataRequest(topics=None))
    assert not isinstance(info.value, RequestTimeoutError)
    assert sock.closed and not conn.connected


def test_a_silent_broker_times_out_and_the_connection_is_dropped():
    now = [100.0]

    class Silent(FakeSocket):
        def recv(self, n):
            if self.inbox:
                return super().recv(n)
            now[0] += 0.4  # each blocked read uses up its timeout
            raise TimeoutError

    def responder(header, body):
        if header.request_api_key == ApiKey.API_VERSIONS:
            return serve({ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12)})(header, body)
        return b""
    sock = Silent(responder)
    conn = connect(sock, request_timeout_s=1.0, clock=lambda: now[0])
    with pytest.raises(RequestTimeoutError):
        conn.send(MetadataRequest(topics=None))
    assert sock.closed and not conn.connected
    # every wait was bounded by what was left of the request's time
    assert all(0 < t <= 1.0 for t in sock.timeouts)


def test_connect_failure_is_a_retriable_connection_error():
    def refuse(addr, t):
        raise ConnectionRefusedError(111, "Connection refused")
    conn = BrokerConnection("h", 9, socket_factory=refuse)
    with pytest.raises(BrokerConnectionError) as info:
        conn.connect()
    assert info.value.retriable and "h:9" in str(info.value)


def test_oversized_frame_is_a_protocol_error():
    def responder(header, body):
        if header.request_api_key == ApiKey.API_VERSIONS:
            return serve({ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12)})(header, body)
        return struct.pack(">i", -5)
    conn = connect(FakeSocket(responder))
    with pytest.raises(ProtocolError):
        conn.send(MetadataRequest(topics=None))
    assert not conn.connected


# -- retry_call -----------------------------------------------------------------------------


def test_retry_call_repeats_retriable_errors_with_capped_exponential_backoff():
    sleeps: list[float] = []
    calls = []

    def fn():
        calls.append(1)
        if len(calls) < 5:
            raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        return "ok"
    retried = []
    assert retry_call(fn, retries=5, backoff_s=0.1, max_backoff_s=0.3, sleep=sleeps.append,
                      on_retry=retried.append) == "ok"
    assert sleeps == pytest.approx([0.1, 0.2, 0.3, 0.3])
    assert len(retried) == 4 and all(e.code == Errors.COORDINATOR_LOAD_IN_PROGRESS for e in retried)


def test_retry_call_gives_up_after_the_retry_count():
    calls = []

    def fn():
        calls.append(1)
        raise BrokerConnectionError("h:1", "refused")
    with pytest.raises(BrokerConnectionError):
        retry_call(fn, retries=2, sleep=lambda s: None)
    assert len(calls) == 3


def test_retry_call_does_not_repeat_non_retriable_errors():
    calls = []

    def fn():
        calls.append(1)
        raise KafkaError(Errors.TOPIC_ALREADY_EXISTS)
    with pytest.raises(KafkaError):
        retry_call(fn, retries=5, sleep=lambda s: None)
    assert len(calls) == 1


def test_retry_call_stops_at_the_deadline():
    now = [0.0]
    calls = []

    def sleep(s):
        now[0] += s

    def fn():
        calls.append(now[0])
        raise KafkaError(Errors.NOT_COORDINATOR)
    with pytest.raises(KafkaError):
        retry_call(fn, retries=100, backoff_s=0.125, max_backoff_s=0.125, deadline_s=1.0, sleep=sleep,
                   clock=lambda: now[0])
    assert calls == [i * 0.125 for i in range(9)]  # the last attempt lands on the deadline, none after


# -- bootstrap servers ------------------------------------------------------------------------


def test_parse_bootstrap_servers():
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers("[::1]:9092") == [("::1", 9092)]
    for bad in ["", "a", "a:", ":9", "a:x", "a:0", "a:70000", "[::1]9092"]:
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)
