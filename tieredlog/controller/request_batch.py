"""Controller-to-broker requests, batched per event (Kafka's ``ControllerBrokerRequestBatch``).

While the controller handles one event it only records what each broker must learn; at the end it
sends at most one LeaderAndIsr, one UpdateMetadata and one StopReplica per broker. So the failover of
a thousand partitions costs one request per surviving broker, not one per partition.

This module is the one place where request bodies are built: dicts of the Kafka 3.9 field names as the
wire classes in ``tieredlog.protocol.inter_broker`` spell them (``codec.build_entity`` turns them into
entities when sent).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kio.schema.errors import ErrorCode

from tieredlog.cluster.znodes import BrokerInfo, EndPoint
from tieredlog.controller.channel import BrokerRequestSender
from tieredlog.controller.context import ControllerContext, LeaderIsrAndEpoch, TopicPartition
from tieredlog.controller.election import LEADER_DURING_DELETE

state_change_log = logging.getLogger("state.change.logger")

# the api keys and the versions a ZooKeeper-mode controller of Kafka 3.9 sends
LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7
LEADER_AND_ISR_VERSION = 7
STOP_REPLICA_VERSION = 4
UPDATE_METADATA_VERSION = 8

EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch for a partition being deleted
NO_EPOCH = -1

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

StopReplicaCallback = Callable[[int, Any, "BaseException | None", "frozenset[TopicPartition]"], None]
"""``(broker_id, response, error, partitions deleted)``: a StopReplica that deleted partitions answered."""
ResponseHandler = Callable[[int, int, Any, "BaseException | None"], None]
"""``(broker_id, api_key, response, error)`` of the other requests (errors are logged)."""


@dataclass
class _LeaderAndIsrEntry:
    info: LeaderIsrAndEpoch
    is_new: bool


@dataclass
class _StopReplicaEntry:
    delete_partition: bool
    leader_epoch: int


class ControllerBrokerRequestBatch:
    def __init__(self, context: ControllerContext, controller_id: int, sender: BrokerRequestSender,
                 endpoint_for: Callable[[BrokerInfo], EndPoint | None], *,
                 on_stop_replica_response: StopReplicaCallback, on_response: ResponseHandler) -> None:
        self.ctx = context
        self.controller_id = controller_id
        self.sender = sender
        self.endpoint_for = endpoint_for
        self.on_stop_replica_response = on_stop_replica_response
        self.on_response = on_response
        self.leader_and_isr: dict[int, dict[TopicPartition, _LeaderAndIsrEntry]] = {}
        self.stop_replica: dict[int, dict[TopicPartition, _StopReplicaEntry]] = {}
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: set[TopicPartition] = set()

    def is_empty(self) -> bool:
        return not (self.leader_and_isr or self.stop_replica or self.update_metadata_brokers)

    def clear(self) -> None:
        self.leader_and_isr.clear()
        self.stop_replica.clear()
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()

    # ---- collecting ----------------------------------------------------------------------------------

    def add_leader_and_isr_request_for_brokers(self, broker_ids: Iterable[int], tp: TopicPartition,
                                               info: LeaderIsrAndEpoch, is_new: bool) -> None:
        """LeaderAndIsr for ``tp`` to ``broker_ids``, and UpdateMetadata for it to every live broker."""
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self.leader_and_isr.setdefault(broker_id, {})
            old = per_broker.get(tp)
            per_broker[tp] = _LeaderAndIsrEntry(info, is_new or (old is not None and old.is_new))
            # the last word for a replica wins, as if each had been sent in turn: a broker that bounced
            # is stopped as failed, then started again in the same event
            stop = self.stop_replica.get(broker_id, {})
            if tp in stop and not stop[tp].delete_partition:
                del stop[tp]
        self.add_update_metadata_request_for_brokers(self.ctx.live_or_shutting_down_broker_ids, [tp])

    def add_update_metadata_request_for_brokers(self, broker_ids: Iterable[int],
                                                partitions: Iterable[TopicPartition] = ()) -> None:
        """UpdateMetadata to ``broker_ids`` (every live broker listed, with ``partitions``' states); with
        no partitions it still goes out, carrying the live brokers."""
        self.update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        self.update_metadata_partitions.update(partitions)

    def add_stop_replica_request_for_brokers(self, broker_ids: Iterable[int], tp: TopicPartition,
                                             delete_partition: bool) -> None:
        info = self.ctx.leadership.get(tp)
        if info is None:
            epoch = NO_EPOCH
        elif self.ctx.is_topic_queued_up_for_deletion(tp.topic):
            epoch = EPOCH_DURING_DELETE
        else:
            epoch = info.leader_and_isr.leader_epoch
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            self.leader_and_isr.get(broker_id, {}).pop(tp, None)
            per_broker = self.stop_replica.setdefault(broker_id, {})
            old = per_broker.get(tp)
            per_broker[tp] = _StopReplicaEntry(delete_partition or (old is not None and old.delete_partition), epoch)

    # ---- sending -------------------------------------------------------------------------------------

    def send_requests_to_brokers(self) -> None:
        """Send what was collected (LeaderAndIsr first, then UpdateMetadata, then StopReplica, as Kafka
        does) and start a new batch. Requests to brokers that are no longer live are dropped."""
        try:
            self._send_leader_and_isr()
            self._send_update_metadata()
            self._send_stop_replica()
        finally:
            self.clear()

    def _prefix(self) -> str:
        return f"[Controller id={self.controller_id} epoch={self.ctx.epoch}] "

    def _send_leader_and_isr(self) -> None:
        live = self.ctx.live_or_shutting_down_broker_ids
        for broker_id, partitions in sorted(self.leader_and_isr.items()):
            if broker_id not in live or not partitions:
                continue
            leaders = {e.info.leader_and_isr.leader for e in partitions.values()}
            n_lead = sum(1 for e in partitions.values() if e.info.leader_and_isr.leader == broker_id)
            state_change_log.info("%sSending LeaderAndIsr request to broker %d with %d become-leader and %d "
                                  "become-follower partitions", self._prefix(), broker_id, n_lead, len(partitions) - n_lead)
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, entry in sorted(partitions.items()):
                lai = entry.info.leader_and_isr
                assignment = self.ctx.full_assignment(tp)
                by_topic.setdefault(tp.topic, []).append({
                    "partition_index": tp.partition,
                    "controller_epoch": entry.info.controller_epoch,
                    "leader": lai.leader,
                    "leader_epoch": lai.leader_epoch,
                    "isr": list(lai.isr),
                    "partition_epoch": lai.partition_epoch,
                    "replicas": list(assignment.replicas),
                    "adding_replicas": list(assignment.adding_replicas),
                    "removing_replicas": list(assignment.removing_replicas),
                    "is_new": entry.is_new,
                    "leader_recovery_state": lai.leader_recovery_state,
                })
            live_leaders = []
            for leader in sorted(leaders):
                info = self.ctx.live_brokers.get(leader)
                endpoint = self.endpoint_for(info) if info is not None else None
                if endpoint is not None:
                    live_leaders.append({"broker_id": leader, "host_name": endpoint.host, "port": endpoint.port})
            body = {
                "controller_id": self.controller_id,
                "is_k_raft_controller": False,
                "controller_epoch": self.ctx.epoch,
                "broker_epoch": self.ctx.live_broker_epochs.get(broker_id, -1),
                "type_": 0,
                "topic_states": [{"topic_name": t, "topic_id": self.ctx.topic_ids.get(t), "partition_states": states}
                                 for t, states in sorted(by_topic.items())],
                "live_leaders": live_leaders,
            }
            self.sender.send_request(broker_id, LEADER_AND_ISR, LEADER_AND_ISR_VERSION, body,
                                     self._callback(broker_id, LEADER_AND_ISR))

    def update_metadata_partition_state(self, tp: TopicPartition) -> dict[str, Any] | None:
        info = self.ctx.leadership.get(tp)
        if info is None:
            return None
        lai = info.leader_and_isr
        replicas = self.ctx.replica_assignment(tp)
        return {
            "partition_index": tp.partition,
            "controller_epoch": info.controller_epoch,
            # brokers learn that a topic is being deleted from this leader
            "leader": LEADER_DURING_DELETE if self.ctx.is_topic_queued_up_for_deletion(tp.topic) else lai.leader,
            "leader_epoch": lai.leader_epoch,
            "isr": list(lai.isr),
            "zk_version": lai.partition_epoch,
            "replicas": list(replicas),
            "offline_replicas": [r for r in replicas if not self.ctx.is_replica_online(r)],
        }

    def live_brokers_for_update_metadata(self) -> list[dict[str, Any]]:
        return [{
            "id_": b.broker_id,
            "endpoints": [{"port": e.port, "host": e.host, "listener": e.listener_name,
                           "security_protocol": SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0)} for e in b.endpoints],
            "rack": b.rack,
        } for _, b in sorted(self.ctx.live_brokers.items())]

    def _send_update_metadata(self) -> None:
        live = self.ctx.live_or_shutting_down_broker_ids
        targets = sorted(b for b in self.update_metadata_brokers if b in live)
        if not targets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in sorted(self.update_metadata_partitions):
            state = self.update_metadata_partition_state(tp)
            if state is not None:
                by_topic.setdefault(tp.topic, []).append(state)
        n = sum(len(v) for v in by_topic.values())
        state_change_log.info("%sSending UpdateMetadata request to brokers Set(%s) for %d partitions", self._prefix(),
                              ", ".join(map(str, targets)), n)
        topic_states = [{"topic_name": t, "topic_id": self.ctx.topic_ids.get(t), "partition_states": states}
                        for t, states in sorted(by_topic.items())]
        live_brokers = self.live_brokers_for_update_metadata()
        for broker_id in targets:
            body = {
                "controller_id": self.controller_id,
                "is_k_raft_controller": False,
                "type_": 0,
                "controller_epoch": self.ctx.epoch,
                "broker_epoch": self.ctx.live_broker_epochs.get(broker_id, -1),
                "topic_states": topic_states,
                "live_brokers": live_brokers,
            }
            self.sender.send_request(broker_id, UPDATE_METADATA, UPDATE_METADATA_VERSION, body,
                                     self._callback(broker_id, UPDATE_METADATA))

    def _send_stop_replica(self) -> None:
        live = self.ctx.live_or_shutting_down_broker_ids
        for broker_id, partitions in sorted(self.stop_replica.items()):
            if broker_id not in live or not partitions:
                continue
            state_change_log.info("%sSending StopReplica request for %d replicas to broker %d", self._prefix(),
                                  len(partitions), broker_id)
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp, entry in sorted(partitions.items()):
                by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition,
                                                          "leader_epoch": entry.leader_epoch,
                                                          "delete_partition": entry.delete_partition})
            body = {
                "controller_id": self.controller_id,
                "is_k_raft_controller": False,
                "controller_epoch": self.ctx.epoch,
                "broker_epoch": self.ctx.live_broker_epochs.get(broker_id, -1),
                "topic_states": [{"topic_name": t, "partition_states": states} for t, states in sorted(by_topic.items())],
            }
            deleted = frozenset(tp for tp, e in partitions.items() if e.delete_partition)
            if deleted:
                self.sender.send_request(broker_id, STOP_REPLICA, STOP_REPLICA_VERSION, body,
                                         self._stop_replica_callback(broker_id, deleted))
            else:
                self.sender.send_request(broker_id, STOP_REPLICA, STOP_REPLICA_VERSION, body,
                                         self._callback(broker_id, STOP_REPLICA))

    def _callback(self, broker_id: int, api_key: int) -> Callable[[Any, BaseException | None], None]:
        def done(response: Any, error: BaseException | None) -> None:
            self.on_response(broker_id, api_key, response, error)
        return done

    def _stop_replica_callback(self, broker_id: int, deleted: frozenset[TopicPartition]
                               ) -> Callable[[Any, BaseException | None], None]:
        def done(response: Any, error: BaseException | None) -> None:
            self.on_stop_replica_response(broker_id, response, error, deleted)
        return done


def stop_replica_errors(response: Any) -> tuple[int, dict[TopicPartition, int]]:
    """(top-level error code, partition -> error code) of a StopReplica response entity."""
    errors = {TopicPartition(str(e.topic_name), int(e.partition_index)): _code(e.error_code)
              for e in response.partition_errors}
    return _code(response.error_code), errors


def _code(value: Any) -> int:
    return int(value.value) if isinstance(value, ErrorCode) else int(value)
