"""Incremental fetch sessions (KIP-227), the rules of Kafka's FetchSession / FetchSessionCache.

A Fetch (v7+) names a session id and an epoch:

- id 0, epoch -1: a full, sessionless fetch (and what every client before v7 does);
- epoch 0: a full fetch that opens a session (closing the one named, if any). The broker answers every
  partition and, when the cache has or can make room, the new session's id; 0 otherwise, and the
  client goes on with full fetches;
- any id, epoch -1: close that session, answer this one in full, sessionless;
- id N, epoch E > 0: an incremental fetch. The request lists only partitions that are new or whose
  fetch offset, max bytes, leader epoch or log start changed, plus ``forgotten_topics_data``; the
  broker reads every partition of the session and answers only those with something to say (records,
  a new high watermark, last stable offset or log start offset, an error). An unknown id is
  FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's INVALID_FETCH_SESSION_EPOCH; each
  accepted fetch moves the epoch on by one.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. When full, a new one
takes the slot of the least recently used session if that was idle for over two minutes; else of the
smallest session that may be evicted: any session (smallest first) once it is two minutes old, and a
consumer's session at any age when the newcomer is a follower's (followers are privileged); the
newcomer must have more partitions than its victim unless it is a follower displacing a consumer.
All of this runs on the event loop; the work per fetch is a few dictionary operations per partition.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from typing import Any, Callable, Sequence

from kio.schema.errors import ErrorCode

from tieredlog.protocol.fetch_encoder import FetchTopicData
from tieredlog.server.fetch_request import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    TOPIC_IDS_SINCE,
    FetchPartitionFields,
    FetchRequest,
    FetchTopicFields,
)

INITIAL_EPOCH = 0
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: how long a session is safe from eviction by peers
EVICTION_MS = 120_000
_ZERO_ID = uuid.UUID(int=0)

Key = tuple[Any, int]  # (topic id from v13, else topic name; partition)


class CachedPartition:
    """A session's partition: what the client last asked (named as the request's fields, so the Fetch
    handler reads it like a request partition) and what it was last told."""

    __slots__ = ("partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "log_start_offset",
                 "last_fetched_epoch", "topic", "topic_id", "high_watermark", "last_stable_offset", "sent_log_start")

    def __init__(self, topic: str, topic_id: uuid.UUID | None, fp: FetchPartitionFields) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = int(fp.partition)
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.sent_log_start = -1
        self.update_request(fp)

    def update_request(self, fp: FetchPartitionFields) -> None:
        self.fetch_offset = fp.fetch_offset
        self.partition_max_bytes = fp.partition_max_bytes
        self.current_leader_epoch = fp.current_leader_epoch
        self.log_start_offset = fp.log_start_offset
        self.last_fetched_epoch = fp.last_fetched_epoch

    def must_respond(self, d: Any) -> bool:
        """Whether an incremental answer includes this partition; remembers what it tells."""
        respond = (d.records_size > 0 or d.error_code != ErrorCode.none or d.current_leader is not None
                   or d.diverging_epoch is not None)
        if d.error_code == ErrorCode.none:
            # an error answer carries no offsets worth remembering (Kafka keeps the last good ones)
            if d.high_watermark != self.high_watermark:
                self.high_watermark = d.high_watermark
                respond = True
            if d.last_stable_offset != self.last_stable_offset:
                self.last_stable_offset = d.last_stable_offset
                respond = True
            if d.log_start_offset != self.sent_log_start:
                self.sent_log_start = d.log_start_offset
                respond = True
        return respond

    def remember(self, d: Any) -> None:
        self.high_watermark = d.high_watermark
        self.last_stable_offset = d.last_stable_offset
        self.sent_log_start = d.log_start_offset


class SessionTopic:
    """A run of one topic's session partitions, shaped like a request's FetchTopic."""

    __slots__ = ("topic", "topic_id", "partitions")

    def __init__(self, topic: str, topic_id: uuid.UUID | None, partitions: list[CachedPartition]) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partitions = partitions


class FetchSession:
    __slots__ = ("id", "privileged", "uses_topic_ids", "partitions", "epoch", "creation_ms", "last_used_ms")

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool,
                 partitions: OrderedDict[Key, CachedPartition], now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.creation_ms = now_ms
        self.last_used_ms = now_ms

    def eviction_key(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.id)


def next_epoch(epoch: int) -> int:
    # the epoch wraps to 1: 0 and -1 mean "open" and "close"
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def _clock_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FetchSessionCache:
    def __init__(self, max_slots: int, eviction_ms: int = EVICTION_MS,
                 clock_ms: Callable[[], int] = _clock_ms) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.clock_ms = clock_ms
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        # kept as plain ints on the loop, so the metrics thread reads them without walking the sessions
        self.evictions = 0
        self.partitions_cached = 0
        self._rng = random.Random()

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.partitions_cached -= len(session.partitions)
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        if session.id in self.sessions:
            self.sessions.move_to_end(session.id)

    def _evictable(self, s: FetchSession, privileged: bool, now_ms: int) -> bool:
        old = now_ms - s.creation_ms > self.eviction_ms
        return old or (privileged and not s.privileged)

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if len(self.sessions) < self.max_slots:
            return True
        lru = next(iter(self.sessions.values()), None)
        if lru is None:
            return False
        if lru.last_used_ms + self.eviction_ms < now_ms:
            self.remove(lru.id)
            self.evictions += 1
            return True
        # only when the cache is full and nothing is stale: a scan of at most max_slots sessions
        candidates = [s for s in self.sessions.values() if self._evictable(s, privileged, now_ms)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.eviction_key)
        # the newcomer's key has id 0, so an equal-sized peer stays
        if (privileged, size, 0) < victim.eviction_key():
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def maybe_create(self, privileged: bool, uses_topic_ids: bool,
                     partitions: OrderedDict[Key, CachedPartition]) -> int:
        """A new session's id, or 0 when there is no room for it."""
        if self.max_slots <= 0:
            return INVALID_SESSION_ID
        now = self.clock_ms()
        if not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        while True:
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                break
        self.sessions[session_id] = FetchSession(session_id, privileged, uses_topic_ids, partitions, now)
        self.partitions_cached += len(partitions)
        return session_id


def _key(uses_topic_ids: bool, topic: str, topic_id: uuid.UUID | None, partition: int) -> Key:
    return ((topic_id or _ZERO_ID) if uses_topic_ids else topic, partition)


def _response_key(uses_topic_ids: bool, td: FetchTopicData, partition: int) -> Key:
    return (td.topic_id if uses_topic_ids else td.topic, partition)


class FetchContext:
    """One Fetch request's view of its session: ``topics`` are what to read (the request's own topics,
    or the session's partitions), ``finish`` turns the read partitions into the answer."""

    __slots__ = ("error", "topics", "_cache", "_req", "_session", "_privileged", "_uses_topic_ids", "_create")

    def __init__(self, cache: FetchSessionCache, req: FetchRequest, topics: Sequence[FetchTopicFields], *, error: ErrorCode = ErrorCode.none,
                 session: FetchSession | None = None, create: bool = False, privileged: bool = False,
                 uses_topic_ids: bool = False) -> None:
        self.error = error
        self.topics = topics
        self._cache = cache
        self._req = req
        self._session = session
        self._create = create
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids

    def finish(self, topics: list[FetchTopicData]) -> tuple[list[FetchTopicData], int]:
        """(topics to answer, session id to answer with)."""
        session = self._session
        if session is not None:
            return self._incremental(session, topics), session.id
        if not self._create:
            return topics, INVALID_SESSION_ID
        by_key = {_response_key(self._uses_topic_ids, td, d.partition_index): d for td in topics for d in td.partitions}
        cached: OrderedDict[Key, CachedPartition] = OrderedDict()
        for ft in self._req.topics:
            for fp in ft.partitions:
                key = _key(self._uses_topic_ids, ft.topic, ft.topic_id, fp.partition)
                cp = CachedPartition(ft.topic, ft.topic_id, fp)
                d = by_key.get(key)
                if d is not None:
                    cp.remember(d)
                cached[key] = cp
        return topics, self._cache.maybe_create(self._privileged, self._uses_topic_ids, cached)

    def _incremental(self, session: FetchSession, topics: list[FetchTopicData]) -> list[FetchTopicData]:
        out: list[FetchTopicData] = []
        parts = session.partitions
        sent_records: list[Key] = []
        for td in topics:
            kept = []
            for d in td.partitions:
                key = _response_key(session.uses_topic_ids, td, d.partition_index)
                cp = parts.get(key)
                if cp is None or cp.must_respond(d):
                    kept.append(d)
                    if d.records_size > 0:
                        sent_records.append(key)
            if kept:
                out.append(FetchTopicData(td.topic, td.topic_id, kept))
        # partitions that just returned data go to the back, so the next fetches' byte budget reaches
        # the others first (KIP-227's fairness across one session)
        for key in sent_records:
            if key in parts:
                parts.move_to_end(key)
        return out


def _session_topics(session: FetchSession) -> list[SessionTopic]:
    """The session's partitions as request-shaped topics, consecutive partitions of one topic grouped."""
    out: list[SessionTopic] = []
    for cp in session.partitions.values():
        last = out[-1] if out else None
        if last is not None and last.topic == cp.topic and last.topic_id == cp.topic_id:
            last.partitions.append(cp)
        else:
            out.append(SessionTopic(cp.topic, cp.topic_id, [cp]))
    return out


def new_context(cache: FetchSessionCache, req: FetchRequest, version: int, privileged: bool) -> FetchContext:
    """Kafka's FetchManager.newContext: what this request reads and how it is answered."""
    session_id = req.session_id
    epoch = req.session_epoch
    uses_topic_ids = version >= TOPIC_IDS_SINCE
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # a full fetch closes the session it names
        return FetchContext(cache, req, req.topics, create=epoch == INITIAL_EPOCH, privileged=privileged,
                            uses_topic_ids=uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return FetchContext(cache, req, (), error=ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return FetchContext(cache, req, (), error=ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != uses_topic_ids:
        return FetchContext(cache, req, (), error=ErrorCode.fetch_session_topic_id_error)
    parts = session.partitions
    before = len(parts)
    for ft in req.topics:
        for fp in ft.partitions:
            key = _key(uses_topic_ids, ft.topic, ft.topic_id, fp.partition)
            cp = parts.get(key)
            if cp is None:
                parts[key] = CachedPartition(ft.topic, ft.topic_id, fp)
            else:
                cp.update_request(fp)
    for forgotten in req.forgotten_topics_data:
        for p in forgotten.partitions:
            parts.pop(_key(uses_topic_ids, forgotten.topic, forgotten.topic_id, p), None)
    cache.partitions_cached += len(parts) - before
    session.epoch = next_epoch(session.epoch)
    cache.touch(session, cache.clock_ms())
    return FetchContext(cache, req, _session_topics(session), session=session, privileged=privileged,
                        uses_topic_ids=uses_topic_ids)
