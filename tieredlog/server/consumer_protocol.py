"""The consumer protocol's subscription: what a "consumer" member puts in its JoinGroup metadata,
read with kio's ConsumerProtocolSubscription schemas (v0-3).

The bytes start with an int16 version; as Kafka's ConsumerProtocol does, a version newer than the
schemas known here is read as the newest one (later versions only add fields at the end), and a
negative one is refused. Clients write these bytes, so every length is checked by the request guard
before kio's native reader runs: it sizes an array from its length field, and a failed allocation
aborts the process. Handed to the group coordinator as its `SubscribedTopics` decoder (the
coordinator never imports the protocol package).

Assignments (SyncGroup) are stored and handed back as opaque bytes, so nothing reads
ConsumerProtocolAssignment here.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader

from tieredlog.protocol.guard import Checker, entity_checker

_SUBSCRIPTION_SCHEMAS: tuple[type, ...] = (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)


@functools.cache
def _subscription_codec(version: int) -> tuple[Checker, Callable[[Any, int], tuple[Any, int]]]:
    cls = _SUBSCRIPTION_SCHEMAS[version]
    return entity_checker(cls), entity_reader(cls)


def subscribed_topics(metadata: bytes) -> tuple[str, ...] | None:
    """The topics a ConsumerProtocolSubscription names, or None when the bytes are not one."""
    if len(metadata) < 2:
        return None
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        return None
    check, read = _subscription_codec(min(version, len(_SUBSCRIPTION_SCHEMAS) - 1))
    try:
        check(metadata, 2, len(metadata))
        subscription, _ = read(metadata, 2)
    except Exception:  # noqa: BLE001 - the guard's FrameError and kio's several decode errors alike
        return None
    return subscription.topics
