"""Kafka's ACL model: operations, permission types, resource and pattern types with their wire codes,
resource patterns, access control entries, bindings and the filters DescribeAcls / DeleteAcls take.

The codes are the protocol's (org.apache.kafka.common.acl / .resource); the names in ZooKeeper and in
the ACL file are Kafka's PascalCase ones (``Topic``, ``IdempotentWrite``, ``Allow``), so a ZooKeeper
written by Kafka's AclAuthorizer reads the same here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class _Coded(enum.IntEnum):
    @classmethod
    def from_code(cls, code: int) -> Self:
        """Kafka's fromCode: a code this broker does not know is UNKNOWN, not an error."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @property
    def pascal_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_name(cls, name: str) -> Self:
        """PascalCase (ZooKeeper, the ACL file) or the enum's own name, any case; UNKNOWN otherwise."""
        key = name.replace("_", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == key:
                return member
        return cls(0)


class AclOperation(_Coded):
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


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


# What an ALLOW entry for an operation grants besides itself (a DENY entry denies only its own
# operation): Kafka's implications, so a consumer allowed READ may also describe the topic.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

_op = AclOperation
# Kafka's AclEntry.supportedOperations: the operations KIP-430's authorized-operations fields report
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER,
                         _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS),
    ResourceType.GROUP: (_op.READ, _op.DESCRIBE, _op.DELETE),
    ResourceType.CLUSTER: (_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS,
                           _op.IDEMPOTENT_WRITE, _op.ALTER, _op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_op.DESCRIBE, _op.WRITE),
    ResourceType.DELEGATION_TOKEN: (_op.DESCRIBE,),
    ResourceType.USER: (_op.CREATE_TOKENS, _op.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", or the wildcard "User:*"
    host: str  # an IP address or "*"
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> dict[str, str]:
        """Kafka's AclEntry JSON, as in /kafka-acl/<type>/<name>."""
        return {"principal": self.principal, "permissionType": self.permission_type.pascal_name,
                "operation": self.operation.pascal_name, "host": self.host}

    @classmethod
    def from_json(cls, item: dict) -> "AccessControlEntry":
        return cls(str(item["principal"]), str(item["host"]), AclOperation.from_name(str(item["operation"])),
                   AclPermissionType.from_name(str(item["permissionType"])))

    def __str__(self) -> str:
        return f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, " \
               f"permissionType={self.permission_type.name})"


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType
    name: str | None  # None matches every name
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    @property
    def matches_at_most_one(self) -> bool:
        """The filter names one concrete pattern (or, with ANY, the literal and the prefixed one of a
        name): Kafka deletes through it even what has not reached this broker's cache yet."""
        return (self.resource_type != ResourceType.ANY and self.name is not None
                and self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY))

    def concrete_patterns(self) -> list[ResourcePattern]:
        assert self.name is not None
        if self.pattern_type == PatternType.ANY:
            return [ResourcePattern(self.resource_type, self.name, PatternType.LITERAL),
                    ResourcePattern(self.resource_type, self.name, PatternType.PREFIXED)]
        return [ResourcePattern(self.resource_type, self.name, self.pattern_type)]

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches. MATCH takes the patterns that would apply to the
        named resource: its literal, the literal wildcard and every prefix of it."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


def invalid_binding_reason(binding: AclBinding) -> str | None:
    """Why an ACL cannot be created (Kafka's checks in CreateAcls and its authorizers), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {p.pattern_type.name}"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {e.operation.name}"
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {e.permission_type.name}"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not p.name:
        return "Invalid empty resource name"
    if "/" in p.name:
        # the name is a znode's name in Kafka's ZooKeeper layout
        return f"ACL binding contains invalid resource name: {p.name}"
    kind, sep, _ = e.principal.partition(":")
    if not sep or not kind:
        return (f"Could not parse principal from `{e.principal}` (no colon is present separating the principal "
                "type from the principal name)")
    return None
