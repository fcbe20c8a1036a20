"""A KIP-848 group keeps per-topic-name and per-regex subscriber counts (Kafka's
subscribedTopicNames) so a heartbeat resolves its subscription metadata without walking the
members: after any sequence of joins, subscription changes, leaves, session expiries and
topic creations, the counts and the metadata they resolve to equal a walk over the members,
and a reload from the records rebuilds the same counts."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.group.consumer_group import ConsumerGroup, TopicMetadata

from .test_consumer_group import SESSION_MS, CGHarness

TOPICS = ["a", "b", "c", "orders-1", "orders-2"]
SUBSCRIPTIONS = [(["a"], None), (["a", "b"], None), (["b", "b"], None), ([], "orders-.*"), (["c"], "orders-.*"),
                 (["a"], "orders-1|c"), (["missing"], None)]

step = st.one_of(
    st.tuples(st.just("join"), st.integers(0, len(SUBSCRIPTIONS) - 1)),
    st.tuples(st.just("resubscribe"), st.integers(0, 9), st.integers(0, len(SUBSCRIPTIONS) - 1)),
    st.tuples(st.just("heartbeat"), st.integers(0, 9)),
    st.tuples(st.just("leave"), st.integers(0, 9)),
    st.tuples(st.just("create"), st.sampled_from(TOPICS + ["orders-3"])),
    st.tuples(st.just("advance"), st.sampled_from([1000, SESSION_MS + 1])),
)


def walked_metadata(h: CGHarness, group: ConsumerGroup) -> dict[str, TopicMetadata]:
    names: set[str] = set()
    for m in group.members.values():
        names |= h.shard.consumer.subscribed_names(m)
    out = {}
    for name in names:
        t = h.image.topics_by_name.get(name)
        if t is not None and t.partitions:
            out[name] = TopicMetadata(t.topic_id, name, len(t.partitions))
    return out


def assert_counts(group: ConsumerGroup) -> None:
    names: Counter[str] = Counter()
    regexes: Counter[str] = Counter()
    for m in group.members.values():
        names.update(set(m.subscribed_topic_names))
        if m.subscribed_topic_regex:
            regexes[m.subscribed_topic_regex] += 1
    assert group.subscribed_topic_name_counts == dict(names)
    assert group.subscribed_regex_counts == dict(regexes)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, min_size=3, max_size=25))
def test_subscription_counts_match_a_walk_over_the_members(steps):
    h = CGHarness()
    h.image.create("a", 3)
    h.image.create("orders-1", 2)
    for n, s in enumerate(steps):
        g = h.group("g")
        ids = sorted(g.members) if g is not None else []
        kind = s[0]
        member = g.members[ids[s[1] % len(ids)]] if ids and kind in ("resubscribe", "heartbeat", "leave") else None
        resp = None
        if kind == "join":
            topics, regex = SUBSCRIPTIONS[s[1]]
            resp = h.hb("g", f"m{n}", 0, topics=topics, regex=regex, owned={}, rebalance_ms=30000)
        elif kind == "resubscribe" and member is not None:
            topics, regex = SUBSCRIPTIONS[s[2]]
            resp = h.hb("g", member.member_id, member.member_epoch, topics=topics, regex=regex if regex is not None else "")
        elif kind == "heartbeat" and member is not None:
            resp = h.hb("g", member.member_id, member.member_epoch)
        elif kind == "leave" and member is not None:
            resp = h.hb("g", member.member_id, -1)
        elif kind == "create" and s[1] not in h.image.topics_by_name:
            h.image.create(s[1], 2)
        elif kind == "advance":
            h.advance(s[1])
        g = h.group("g")
        if g is not None:
            assert_counts(g)
            assert h.shard.consumer._subscription_metadata(g) == walked_metadata(h, g)
            if resp is not None and resp.error_code == 0:
                # what the heartbeat (or leave) wrote is what its members subscribe to now
                assert g.subscription_metadata == walked_metadata(h, g)
    g = h.group("g")
    if g is not None:
        reloaded = h.rebuilt().consumer.group("g")
        assert reloaded is not None
        assert_counts(reloaded)
        assert reloaded.subscribed_topic_name_counts == g.subscribed_topic_name_counts
