"""One typed view of a Fetch request (v4-17), whatever its version family.

Kafka's Fetch grew fields version by version: log_start_offset (v5), sessions (v7), the client's
leader epoch (v9), rack_id (v11), last_fetched_epoch (v12), topic ids instead of names (v13), and
the follower's replica_state instead of replica_id (v15). kio decodes each version to its own
class; this view has every field, with Kafka's default where the version has none, so the handler
and the fetch sessions read fields that always exist. It is built once per request: one small
object per partition, never per record (plain slotted classes: a frozen dataclass's __init__ costs
several times more, on every fetch).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Protocol, Sequence, cast

INVALID_SESSION_ID = 0
FINAL_EPOCH = -1

_LOG_START_SINCE = 5
_SESSIONS_SINCE = 7
_LEADER_EPOCH_SINCE = 9
_RACK_SINCE = 11
_LAST_FETCHED_EPOCH_SINCE = 12
TOPIC_IDS_SINCE = 13
_REPLICA_STATE_SINCE = 15


class FetchPartitionFields(Protocol):
    """A partition to read: a request's, or a fetch session's cached one."""

    @property
    def partition(self) -> int: ...

    @property
    def fetch_offset(self) -> int: ...

    @property
    def partition_max_bytes(self) -> int: ...

    @property
    def current_leader_epoch(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def last_fetched_epoch(self) -> int: ...


class FetchTopicFields(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID | None: ...

    @property
    def partitions(self) -> Sequence[FetchPartitionFields]: ...


@dataclass(slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchTopic:
    topic: str  # "" from v13
    topic_id: uuid.UUID | None  # None before v13, and for the all-zero id
    partitions: list[FetchPartition]


@dataclass(slots=True)
class ForgottenTopic:
    topic: str
    topic_id: uuid.UUID | None
    partitions: Sequence[int]


@dataclass(slots=True)
class FetchRequest:
    replica_id: int  # -1: a consumer
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic]
    rack_id: str | None  # None before v11


# -- what kio hands the handler, per version family (only what the view reads) --------------------------

class _KioPartition(Protocol):
    partition: int
    fetch_offset: int
    partition_max_bytes: int


class _KioPartitionV5(_KioPartition, Protocol):
    log_start_offset: int


class _KioPartitionV9(_KioPartitionV5, Protocol):
    current_leader_epoch: int


class _KioPartitionV12(_KioPartitionV9, Protocol):
    last_fetched_epoch: int


class _KioTopic(Protocol):
    @property
    def partitions(self) -> Sequence[_KioPartition]: ...


class _KioTopicByName(_KioTopic, Protocol):
    topic: str


class _KioTopicById(_KioTopic, Protocol):
    topic_id: uuid.UUID | None


class _KioForgottenByName(Protocol):
    topic: str
    partitions: Sequence[int]


class _KioForgottenById(Protocol):
    topic_id: uuid.UUID | None
    partitions: Sequence[int]


class _KioReplicaState(Protocol):
    replica_id: int


class KioFetchRequest(Protocol):
    """The fields every served version of kio's FetchRequest has."""

    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    isolation_level: int

    @property
    def topics(self) -> Sequence[_KioTopic]: ...


class _KioFetchV4(KioFetchRequest, Protocol):
    replica_id: int


class _KioFetchV7(KioFetchRequest, Protocol):
    session_id: int
    session_epoch: int

    @property
    def forgotten_topics_data(self) -> Sequence[object]: ...


class _KioFetchV11(_KioFetchV7, Protocol):
    rack_id: str


class _KioFetchV15(_KioFetchV11, Protocol):
    replica_state: _KioReplicaState


def fetch_request(req: KioFetchRequest, version: int) -> FetchRequest:
    """The view of kio's decoded Fetch ``req`` of ``version``."""
    if version >= _REPLICA_STATE_SINCE:
        replica_id = cast(_KioFetchV15, req).replica_state.replica_id
    else:
        replica_id = cast(_KioFetchV4, req).replica_id
    session_id, session_epoch = INVALID_SESSION_ID, FINAL_EPOCH
    forgotten: list[ForgottenTopic] = []
    if version >= _SESSIONS_SINCE:
        v7 = cast(_KioFetchV7, req)
        session_id, session_epoch = v7.session_id, v7.session_epoch
        forgotten = [_forgotten(f, version) for f in v7.forgotten_topics_data]
    rack_id = cast(_KioFetchV11, req).rack_id if version >= _RACK_SINCE else None
    return FetchRequest(replica_id, req.max_wait, req.min_bytes, req.max_bytes, req.isolation_level, session_id,
                        session_epoch, [_topic(t, version) for t in req.topics], forgotten, rack_id)


def _topic(t: _KioTopic, version: int) -> FetchTopic:
    if version >= TOPIC_IDS_SINCE:
        name, topic_id = "", cast(_KioTopicById, t).topic_id
    else:
        name, topic_id = cast(_KioTopicByName, t).topic, None
    return FetchTopic(name, topic_id, [_partition(p, version) for p in t.partitions])


def _partition(p: _KioPartition, version: int) -> FetchPartition:
    if version >= _LAST_FETCHED_EPOCH_SINCE:
        v12 = cast(_KioPartitionV12, p)
        return FetchPartition(p.partition, p.fetch_offset, p.partition_max_bytes, v12.current_leader_epoch,
                              v12.log_start_offset, v12.last_fetched_epoch)
    if version >= _LEADER_EPOCH_SINCE:
        v9 = cast(_KioPartitionV9, p)
        return FetchPartition(p.partition, p.fetch_offset, p.partition_max_bytes, v9.current_leader_epoch,
                              v9.log_start_offset)
    if version >= _LOG_START_SINCE:
        return FetchPartition(p.partition, p.fetch_offset, p.partition_max_bytes,
                              log_start_offset=cast(_KioPartitionV5, p).log_start_offset)
    return FetchPartition(p.partition, p.fetch_offset, p.partition_max_bytes)


def _forgotten(f: object, version: int) -> ForgottenTopic:
    if version >= TOPIC_IDS_SINCE:
        by_id = cast(_KioForgottenById, f)
        return ForgottenTopic("", by_id.topic_id, by_id.partitions)
    by_name = cast(_KioForgottenByName, f)
    return ForgottenTopic(by_name.topic, None, by_name.partitions)
