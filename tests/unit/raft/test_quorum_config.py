"""controller.quorum.* settings."""

from __future__ import annotations

import pytest

from pybroker.raft.quorum_config import QuorumConfig, QuorumConfigError, parse_voters
from pybroker.raft.request_manager import RequestManager


def test_defaults_are_kafkas() -> None:
    c = QuorumConfig.from_properties({"controller.quorum.voters": "1@localhost:9093"})
    assert (c.election_timeout_ms, c.fetch_timeout_ms, c.election_backoff_max_ms,
            c.request_timeout_ms, c.retry_backoff_ms, c.append_linger_ms) == (1000, 2000, 1000, 2000, 20, 25)
    assert c.voters == {1: ("localhost", 9093)}


def test_voters_string_with_ipv6() -> None:
    assert parse_voters("1@[::1]:9093, 2@host-b:9094") == {1: ("::1", 9093), 2: ("host-b", 9094)}


@pytest.mark.parametrize("value", ["1@host", "x@host:1", "1:host:1", "1@host:1,1@host:2", "1@host:99999"])
def test_bad_voters_string_is_one_clear_error(value: str) -> None:
    with pytest.raises(QuorumConfigError, match="controller.quorum.voters"):
        parse_voters(value)


def test_request_manager_keeps_one_request_in_flight_and_backs_off() -> None:
    import random

    rm = RequestManager([1, 2], retry_backoff_ms=20, request_timeout_ms=2000, random=random.Random(0))
    assert rm.is_ready(1, 0)
    rm.on_request_sent(1, 7, 0)
    assert not rm.is_ready(1, 10) and rm.is_response_expected(1, 7) and not rm.is_response_expected(1, 6)
    rm.on_response_result(1, 7, False, 100)
    assert rm.is_backing_off(1, 110) and rm.remaining_backoff_ms(1, 110) == 10
    assert rm.is_ready(1, 120)
    rm.on_request_sent(2, 8, 0)
    assert rm.has_request_timed_out(2, 2000) and rm.is_ready(2, 2000)
