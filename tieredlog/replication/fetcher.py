"""Follower fetchers: Kafka's ``ReplicaFetcherManager`` and ``ReplicaFetcherThread``, as asyncio tasks.

One fetcher per leader broker (times ``num.replica.fetchers``) copies the batches of every partition
this broker follows there. It fetches from its log end offset naming the latest epoch of its log
(``last_fetched_epoch``, KIP-320, Kafka's truncation on fetch): where that epoch ends on the leader
before the fetch offset, the leader answers ``diverging_epoch`` instead of records and the follower
cuts its log there (KIP-101/279's rule) and fetches again. Otherwise the partition appends the
leader's batches as they are (offsets and epochs included, straight from the response, uncopied) and
takes the leader's high watermark and log start offset (``Partition.append_records_to_follower``);
the fetcher keeps only its fetch state: quota, in-sync flag, errors. A partition whose log has no
epoch starts in ``TRUNCATING`` (cut to its high watermark); one whose fetch offset lies past the
leader's log asks the leader where its latest epoch ends (OffsetForLeaderEpoch) before fetching
again. A fenced or moved partition waits for the controller's next word.

A fetch below the leader's local log start of a tiered partition answers
OFFSET_MOVED_TO_TIERED_STORAGE: the partition enters ``BUILDING_REMOTE_LOG_AUX_STATE`` (KIP-405). The
follower asks the leader for its earliest local offset and that offset's epoch (ListOffsets -4),
reads the leader-epoch lineage and producer snapshot of the remote segment just below it through
the remote tier (``RemoteAuxStateSource``, on the remote reader pool), restarts its log there and
fetches only what the leader still has locally. Until the leader's segment metadata reaches this
broker, or while the object store is down, the partition retries after its backoff; the other
partitions of the fetcher go on, also while a remote read waits on a store that does not answer (the
partition waits for it in a task of its own, off the fetch loop).

Network waits are awaits on the event loop; truncation and the rebuild run on an executor (they
touch files).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import struct
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.fetch.v12.response import PartitionData as FetchPartitionData

from tieredlog.clients.connection import AsyncKafkaConnection
from tieredlog.clients.node_clients import PLAINTEXT, ConnectSettings, ListenerSecurity, NodeConnections
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH
from tieredlog.rate_limited_log import RateLimitedLog

if TYPE_CHECKING:
    from tieredlog.replication.partition import Partition
    from tieredlog.replication.replication_quota import ReplicationQuotaManager

log = logging.getLogger(__name__)
# a rebuild from the remote tier fails every backoff while the object store is down: a line per interval
_rebuild_failures = RateLimitedLog(log, 30.0)

# topic names, current_leader_epoch, log_start_offset; every tieredlog broker serves it (the answer's
# types above are this version's)
FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 8  # the first with EARLIEST_LOCAL_TIMESTAMP (KIP-405)
EARLIEST_LOCAL_TIMESTAMP = -4
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    client_id_prefix: str = "replica-fetcher"
    num_fetchers: int = 1
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1048576
    response_max_bytes: int = 10485760
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    security: ListenerSecurity = PLAINTEXT  # TLS and SASL of the inter-broker listener, as its protocol asks


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    BUILDING_REMOTE_LOG_AUX_STATE = "building-remote-log-aux-state"


class RemoteLogAuxStateView(Protocol):
    """What the fetcher uses of a remote segment's auxiliary state (tieredlog.rlm.follower)."""

    @property
    def next_offset(self) -> int: ...
    @property
    def epochs(self) -> list: ...
    @property
    def producer_snapshot(self) -> bytes | None: ...


class RemoteAuxStateSource(Protocol):
    """The remote tier, as a follower rebuilding from it needs it (the RemoteLogManager)."""

    def fetch_aux_state_async(self, topic_partition: TopicPartition, target_epoch: int,
                              target_offset: int) -> Future: ...


class FollowerReplicaManager(Protocol):
    """What the fetchers need of the ReplicaManager that runs them (it passes itself)."""

    @property
    def remote_aux(self) -> RemoteAuxStateSource | None: ...

    @property
    def follower_quota(self) -> ReplicationQuotaManager: ...

    async def rebuild_from_remote(self, partition: Partition, next_offset: int, log_start_offset: int,
                                  epochs: list, producer_snapshot: bytes | None) -> None: ...

    def high_watermark_moved(self, tp: TopicPartition) -> None: ...


@dataclass(slots=True)
class PartitionFetchState:
    partition: Partition
    leader_epoch: int
    state: FetchState = FetchState.TRUNCATING
    delayed_until: float = 0.0
    warned: set[str] = field(default_factory=set)
    leader_log_start_offset: int = -1  # from the OFFSET_MOVED_TO_TIERED_STORAGE answer
    rebuild: asyncio.Task | None = None  # the remote aux state read and rebuild in flight
    in_sync: bool = False  # reached the leader's high watermark at the last fetch: never throttled (KIP-73)


def whole_batches(records: bytes | memoryview) -> memoryview:
    """The leader may end a response inside a batch (its max bytes cut it); append whole ones only.
    A view of ``records``, not a copy."""
    view = memoryview(records)
    pos, end = 0, len(view)
    while end - pos >= _BATCH_HEADER.size:
        _base, length = _BATCH_HEADER.unpack_from(view, pos)
        size = _BATCH_HEADER.size + length
        if length <= 0 or pos + size > end:
            break
        pos += size
    return view[:pos]


class ReplicaFetcher:
    """Fetches every partition this broker follows on one leader broker."""

    def __init__(self, name: str, leader_id: int, endpoint: tuple[str, int], broker_id: int,
                 replica_manager: FollowerReplicaManager, config: FetcherConfig) -> None:
        self.name = name
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.broker_id = broker_id
        self._rm = replica_manager
        self._config = config
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wakeup = asyncio.Event()
        settings = ConnectSettings(f"{config.client_id_prefix}-{broker_id}", config.socket_timeout_ms / 1000,
                                   config.security)
        self._connections: NodeConnections[int] = NodeConnections(
            lambda _leader: endpoint, lambda: settings, describe=lambda b: f"broker {b}")
        self._task: asyncio.Task | None = None
        self._rebuilds: set[asyncio.Task] = set()
        self.requests = 0  # Fetch requests sent (Kafka's FetcherStats RequestsPerSec)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        for rebuild in list(self._rebuilds):
            rebuild.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: its failures are logged
                pass
        await self._close()

    def add(self, partition: Partition) -> None:
        # with an epoch the fetch itself detects divergence; without one, truncate to the high watermark
        state = FetchState.TRUNCATING if partition.log.leader_epoch_cache.latest_epoch is None else FetchState.FETCHING
        self.partitions[partition.tp] = PartitionFetchState(partition, partition.leader_epoch, state)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> bool:
        return self.partitions.pop(tp, None) is not None

    async def _close(self) -> None:
        await self._connections.close()

    async def _connection(self) -> AsyncKafkaConnection:
        return await self._connections.get(self.leader_id)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = self._config.backoff_ms / 1000
        while True:
            now = loop.time()
            # a partition whose rebuild is in flight waits for it: the rebuild wakes the fetcher when done
            ready = {tp: s for tp, s in self.partitions.items() if s.delayed_until <= now and s.rebuild is None}
            if not ready:
                self._wakeup.clear()
                wake = min((s.delayed_until for s in self.partitions.values() if s.rebuild is None),
                           default=now + 1.0)
                try:
                    await asyncio.wait_for(self._wakeup.wait(), max(wake - now, 0.01))
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                truncating = {tp: s for tp, s in ready.items() if s.state is FetchState.TRUNCATING}
                if truncating:
                    await self._truncate(truncating)
                building = {tp: s for tp, s in ready.items()
                            if s.state is FetchState.BUILDING_REMOTE_LOG_AUX_STATE and self.partitions.get(tp) is s}
                if building:
                    await self._build_remote_log_aux_state(building)
                fetching = {tp: s for tp, s in ready.items()
                            if s.state is FetchState.FETCHING and self.partitions.get(tp) is s}
                if fetching:
                    await self._fetch(fetching)
            except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
                log.warning("%s: leader %d at %s:%d unreachable: %s; retrying in %d ms", self.name, self.leader_id,
                            *self.endpoint, exc, self._config.backoff_ms)
                await self._close()
                for s in ready.values():
                    s.delayed_until = loop.time() + backoff_s
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the fetcher must outlive a bad response
                log.exception("%s: fetch from leader %d failed", self.name, self.leader_id)
                await self._close()
                for s in ready.values():
                    s.delayed_until = loop.time() + backoff_s

    def _delay(self, s: PartitionFetchState, why: str, waiting_for: str = "the controller") -> None:
        s.delayed_until = asyncio.get_running_loop().time() + self._config.backoff_ms / 1000
        if why not in s.warned:
            s.warned.add(why)
            log.info("%s: %s: %s; waiting for %s", self.name, s.partition.tp, why, waiting_for)

    # ---- truncation (KIP-101 / KIP-279) -----------------------------------------------------------

    async def _truncate(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        loop = asyncio.get_running_loop()
        ask: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, s in states.items():
            latest = s.partition.log.leader_epoch_cache.latest_epoch
            if latest is None:
                # no epochs (an empty log, or one from before epochs): the high watermark is safe
                await loop.run_in_executor(None, s.partition.log.truncate_to, s.partition.log.high_watermark)
                s.state = FetchState.FETCHING
            else:
                ask[tp] = (s, latest)
        if not ask:
            return
        by_topic: dict[str, list[dict]] = {}
        for tp, (s, latest) in ask.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "current_leader_epoch": s.leader_epoch, "leader_epoch": latest})
        conn = await self._connection()
        resp = await conn.request(
            OFFSET_FOR_LEADER_EPOCH,
            {"replica_id": self.broker_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]},
            version=OFFSET_FOR_LEADER_EPOCH_VERSION, timeout_s=self._config.socket_timeout_ms / 1000)
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                entry = ask.get(tp)
                if entry is None or self.partitions.get(tp) is not entry[0]:
                    continue
                s, _latest = entry
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    self._delay(s, f"OffsetForLeaderEpoch answered {code.name}")
                    continue
                await self._truncate_one(s, p.leader_epoch, p.end_offset)

    async def _truncate_one(self, s: PartitionFetchState, leader_epoch: int, leader_end_offset: int,
                            cause: str = "OffsetForLeaderEpoch") -> None:
        plog = s.partition.log
        loop = asyncio.get_running_loop()
        done = True
        if leader_end_offset == UNDEFINED_OFFSET:
            target = plog.high_watermark
        elif leader_epoch == UNDEFINED_EPOCH:
            target = min(leader_end_offset, plog.log_end_offset)
        else:
            # the leader's answer is for the largest epoch it has at or below ours; where does that epoch
            # end in our own log?
            own_epoch, own_end = plog.leader_epoch_cache.end_offset_for(leader_epoch, plog.log_end_offset)
            target = min(leader_end_offset, own_end if own_end >= 0 else plog.log_end_offset)
            # we lack that epoch too: cut there, and ask again with our new latest epoch
            done = own_epoch == leader_epoch
        if target < plog.log_end_offset:
            log.info("%s: truncating %s from %d to %d (%s: leader epoch %d ends at %d)", self.name,
                     s.partition.tp, plog.log_end_offset, target, cause, leader_epoch, leader_end_offset)
        elif not done:
            done = True  # nothing left to cut: fetch from here
        # also when no record goes: an epoch this broker began at its log end as leader and never wrote
        # in goes from its cache, or every fetch naming it would diverge again (Kafka's truncateTo)
        await loop.run_in_executor(None, plog.truncate_to, target)
        if done:
            s.state = FetchState.FETCHING

    # ---- BuildingRemoteLogAuxState (KIP-405) -------------------------------------------------------

    async def _build_remote_log_aux_state(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        """Kafka's TierStateMachine: where the leader's local log starts, which remote segment ends
        just below it, and the follower's log restarted after that segment with its lineage."""
        conn = await self._connection()
        timeout = self._config.socket_timeout_ms / 1000
        by_topic: dict[str, list[dict]] = {}
        for tp, s in states.items():
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "current_leader_epoch": s.leader_epoch,
                "timestamp": EARLIEST_LOCAL_TIMESTAMP})
        resp = await conn.request(LIST_OFFSETS, {
            "replica_id": self.broker_id, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }, version=LIST_OFFSETS_VERSION, timeout_s=timeout)
        earliest_local: dict[TopicPartition, tuple[int, int]] = {}
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                asked = states.get(tp)
                if asked is None or self.partitions.get(tp) is not asked:
                    continue
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    self._delay(asked, f"ListOffsets(EARLIEST_LOCAL) answered {code.name}")
                    continue
                earliest_local[tp] = (p.offset, p.leader_epoch)
        for tp, (local_start, epoch_at_it) in earliest_local.items():
            s = states[tp]
            if self.partitions.get(tp) is not s:
                continue
            await self._rebuild_one(conn, s, local_start, epoch_at_it)

    async def _target_epoch(self, conn: AsyncKafkaConnection, s: PartitionFetchState, target: int,
                            epoch_at_local_start: int) -> int | None:
        """The epoch of the leader's offset ``target`` (just below its local log start): the epoch
        before the one at the local start when that one ends after ``target`` (epochs with no data
        in between), else the epoch at the local start."""
        if epoch_at_local_start <= 0:
            return 0
        tp = s.partition.tp
        resp = await conn.request(OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": self.broker_id,
            "topics": [{"topic": tp.topic, "partitions": [{
                "partition": tp.partition, "current_leader_epoch": s.leader_epoch,
                "leader_epoch": epoch_at_local_start - 1}]}],
        }, version=OFFSET_FOR_LEADER_EPOCH_VERSION, timeout_s=self._config.socket_timeout_ms / 1000)
        p = resp.topics[0].partitions[0]
        code = ErrorCode(p.error_code)
        if code != ErrorCode.none:
            self._delay(s, f"OffsetForLeaderEpoch answered {code.name}")
            return None
        return p.leader_epoch if p.end_offset > target and p.leader_epoch >= 0 else epoch_at_local_start

    async def _rebuild_one(self, conn: AsyncKafkaConnection, s: PartitionFetchState, local_start: int,
                           epoch_at_local_start: int) -> None:
        plog = s.partition.log
        if local_start <= plog.log_end_offset:
            s.state = FetchState.FETCHING  # the leader's local log reaches us again (it was re-elected, say)
            return
        source = self._rm.remote_aux
        if source is None:
            self._delay(s, "the leader's data below its local log start is tiered, but this broker has no "
                           "remote tier (remote.log.storage.system.enable=false)", "a configuration change")
            return
        target = local_start - 1
        target_epoch = await self._target_epoch(conn, s, target, epoch_at_local_start)
        if target_epoch is None:
            return
        # the read takes as long as the object store does (its retries and timeouts): awaited here, it
        # would stall every other partition of this fetcher out of the ISR
        read = source.fetch_aux_state_async(s.partition.tp, target_epoch, target)
        s.rebuild = asyncio.get_running_loop().create_task(
            self._rebuild_when_read(s, read, target_epoch, target, local_start, epoch_at_local_start),
            name=f"{self.name}-rebuild-{s.partition.tp}")
        self._rebuilds.add(s.rebuild)
        s.rebuild.add_done_callback(self._rebuilds.discard)

    async def _rebuild_when_read(self, s: PartitionFetchState, read: Future, target_epoch: int, target: int,
                                 local_start: int, epoch_at_local_start: int) -> None:
        try:
            try:
                aux = await asyncio.wrap_future(read)
            except Exception as exc:  # noqa: BLE001 - not yet in the metadata, object store down: retried
                self._delay(s, f"remote log aux state for epoch {target_epoch} at offset {target} is not "
                               f"available yet ({exc})", "the remote tier")
                return
            if self.partitions.get(s.partition.tp) is not s:
                return  # moved while the remote tier answered
            leader_start = max(s.leader_log_start_offset, 0)
            await self._rm.rebuild_from_remote(s.partition, aux.next_offset, min(leader_start, aux.next_offset),
                                               aux.epochs, aux.producer_snapshot)
            log.info("%s: %s rebuilt its auxiliary state from the remote tier up to offset %d (leader's local "
                     "log starts at %d, epoch %d); fetching from there", self.name, s.partition.tp,
                     aux.next_offset, local_start, epoch_at_local_start)
            s.warned.clear()
            s.state = FetchState.FETCHING
        except Exception as exc:  # noqa: BLE001 - the rebuild is tried again after the backoff
            _rebuild_failures.failed(s.partition.tp, exc, "%s: %s: rebuilding from the remote tier failed",
                                     self.name, s.partition.tp)
            s.delayed_until = asyncio.get_running_loop().time() + self._config.backoff_ms / 1000
        finally:
            s.rebuild = None
            self._wakeup.set()

    # ---- fetch ------------------------------------------------------------------------------------

    async def _fetch(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        cfg = self._config
        quota = self._rm.follower_quota
        by_topic: dict[str, list[dict]] = {}
        for tp, s in list(states.items()):
            plog = s.partition.log
            if quota.should_throttle(tp, plog.config, s.in_sync):
                # KIP-73: left out of this fetch until the follower quota has room again
                s.delayed_until = asyncio.get_running_loop().time() + min(quota.throttle_time_ms(), cfg.backoff_ms) / 1000
                del states[tp]
                continue
            latest = plog.leader_epoch_cache.latest_epoch
            by_topic.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": plog.log_end_offset, "last_fetched_epoch": UNDEFINED_EPOCH if latest is None else latest,
                "log_start_offset": plog.log_start_offset, "partition_max_bytes": cfg.max_bytes,
            })
        if not by_topic:
            return
        conn = await self._connection()
        timeout = cfg.socket_timeout_ms / 1000 + cfg.wait_max_ms / 1000
        self.requests += 1
        resp: FetchResponse = await conn.request(FETCH, {
            "replica_id": self.broker_id, "max_wait": cfg.wait_max_ms, "min_bytes": cfg.min_bytes,
            "max_bytes": cfg.response_max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }, version=FETCH_VERSION, timeout_s=timeout)
        if ErrorCode(resp.error_code) != ErrorCode.none:
            raise ConnectionError(f"fetch answered {ErrorCode(resp.error_code).name}")
        diverging: list[tuple[PartitionFetchState, int, int]] = []
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                fs = states.get(tp)
                if fs is None or self.partitions.get(tp) is not fs:
                    continue  # removed while the fetch was in flight
                de = p.diverging_epoch
                if ErrorCode(p.error_code) == ErrorCode.none and de.end_offset >= 0:
                    # no records: the log diverges from the leader's before the fetch offset
                    diverging.append((fs, de.epoch, de.end_offset))
                    continue
                self._process(fs, p)
        for fs, epoch, end_offset in diverging:
            if self.partitions.get(fs.partition.tp) is fs:
                await self._truncate_one(fs, epoch, end_offset, "diverging epoch")

    def _process(self, s: PartitionFetchState, p: FetchPartitionData) -> None:
        code = ErrorCode(p.error_code)
        partition = s.partition
        plog = partition.log
        if code == ErrorCode.none:
            # a view of the response's records, appended without a copy (kio's bytes are immutable)
            batches = whole_batches(p.records or b"")
            if partition.append_records_to_follower(batches, p.high_watermark, p.log_start_offset):
                self._rm.high_watermark_moved(partition.tp)
            if len(batches) and self._rm.follower_quota.is_throttled(partition.tp, plog.config):
                self._rm.follower_quota.record(len(batches))
            s.in_sync = plog.log_end_offset >= p.high_watermark
            s.warned.clear()
            return
        if code == ErrorCode.offset_out_of_range:
            leader_start = p.log_start_offset
            if 0 <= leader_start and plog.log_end_offset < leader_start:
                # everything we have is below what the leader keeps: start over at its log start
                log.info("%s: %s is at %d, below the leader's log start %d: starting over there",
                         self.name, partition.tp, plog.log_end_offset, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
            else:
                s.state = FetchState.TRUNCATING  # we are past the leader's end: an unclean election
            return
        if code == ErrorCode.offset_moved_to_tiered_storage:
            log.info("%s: %s: offset %d is only in the leader's remote tier: rebuilding from it",
                     self.name, partition.tp, plog.log_end_offset)
            s.leader_log_start_offset = p.log_start_offset
            s.state = FetchState.BUILDING_REMOTE_LOG_AUX_STATE
            self._wakeup.set()
            return
        self._delay(s, f"fetch answered {code.name}")


class ReplicaFetcherManager:
    """Which fetcher fetches which partition: partitions of one leader spread over
    ``num.replica.fetchers`` fetchers by hash, as Kafka's AbstractFetcherManager."""

    def __init__(self, broker_id: int, replica_manager: FollowerReplicaManager, config: FetcherConfig) -> None:
        self.broker_id = broker_id
        self._rm = replica_manager
        self.config = config
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}

    def _fetcher_id(self, tp: TopicPartition) -> int:
        return (hash(tp.topic) * 31 + tp.partition) % max(self.config.num_fetchers, 1)

    def is_fetching(self, tp: TopicPartition) -> bool:
        return tp in self._where

    def fetchers(self) -> list[ReplicaFetcher]:
        return list(self._fetchers.values())

    def resize_thread_pool(self, num_fetchers: int) -> None:
        """Dynamic ``num.replica.fetchers`` (Kafka's resizeThreadPool): each partition moves to the
        fetcher its hash names under the new count, so the layout is the one a restart would give;
        fetchers left without partitions stop (their fetch in flight is dropped: the partition
        fetches again from its log end on its new fetcher)."""
        num_fetchers = max(num_fetchers, 1)
        if num_fetchers == self.config.num_fetchers:
            return
        log.info("resizing the replica fetcher pool from %d to %d fetchers per leader",
                 self.config.num_fetchers, num_fetchers)
        self.config = dataclasses.replace(self.config, num_fetchers=num_fetchers)
        moves: dict[TopicPartition, tuple[Partition, tuple[str, int]]] = {}
        for tp, key in list(self._where.items()):
            fetcher = self._fetchers.get(key)
            state = fetcher.partitions.get(tp) if fetcher is not None else None
            if fetcher is not None and state is not None and self._fetcher_id(tp) != key[1]:
                moves[tp] = (state.partition, fetcher.endpoint)
        self.add_partitions(moves)
        self.remove_partitions([])

    def add_partitions(self, partitions: dict[TopicPartition, tuple[Partition, tuple[str, int]]]) -> None:
        for tp, (partition, endpoint) in partitions.items():
            self._remove(tp)
            key = (partition.leader_id, self._fetcher_id(tp))
            fetcher = self._fetchers.get(key)
            if fetcher is not None and fetcher.endpoint != endpoint:
                # the leader came back on another address: its old fetcher goes with its partitions
                for moved in list(fetcher.partitions):
                    self._where.pop(moved, None)
                asyncio.get_running_loop().create_task(fetcher.stop())
                del self._fetchers[key]
                fetcher = None
            if fetcher is None:
                fetcher = ReplicaFetcher(f"ReplicaFetcherThread-{key[1]}-{key[0]}", key[0], endpoint,
                                         self.broker_id, self._rm, self.config)
                self._fetchers[key] = fetcher
                fetcher.start()
            fetcher.add(partition)
            self._where[tp] = key

    def _remove(self, tp: TopicPartition) -> None:
        key = self._where.pop(tp, None)
        if key is not None and (fetcher := self._fetchers.get(key)) is not None:
            fetcher.remove(tp)

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self._remove(tp)
        # idle fetchers close their connection and stop
        for key, fetcher in list(self._fetchers.items()):
            if not fetcher.partitions:
                del self._fetchers[key]
                asyncio.get_running_loop().create_task(fetcher.stop())

    async def shutdown(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._where.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
