"""The ACL authorizer: Kafka's AclAuthorizer / StandardAuthorizer decisions over an in-memory cache.

Decisions (``authorize``) are made on the event loop from an immutable snapshot of the ACLs, never
waiting for a store: the snapshot is replaced whole when ACLs change, so a reader always sees one
consistent set. Changes (``create_acls``, ``delete_acls``) and a cluster's change notifications go
through the store (a file alone, ZooKeeper in a cluster), which blocks: call them from a thread.

The rules, as Kafka's:
- a super user (``super.users``) may do everything;
- the ACLs that apply to a resource are those on its literal name, on the literal wildcard ``*``
  and on every prefix of its name (PREFIXED patterns);
- when none applies, ``allow.everyone.if.no.acl.found`` decides;
- otherwise a matching DENY wins; else a matching ALLOW grants (ALLOW READ, WRITE, DELETE or ALTER
  also grants DESCRIBE, ALLOW ALTER_CONFIGS also DESCRIBE_CONFIGS); else denied.
An entry matches the request's principal or ``User:*``, its client address or ``*``, and its
operation or ALL.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from tieredlog.security.authorizer.acl import (
    IMPLIED_BY,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    invalid_binding_reason,
)

log = logging.getLogger(__name__)
# Kafka's audit logger: denials of what a request asked for at INFO, the rest at DEBUG
audit = logging.getLogger("kafka.authorizer.logger")

Acls = frozenset[AccessControlEntry]
EMPTY: Acls = frozenset()


class AclStore(Protocol):
    """Where the ACLs live. Blocking; the authorizer calls it under its own write lock, and the store
    calls ``on_change`` (given to ``start``) from its own thread for changes other brokers made."""

    def start(self, on_change: Callable[[ResourcePattern], None]) -> None: ...

    def load(self) -> dict[ResourcePattern, Acls]: ...

    def read(self, pattern: ResourcePattern) -> Acls: ...

    def update(self, changes: Mapping[ResourcePattern, Callable[[Acls], Acls]],
               cached: Mapping[ResourcePattern, Acls]) -> dict[ResourcePattern, Acls | Exception]: ...

    def close(self) -> None: ...


class AclError(Exception):
    """A binding or filter refused with INVALID_REQUEST (Kafka's InvalidRequestException)."""


@dataclass(frozen=True)
class _Snapshot:
    acls: dict[ResourcePattern, Acls]
    # lengths of the PREFIXED names per resource type: a lookup tries only prefixes that exist
    prefix_lengths: dict[ResourceType, tuple[int, ...]]

    @classmethod
    def of(cls, acls: dict[ResourcePattern, Acls]) -> "_Snapshot":
        lengths: dict[ResourceType, set[int]] = {}
        for p in acls:
            if p.pattern_type == PatternType.PREFIXED:
                lengths.setdefault(p.resource_type, set()).add(len(p.name))
        return cls(acls, {t: tuple(sorted(ls)) for t, ls in lengths.items()})

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        out: list[AccessControlEntry] = []
        get = self.acls.get
        for found in (get(ResourcePattern(resource_type, WILDCARD_RESOURCE, PatternType.LITERAL)),
                      get(ResourcePattern(resource_type, name, PatternType.LITERAL))):
            if found:
                out.extend(found)
        for length in self.prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            found = get(ResourcePattern(resource_type, name[:length], PatternType.PREFIXED))
            if found:
                out.extend(found)
        return out


@dataclass(frozen=True)
class DeletedBinding:
    binding: AclBinding
    error: Exception | None = None


class AclAuthorizer:
    def __init__(self, store: AclStore, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
                 ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._snapshot = _Snapshot.of({})
        # serialises changes and notification handling (Kafka's authorizer lock); decisions never take it
        self._write_lock = threading.Lock()

    # ---- lifecycle (blocking) ------------------------------------------------------------------------

    def start(self) -> None:
        """Load every ACL. The store's change listener starts first, so nothing another broker
        changes between the load and the listener's first look is missed."""
        self.store.start(self._changed_elsewhere)
        with self._write_lock:
            self._snapshot = _Snapshot.of(self.store.load())
        log.info("ACL authorizer started with %d ACL(s) on %d resource pattern(s), %d super user(s)",
                 sum(len(a) for a in self._snapshot.acls.values()), len(self._snapshot.acls), len(self.super_users))

    def close(self) -> None:
        self.store.close()

    def _changed_elsewhere(self, pattern: ResourcePattern) -> None:
        with self._write_lock:
            acls = self.store.read(pattern)
            self._publish({pattern: acls})
        log.info("ACLs of %s are now %s", pattern, sorted(map(str, acls)) or "none")

    def _publish(self, changes: Mapping[ResourcePattern, Acls]) -> None:
        acls = dict(self._snapshot.acls)
        for pattern, value in changes.items():
            if value:
                acls[pattern] = value
            else:
                acls.pop(pattern, None)
        self._snapshot = _Snapshot.of(acls)

    # ---- decisions (event loop, no I/O) --------------------------------------------------------------

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._snapshot.matching(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        for e in entries:
            if e.permission_type == AclPermissionType.DENY and _applies(e, principal, host) \
                    and e.operation in (operation, AclOperation.ALL):
                return False
        granting = IMPLIED_BY.get(operation, frozenset((operation,)))
        for e in entries:
            if e.permission_type == AclPermissionType.ALLOW and _applies(e, principal, host) \
                    and (e.operation == AclOperation.ALL or e.operation in granting):
                return True
        return False

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType (KIP-679): may the principal do ``operation`` on
        at least one resource of the type? An ALLOW counts unless a DENY of the same literal name or of
        a prefix of it takes it away; a DENY on the literal wildcard takes everything away."""
        # Kafka asks about a made-up name first, so super users, and allow.everyone.if.no.acl.found when
        # no wildcard or prefix applies, are allowed; this one cannot be a real resource's name
        if self.authorize(principal, host, operation, resource_type, "\x00hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        for pattern, entries in self._snapshot.acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if not _applies(e, principal, host) or e.operation not in (operation, AclOperation.ALL):
                    continue
                if e.permission_type == AclPermissionType.DENY:
                    if pattern.pattern_type == PatternType.LITERAL:
                        if pattern.name == WILDCARD_RESOURCE:
                            return False
                        deny_literal.add(pattern.name)
                    else:
                        deny_prefixed.add(pattern.name)
                elif e.permission_type == AclPermissionType.ALLOW:
                    allow.append((pattern.pattern_type, pattern.name))
        if any(kind == PatternType.LITERAL and name == WILDCARD_RESOURCE for kind, name in allow):
            return True
        for kind, name in allow:
            if kind == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    def acls(self, filter: AclBindingFilter) -> list[AclBinding]:
        out: list[AclBinding] = []
        for pattern, entries in self._snapshot.acls.items():
            if not filter.pattern.matches(pattern):
                continue
            out.extend(AclBinding(pattern, e) for e in entries if filter.entry.matches(e))
        return out

    # ---- changes (blocking: call from a thread) ------------------------------------------------------

    def create_acls(self, bindings: list[AclBinding]) -> list[Exception | None]:
        """One result per binding: None when created (or already there), else why not."""
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            reason = invalid_binding_reason(b)
            if reason is not None:
                results[i] = AclError(reason)
            else:
                by_pattern.setdefault(b.pattern, []).append(i)
        if not by_pattern:
            return results

        def adding(indexes: list[int]) -> Callable[[Acls], Acls]:
            return lambda current: current | {bindings[i].entry for i in indexes}

        with self._write_lock:
            outcome = self.store.update({p: adding(ix) for p, ix in by_pattern.items()}, self._snapshot.acls)
            self._publish({p: v for p, v in outcome.items() if not isinstance(v, Exception)})
        for pattern, indexes in by_pattern.items():
            value = outcome.get(pattern)
            if isinstance(value, Exception):
                log.warning("could not create ACLs on %s: %s", pattern, value)
                for i in indexes:
                    results[i] = value
            else:
                log.info("created ACLs %s on %s", ", ".join(str(bindings[i].entry) for i in indexes), pattern)
        return results

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[DeletedBinding] | Exception]:
        """Per filter: the bindings it deleted (each binding under the first filter that matched it), or
        why the filter was refused."""
        results: list[list[DeletedBinding] | Exception] = [[] for _ in filters]
        usable: list[tuple[int, AclBindingFilter]] = []
        for i, f in enumerate(filters):
            if f.pattern.is_unknown:
                results[i] = AclError("Unknown patternFilter.")
            elif f.entry.is_unknown:
                results[i] = AclError("Unknown entryFilter.")
            else:
                usable.append((i, f))
        if not usable:
            return results
        with self._write_lock:
            candidates = set(self._snapshot.acls)
            for _, f in usable:
                if f.pattern.matches_at_most_one:
                    candidates.update(f.pattern.concrete_patterns())
            claimed: dict[AclBinding, int] = {}
            changes: dict[ResourcePattern, Callable[[Acls], Acls]] = {}
            for pattern in candidates:
                matching = [(i, f) for i, f in usable if f.pattern.matches(pattern)]
                if matching:
                    changes[pattern] = _remover(pattern, matching, claimed)
            outcome = self.store.update(changes, self._snapshot.acls) if changes else {}
            self._publish({p: v for p, v in outcome.items() if not isinstance(v, Exception)})
        for binding, index in claimed.items():
            value = outcome.get(binding.pattern)
            deleted = results[index]
            assert isinstance(deleted, list)
            deleted.append(DeletedBinding(binding, value if isinstance(value, Exception) else None))
            if not isinstance(value, Exception):
                log.info("deleted ACL %s", binding)
        return results


def _applies(entry: AccessControlEntry, principal: str, host: str) -> bool:
    return (entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL) \
        and (entry.host == WILDCARD_HOST or entry.host == host)


def _remover(pattern: ResourcePattern, filters: list[tuple[int, AclBindingFilter]],
             claimed: dict[AclBinding, int]) -> Callable[[Acls], Acls]:
    def remove(current: Acls) -> Acls:
        # a versioned store may call this again after a conflict: only the last call's claims count
        for b in [b for b in claimed if b.pattern == pattern]:
            del claimed[b]
        kept = set()
        for entry in current:
            index = next((i for i, f in filters if f.entry.matches(entry)), None)
            if index is None:
                kept.add(entry)
            else:
                claimed[AclBinding(pattern, entry)] = index
        return frozenset(kept)

    return remove
