"""Kafka's controller in ZooKeeper mode (``KafkaController``).

One broker of the cluster is the controller: the elector (``tieredlog.cluster.controller_election``)
calls ``on_become_controller(epoch)`` when this broker wins /controller and ``on_resign()`` when it
loses it. The controller then watches ZooKeeper, decides every partition's leader and ISR, writes them
to the partition state znodes (conditionally, fenced by the controller epoch) and tells the brokers
with LeaderAndIsr, UpdateMetadata and StopReplica requests.

Threads. Everything that reads or writes ZooKeeper or the ``ControllerContext`` runs on one thread,
``controller-event-thread``, one event at a time (Kafka's ControllerEventManager). ZooKeeper watches
(kazoo's thread), the elector's callbacks (its thread), the channel's response callbacks (the sender
threads), the rebalance timer and the broker's request handlers (asyncio) only put an event on the
queue; the entry points return a ``concurrent.futures.Future`` (from asyncio:
``asyncio.wrap_future``). Requests are collected in one batch per event and sent when it is done.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from concurrent.futures import Future
from typing import Any, Callable, Iterable

from kazoo.protocol.states import EventType, WatchedEvent
from kio.schema.errors import ErrorCode

from tieredlog.clients.routing import inter_broker_endpoint
from tieredlog.cluster import znodes
from tieredlog.cluster.errors import ControllerMovedError
from tieredlog.cluster.zk import ZkClient
from tieredlog.cluster.znodes import BrokerInfo, EndPoint, ReplicaAssignment, TopicAssignment
from tieredlog.controller import events as ev
from tieredlog.controller.alter_partition import AlterPartitionHandler
from tieredlog.controller.channel import BrokerRequestSender, ControllerChannelManager
from tieredlog.controller.config import ControllerConfig
from tieredlog.controller.context import (
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from tieredlog.controller.election import (
    NO_LEADER,
    ElectionStrategy,
    ElectionType,
    preferred_replica_partition_leader_election,
)
from tieredlog.controller.internal_topics import INTERNAL_TOPIC_REPLICATION_CONFIGS, raised_replicas
from tieredlog.controller.reassignment import PartitionReassigner
from tieredlog.controller.request_batch import ControllerBrokerRequestBatch, stop_replica_errors
from tieredlog.controller.state_machines import (
    PartitionStateMachine,
    ReplicaStateMachine,
    StateChangeFailedError,
)
from tieredlog.controller.topic_deletion import TopicDeletionListener, TopicDeletionManager

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("state.change.logger")

SenderFactory = Callable[[], BrokerRequestSender]

AUTO_REBALANCE_INITIAL_DELAY_S = 5.0  # Kafka waits this long after a failover before the first check


class KafkaController:
    def __init__(self, zk: ZkClient, broker_id: int, config: ControllerConfig | None = None,
                 sender_factory: SenderFactory | None = None,
                 on_topic_deleted: TopicDeletionListener | None = None) -> None:
        self.zk = zk
        self._on_topic_deleted = on_topic_deleted
        self.broker_id = broker_id
        self.config = config or ControllerConfig()
        self._sender_factory = sender_factory or self._default_sender
        self.ctx = ControllerContext()
        self._queue: queue.Queue[ev.ControllerEvent | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller-event-thread", daemon=True)
        self._active = False  # written on the event thread only; read anywhere
        self._closed = False
        self._started = False
        self._sender: BrokerRequestSender | None = None
        self._batch: ControllerBrokerRequestBatch | None = None
        self._replicas: ReplicaStateMachine | None = None
        self._partitions: PartitionStateMachine | None = None
        self._deletion: TopicDeletionManager | None = None
        self._reassigner: PartitionReassigner | None = None
        self._rebalance_timer: threading.Timer | None = None
        self._timer_lock = threading.Lock()

    def _default_sender(self) -> BrokerRequestSender:
        return ControllerChannelManager(self.broker_id,
                                        inter_broker_listener_name=self.config.inter_broker_listener_name,
                                        security_inter_broker_protocol=self.config.security_inter_broker_protocol,
                                        socket_timeout_ms=self.config.controller_socket_timeout_ms,
                                        security=self.config.inter_broker_security)

    # ---- lifecycle (any thread) ----------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True while this broker is the controller and has loaded the cluster's state."""
        return self._active

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    def start(self) -> None:
        """Start the event thread (idempotent); the controller stays inactive until elected."""
        if self._started:
            return
        self._started = True
        self.zk.add_connection_listener(self)
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Resign if active, stop the event thread and the channel. Events still queued are rejected."""
        if self._closed:
            return
        self._closed = True
        self.zk.remove_connection_listener(self)
        self._cancel_rebalance_timer()
        if self._started:
            self._queue.put(ev.Resign())
            self._queue.put(None)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout_s)
        else:
            self._on_controller_resignation()

    def on_become_controller(self, epoch: int) -> None:
        """The elector's callback (its thread): this broker won /controller at ``epoch``."""
        self._put(ev.BecomeController(epoch))

    def on_resign(self) -> None:
        """The elector's callback: /controller is no longer ours."""
        self._put(ev.Resign())

    # ZooKeeper connection listener (the client's events thread)
    def on_connected(self, new_session: bool) -> None:
        self._put(ev.Reconnected())

    def on_session_expired(self) -> None:
        pass  # the elector resigns us

    # ---- entry points for the broker's request handlers (never block) --------------------------------

    def alter_partition(self, request: Any) -> Future[dict[str, Any]]:
        """AlterPartition v2/v3 (the decoded request entity) -> a dict of AlterPartitionResponse fields."""
        event = ev.AlterPartitionReceived(request)
        self._put(event)
        return event.future

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future[tuple[int, list[tuple[str, int]]]]:
        """-> (error code, partitions the broker still leads: (topic, partition)); the broker retries
        while that list is not empty."""
        event = ev.ControlledShutdownReceived(broker_id, broker_epoch)
        self._put(event)
        return event.future

    def elect_leaders(self, election_type: ElectionType | int,
                      partitions: Iterable[tuple[str, int]] | None = None) -> Future[dict[str, Any]]:
        """ElectLeaders (KIP-460); ``partitions`` None: all. -> a dict of ElectLeadersResponse fields."""
        parts = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
        event = ev.ElectLeadersReceived(ElectionType(election_type), parts)
        self._put(event)
        return event.future

    def alter_partition_reassignments(self, targets: dict[tuple[str, int], Iterable[int] | None]) -> Future[dict[str, Any]]:
        """AlterPartitionReassignments (KIP-455): (topic, partition) -> target replicas, or None to
        cancel. -> a dict of AlterPartitionReassignmentsResponse fields."""
        parsed = {TopicPartition(t, p): (None if r is None else tuple(r)) for (t, p), r in targets.items()}
        event = ev.AlterPartitionReassignmentsReceived(parsed)
        self._put(event)
        return event.future

    def list_partition_reassignments(self, partitions: Iterable[tuple[str, int]] | None = None
                                     ) -> Future[dict[str, Any]]:
        parts = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
        event = ev.ListPartitionReassignmentsReceived(parts)
        self._put(event)
        return event.future

    def barrier(self) -> Future[None]:
        """Completes when the events queued before it are processed (tests, orderly hand-offs)."""
        event = ev.Barrier()
        self._put(event)
        return event.future

    def _put(self, event: ev.ControllerEvent) -> None:
        if self._closed or not self._started:
            event.reject(ErrorCode.not_controller)
            return
        self._queue.put(event)

    # ---- watches (kazoo's thread: only enqueue) ------------------------------------------------------

    def _on_broker_change(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._put(ev.BrokerChange())

    def _on_topic_change(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._put(ev.TopicChange())

    def _on_topic_deletion(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._put(ev.TopicDeletion())

    def _on_reassignment(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._put(ev.PartitionReassignmentZnode())

    def _on_topic_modification(self, event: WatchedEvent) -> None:
        prefix = znodes.TOPICS_PATH + "/"
        if event.type != EventType.NONE and event.path.startswith(prefix):
            self._put(ev.PartitionModifications(event.path[len(prefix):]))

    # ---- the event thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                break
            self._process_one(event)
        while True:  # closed: answer whoever still waits
            try:
                left = self._queue.get_nowait()
            except queue.Empty:
                return
            if left is not None:
                left.reject(ErrorCode.not_controller)

    def _process_one(self, event: ev.ControllerEvent) -> None:
        try:
            self._process(event)
            if self._active and self._batch is not None:
                self._batch.send_requests_to_brokers()
        except ControllerMovedError as exc:
            log.info("Controller %d: the controller moved to another broker while processing %s (%s); resigning",
                     self.broker_id, type(event).__name__, exc)
            event.reject(ErrorCode.not_controller)
            self._on_controller_resignation()
        except Exception:
            log.exception("Controller %d failed to process %s", self.broker_id, type(event).__name__)
            event.reject(ErrorCode.unknown_server_error)
            if self._batch is not None:
                self._batch.clear()

    def _process(self, event: ev.ControllerEvent) -> None:
        if isinstance(event, ev.BecomeController):
            self._on_controller_failover(event.epoch)
            return
        if isinstance(event, ev.Resign):
            self._on_controller_resignation()
            return
        if isinstance(event, ev.Barrier):
            ev.complete(event.future, None)
            return
        if not self._active:
            event.reject(ErrorCode.not_controller)
            return
        if isinstance(event, ev.BrokerChange):
            self._process_broker_change()
        elif isinstance(event, ev.TopicChange):
            self._process_topic_change()
        elif isinstance(event, ev.PartitionModifications):
            self._process_partition_modifications(event.topic)
        elif isinstance(event, ev.TopicDeletion):
            self._process_topic_deletion()
        elif isinstance(event, ev.Reconnected):
            self._process_reconnected()
        elif isinstance(event, ev.TopicDeletionStopReplicaResponseReceived):
            self._process_stop_replica_response(event)
        elif isinstance(event, ev.AlterPartitionReceived):
            self._process_alter_partition(event)
        elif isinstance(event, ev.ControlledShutdownReceived):
            ev.complete(event.future, self._process_controlled_shutdown(event.broker_id, event.broker_epoch))
        elif isinstance(event, ev.ElectLeadersReceived):
            ev.complete(event.future, self._process_elect_leaders(event.election_type, event.partitions))
        elif isinstance(event, ev.AutoPreferredReplicaLeaderElection):
            try:
                self._check_and_trigger_auto_leader_rebalance()
            finally:
                self._schedule_auto_leader_rebalance(self.config.leader_imbalance_check_interval_seconds)
        elif isinstance(event, ev.PartitionReassignmentZnode):
            assert self._reassigner is not None
            self._reassigner.process_znode()
        elif isinstance(event, ev.AlterPartitionReassignmentsReceived):
            assert self._reassigner is not None
            ev.complete(event.future, self._reassigner.alter(event.targets))
        elif isinstance(event, ev.ListPartitionReassignmentsReceived):
            assert self._reassigner is not None
            ev.complete(event.future, self._reassigner.list(event.partitions))

    # ---- failover and resignation --------------------------------------------------------------------

    def _on_controller_failover(self, epoch: int) -> None:
        if self._active:
            self._on_controller_resignation()
        current = self.zk.get_controller_epoch()
        if current is None or current[0] != epoch:
            log.info("Controller %d: not taking office for epoch %d, /controller_epoch is now %s", self.broker_id, epoch,
                     current[0] if current else None)
            return
        log.info("Controller %d: starting failover for controller epoch %d", self.broker_id, epoch)
        ctx = self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=current[1])
        self._sender = self._sender_factory()
        batch = self._batch = ControllerBrokerRequestBatch(
            ctx, self.broker_id, self._sender, self._endpoint_for,
            on_stop_replica_response=self._stop_replica_response_callback, on_response=self._log_response)
        self._replicas = ReplicaStateMachine(ctx, self.zk, batch, self.broker_id)
        self._partitions = PartitionStateMachine(ctx, self.zk, batch, self.broker_id, self._unclean_enabled)
        self._deletion = TopicDeletionManager(ctx, self.zk, batch, self._replicas, self._partitions,
                                              self.config.delete_topic_enable, self.broker_id,
                                              on_topic_deleted=self._on_topic_deleted)
        self._reassigner = PartitionReassigner(ctx, self.zk, batch, self._replicas, self._partitions, self._deletion,
                                               self.broker_id, znode_watch=self._on_reassignment)
        self._active = True
        self._initialize_controller_context()
        markers = set(self.zk.get_topics_marked_for_deletion(watch=self._on_topic_deletion))
        for topic in sorted(markers - ctx.all_topics):
            self.zk.remove_topic_deletion_marker(topic, expected_controller_epoch_zk_version=ctx.epoch_zk_version)
        to_delete = markers & ctx.all_topics
        ineligible = {r.topic_partition.topic for t in to_delete for r in ctx.replicas_for_topic(t)
                      if not ctx.is_replica_online(r.replica)}
        ineligible |= {tp.topic for tp in ctx.partitions_being_reassigned}
        self._deletion.init(to_delete, ineligible)
        # every live broker learns the live brokers; the state machines add every partition's state
        batch.add_update_metadata_request_for_brokers(ctx.live_or_shutting_down_broker_ids)
        self._replicas.startup()
        self._partitions.startup()
        self._reassigner.resume_on_failover()
        self._deletion.try_topic_deletion()
        self._raise_internal_topics_replication()
        if self.config.auto_leader_rebalance_enable:
            self._schedule_auto_leader_rebalance(min(AUTO_REBALANCE_INITIAL_DELAY_S,
                                                     self.config.leader_imbalance_check_interval_seconds))
        log.info("Controller %d: ready (epoch %d, %d live brokers, %d topics, %d partitions)", self.broker_id, epoch,
                 len(ctx.live_brokers), len(ctx.all_topics), len(ctx.leadership))

    def _initialize_controller_context(self) -> None:
        ctx = self.ctx
        brokers = self.zk.get_all_broker_and_epochs(watch=self._on_broker_change)
        ctx.add_live_brokers(brokers)
        assert self._sender is not None
        self._sender.startup(dict(ctx.live_brokers))
        topics = self.zk.get_all_topics(watch=self._on_topic_change)
        for topic in topics:
            self._load_topic(topic)
        for tp in ctx.all_partitions():
            got = self.zk.get_partition_state(tp.topic, tp.partition)
            if got is not None:
                ctx.leadership[tp] = LeaderIsrAndEpoch.from_znode(*got)

    def _load_topic(self, topic: str) -> dict[int, ReplicaAssignment] | None:
        """Read /brokers/topics/<t> (watching it for added partitions), giving the topic an id if an
        older tool created it without one. Returns the partitions not known before."""
        got = self.zk.get_topic_assignment(topic, watch=self._on_topic_modification)
        if got is None:
            return None
        assignment, version = got
        if assignment.topic_id is None:
            assignment = TopicAssignment(assignment.partitions, uuid.uuid4())
            self.zk.update_topic_assignment(topic, assignment, version,
                                            expected_controller_epoch_zk_version=self.ctx.epoch_zk_version)
        ctx = self.ctx
        ctx.all_topics.add(topic)
        assert assignment.topic_id is not None
        ctx.topic_ids[topic] = assignment.topic_id
        known = ctx.assignments.get(topic, {})
        added = {p: a for p, a in assignment.partitions.items() if p not in known}
        for p, a in added.items():
            ctx.update_assignment(TopicPartition(topic, p), a)
        return added

    def _on_controller_resignation(self) -> None:
        was_active = self._active
        self._active = False
        self._cancel_rebalance_timer()
        if self._batch is not None:
            self._batch.clear()
        if self._sender is not None:
            self._sender.shutdown()
        self._sender = None
        self._batch = self._replicas = self._partitions = None
        self._deletion = None
        self._reassigner = None
        if was_active:
            log.info("Controller %d: resigned as the controller of epoch %d", self.broker_id, self.ctx.epoch)
        self.ctx = ControllerContext(epoch=self.ctx.epoch)

    def _process_reconnected(self) -> None:
        # watches do not survive a lost connection: set them again and catch up with what changed
        self._process_broker_change()
        self._process_topic_change()
        for topic in sorted(self.ctx.all_topics):
            self._process_partition_modifications(topic)
        self._process_topic_deletion()
        assert self._reassigner is not None
        self._reassigner.process_znode()

    # ---- helpers -------------------------------------------------------------------------------------

    def _endpoint_for(self, broker: BrokerInfo) -> EndPoint | None:
        return inter_broker_endpoint(broker, self.config.inter_broker_listener_name,
                                     self.config.security_inter_broker_protocol)

    def _unclean_enabled(self, topic: str) -> bool:
        value = self.zk.get_topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _state_machines(self) -> tuple[ControllerBrokerRequestBatch, ReplicaStateMachine, PartitionStateMachine,
                                       TopicDeletionManager]:
        assert self._batch and self._replicas and self._partitions and self._deletion
        return self._batch, self._replicas, self._partitions, self._deletion

    def _prefix(self) -> str:
        return f"[Controller id={self.broker_id} epoch={self.ctx.epoch}] "

    # ---- brokers -------------------------------------------------------------------------------------

    def _process_broker_change(self) -> None:
        ctx = self.ctx
        assert self._sender is not None
        current = self.zk.get_all_broker_and_epochs(watch=self._on_broker_change)
        known = ctx.live_or_shutting_down_broker_ids
        new = sorted(set(current) - known)
        dead = sorted(known - set(current))
        bounced = sorted(b for b in set(current) & known if ctx.live_broker_epochs.get(b, -1) < current[b][1])
        log.info("Controller %d: newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live brokers: %s",
                 self.broker_id, ",".join(map(str, new)), ",".join(map(str, dead)), ",".join(map(str, bounced)),
                 ",".join(map(str, sorted(current))))
        for b in bounced + dead:
            self._sender.remove_broker(b)
        for b in new + bounced:
            self._sender.add_broker(current[b][0])
        if new:
            ctx.add_live_brokers({b: current[b] for b in new})
            self._on_broker_startup(new)
        if bounced:
            ctx.remove_live_brokers(bounced)
            self._on_broker_failure(bounced)
            ctx.add_live_brokers({b: current[b] for b in bounced})
            self._on_broker_startup(bounced)
        if dead:
            ctx.remove_live_brokers(dead)
            self._on_broker_failure(dead)

    def _on_broker_startup(self, new_brokers: list[int]) -> None:
        """New brokers learn every partition's state and the others learn the new brokers; the new
        brokers' replicas go Online (LeaderAndIsr) and partitions without a leader may get one now."""
        batch, replicas, partitions, deletion = self._state_machines()
        ctx = self.ctx
        log.info("Controller %d: new broker startup callback for %s", self.broker_id, ",".join(map(str, new_brokers)))
        batch.add_update_metadata_request_for_brokers(ctx.live_or_shutting_down_broker_ids)
        batch.add_update_metadata_request_for_brokers(new_brokers, ctx.partitions_with_leaders())
        on_new = ctx.replicas_on_brokers(set(new_brokers))
        replicas.handle_state_changes([r for r in on_new if not ctx.is_topic_queued_up_for_deletion(r.topic_partition.topic)],
                                      ReplicaState.ONLINE)
        partitions.trigger_online_partition_state_change()
        assert self._reassigner is not None
        self._reassigner.on_brokers_started(set(new_brokers))
        deletion.resume_deletion_for_topics({r.topic_partition.topic for r in on_new
                                             if ctx.is_topic_queued_up_for_deletion(r.topic_partition.topic)})
        self._raise_internal_topics_replication()

    def _raise_internal_topics_replication(self) -> None:
        """Internal topics created with fewer replicas than configured (too few brokers registered then)
        get the others by a reassignment once the brokers are there (``internal_topics``)."""
        assert self._reassigner is not None
        for topic, factor in sorted(self.config.internal_topic_replication_factors.items()):
            targets = raised_replicas(self.ctx, topic, factor)
            if not targets:
                continue
            before = sorted({len(self.ctx.replica_assignment(tp)) for tp in targets})
            log.info("Controller %d: raising the replication factor of %s partitions %s from %s to %d (%s=%d) by "
                     "reassigning them to %s", self.broker_id, topic, ",".join(str(tp.partition) for tp in targets),
                     ",".join(map(str, before)), len(next(iter(targets.values()))),
                     INTERNAL_TOPIC_REPLICATION_CONFIGS.get(topic, "replication factor"), factor,
                     "; ".join(f"{tp.partition}: {list(r)}" for tp, r in targets.items()))
            self._reassigner.alter(dict(targets))

    def _on_broker_failure(self, dead_brokers: list[int]) -> None:
        ctx = self.ctx
        log.info("Controller %d: broker failure callback for %s", self.broker_id, ",".join(map(str, dead_brokers)))
        for b in dead_brokers:
            ctx.shutting_down_broker_ids.discard(b)
        self._on_replicas_become_offline(ctx.replicas_on_brokers(set(dead_brokers)))

    def _on_replicas_become_offline(self, offline: list[PartitionAndReplica]) -> None:
        """Partitions whose leader went away elect another (Offline, then Online); the replicas go
        Offline, leaving their ISRs; a topic being deleted waits for the replicas it lost."""
        batch, replicas, partitions, deletion = self._state_machines()
        ctx = self.ctx
        for_deletion = [r for r in offline if ctx.is_topic_queued_up_for_deletion(r.topic_partition.topic)]
        not_for_deletion = [r for r in offline if not ctx.is_topic_queued_up_for_deletion(r.topic_partition.topic)]
        with_offline_leader = ctx.partitions_with_offline_leader()
        partitions.handle_state_changes(with_offline_leader, PartitionState.OFFLINE)
        partitions.trigger_online_partition_state_change()
        replicas.handle_state_changes(not_for_deletion, ReplicaState.OFFLINE)
        if for_deletion:
            deletion.fail_replica_deletion(for_deletion)
        if not with_offline_leader:
            batch.add_update_metadata_request_for_brokers(ctx.live_or_shutting_down_broker_ids)

    # ---- topics --------------------------------------------------------------------------------------

    def _process_topic_change(self) -> None:
        ctx = self.ctx
        topics = set(self.zk.get_all_topics(watch=self._on_topic_change))
        new_topics = sorted(topics - ctx.all_topics)
        deleted = sorted(ctx.all_topics - topics)
        for topic in deleted:
            ctx.remove_topic(topic)
        added: list[TopicPartition] = []
        for topic in new_topics:
            parts = self._load_topic(topic)
            if parts:
                added += [TopicPartition(topic, p) for p in sorted(parts)]
        if new_topics or deleted:
            log.info("Controller %d: new topics: [%s], deleted topics: [%s]", self.broker_id, ",".join(new_topics),
                     ",".join(deleted))
        if added:
            self._on_new_partition_creation(added)
            # an internal topic created by a broker that saw fewer brokers than there are now
            self._raise_internal_topics_replication()

    def _process_partition_modifications(self, topic: str) -> None:
        ctx = self.ctx
        if topic not in ctx.all_topics:
            return  # a deleted topic's watch; TopicChange handles new ones
        if ctx.is_topic_queued_up_for_deletion(topic):
            log.info("Controller %d: skipping partition changes of topic %s since it is being deleted", self.broker_id, topic)
            self.zk.get_topic_assignment(topic, watch=self._on_topic_modification)
            return
        added = self._load_topic(topic)
        if added:
            log.info("Controller %d: new partitions of topic %s: %s", self.broker_id, topic,
                     ",".join(map(str, sorted(added))))
            self._on_new_partition_creation([TopicPartition(topic, p) for p in sorted(added)])

    def _on_new_partition_creation(self, new_partitions: list[TopicPartition]) -> None:
        """New -> Online: the first live assigned replica leads, every live assigned replica is in the
        ISR, the state znodes are created; LeaderAndIsr (is_new) to the replicas, UpdateMetadata to all."""
        _, replicas, partitions, _ = self._state_machines()
        ctx = self.ctx
        log.info("Controller %d: new partition creation callback for %s", self.broker_id,
                 ",".join(map(str, new_partitions)))
        partitions.handle_state_changes(new_partitions, PartitionState.NEW)
        replicas.handle_state_changes(ctx.replicas_for_partitions(new_partitions), ReplicaState.NEW)
        partitions.handle_state_changes(new_partitions, PartitionState.ONLINE, ElectionStrategy.OFFLINE)
        replicas.handle_state_changes(ctx.replicas_for_partitions(new_partitions), ReplicaState.ONLINE)

    def _process_topic_deletion(self) -> None:
        ctx = self.ctx
        _, _, _, deletion = self._state_machines()
        topics = set(self.zk.get_topics_marked_for_deletion(watch=self._on_topic_deletion))
        missing = topics - ctx.all_topics
        if missing:
            log.warning("Controller %d: ignoring request to delete non-existing topics %s", self.broker_id,
                        ",".join(sorted(missing)))
            for topic in sorted(missing):
                self.zk.remove_topic_deletion_marker(topic, expected_controller_epoch_zk_version=ctx.epoch_zk_version)
        topics -= missing
        new = topics - ctx.topics_to_be_deleted
        if not new:
            return
        if not self.config.delete_topic_enable:
            log.info("Controller %d: removing %s since delete topic is disabled", self.broker_id, ",".join(sorted(new)))
            for topic in sorted(new):
                self.zk.remove_topic_deletion_marker(topic, expected_controller_epoch_zk_version=ctx.epoch_zk_version)
            return
        log.info("Controller %d: starting topic deletion for topics %s", self.broker_id, ",".join(sorted(new)))
        reassigning = {tp.topic for tp in ctx.partitions_being_reassigned}
        ctx.topics_to_be_deleted |= new
        deletion.mark_topic_ineligible_for_deletion(new & reassigning, "topic reassignment in progress")
        deletion.resume_deletions()

    def _stop_replica_response_callback(self, broker_id: int, response: Any, error: BaseException | None,
                                        deleted: frozenset[TopicPartition]) -> None:
        # a sender thread: only enqueue
        if error is not None or response is None:
            event = ev.TopicDeletionStopReplicaResponseReceived(broker_id, -1, {}, deleted)
        else:
            code, errors = stop_replica_errors(response)
            event = ev.TopicDeletionStopReplicaResponseReceived(broker_id, code, errors, deleted)
        self._put(event)

    def _process_stop_replica_response(self, event: ev.TopicDeletionStopReplicaResponseReceived) -> None:
        ctx = self.ctx
        _, _, _, deletion = self._state_machines()
        if event.request_error == -1:
            if event.broker_id not in ctx.live_or_shutting_down_broker_ids:
                return  # the broker died: its failure already made these replicas ineligible
            failed = set(event.deleted_partitions)
        elif event.request_error != 0:
            failed = set(event.deleted_partitions)
        else:
            failed = {tp for tp in event.deleted_partitions if event.partition_errors.get(tp, 0) != 0}
        in_deletion = [PartitionAndReplica(tp, event.broker_id) for tp in sorted(event.deleted_partitions)
                       if ctx.replica_states.get(PartitionAndReplica(tp, event.broker_id)) is ReplicaState.DELETION_STARTED]
        deletion.fail_replica_deletion([r for r in in_deletion if r.topic_partition in failed])
        deletion.complete_replica_deletion([r for r in in_deletion if r.topic_partition not in failed])

    def _log_response(self, broker_id: int, api_key: int, response: Any, error: BaseException | None) -> None:
        # a sender thread: logging only
        if error is not None:
            log.debug("Controller %d: request (api key %d) to broker %d dropped: %s", self.broker_id, api_key, broker_id, error)
            return
        code = response.error_code
        if int(code.value if isinstance(code, ErrorCode) else code) != 0:
            log.warning("Controller %d: broker %d answered api key %d with error %s", self.broker_id, broker_id, api_key,
                        code)

    def _process_alter_partition(self, event: ev.AlterPartitionReceived) -> None:
        assert self._batch is not None and self._reassigner is not None
        response, altered = AlterPartitionHandler(self.ctx, self.zk, self._batch, self.broker_id).process(event.request)
        ev.complete(event.future, response)
        self._reassigner.on_isr_change([tp for tp in altered if tp in self.ctx.partitions_being_reassigned])

    # ---- controlled shutdown -------------------------------------------------------------------------

    def _process_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[int, list[tuple[str, int]]]:
        """Move away the leadership of every partition the broker leads (RF > 1), take it out of the ISR
        of those it follows (StopReplica without deletion), and answer what it still leads."""
        ctx = self.ctx
        batch, replicas, partitions, _ = self._state_machines()
        if broker_epoch != -1:
            cached = ctx.live_broker_epochs.get(broker_id)
            if cached is not None and broker_epoch < cached:
                log.info("Controller %d: received controlled shutdown request from an old broker epoch %d for broker %d. "
                         "Current broker epoch is %d.", self.broker_id, broker_epoch, broker_id, cached)
                return ErrorCode.stale_broker_epoch.value, []
        log.info("Controller %d: shutting down broker %d", self.broker_id, broker_id)
        if broker_id not in ctx.live_or_shutting_down_broker_ids:
            return ErrorCode.broker_not_available.value, []
        ctx.shutting_down_broker_ids.add(broker_id)
        to_act_on = [tp for tp in ctx.partitions_on_broker(broker_id)
                     if len(ctx.replica_assignment(tp)) > 1 and tp in ctx.leadership
                     and not ctx.is_topic_queued_up_for_deletion(tp.topic)]
        led = [tp for tp in to_act_on if ctx.leadership[tp].leader_and_isr.leader == broker_id]
        followed = [tp for tp in to_act_on if ctx.leadership[tp].leader_and_isr.leader != broker_id]
        partitions.handle_state_changes(led, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN)
        for tp in followed:
            batch.add_stop_replica_request_for_brokers([broker_id], tp, delete_partition=False)
        replicas.handle_state_changes([PartitionAndReplica(tp, broker_id) for tp in followed], ReplicaState.OFFLINE)
        remaining = [tp for tp in ctx.partition_leaders_on_broker(broker_id) if not ctx.is_topic_queued_up_for_deletion(tp.topic)]
        return ErrorCode.none.value, [(tp.topic, tp.partition) for tp in remaining]

    # ---- leader elections (KIP-460) and the auto rebalance -------------------------------------------

    def _process_elect_leaders(self, election_type: ElectionType, requested: list[TopicPartition] | None) -> dict[str, Any]:
        ctx = self.ctx
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        candidates = ctx.partitions_with_leaders() if requested is None else requested
        electable: list[TopicPartition] = []
        for tp in candidates:
            info = ctx.leadership.get(tp)
            if info is None:
                results[tp] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
            elif ctx.is_topic_queued_up_for_deletion(tp.topic):
                results[tp] = (ErrorCode.invalid_topic_exception, "The topic is being deleted")
            elif election_type is ElectionType.PREFERRED:
                if info.leader_and_isr.leader == ctx.replica_assignment(tp)[0]:
                    results[tp] = (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
                else:
                    electable.append(tp)
            else:
                leader = info.leader_and_isr.leader
                if leader != NO_LEADER and ctx.is_replica_online(leader):
                    results[tp] = (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
                else:
                    electable.append(tp)
        for tp, outcome in self._on_replica_election(electable, election_type, admin_triggered=True).items():
            if isinstance(outcome, LeaderAndIsr):
                results[tp] = (ErrorCode.none, None)
            elif isinstance(outcome, StateChangeFailedError):
                code = ErrorCode.preferred_leader_not_available if election_type is ElectionType.PREFERRED \
                    else ErrorCode.eligible_leaders_not_available
                results[tp] = (code, str(outcome))
            else:
                results[tp] = (ErrorCode.unknown_server_error, str(outcome))
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, (code, message) in sorted(results.items()):
            if requested is None and code is ErrorCode.election_not_needed:
                continue  # "all partitions": only those that needed an election are listed
            by_topic.setdefault(tp.topic, []).append({"partition_id": tp.partition, "error_code": code,
                                                      "error_message": message})
        return {"error_code": ErrorCode.none,
                "replica_election_results": [{"topic": t, "partition_result": r} for t, r in by_topic.items()]}

    def _on_replica_election(self, partitions: list[TopicPartition], election_type: ElectionType, *,
                             admin_triggered: bool) -> dict[TopicPartition, Any]:
        _, _, psm, _ = self._state_machines()
        if not partitions:
            return {}
        log.info("Controller %d: starting replica leader election (%s) for partitions %s", self.broker_id,
                 election_type.name, ",".join(map(str, partitions)))
        strategy = ElectionStrategy.PREFERRED if election_type is ElectionType.PREFERRED else ElectionStrategy.OFFLINE
        results = psm.handle_state_changes(partitions, PartitionState.ONLINE, strategy,
                                           allow_unclean=admin_triggered and election_type is ElectionType.UNCLEAN)
        for tp in partitions:
            results.setdefault(tp, StateChangeFailedError(f"Partition {tp} is not in a state to elect a leader"))
        return results

    def _check_and_trigger_auto_leader_rebalance(self) -> None:
        """Per preferred broker: when more than leader.imbalance.per.broker.percentage of the partitions
        it should lead are led by others, elect it again where it is live and in the ISR."""
        ctx = self.ctx
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in ctx.all_partitions():
            replicas = ctx.replica_assignment(tp)
            if replicas and not ctx.is_topic_queued_up_for_deletion(tp.topic):
                by_preferred.setdefault(replicas[0], []).append(tp)
        for preferred, tps in sorted(by_preferred.items()):
            not_led = [tp for tp in tps if tp in ctx.leadership and ctx.leadership[tp].leader_and_isr.leader != preferred]
            ratio = len(not_led) / len(tps)
            log.debug("Controller %d: leader imbalance ratio for broker %d is %.3f", self.broker_id, preferred, ratio)
            if ratio <= self.config.leader_imbalance_per_broker_percentage / 100:
                continue
            candidates = [tp for tp in not_led if tp not in ctx.partitions_being_reassigned
                          and not ctx.is_topic_queued_up_for_deletion(tp.topic) and tp.topic in ctx.all_topics
                          and self._can_preferred_replica_be_leader(tp)]
            self._on_replica_election(candidates, ElectionType.PREFERRED, admin_triggered=False)

    def _can_preferred_replica_be_leader(self, tp: TopicPartition) -> bool:
        ctx = self.ctx
        assignment = ctx.replica_assignment(tp)
        live = {r for r in assignment if ctx.is_replica_online(r)}
        isr = ctx.leadership[tp].leader_and_isr.isr
        return preferred_replica_partition_leader_election(assignment, isr, live) is not None

    def _schedule_auto_leader_rebalance(self, delay_s: float) -> None:
        if not self.config.auto_leader_rebalance_enable or not self._active:
            return
        timer = threading.Timer(delay_s, self._put, (ev.AutoPreferredReplicaLeaderElection(),))
        timer.daemon = True
        timer.name = "controller-auto-leader-rebalance"
        with self._timer_lock:
            old, self._rebalance_timer = self._rebalance_timer, timer
        if old is not None:
            old.cancel()
        timer.start()

    def _cancel_rebalance_timer(self) -> None:
        with self._timer_lock:
            timer, self._rebalance_timer = self._rebalance_timer, None
        if timer is not None:
            timer.cancel()
