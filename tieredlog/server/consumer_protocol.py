"""The consumer protocol's subscription: what a "consumer" member puts in its JoinGroup metadata,
read with kio's ConsumerProtocolSubscription schemas (v0-3).

The bytes start with an int16 version; as Kafka's ConsumerProtocol does, a version newer than the
schemas known here is read as the newest one (later versions only add fields at the end), and a
negative one is refused. Clients write these bytes, so every length is checked by the request guard
before kio's native reader runs: it sizes an array from its length field, and a failed allocation
aborts the process. Handed to the group coordinator as its `SubscribedTopics` decoder (the
coordinator never imports the protocol package).

Classic groups store SyncGroup assignments as opaque bytes. KIP-848's online migration reads and writes
them (`EmbeddedConsumerProtocol`): a classic group's assignments become a consumer group's, and a classic
member of a consumer group is answered its assignment as ConsumerProtocolAssignment bytes, in the version
of its subscription (clamped to the known ones, as Kafka's ConsumerProtocol.serializeAssignment does).
"""

from __future__ import annotations

import functools
import io
from typing import Any, Callable, Iterable, Mapping

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from tieredlog.coordinator.consumer_group.migration import EmbeddedSubscription
from tieredlog.protocol.guard import Checker, entity_checker

_SUBSCRIPTION_SCHEMAS: tuple[type, ...] = (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)
_ASSIGNMENT_MODULES: tuple[Any, ...] = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)


@functools.cache
def _subscription_codec(version: int) -> tuple[Checker, Callable[[Any, int], tuple[Any, int]]]:
    cls = _SUBSCRIPTION_SCHEMAS[version]
    return entity_checker(cls), entity_reader(cls)


def _version(data: bytes) -> int | None:
    if len(data) < 2:
        return None
    version = int.from_bytes(data[:2], "big", signed=True)
    return None if version < 0 else version


def _subscription(metadata: bytes) -> Any:
    version = _version(metadata)
    if version is None:
        return None
    check, read = _subscription_codec(min(version, len(_SUBSCRIPTION_SCHEMAS) - 1))
    try:
        check(metadata, 2, len(metadata))
        subscription, _ = read(metadata, 2)
    except Exception:  # noqa: BLE001 - the guard's FrameError and kio's several decode errors alike
        return None
    return subscription


def subscribed_topics(metadata: bytes) -> tuple[str, ...] | None:
    """The topics a ConsumerProtocolSubscription names, or None when the bytes are not one."""
    subscription = _subscription(metadata)
    return None if subscription is None else subscription.topics


@functools.cache
def _assignment_codec(version: int) -> tuple[Checker, Callable[[Any, int], tuple[Any, int]], Any]:
    cls = _ASSIGNMENT_MODULES[version].ConsumerProtocolAssignment
    return entity_checker(cls), entity_reader(cls), entity_writer(cls)


class ConsumerProtocolCodec:
    """The consumer protocol's embedded subscription and assignment, for the group coordinator's online
    migration (`migration.EmbeddedConsumerProtocol`)."""

    def subscription(self, metadata: bytes) -> EmbeddedSubscription | None:
        sub = _subscription(metadata)
        if sub is None:
            return None
        owned: dict[str, frozenset[int]] = {}
        if not isinstance(sub, SubscriptionV0):  # owned partitions from v1
            for tp in sub.owned_partitions:
                owned[tp.topic] = owned.get(tp.topic, frozenset()) | frozenset(int(p) for p in tp.partitions)
        rack_id = sub.rack_id if isinstance(sub, SubscriptionV3) else None
        return EmbeddedSubscription(tuple(sub.topics), owned, rack_id)

    def assignment(self, data: bytes) -> dict[str, frozenset[int]] | None:
        if not data:
            return {}
        version = _version(data)
        if version is None:
            return None
        check, read, _ = _assignment_codec(min(version, len(_ASSIGNMENT_MODULES) - 1))
        try:
            check(data, 2, len(data))
            assignment, _ = read(data, 2)
        except Exception:  # noqa: BLE001 - the guard's FrameError and kio's several decode errors alike
            return None
        out: dict[str, frozenset[int]] = {}
        for tp in assignment.assigned_partitions:
            out[tp.topic] = out.get(tp.topic, frozenset()) | frozenset(int(p) for p in tp.partitions)
        return out

    def encode_assignment(self, partitions: Mapping[str, Iterable[int]], subscription_metadata: bytes) -> bytes:
        version = min(_version(subscription_metadata) or 0, len(_ASSIGNMENT_MODULES) - 1)
        module = _ASSIGNMENT_MODULES[version]
        _, _, write = _assignment_codec(version)
        value = module.ConsumerProtocolAssignment(assigned_partitions=tuple(
            module.TopicPartition(topic=name, partitions=tuple(i32(p) for p in sorted(ps)))
            for name, ps in sorted(partitions.items())))
        buf = io.BytesIO()
        buf.write(version.to_bytes(2, "big"))
        write(buf, value)
        return buf.getvalue()
