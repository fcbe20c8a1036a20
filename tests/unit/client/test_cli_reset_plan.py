"""The admin tools' pure parts: Kafka's reset-offsets rules (plan_reset), --topic T:P parsing,
ISO date-times, and the table printer."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker.cli.common import CliError, parse_topic_partitions, print_table
from pybroker.cli.groups import parse_datetime_ms, plan_reset
from pybroker.client.admin import TopicPartition

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
EARLIEST = {TP0: 10, TP1: 0}
LATEST = {TP0: 50, TP1: 7}


def test_to_earliest_and_to_latest_use_the_log_bounds():
    kw = dict(earliest=EARLIEST, latest=LATEST, committed={})
    assert plan_reset([TP0, TP1], to_earliest=True, **kw) == {TP0: 10, TP1: 0}
    assert plan_reset([TP0, TP1], to_latest=True, **kw) == {TP0: 50, TP1: 7}


def test_to_offset_is_clamped_to_the_log_like_kafka():
    kw = dict(earliest=EARLIEST, latest=LATEST, committed={})
    assert plan_reset([TP0, TP1], to_offset=5, **kw) == {TP0: 10, TP1: 5}
    assert plan_reset([TP0, TP1], to_offset=99, **kw) == {TP0: 50, TP1: 7}


def test_shift_by_moves_from_the_committed_offset_and_needs_one():
    kw = dict(earliest=EARLIEST, latest=LATEST)
    assert plan_reset([TP0], shift_by=-5, committed={TP0: 30}, **kw) == {TP0: 25}
    assert plan_reset([TP0], shift_by=-50, committed={TP0: 30}, **kw) == {TP0: 10}
    with pytest.raises(CliError, match="no committed offset"):
        plan_reset([TP0, TP1], shift_by=1, committed={TP0: 30}, **kw)


def test_to_datetime_without_a_later_record_goes_to_the_log_end():
    kw = dict(earliest=EARLIEST, latest=LATEST, committed={})
    assert plan_reset([TP0, TP1], by_time={TP0: 20, TP1: -1}, **kw) == {TP0: 20, TP1: 7}


@given(lo=st.integers(0, 1000), span=st.integers(0, 1000), committed=st.integers(0, 3000),
       shift=st.integers(-3000, 3000), target=st.integers(-10, 3000))
def test_every_plan_stays_inside_the_log(lo, span, committed, shift, target):
    hi = lo + span
    kw = dict(earliest={TP0: lo}, latest={TP0: hi}, committed={TP0: committed})
    for plan in (plan_reset([TP0], shift_by=shift, **kw), plan_reset([TP0], to_offset=target, **kw)):
        assert lo <= plan[TP0] <= hi
    if lo <= target <= hi:
        assert plan_reset([TP0], to_offset=target, **kw) == {TP0: target}


def test_parse_topic_partitions():
    assert parse_topic_partitions("orders") == ("orders", None)
    assert parse_topic_partitions("orders:2,0,2") == ("orders", [0, 2])
    for bad in (":1", "t:", "t:a", "t:-1"):
        with pytest.raises(CliError):
            parse_topic_partitions(bad)


def test_parse_datetime_ms():
    assert parse_datetime_ms("2024-05-01T10:00:00Z") == 1714557600000
    assert parse_datetime_ms("2024-05-01T12:00:00.250+02:00") == 1714557600250
    assert parse_datetime_ms("2024-05-01T10:00:00.000") == 1714557600000  # no zone: UTC, as Kafka's
    assert parse_datetime_ms("2024-05-01T12:00:00.000+0200") == parse_datetime_ms("2024-05-01T12:00:00.000+02")
    assert parse_datetime_ms("2024-05-01T10:00:00Z") == int(datetime(2024, 5, 1, 10, tzinfo=UTC)
                                                            .timestamp() * 1000)
    with pytest.raises(CliError):
        parse_datetime_ms("yesterday")


def test_print_table_aligns_columns_and_marks_unknowns():
    out = io.StringIO()
    print_table(out, ["A", "LONG-HEADER", "C"], [["xxxx", 1, None], ["y", 22222222222222, "z"]])
    assert out.getvalue().splitlines() == [
        "A     LONG-HEADER     C",
        "xxxx  1               -",
        "y     22222222222222  z",
    ]
