"""Where SCRAM credentials live: a broker alone keeps them in a file of its first log dir, a cluster in
ZooKeeper in Kafka's own layout, so every broker (and Kafka's tools) reads the same users.

ZooKeeper, as Kafka's AdminZkClient writes a user's configs:
- ``/config/users/<sanitized user>``: ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,
  server_key=...,iterations=4096", ...}}``; the user name URL-encoded (Kafka's Sanitizer). Other keys
  of the same znode (a user's quotas) are kept as they are.
- then a sequential ``/config/changes/config_change_<n>`` with ``{"version":2,"entity_path":"users/<sanitized>"}``;
  each broker's ConfigChangeListener reads the user again into its cache.

Alone: ``tieredlog-scram-credentials.json`` in the first log dir, replaced atomically, readable by
the broker's user only: ``{"version":1,"users":{"<user>":{"SCRAM-SHA-256":"salt=...,..."}}}``.

Authentication reads the in-memory cache only (any thread, never waits); ``user_configs``,
``all_user_configs`` and ``change_user_configs`` wait on a disk or on ZooKeeper and run off the event loop.
Neither form holds a password, and nothing here logs or raises a credential's text.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tieredlog.atomic_file import atomic_write
from tieredlog.security.scram import MECHANISMS, ScramCredential, ScramFormatError

if TYPE_CHECKING:
    from tieredlog.cluster.zk import ZkClient

log = logging.getLogger(__name__)

USERS_PATH = "/config/users"
STORE_FILE = "tieredlog-scram-credentials.json"
_URL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: Java's URLEncoder (UTF-8), with '*' and a space percent-encoded."""
    out = []
    for ch in name:
        if ch in _URL_SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (URLDecoder: '+' is a space)."""
    from urllib.parse import unquote_plus

    return unquote_plus(name, encoding="utf-8", errors="strict")


def scram_credentials_of(configs: dict[str, str], user: str) -> dict[str, ScramCredential]:
    """The SCRAM mechanisms of one user's configs; a credential that does not parse is skipped (and
    named in the log, never shown)."""
    out: dict[str, ScramCredential] = {}
    for mechanism in MECHANISMS:
        text = configs.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.from_text(text)
        except ScramFormatError:
            log.warning("ignoring the %s credential of user %s: it does not parse", mechanism, user)
    return out


class ScramCredentialStore(Protocol):
    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """From memory; any thread."""
        ...

    def user_configs(self, user: str) -> dict[str, str]:
        """Every config of ``user`` as stored (blocking)."""
        ...

    def all_user_configs(self) -> dict[str, dict[str, str]]:
        """Every user's configs (blocking)."""
        ...

    def change_user_configs(self, user: str, configs: dict[str, str]) -> None:
        """Replace ``user``'s configs and make the change seen everywhere (blocking)."""
        ...


class _Cache:
    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._lock = threading.Lock()
        # users changed while a full load runs: the load's older view of them must not win
        self._changed_during_load: set[str] | None = None

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def set_user(self, user: str, configs: dict[str, str]) -> None:
        credentials = scram_credentials_of(configs, user)
        with self._lock:
            if credentials:
                self._users[user] = credentials
            else:
                self._users.pop(user, None)
            if self._changed_during_load is not None:
                self._changed_during_load.add(user)

    def begin_load(self) -> None:
        with self._lock:
            self._changed_during_load = set()

    def replace(self, users: dict[str, dict[str, str]]) -> None:
        fresh = {u: c for u, c in ((u, scram_credentials_of(cfg, u)) for u, cfg in users.items()) if c}
        with self._lock:
            for user in self._changed_during_load or ():
                fresh.pop(user, None)
                if user in self._users:
                    fresh[user] = self._users[user]
            self._users = fresh
            self._changed_during_load = None


def _decode_user_configs(data: bytes) -> dict[str, str]:
    """A ``/config/users/<u>`` znode's ``config`` map; ValueError without quoting the content."""
    try:
        js = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not JSON") from None
    config = js.get("config") if isinstance(js, dict) else None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError("its config is not an object")
    return {str(k): str(v) for k, v in config.items()}


class FileScramCredentialStore:
    """A broker alone: one JSON file in the first log dir."""

    def __init__(self, log_dir: Path) -> None:
        self.path = Path(log_dir) / STORE_FILE
        self._cache = _Cache()
        self._lock = threading.Lock()  # one change at a time: each rewrites the whole file
        self._users: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file (blocking; at start-up). A file that does not parse stops the broker: a store
        of credentials silently treated as empty would lock every SCRAM user out."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        users: dict[str, dict[str, str]] = {}
        if raw:
            try:
                js = json.loads(raw)
                users = {str(u): {str(k): str(v) for k, v in cfg.items()} for u, cfg in js["users"].items()}
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
                raise ValueError(f"{self.path} is not a SCRAM credential file this broker wrote") from None
        self._users = users
        self._cache.replace(users)

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._cache.credential(user, mechanism)

    def user_configs(self, user: str) -> dict[str, str]:
        return dict(self._users.get(user, {}))

    def all_user_configs(self) -> dict[str, dict[str, str]]:
        return {u: dict(c) for u, c in self._users.items()}

    def change_user_configs(self, user: str, configs: dict[str, str]) -> None:
        with self._lock:
            users = {u: dict(c) for u, c in self._users.items()}
            if configs:
                users[user] = dict(configs)
            else:
                users.pop(user, None)
            data = json.dumps({"version": 1, "users": users}, sort_keys=True, indent=1).encode()
            atomic_write(self.path, data)
            try:
                os.chmod(self.path, 0o600)
            except OSError:
                pass
            self._users = users
            self._cache.set_user(user, configs)


class ZkScramCredentialStore:
    """A broker of a cluster: Kafka's user config znodes, cached, refreshed by change notifications."""

    def __init__(self, zk: "ZkClient") -> None:
        self.zk = zk
        self._cache = _Cache()

    def load(self) -> None:
        """Read every user's configs into the cache (blocking; at start-up)."""
        self._cache.begin_load()
        self._cache.replace(self.all_user_configs())

    def on_user_changed(self, sanitized: str) -> None:
        """A ``users/<sanitized>`` change notification (the config-change listener's thread)."""
        if "/" in sanitized:
            return  # users/<u>/clients/<c>: a client quota, nothing of SCRAM
        try:
            user = desanitize(sanitized)
        except UnicodeDecodeError:
            log.warning("ignoring a change notification for user znode %r: not a sanitized name", sanitized)
            return
        self._cache.set_user(user, self._read(sanitized))

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._cache.credential(user, mechanism)

    def _read(self, sanitized: str) -> dict[str, str]:
        got = self.zk.get_data(f"{USERS_PATH}/{sanitized}")
        if got is None:
            return {}
        try:
            return _decode_user_configs(got[0])
        except ValueError as exc:
            log.warning("ignoring %s/%s: %s", USERS_PATH, sanitized, exc)
            return {}

    def user_configs(self, user: str) -> dict[str, str]:
        return self._read(sanitize(user))

    def all_user_configs(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for child in self.zk.get_children(USERS_PATH):
            try:
                user = desanitize(child)
            except UnicodeDecodeError:
                continue
            out[user] = self._read(child)
        return out

    def change_user_configs(self, user: str, configs: dict[str, str]) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        from tieredlog.cluster.config_changes import CHANGE_PREFIX, CONFIG_CHANGES_PATH, encode_change

        sanitized = sanitize(user)
        path = f"{USERS_PATH}/{sanitized}"
        data = json.dumps({"version": 1, "config": configs}, separators=(",", ":")).encode()
        kz = self.zk.kazoo
        try:
            kz.retry(kz.set, path, data)
        except NoNodeError:
            try:
                kz.retry(kz.create, path, data, makepath=True)
            except NodeExistsError:
                kz.retry(kz.set, path, data)
        # every broker, this one too, reads the user again (Kafka's ZkConfigChangeNotification)
        kz.retry(kz.create, f"{CONFIG_CHANGES_PATH}/{CHANGE_PREFIX}", encode_change(f"users/{sanitized}"),
                 sequence=True, makepath=True)
        self._cache.set_user(user, configs)
