"""Requests from this broker to the active controller: ISR changes (AlterPartition, KIP-497) and
controlled shutdown. Kafka's BrokerToControllerChannelManager, as one asyncio connection that
follows the controller wherever ZooKeeper says it is.

``AlterPartitionManager`` batches the ISR proposals of every partition this broker leads: one
request in flight at a time, the proposals made meanwhile go in the next one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.clients.node_clients import ConnectSettings, ListenerSecurity, NodeConnections
from tieredlog.log.types import TopicPartition
from tieredlog.protocol.api import ALTER_PARTITION, CONTROLLED_SHUTDOWN, INTER_BROKER_VERSIONS
from tieredlog.replication.partition import IsrChange, Partition, PartitionState

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 2  # topic ids and plain ISR lists


class ControllerLocator(Protocol):
    """Who the controller is and how to reach it, from this broker's cached view of ZooKeeper."""

    # TLS to the inter-broker listener when it is SSL or SASL_SSL, the SASL login when it is SASL_*
    inter_broker_security: ListenerSecurity

    def controller_endpoint(self) -> tuple[int, str, int] | None: ...

    def broker_epoch(self) -> int: ...


ControllerTarget = tuple[int, str, int]  # the controller's broker id, host, port


class ControllerChannel:
    def __init__(self, broker_id: int, locator: ControllerLocator, *, timeout_s: float = 30.0) -> None:
        self.broker_id = broker_id
        self._locator = locator
        self._timeout_s = timeout_s
        # keyed by the whole target: a controller that moved, or came back on another port, gets a new connection
        self._connections: NodeConnections[ControllerTarget] = NodeConnections(
            lambda target: (target[1], target[2]),
            lambda: ConnectSettings(f"broker-{broker_id}-to-controller", timeout_s,
                                    locator.inter_broker_security))
        self._conn_target: ControllerTarget | None = None
        self._lock = asyncio.Lock()

    async def request(self, api_key: int, body: dict, version: int) -> object:
        """Send to the current controller; ConnectionError when there is none or it cannot be reached."""
        target = self._locator.controller_endpoint()
        if target is None:
            raise ConnectionError("no controller is known")
        async with self._lock:
            if self._conn_target != target:
                await self.close()
                self._conn_target = target
            await self._connections.get(target)
        return await self._connections.request(target, api_key, body, version=version, timeout_s=self._timeout_s)

    async def close(self) -> None:
        await self._connections.close()

    async def controlled_shutdown(self) -> tuple[ErrorCode, list[TopicPartition]]:
        """Ask the controller to move this broker's leaderships away: (error, partitions still led here)."""
        version = INTER_BROKER_VERSIONS[CONTROLLED_SHUTDOWN][1]
        resp = await self.request(CONTROLLED_SHUTDOWN, {"broker_id": self.broker_id,
                                                        "broker_epoch": self._locator.broker_epoch()}, version)
        remaining = [TopicPartition(r.topic_name, r.partition_index) for r in resp.remaining_partitions]  # type: ignore[attr-defined]
        return ErrorCode(resp.error_code), remaining  # type: ignore[attr-defined]


class AlterPartitionManager:
    """The ``IsrChangeSender`` of a broker in a cluster."""

    def __init__(self, channel: ControllerChannel, locator: ControllerLocator, *,
                 on_answered: Callable[[TopicPartition], None], retry_backoff_s: float = 0.5) -> None:
        self._channel = channel
        self._locator = locator
        self._on_answered = on_answered
        self._retry_backoff_s = retry_backoff_s
        self._pending: dict[TopicPartition, tuple[Partition, IsrChange]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._channel.close()

    def submit(self, partition: Partition, change: IsrChange) -> None:
        self._pending[change.tp] = (partition, change)
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._pending = self._pending, {}
            if not batch:
                continue
            try:
                answers = await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the proposals are dropped; the next ISR check proposes again
                log.warning("AlterPartition of %d partition(s) failed: %s", len(batch), exc)
                answers = {}
                await asyncio.sleep(self._retry_backoff_s)
            for tp, (partition, change) in batch.items():
                partition.on_isr_change_answered(change, answers.get(tp))
                # an ISR change may move the HW or fail acks=all waiters: the replica manager looks again
                self._on_answered(tp)

    async def _send(self, batch: dict[TopicPartition, tuple[Partition, IsrChange]]) -> dict[TopicPartition, PartitionState]:
        by_topic: dict[object, list[dict]] = {}
        names: dict[object, str] = {}
        for tp, (partition, change) in batch.items():
            tid = partition.log.topic_id
            names[tid] = tp.topic
            by_topic.setdefault(tid, []).append({
                "partition_index": tp.partition, "leader_epoch": change.leader_epoch, "new_isr": list(change.new_isr),
                "leader_recovery_state": 0, "partition_epoch": change.partition_epoch,
            })
        body = {"broker_id": self._channel.broker_id, "broker_epoch": self._locator.broker_epoch(),
                "topics": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()]}
        resp = await self._channel.request(ALTER_PARTITION, body, ALTER_PARTITION_VERSION)
        top = ErrorCode(resp.error_code)  # type: ignore[attr-defined]
        if top != ErrorCode.none:
            raise ConnectionError(f"the controller answered {top.name}")
        out: dict[TopicPartition, PartitionState] = {}
        for t in resp.topics:  # type: ignore[attr-defined]
            name = names.get(t.topic_id)
            if name is None:
                continue
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    log.info("AlterPartition of %s refused: %s", tp, code.name)
                    continue
                current = batch[tp][0]
                out[tp] = PartitionState(leader=p.leader_id, leader_epoch=p.leader_epoch, isr=tuple(p.isr),
                                         replicas=current.replicas, partition_epoch=p.partition_epoch)
        return out
