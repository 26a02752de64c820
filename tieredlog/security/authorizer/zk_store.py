"""ACLs of a cluster, in ZooKeeper under Kafka's (ZooKeeper mode) layout, so Kafka's tools and
brokers read what tieredlog writes and the other way round:

- ``/kafka-acl/<Type>/<name>``: the LITERAL patterns of a resource type (``Topic``, ``Group``,
  ``Cluster``, ``TransactionalId``, ``DelegationToken``, ``User``);
  ``/kafka-acl-extended/prefixed/<Type>/<name>``: the PREFIXED ones. Each holds
  ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``.
- A change writes the pattern's znode conditionally on the version read (retried after a conflict:
  two brokers may add ACLs to one resource at once), deletes it when no ACL is left, then creates a
  sequential ``acl_changes_`` notification: ``/kafka-acl-changes`` holds ``<TYPE>:<name>`` for a
  literal pattern, ``/kafka-acl-extended-changes`` ``{"version":1,"resourceType":..,"name":..,
  "patternType":"PREFIXED"}``. Every broker watches both, reads the named pattern again and
  replaces it in its cache. Notifications older than 15 minutes are deleted, as Kafka does.

Blocking, like every ZooKeeper call: the authorizer calls it from threads, never the event loop.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping

from kazoo.exceptions import BadVersionError, ConnectionClosedError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import EventType, WatchedEvent

from tieredlog.cluster import znodes
from tieredlog.cluster.errors import MalformedZnodeError
from tieredlog.cluster.zk import ZkClient
from tieredlog.security.authorizer.acl import AccessControlEntry, PatternType, ResourcePattern, ResourceType
from tieredlog.security.authorizer.authorizer import Acls

log = logging.getLogger(__name__)

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
PREFIXED_ACL_PATH = f"{EXTENDED_ACL_PATH}/prefixed"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_S = 15 * 60
MAX_UPDATE_RETRIES = 10
RETRY_DELAY_S = 0.5


def acl_root(pattern_type: PatternType) -> str:
    return LITERAL_ACL_PATH if pattern_type == PatternType.LITERAL else PREFIXED_ACL_PATH


def resource_path(pattern: ResourcePattern) -> str:
    return f"{acl_root(pattern.pattern_type)}/{pattern.resource_type.pascal_name}/{pattern.name}"


def encode_acls(acls: Acls) -> bytes:
    return znodes.encode_json({"version": 1, "acls": [e.to_json() for e in sorted(acls, key=str)]})


def decode_acls(data: bytes | None) -> Acls:
    if not data:
        return frozenset()
    js = znodes.decode_json(data, "an ACL znode")
    if js.get("version") != 1 or not isinstance(js.get("acls"), list):
        raise MalformedZnodeError(f"unsupported ACL znode: {data!r}")
    try:
        return frozenset(AccessControlEntry.from_json(item) for item in js["acls"])
    except (KeyError, TypeError) as exc:
        raise MalformedZnodeError(f"malformed ACL entry in {data!r}: {exc!r}") from None


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(notification folder, data) announcing a change of ``pattern``."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES_PATH, f"{pattern.resource_type.name}:{pattern.name}".encode()
    return EXTENDED_CHANGES_PATH, znodes.encode_json({
        "version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
        "patternType": pattern.pattern_type.name})


def decode_change(folder: str, data: bytes) -> ResourcePattern:
    if folder == LITERAL_CHANGES_PATH:
        kind, sep, name = data.decode("utf-8", "replace").partition(":")
        rtype = ResourceType.from_name(kind)
        if not sep or rtype == ResourceType.UNKNOWN:
            raise MalformedZnodeError(f"expected <ResourceType>:<name> in an ACL change, got {data!r}")
        return ResourcePattern(rtype, name, PatternType.LITERAL)
    js = znodes.decode_json(data, "an ACL change")
    rtype = ResourceType.from_name(str(js.get("resourceType", "")))
    ptype = PatternType.from_name(str(js.get("patternType", "")))
    named = js.get("name")
    if js.get("version") != 1 or rtype == ResourceType.UNKNOWN or ptype == PatternType.UNKNOWN or not isinstance(named, str):
        raise MalformedZnodeError(f"malformed ACL change {data!r}")
    return ResourcePattern(rtype, named, ptype)


class ZkAclStore:
    def __init__(self, zk: ZkClient, name: str = "") -> None:
        self.zk = zk
        self._name = name
        self._versions: dict[ResourcePattern, int] = {}  # znode versions of the cached patterns
        self._listener: _ChangeListener | None = None

    def _kz(self, fn: Callable, *args: object, **kwargs: object) -> object:
        return self.zk.kazoo.retry(fn, *args, **kwargs)

    def start(self, on_change: Callable[[ResourcePattern], None]) -> None:
        for path in (LITERAL_ACL_PATH, PREFIXED_ACL_PATH, LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH):
            self.zk.ensure_path(path)
        self._listener = _ChangeListener(self.zk, on_change, self._name)
        self._listener.start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def load(self) -> dict[ResourcePattern, Acls]:
        out: dict[ResourcePattern, Acls] = {}
        for ptype in (PatternType.LITERAL, PatternType.PREFIXED):
            root = acl_root(ptype)
            for type_name in self.zk.get_children(root):
                rtype = ResourceType.from_name(type_name)
                if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
                    log.warning("ignoring ACLs of unknown resource type %s under %s", type_name, root)
                    continue
                for name in self.zk.get_children(f"{root}/{type_name}"):
                    pattern = ResourcePattern(rtype, name, ptype)
                    acls = self.read(pattern)
                    if acls:
                        out[pattern] = acls
        return out

    def read(self, pattern: ResourcePattern) -> Acls:
        got = self.zk.get_data(resource_path(pattern))
        if got is None:
            self._versions.pop(pattern, None)
            return frozenset()
        try:
            acls = decode_acls(got[0])
        except MalformedZnodeError as exc:
            log.warning("ignoring the ACLs of %s: %s", pattern, exc)
            acls = frozenset()
        self._versions[pattern] = got[1].version
        return acls

    def update(self, changes: Mapping[ResourcePattern, Callable[[Acls], Acls]],
               cached: Mapping[ResourcePattern, Acls]) -> dict[ResourcePattern, Acls | Exception]:
        out: dict[ResourcePattern, Acls | Exception] = {}
        for pattern, change in changes.items():
            try:
                out[pattern] = self._update_one(pattern, change, cached)
            except Exception as exc:  # noqa: BLE001 - this pattern's result; the others go on
                out[pattern] = exc
        return out

    def _update_one(self, pattern: ResourcePattern, change: Callable[[Acls], Acls],
                    cached: Mapping[ResourcePattern, Acls]) -> Acls:
        path = resource_path(pattern)
        if pattern in cached and pattern in self._versions:
            current, version = cached[pattern], self._versions[pattern]
        else:
            current = self.read(pattern)
            version = self._versions.get(pattern, -1)
        for attempt in range(MAX_UPDATE_RETRIES + 1):
            new = frozenset(change(current))
            try:
                if new == current and version >= 0:
                    break
                if new:
                    if version >= 0:
                        stat = self._kz(self.zk.kazoo.set, path, encode_acls(new), version=version)
                        version = stat.version  # type: ignore[attr-defined]
                    else:
                        self._kz(self.zk.kazoo.create, path, encode_acls(new), makepath=True)
                        version = 0
                    self._versions[pattern] = version
                elif version >= 0:
                    self._kz(self.zk.kazoo.delete, path, version=version)
                    self._versions.pop(pattern, None)
                # absent and nothing to write: nothing to do
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                if attempt == MAX_UPDATE_RETRIES:
                    raise RuntimeError(f"Failed to update ACLs for {pattern} after trying a maximum of "
                                       f"{MAX_UPDATE_RETRIES} times") from None
                # another broker wrote first: read its version and apply the change to it
                time.sleep(0.1 + random.random() * 0.05)
                current = self.read(pattern)
                version = self._versions.get(pattern, -1)
                continue
            if new != current:
                folder, data = encode_change(pattern)
                self._kz(self.zk.kazoo.create, f"{folder}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)
            return new
        return current


class _ChangeListener:
    """Watches both notification folders on one worker thread and hands each changed pattern to
    ``on_change``. Notifications older than the first listing are history: the load that follows the
    start reads every pattern anyway."""

    def __init__(self, zk: ZkClient, on_change: Callable[[ResourcePattern], None], name: str = "") -> None:
        self.zk = zk
        self._on_change = on_change
        self._last_seq: dict[str, int | None] = {LITERAL_CHANGES_PATH: None, EXTENDED_CHANGES_PATH: None}
        self._closed = False
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"acl-changes{'-' + name if name else ''}")

    def start(self) -> None:
        self.zk.add_connection_listener(self)
        # at once, on this thread: the load that follows must not race the first listing
        for folder in self._last_seq:
            self._process(folder)

    def close(self) -> None:
        self._closed = True
        self.zk.remove_connection_listener(self)
        self._worker.shutdown(wait=False, cancel_futures=True)

    def on_connected(self, new_session: bool) -> None:
        for folder in self._last_seq:
            self._submit(folder)  # watches do not survive a disconnection

    def on_session_expired(self) -> None:
        pass

    def _submit(self, folder: str) -> None:
        if self._closed:
            return
        try:
            self._worker.submit(self._run, folder)
        except RuntimeError:
            pass

    def _run(self, folder: str) -> None:
        if self._closed:
            return
        try:
            self._process(folder)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away or a bad znode: try again shortly
            if self._closed or self.zk.closed:
                return
            if not isinstance(exc, (InterruptedError, ConnectionClosedError)):
                log.warning("could not read %s (%s); trying again", folder, exc)
            timer = threading.Timer(RETRY_DELAY_S, self._submit, args=(folder,))
            timer.daemon = True
            timer.start()

    def _process(self, folder: str) -> None:
        def watch(event: WatchedEvent) -> None:
            if event.type != EventType.NONE:
                self._submit(folder)

        children = self.zk.get_children(folder, watch=watch)
        seqs = sorted(int(c[len(CHANGE_PREFIX):]) for c in children
                      if c.startswith(CHANGE_PREFIX) and c[len(CHANGE_PREFIX):].isdigit())
        last = self._last_seq[folder]
        if last is None:
            self._last_seq[folder] = seqs[-1] if seqs else -1
        else:
            for seq in seqs:
                if seq <= last:
                    continue
                got = self.zk.get_data(f"{folder}/{CHANGE_PREFIX}{seq:010d}")
                self._last_seq[folder] = seq
                if got is None:
                    continue  # purged meanwhile
                try:
                    pattern = decode_change(folder, got[0])
                except MalformedZnodeError as exc:
                    log.warning("%s", exc)
                    continue
                self._on_change(pattern)
        self._purge(folder, seqs)

    def _purge(self, folder: str, seqs: list[int]) -> None:
        """Kafka's purge of obsolete notifications: the oldest ones, while older than 15 minutes."""
        horizon_ms = (time.time() - CHANGE_EXPIRATION_S) * 1000
        for seq in seqs:
            path = f"{folder}/{CHANGE_PREFIX}{seq:010d}"
            stat = self.zk.exists(path)
            if stat is None:
                continue
            if stat.ctime >= horizon_ms:
                return
            try:
                self.zk.delete_path(path, stat.version)
            except BadVersionError:
                pass
