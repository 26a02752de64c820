"""Authorized operations (KIP-430) in Metadata v8+, DescribeCluster and DescribeGroups v3+.

A bit field whose bit index is the AclOperation code, over the operations the resource type
supports (Kafka's AclEntry.supportedOperations): those the authorizer allows the request's principal
(``tieredlog.server.authorization.authorized_operations``), all of them without an authorizer. A
client that did not ask gets Kafka's "omitted" marker.
"""

from __future__ import annotations

from typing import Callable

from tieredlog.security.authorizer.acl import SUPPORTED_OPERATIONS, AclOperation, ResourceType

__all__ = ["AUTHORIZED_OPERATIONS_OMITTED", "AclOperation", "ResourceType", "authorized_operations"]

# Kafka's Integer.MIN_VALUE: "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def authorized_operations(resource_type: ResourceType, requested: bool,
                          allowed: Callable[[AclOperation], bool] = lambda operation: True) -> int:
    """The field's value for one resource (Kafka's Utils.to32BitField of the allowed operations), or
    the omitted marker when the request did not ask for them."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(operation):
            bits |= 1 << operation
    return bits
