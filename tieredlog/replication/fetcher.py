"""Follower fetchers: Kafka's ``ReplicaFetcherManager`` and ``ReplicaFetcherThread``, as asyncio tasks.

One fetcher per leader broker (times ``num.replica.fetchers``) copies the batches of every partition
this broker follows there. A partition starts in ``TRUNCATING``: the follower asks the leader for
the end offset of its latest leader epoch (OffsetForLeaderEpoch, KIP-101/279) and cuts its log
where the two diverge before it fetches anything. Then it fetches from its log end offset, appends
the leader's batches as they are (offsets and epochs included), and takes the leader's high
watermark and log start offset. A fenced or moved partition waits for the controller's next word.

Network waits are awaits on the event loop; truncation runs on an executor (it touches files).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import FETCH, OFFSET_FOR_LEADER_EPOCH
from tieredlog.protocol.async_client import AsyncKafkaConnection

if TYPE_CHECKING:
    from tieredlog.replication.partition import Partition
    from tieredlog.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # topic names, current_leader_epoch, log_start_offset; every tieredlog broker serves it
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
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


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(slots=True)
class PartitionFetchState:
    partition: Partition
    leader_epoch: int
    state: FetchState = FetchState.TRUNCATING
    delayed_until: float = 0.0
    warned: set[str] = field(default_factory=set)


def whole_batches(records: bytes | memoryview) -> memoryview:
    """The leader may end a response inside a batch (its max bytes cut it); append whole ones only."""
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
                 replica_manager: ReplicaManager, config: FetcherConfig) -> None:
        self.name = name
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.broker_id = broker_id
        self._rm = replica_manager
        self._config = config
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wakeup = asyncio.Event()
        self._conn: AsyncKafkaConnection | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: its failures are logged
                pass
        await self._close()

    def add(self, partition: Partition) -> None:
        self.partitions[partition.tp] = PartitionFetchState(partition, partition.leader_epoch)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> bool:
        return self.partitions.pop(tp, None) is not None

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _connection(self) -> AsyncKafkaConnection:
        if self._conn is None or self._conn.closed:
            host, port = self.endpoint
            self._conn = await AsyncKafkaConnection.open(
                host, port, client_id=f"{self._config.client_id_prefix}-{self.broker_id}",
                timeout_s=self._config.socket_timeout_ms / 1000)
        return self._conn

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = self._config.backoff_ms / 1000
        while True:
            now = loop.time()
            ready = {tp: s for tp, s in self.partitions.items() if s.delayed_until <= now}
            if not ready:
                self._wakeup.clear()
                wake = min((s.delayed_until for s in self.partitions.values()), default=now + 1.0)
                try:
                    await asyncio.wait_for(self._wakeup.wait(), max(wake - now, 0.01))
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                truncating = {tp: s for tp, s in ready.items() if s.state is FetchState.TRUNCATING}
                if truncating:
                    await self._truncate(truncating)
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

    def _delay(self, s: PartitionFetchState, why: str) -> None:
        s.delayed_until = asyncio.get_running_loop().time() + self._config.backoff_ms / 1000
        if why not in s.warned:
            s.warned.add(why)
            log.info("%s: %s: %s; waiting for the controller", self.name, s.partition.tp, why)

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

    async def _truncate_one(self, s: PartitionFetchState, leader_epoch: int, leader_end_offset: int) -> None:
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
            log.info("%s: truncating %s from %d to %d (leader epoch %d ends at %d)", self.name, s.partition.tp,
                     plog.log_end_offset, target, leader_epoch, leader_end_offset)
            await loop.run_in_executor(None, plog.truncate_to, target)
        elif not done:
            done = True  # nothing left to cut: fetch from here
        if done:
            s.state = FetchState.FETCHING

    # ---- fetch ------------------------------------------------------------------------------------

    async def _fetch(self, states: dict[TopicPartition, PartitionFetchState]) -> None:
        cfg = self._config
        by_topic: dict[str, list[dict]] = {}
        for tp, s in states.items():
            plog = s.partition.log
            by_topic.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": plog.log_end_offset, "last_fetched_epoch": -1,
                "log_start_offset": plog.log_start_offset, "partition_max_bytes": cfg.max_bytes,
            })
        conn = await self._connection()
        timeout = cfg.socket_timeout_ms / 1000 + cfg.wait_max_ms / 1000
        resp = await conn.request(FETCH, {
            "replica_id": self.broker_id, "max_wait": cfg.wait_max_ms, "min_bytes": cfg.min_bytes,
            "max_bytes": cfg.response_max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }, version=FETCH_VERSION, timeout_s=timeout)
        if ErrorCode(resp.error_code) != ErrorCode.none:
            raise ConnectionError(f"fetch answered {ErrorCode(resp.error_code).name}")
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                fs = states.get(tp)
                if fs is None or self.partitions.get(tp) is not fs:
                    continue  # removed while the fetch was in flight
                self._process(fs, p)

    def _process(self, s: PartitionFetchState, p: object) -> None:
        code = ErrorCode(p.error_code)  # type: ignore[attr-defined]
        partition = s.partition
        plog = partition.log
        if code == ErrorCode.none:
            records = p.records  # type: ignore[attr-defined]
            if records:
                batches = whole_batches(records)
                if len(batches):
                    plog.append_as_follower(bytes(batches))
            hw = min(p.high_watermark, plog.log_end_offset)  # type: ignore[attr-defined]
            if hw > plog.high_watermark:
                plog.update_high_watermark(hw)
            leader_start = p.log_start_offset  # type: ignore[attr-defined]
            if leader_start > plog.log_start_offset:
                plog.maybe_increment_log_start_offset(min(leader_start, plog.high_watermark), "leader_offset_increment")
            s.warned.clear()
            return
        if code == ErrorCode.offset_out_of_range:
            leader_start = p.log_start_offset  # type: ignore[attr-defined]
            if 0 <= leader_start and plog.log_end_offset < leader_start:
                # everything we have is below what the leader keeps: start over at its log start
                log.info("%s: %s is at %d, below the leader's log start %d: starting over there",
                         self.name, partition.tp, plog.log_end_offset, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
            else:
                s.state = FetchState.TRUNCATING  # we are past the leader's end: an unclean election
            return
        if code == ErrorCode.offset_moved_to_tiered_storage:
            self._delay(s, "the leader's local log starts above our log end offset (tiered storage follower "
                           "rebuild is not supported yet)")
            return
        self._delay(s, f"fetch answered {code.name}")


class ReplicaFetcherManager:
    """Which fetcher fetches which partition: partitions of one leader spread over
    ``num.replica.fetchers`` fetchers by hash, as Kafka's AbstractFetcherManager."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager, config: FetcherConfig) -> None:
        self.broker_id = broker_id
        self._rm = replica_manager
        self.config = config
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}

    def _fetcher_id(self, tp: TopicPartition) -> int:
        return (hash(tp.topic) * 31 + tp.partition) % max(self.config.num_fetchers, 1)

    def is_fetching(self, tp: TopicPartition) -> bool:
        return tp in self._where

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
