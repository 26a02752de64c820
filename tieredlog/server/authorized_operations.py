"""Authorized operations (KIP-430) in Metadata v8+, DescribeCluster and DescribeGroups v3+.

There is no authorizer here, so every principal may do everything, and Kafka without an authorizer
reports every operation the resource type supports (AclEntry.supportedOperations) as a bit field
whose bit index is the AclOperation code. A client that did not ask gets Kafka's "omitted" marker.
"""

from __future__ import annotations

import enum


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes (org.apache.kafka.common.acl.AclOperation)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes (org.apache.kafka.common.resource.ResourceType)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


_op = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER,
                                   _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_op.READ, _op.DESCRIBE, _op.DELETE}),
    ResourceType.CLUSTER: frozenset({_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
                                     _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE}),
}

# Kafka's Integer.MIN_VALUE: "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def authorized_operations(resource_type: ResourceType, requested: bool) -> int:
    """The field's value for one resource: every supported operation (Kafka's Utils.to32BitField), or
    the omitted marker when the request did not ask for them."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        bits |= 1 << operation
    return bits
