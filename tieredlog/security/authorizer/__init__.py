"""Authorization with Kafka's ACL model (``authorizer.class.name``, ``super.users``,
``allow.everyone.if.no.acl.found``).

- ``acl``: operations, permission, resource and pattern types with Kafka's codes, bindings, filters.
- ``authorizer``: the decisions, from an in-memory snapshot, and ACL changes through a store.
- ``file_store``: a broker alone keeps its ACLs in a file in its first log dir.
- ``zk_store``: a cluster keeps them in ZooKeeper in Kafka's layout, with change notifications.

The server asks through ``tieredlog.server.authorization``, which knows each API's rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tieredlog.config import AUTHORIZER_CLASS_NAMES, check_authorizer_class_name
from tieredlog.security.authorizer.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tieredlog.security.authorizer.authorizer import AclAuthorizer, AclStore
from tieredlog.security.principal import parse_super_users

if TYPE_CHECKING:
    from tieredlog.cluster.zk import ZkClient

__all__ = [
    "CLUSTER_NAME", "AccessControlEntry", "AclAuthorizer", "AclBinding", "AclBindingFilter", "AclOperation",
    "AclPermissionType", "PatternType", "ResourcePattern", "ResourceType", "AUTHORIZER_CLASS_NAMES",
    "parse_super_users", "create_authorizer",
]

def create_authorizer(class_name: str | None, super_users: str | None, allow_everyone_if_no_acl_found: bool,
                      log_dir: Path, zk: "ZkClient | None" = None, name: str = "") -> AclAuthorizer | None:
    """The configured authorizer, not started yet (``start`` loads the ACLs: blocking), or None."""
    if not check_authorizer_class_name(class_name):
        return None
    if zk is None:
        from tieredlog.security.authorizer.file_store import FileAclStore

        store: AclStore = FileAclStore(log_dir)
    else:
        from tieredlog.security.authorizer.zk_store import ZkAclStore

        store = ZkAclStore(zk, name)
    return AclAuthorizer(store, parse_super_users(super_users), allow_everyone_if_no_acl_found)
