"""What the console shows: plain frozen values copied out of the broker, so rendering never touches
live broker state (and may run on any thread)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tieredlog.console.history import Sample


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    is_controller: bool = False
    is_self: bool = False


@dataclass(frozen=True, slots=True)
class ClusterPartition:
    """One partition as the cluster's metadata describes it (any broker's view, led here or not)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_isr: int

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return not self.offline and len(self.isr) < len(self.replicas)

    @property
    def under_min_isr(self) -> bool:
        return not self.offline and len(self.isr) < self.min_isr


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """A local segment's offset range [base_offset, end_offset) and size; ``tiered`` when the
    remote tier already holds all of it (so local retention may delete it)."""

    base_offset: int
    end_offset: int
    size: int
    active: bool
    tiered: bool


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """A remote segment as the remote log metadata lists it: offsets [start, end] inclusive, as Kafka's."""

    segment_id: str
    start_offset: int
    end_offset: int
    size: int
    state: str  # COPY_SEGMENT_STARTED / COPY_SEGMENT_FINISHED / DELETE_SEGMENT_STARTED / ...
    max_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class FollowerState:
    broker_id: int
    log_end_offset: int
    in_sync: bool


@dataclass(frozen=True, slots=True)
class TieringLag:
    """Rolled segments not yet in the remote tier: their bytes, their count, and how long the oldest
    has waited (from its largest record timestamp; None when nothing waits or it is unknown)."""

    bytes: int
    segments: int
    oldest_ms: int | None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition hosted by this broker: its offset line, from the oldest offset to the log end."""

    topic: str
    partition: int
    is_leader: bool
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int  # ListOffsets -2: the oldest offset (remote or local)
    local_log_start_offset: int  # ListOffsets -4
    high_watermark: int  # ListOffsets -1
    last_stable_offset: int
    log_end_offset: int
    highest_offset_in_remote_storage: int  # ListOffsets -5 (-1 = nothing tiered)
    tiered: bool  # remote.storage.enable on a broker with a remote tier
    local_segments: tuple[LocalSegment, ...]
    topic_id: uuid.UUID | None = None
    followers: tuple[FollowerState, ...] = ()
    # filled off the event loop, from the remote log metadata (leaders of tiered partitions only)
    # sums over the local segments (also when local_segments is not filled)
    local_size: int = 0
    local_segment_count: int = 0
    pending_bytes: int = 0  # rolled, not yet wholly in the remote tier
    pending_segments: int = 0
    first_pending_base: int | None = None
    remote_segments: tuple[RemoteSegment, ...] = ()
    remote_note: str = ""  # why the remote segments are not shown, when they are not
    tiering_lag: TieringLag | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def local_bytes(self) -> int:
        return self.local_size

    @property
    def remote_bytes(self) -> int:
        return sum(s.size for s in self.remote_segments if s.state == "COPY_SEGMENT_FINISHED")


@dataclass(frozen=True, slots=True)
class TopicUsage:
    """Object-store requests and bytes of one topic's remote data, counted by this broker."""

    puts: int = 0
    gets: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_put: int = 0
    bytes_get: int = 0


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    partitions: int
    replication_factor: int
    tiered: bool
    internal: bool
    usage: TopicUsage = field(default_factory=TopicUsage)


@dataclass(frozen=True, slots=True)
class GroupPartitionLag:
    """A committed offset beside the partition's end, when this broker hosts the partition."""

    topic: str
    partition: int
    committed: int
    high_watermark: int | None  # None: the partition is not hosted here
    local_log_start_offset: int | None

    @property
    def lag(self) -> int | None:
        return None if self.high_watermark is None else max(0, self.high_watermark - self.committed)

    @property
    def from_remote(self) -> bool:
        """The next offset the group reads is only in the remote tier."""
        return self.local_log_start_offset is not None and self.committed < self.local_log_start_offset


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str
    client_host: str
    assigned: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    protocol: str  # "classic" or "consumer" (KIP-848)
    state: str
    members: tuple[GroupMember, ...]
    offsets: tuple[GroupPartitionLag, ...]

    @property
    def total_lag(self) -> int | None:
        lags = [o.lag for o in self.offsets]
        return None if not lags or any(x is None for x in lags) else sum(x for x in lags if x is not None)


@dataclass(frozen=True, slots=True)
class Prices:
    """Object-store prices the monthly cost estimate uses (USD)."""

    storage_gb_month: float
    put_per_1000: float
    get_per_1000: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    broker_id: int
    cluster_id: str
    taken_ms: int
    started_ms: int  # when this broker's usage counters began
    brokers: tuple[BrokerInfo, ...]
    controller_id: int | None
    cluster_partitions: tuple[ClusterPartition, ...]
    topics: tuple[TopicView, ...]
    partitions: tuple[PartitionView, ...]  # hosted here
    groups: tuple[GroupView, ...]  # coordinated here
    remote_tier: bool
    prices: Prices
    history: tuple[Sample, ...] = ()  # the last hour of totals, for the charts

    def topic(self, name: str) -> TopicView | None:
        return next((t for t in self.topics if t.name == name), None)

    def partitions_of(self, topic: str) -> list[PartitionView]:
        return sorted((p for p in self.partitions if p.topic == topic), key=lambda p: p.partition)

    def group(self, group_id: str) -> GroupView | None:
        return next((g for g in self.groups if g.group_id == group_id), None)
