"""ACLs of a broker alone: one JSON file in the first log dir, replaced atomically on every change.

Each resource pattern is written as Kafka writes it in ZooKeeper (the type's PascalCase name, the
name, the pattern type, and ``{"principal", "permissionType", "operation", "host"}`` entries), so the
file reads like ``/kafka-acl``. Only this broker writes it: its cache is the truth, and a change
writes the whole file once however many patterns it touches.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable, Mapping

from tieredlog.atomic_file import atomic_write
from tieredlog.security.authorizer.acl import AccessControlEntry, PatternType, ResourcePattern, ResourceType
from tieredlog.security.authorizer.authorizer import Acls

ACL_FILE = "tieredlog-acls.json"


class AclFileError(ValueError):
    """The ACL file cannot be read: the broker refuses to start rather than run without its ACLs."""


class FileAclStore:
    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / ACL_FILE
        self._acls: dict[ResourcePattern, Acls] = {}
        self._lock = threading.Lock()

    def start(self, on_change: Callable[[ResourcePattern], None]) -> None:
        pass  # nobody else writes the file

    def close(self) -> None:
        pass

    def load(self) -> dict[ResourcePattern, Acls]:
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise AclFileError(f"cannot read {self.path}: {exc}") from None
        try:
            acls = decode(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise AclFileError(f"{self.path} is not an ACL file: {exc!r}") from None
        with self._lock:
            self._acls = dict(acls)
        return acls

    def read(self, pattern: ResourcePattern) -> Acls:
        with self._lock:
            return self._acls.get(pattern, frozenset())

    def update(self, changes: Mapping[ResourcePattern, Callable[[Acls], Acls]],
               cached: Mapping[ResourcePattern, Acls]) -> dict[ResourcePattern, Acls | Exception]:
        with self._lock:
            acls = dict(self._acls)
            out: dict[ResourcePattern, Acls | Exception] = {}
            for pattern, change in changes.items():
                new = frozenset(change(acls.get(pattern, frozenset())))
                out[pattern] = new
                if new:
                    acls[pattern] = new
                else:
                    acls.pop(pattern, None)
            if acls == self._acls:
                return out
            try:
                atomic_write(self.path, encode(acls))
            except OSError as exc:
                return {p: exc for p in changes}
            self._acls = acls
            return out


def encode(acls: Mapping[ResourcePattern, Acls]) -> bytes:
    resources: list[dict[str, object]] = [
        {"resourceType": p.resource_type.pascal_name, "name": p.name, "patternType": p.pattern_type.name,
         "acls": sorted((e.to_json() for e in entries), key=lambda j: sorted(j.items()))}
        for p, entries in sorted(acls.items(), key=lambda kv: (kv[0].resource_type, kv[0].pattern_type, kv[0].name))
    ]
    return json.dumps({"version": 1, "resources": resources}, indent=1).encode()


def decode(raw: object) -> dict[ResourcePattern, Acls]:
    if not isinstance(raw, dict) or raw.get("version") != 1:
        raise ValueError("expected {\"version\": 1, \"resources\": [...]}")
    out: dict[ResourcePattern, Acls] = {}
    for r in raw["resources"]:
        rtype = ResourceType.from_name(r["resourceType"])
        ptype = PatternType.from_name(r["patternType"])
        if rtype == ResourceType.UNKNOWN or ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"unknown resource type or pattern type in {r!r}")
        entries = frozenset(AccessControlEntry.from_json(e) for e in r["acls"])
        if entries:
            out[ResourcePattern(rtype, str(r["name"]), ptype)] = entries
    return out
