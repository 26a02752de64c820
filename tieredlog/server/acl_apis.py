"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as a Kafka broker answers them.

Without an authorizer every answer is SECURITY_DISABLED. The cluster permission these need (ALTER
to create or delete, DESCRIBE to describe) is checked before the handler runs (``authorization``).
Describing reads the authorizer's cache; creating and deleting write the store (a file, ZooKeeper),
so they run on a worker thread and the event loop only waits.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from tieredlog.protocol.api import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from tieredlog.security.authorizer.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tieredlog.security.authorizer.authorizer import AclError
from tieredlog.server.authorization import AuthContext, AuthorizerServer
from tieredlog.server.context import Handler

NO_AUTHORIZER = "No Authorizer is configured."

if TYPE_CHECKING:
    from tieredlog.server.admin_requests import KioCreateAclsRequest, KioDeleteAclsRequest, KioDescribeAclsRequest



class _AclFilterFields(Protocol):
    """DescribeAcls' request and DeleteAcls' filters (v1-3)."""

    @property
    def resource_type_filter(self) -> int: ...

    @property
    def resource_name_filter(self) -> str | None: ...

    @property
    def pattern_type_filter(self) -> int: ...

    @property
    def principal_filter(self) -> str | None: ...

    @property
    def host_filter(self) -> str | None: ...

    @property
    def operation(self) -> int: ...

    @property
    def permission_type(self) -> int: ...


class _AclCreationFields(Protocol):
    """CreateAcls' creations (v1-3)."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...

    @property
    def resource_pattern_type(self) -> int: ...

    @property
    def principal(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def operation(self) -> int: ...

    @property
    def permission_type(self) -> int: ...


def _filter(f: _AclFilterFields) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(f.resource_type_filter), f.resource_name_filter,
                              PatternType.from_code(f.pattern_type_filter)),
        AccessControlEntryFilter(f.principal_filter, f.host_filter,
                                 AclOperation.from_code(f.operation),
                                 AclPermissionType.from_code(f.permission_type)))


def _binding(c: _AclCreationFields) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.from_code(c.resource_type), c.resource_name,
                        PatternType.from_code(c.resource_pattern_type)),
        AccessControlEntry(c.principal, c.host, AclOperation.from_code(c.operation),
                           AclPermissionType.from_code(c.permission_type)))


def _error(exc: Exception) -> tuple[ErrorCode, str | None]:
    if isinstance(exc, AclError):
        return ErrorCode.invalid_request, str(exc)
    return ErrorCode.unknown_server_error, str(exc) or type(exc).__name__


async def handle_describe_acls(ctx: AuthContext, req: KioDescribeAclsRequest) -> dict:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return {"error_code": ErrorCode.security_disabled, "error_message": "No Authorizer is configured on the broker",
                "resources": []}
    acl_filter = _filter(req)
    if acl_filter.is_unknown:
        return {"error_code": ErrorCode.invalid_request, "resources": [],
                "error_message": "DescribeAcls filter contains UNKNOWN elements"}
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in authorizer.acls(acl_filter):
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    resources = [
        {"resource_type": p.resource_type, "resource_name": p.name, "pattern_type": p.pattern_type,
         "acls": [{"principal": e.principal, "host": e.host, "operation": e.operation,
                   "permission_type": e.permission_type} for e in sorted(entries, key=str)]}
        for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].pattern_type, kv[0].name))
    ]
    return {"error_code": ErrorCode.none, "error_message": None, "resources": resources}


async def handle_create_acls(ctx: AuthContext, req: KioCreateAclsRequest) -> dict:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return {"results": [{"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
                            for _ in req.creations]}
    bindings = [_binding(c) for c in req.creations]
    outcome = await asyncio.get_running_loop().run_in_executor(None, authorizer.create_acls, bindings)
    results: list[dict[str, Any]] = []
    for exc in outcome:
        if exc is None:
            results.append({"error_code": ErrorCode.none, "error_message": None})
        else:
            code, message = _error(exc)
            results.append({"error_code": code, "error_message": message})
    return {"results": results}


async def handle_delete_acls(ctx: AuthContext, req: KioDeleteAclsRequest) -> dict:
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return {"filter_results": [{"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER,
                                    "matching_acls": []} for _ in req.filters]}
    filters = [_filter(f) for f in req.filters]
    outcome = await asyncio.get_running_loop().run_in_executor(None, authorizer.delete_acls, filters)
    results: list[dict[str, Any]] = []
    for deleted in outcome:
        if isinstance(deleted, Exception):
            code, message = _error(deleted)
            results.append({"error_code": code, "error_message": message, "matching_acls": []})
            continue
        matching: list[dict[str, Any]] = []
        for d in sorted(deleted, key=lambda d: str(d.binding)):
            p, e = d.binding.pattern, d.binding.entry
            code, message = _error(d.error) if d.error is not None else (ErrorCode.none, None)
            matching.append({"error_code": code, "error_message": message, "resource_type": p.resource_type,
                             "resource_name": p.name, "pattern_type": p.pattern_type, "principal": e.principal,
                             "host": e.host, "operation": e.operation, "permission_type": e.permission_type})
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": matching})
    return {"filter_results": results}


def handlers() -> dict[int, Handler[AuthorizerServer]]:
    return {DESCRIBE_ACLS: handle_describe_acls, CREATE_ACLS: handle_create_acls, DELETE_ACLS: handle_delete_acls}
