"""Share sessions (KIP-932): Kafka's ShareSessionCache, ShareSession and the share fetch contexts.

A share consumer keeps one share session per broker, keyed by (group id, member id). Its
ShareFetch and ShareAcknowledge requests carry a ShareSessionEpoch:

| epoch | ShareFetch                                                      | ShareAcknowledge            |
|-------|-----------------------------------------------------------------|-----------------------------|
| 0     | open a session (replacing the member's old one) naming the      | INVALID_SHARE_SESSION_EPOCH |
|       | partitions to fetch; acknowledgements are INVALID_REQUEST here; |                             |
|       | SHARE_SESSION_LIMIT_REACHED when group.share.max.share.sessions |                             |
|       | sessions exist                                                  |                             |
| n > 0 | incremental: the request's partitions are added, its forgotten  | acknowledge in the session  |
|       | ones removed, and every partition of the session is fetched     |                             |
| -1    | final: acknowledge only (fetching is INVALID_REQUEST), then the | acknowledge, then close     |
|       | session closes                                                  |                             |

An unknown session is SHARE_SESSION_NOT_FOUND, a wrong epoch INVALID_SHARE_SESSION_EPOCH. Epochs
count 1, 2, ... and wrap to 1 after 2^31-1. A session belongs to the connection that opened it:
when that connection closes, the session goes (Kafka 4.1's ShareSessionCache connection
listener) and the caller releases the member's acquired records so another member gets them at
once. Closing a session by epoch -1 or replacing it by epoch 0 releases them likewise.

Concurrency: trio thread only; plain dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pybroker.protocol.errors import Errors

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1

SessionKey = tuple[str, str]  # (group id, member id)
PartitionKey = tuple[bytes, int]  # (topic id, partition)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _INT32_MAX else epoch + 1


@dataclass
class ShareSession:
    key: SessionKey
    connection: object  # the connection that opened it
    epoch: int = 1
    # the partitions in the session's order, each with Kafka's requiresUpdateInResponse: a partition
    # added by an incremental request, or one that answered an error, is answered once more even
    # with nothing new
    partitions: dict[PartitionKey, bool] = field(default_factory=dict)

    def must_respond(self, key: PartitionKey, has_records: bool, error: bool) -> bool:
        """Whether an incremental response carries this partition, updating the session as
        Kafka's CachedSharePartition.maybeUpdateResponseData (a partition that returned records
        moves to the end of the order, so the others get the request's bytes first next time)."""
        if key not in self.partitions:
            return has_records or error
        respond = has_records or error or self.partitions[key]
        self.partitions[key] = error
        if has_records:
            del self.partitions[key]
            self.partitions[key] = error
        return respond
    created_ms: int = 0
    last_used_ms: int = 0


@dataclass
class ShareFetchContext:
    """What a ShareFetch / ShareAcknowledge may do in its session: `error` (0 = go on), the
    partitions to fetch, whether it is a full fetch (every partition answered) and whether it
    closes the session (final epoch)."""

    error: int = 0
    session: ShareSession | None = None
    partitions: list[PartitionKey] = field(default_factory=list)
    full: bool = True
    final: bool = False
    released: ShareSession | None = None  # a session this request closed or replaced


class ShareSessionCache:
    """At most `max_entries` sessions (group.share.max.share.sessions, default 2000)."""

    def __init__(self, max_entries: int = 2000) -> None:
        self.max_entries = max_entries
        self.sessions: dict[SessionKey, ShareSession] = {}
        self._by_connection: dict[int, set[SessionKey]] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def num_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, key: SessionKey) -> ShareSession | None:
        return self.sessions.get(key)

    def remove(self, key: SessionKey) -> ShareSession | None:
        s = self.sessions.pop(key, None)
        if s is not None:
            keys = self._by_connection.get(id(s.connection))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[id(s.connection)]
        return s

    def maybe_create(self, key: SessionKey, connection: object, partitions: list[PartitionKey],
                     now_ms: int) -> ShareSession | None:
        if len(self.sessions) >= self.max_entries:
            return None
        s = ShareSession(key, connection, 1, dict.fromkeys(partitions, False), now_ms, now_ms)
        self.sessions[key] = s
        self._by_connection.setdefault(id(connection), set()).add(key)
        return s

    def connection_closed(self, connection: object) -> list[ShareSession]:
        """The sessions of a connection that closed, removed from the cache."""
        keys = self._by_connection.pop(id(connection), set())
        out = []
        for key in keys:
            s = self.sessions.get(key)
            if s is not None and s.connection is connection:
                del self.sessions[key]
                out.append(s)
        return out

    # ------------------------------------------------------------------ contexts

    def fetch_context(self, group_id: str, member_id: str, epoch: int, fetch: list[PartitionKey],
                      forgotten: list[PartitionKey], has_acks: bool, connection: object,
                      now_ms: int) -> ShareFetchContext:
        """The context of a ShareFetch (Kafka's SharePartitionManager.newContext)."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            if fetch and not has_acks:
                return ShareFetchContext(Errors.INVALID_REQUEST)
            s = self.get(key)
            if s is None:
                return ShareFetchContext(Errors.SHARE_SESSION_NOT_FOUND)
            return ShareFetchContext(0, s, [], True, True)
        if epoch == INITIAL_EPOCH:
            if has_acks:
                return ShareFetchContext(Errors.INVALID_REQUEST)
            old = self.remove(key)
            s = self.maybe_create(key, connection, fetch, now_ms)
            if s is None:
                return ShareFetchContext(Errors.SHARE_SESSION_LIMIT_REACHED, released=old)
            return ShareFetchContext(0, s, list(s.partitions), True, released=old)
        if epoch < 0:
            return ShareFetchContext(Errors.INVALID_SHARE_SESSION_EPOCH)
        s = self.get(key)
        if s is None:
            return ShareFetchContext(Errors.SHARE_SESSION_NOT_FOUND)
        if s.epoch != epoch:
            return ShareFetchContext(Errors.INVALID_SHARE_SESSION_EPOCH)
        for p in fetch:
            s.partitions.setdefault(p, True)
        for p in forgotten:
            s.partitions.pop(p, None)
        s.epoch = next_epoch(s.epoch)
        s.last_used_ms = now_ms
        return ShareFetchContext(0, s, list(s.partitions), False)

    def acknowledge_context(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareFetchContext:
        """The session check of a ShareAcknowledge (Kafka's acknowledgeSessionUpdate)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH or epoch < FINAL_EPOCH:
            return ShareFetchContext(Errors.INVALID_SHARE_SESSION_EPOCH)
        s = self.get(key)
        if s is None:
            return ShareFetchContext(Errors.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            return ShareFetchContext(0, s, [], True, True)
        if s.epoch != epoch:
            return ShareFetchContext(Errors.INVALID_SHARE_SESSION_EPOCH)
        s.epoch = next_epoch(s.epoch)
        s.last_used_ms = now_ms
        return ShareFetchContext(0, s, [], False)
