"""Helpers of the controller tests: simulated brokers and controllers on one ZooKeeper chroot
(``Cluster``), the requests a controller sends recorded instead of sent (``Recorder``), and AlterPartition
asked of a controller directly."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping

from helpers import wait_for
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tieredlog.cluster.controller_election import ControllerElector
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import BrokerInfo, EndPoint, LeaderIsrAndControllerEpoch, TopicAssignment
from tieredlog.controller import ControllerConfig, KafkaController
from tieredlog.controller.channel import ResponseCallback
from tieredlog.controller.request_batch import STOP_REPLICA
from tieredlog.protocol.codec import build_entity

ALTER_PARTITION = 56


@dataclass
class Sent:
    broker_id: int
    api_key: int
    body: dict[str, Any]


@dataclass
class Recorder:
    """A BrokerRequestSender that records; StopReplica is answered without error."""

    sent: list[Sent] = field(default_factory=list)
    brokers: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def startup(self, brokers: Mapping[int, BrokerInfo]) -> None:
        self.brokers |= set(brokers)

    def shutdown(self) -> None:
        self.brokers.clear()

    def add_broker(self, broker: BrokerInfo) -> None:
        self.brokers.add(broker.broker_id)

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.discard(broker_id)

    def send_request(self, broker_id: int, api_key: int, version: int, body: dict[str, Any],
                     callback: ResponseCallback | None = None) -> None:
        with self.lock:
            self.sent.append(Sent(broker_id, api_key, body))
        if callback is not None and api_key == STOP_REPLICA:
            errors = [SimpleNamespace(topic_name=t["topic_name"], partition_index=p["partition_index"], error_code=0)
                      for t in body["topic_states"] for p in t["partition_states"]]
            callback(SimpleNamespace(error_code=0, partition_errors=errors), None)

    def of(self, api_key: int) -> list[Sent]:
        with self.lock:
            return [s for s in self.sent if s.api_key == api_key]

    def clear(self) -> None:
        with self.lock:
            self.sent.clear()


def broker_info(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),), rack=None)


class Cluster:
    """Simulated brokers and one controller, all on one ZooKeeper chroot."""

    def __init__(self, connect: str) -> None:
        self.connect = connect
        self.admin = ZkClient(connect, session_timeout_ms=6000, name="admin")
        self.admin.start()
        self.brokers: dict[int, ZkClient] = {}
        self.epochs: dict[int, int] = {}
        self.controllers: list[tuple[KafkaController, ZkClient, ControllerElector | None]] = []

    def start_broker(self, broker_id: int) -> int:
        zk = ZkClient(self.connect, session_timeout_ms=6000, name=f"b{broker_id}")
        zk.start()
        self.brokers[broker_id] = zk
        self.epochs[broker_id] = zk.register_broker(broker_info(broker_id))
        return self.epochs[broker_id]

    def kill_broker(self, broker_id: int) -> None:
        self.brokers.pop(broker_id).close()

    def start_controller(self, config: ControllerConfig | None = None, *, elect: bool = True,
                         controller_id: int = 0, zk_class: type[ZkClient] = ZkClient
                         ) -> tuple[KafkaController, Recorder, ZkClient]:
        """``zk_class``: a ZkClient subclass for the controller's session (to record its writes)."""
        zk = zk_class(self.connect, session_timeout_ms=6000, name=f"controller{len(self.controllers)}")
        zk.start()
        recorder = Recorder()
        ctl = KafkaController(zk, controller_id, config or ControllerConfig(auto_leader_rebalance_enable=False),
                              sender_factory=lambda: recorder)
        ctl.start()
        elector = None
        if elect:
            elector = ControllerElector(zk, controller_id, on_become_controller=ctl.on_become_controller,
                                        on_resign=ctl.on_resign)
            elector.start()
            wait_for(lambda: ctl.is_active, "the controller to take office")
        self.controllers.append((ctl, zk, elector))
        return ctl, recorder, zk

    def kill_controller(self, ctl: KafkaController) -> None:
        """The controller's broker dies: its session closes and /controller goes with it."""
        (entry,) = [c for c in self.controllers if c[0] is ctl]
        self.controllers.remove(entry)
        _, zk, elector = entry
        if elector is not None:
            elector.close()
        ctl.close()
        zk.close()

    def create_topic(self, topic: str, replicas: dict[int, list[int]], configs: dict[str, str] | None = None) -> uuid.UUID:
        topic_id = uuid.uuid4()
        if configs:
            self.admin.set_topic_config(topic, configs)
        self.admin.create_topic_assignment(topic, TopicAssignment.of(replicas, topic_id))
        return topic_id

    def state(self, topic: str, partition: int) -> tuple[LeaderIsrAndControllerEpoch, int] | None:
        return self.admin.get_partition_state(topic, partition)

    def wait_state(self, topic: str, partition: int, what: str, **expected: Any) -> tuple[LeaderIsrAndControllerEpoch, int]:
        def check() -> tuple[LeaderIsrAndControllerEpoch, int] | None:
            got = self.state(topic, partition)
            if got is None:
                return None
            return got if all(getattr(got[0], k) == v for k, v in expected.items()) else None
        return wait_for(check, what)

    def close(self) -> None:
        for ctl, zk, elector in self.controllers:
            if elector is not None:
                elector.close()
            ctl.close()
            zk.close()
        for zk in self.brokers.values():
            zk.close()
        self.admin.close()


def partitions_of(body: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(t["topic_name"], p["partition_index"]): p for t in body["topic_states"] for p in t["partition_states"]}


def alter_partition(ctl: KafkaController, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                    leader_epoch: int, isr: list[int], partition_epoch: int, epochs: Mapping[int, int]) -> dict[str, Any]:
    request = build_entity(load_request_schema(ALTER_PARTITION, 3), {
        "broker_id": broker_id, "broker_epoch": broker_epoch,
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition_index": partition, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": epochs.get(b, -1)} for b in isr]}]}],
    })
    return ctl.alter_partition(request).result(timeout=30)


def partition_answer(response: dict[str, Any]) -> dict[str, Any]:
    assert response["error_code"] == ErrorCode.none, response
    (topic,) = response["topics"]
    (answer,) = topic["partitions"]
    return answer  # type: ignore[no-any-return]
