"""What the cluster tools (`reassign`, `leader-election`, `topics describe`) share: the cluster as
Metadata shows it, requests the active controller must answer, and Kafka's way of naming errors.

ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments are answered only by the
active controller (ZooKeeper mode); any other broker says NOT_CONTROLLER. Kafka's admin client sends
them to the controller Metadata names and asks again after NOT_CONTROLLER, because the office may move
between the Metadata answer and the request; so do we.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from kio.schema.errors import ErrorCode

from tieredlog.clients.blocking import KafkaClient
from tieredlog.clients.routing import ControllerNotFound, call_controller
from tieredlog.protocol.api import METADATA

# How long a tool keeps looking for a controller that answers (an election after the controller
# left takes up to the ZooKeeper session timeout).
CONTROLLER_WAIT_S = 30.0
RETRY_BACKOFF_S = 0.2


class AdminCommandFailed(Exception):
    """Kafka's AdminCommandFailedException: the tool prints the message and exits with 1."""


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: Any
    is_internal: bool
    error_code: ErrorCode
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True)
class ClusterView:
    """One Metadata answer: the live brokers, the controller (-1: none known) and the topics asked for."""

    brokers: dict[int, Node]
    controller_id: int
    topics: dict[str, TopicInfo]


def describe_cluster(client: KafkaClient, topics: Iterable[str] | None = None) -> ClusterView:
    """Metadata for ``topics`` (None: every topic)."""
    names = None if topics is None else sorted(set(topics))
    md = client.request(METADATA, {"topics": None if names is None else [{"name": t} for t in names],
                                   "allow_auto_topic_creation": False})
    brokers = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in md.brokers}
    out: dict[str, TopicInfo] = {}
    for t in md.topics:
        parts = tuple(sorted(
            (PartitionInfo(t.name, p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes),
                           tuple(getattr(p, "offline_replicas", ()) or ())) for p in t.partitions),
            key=lambda p: p.partition))
        out[t.name] = TopicInfo(t.name, t.topic_id, bool(t.is_internal), t.error_code, parts)
    return ClusterView(brokers, md.controller_id, out)


def controller_request(client: KafkaClient, api_key: int, body: Any, *, version: int | None = None,
                       wait_s: float = CONTROLLER_WAIT_S) -> Any:
    """Send ``body`` to the active controller (found through ``client``'s broker) and return its
    answer; NOT_CONTROLLER, or no controller yet, means look again until ``wait_s`` has passed."""
    try:
        return call_controller(client, api_key, body, version=version, wait_s=wait_s, backoff_s=RETRY_BACKOFF_S)
    except ControllerNotFound as exc:
        raise AdminCommandFailed(f"Timed out waiting for the controller: {exc.reason}") from None


def tp_name(topic: str, partition: int) -> str:
    """Kafka's TopicPartition.toString."""
    return f"{topic}-{partition}"


# Error codes whose Kafka exception class is not the code's name in camel case plus "Exception".
_EXCEPTION_NAMES = {
    ErrorCode.unknown_server_error: "UnknownServerException",
    ErrorCode.invalid_topic_exception: "InvalidTopicException",
    ErrorCode.not_leader_or_follower: "NotLeaderOrFollowerException",
    ErrorCode.no_reassignment_in_progress: "NoReassignmentInProgressException",
}


def exception_name(code: ErrorCode) -> str:
    """The Java class Kafka's clients raise for ``code``, e.g. PreferredLeaderNotAvailableException."""
    if code in _EXCEPTION_NAMES:
        return _EXCEPTION_NAMES[code]
    return "".join(w.capitalize() for w in code.name.split("_")) + "Exception"


def exception_text(code: ErrorCode, message: str | None) -> str:
    """What Kafka's tools print for a failed partition: the exception's toString."""
    text = f"org.apache.kafka.common.errors.{exception_name(code)}"
    return f"{text}: {message}" if message else text


def exception_message(code: ErrorCode, message: str | None) -> str:
    """An exception's getMessage: the broker's message, else the error's default description."""
    return message or code.name.replace("_", " ").capitalize()
