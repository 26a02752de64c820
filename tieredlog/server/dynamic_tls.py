"""TLS key and trust stores changed without a restart (Kafka's SslFactory.reconfigure on a listener).

An AlterConfigs on this broker setting ``listener.name.<l>.ssl.keystore.*`` / ``ssl.truststore.*`` /
``ssl.key.password`` builds the listener's new SSLContext off the event loop before anything is stored:
a store that cannot be used, or a certificate whose subject or alternative names differ from the one
in use (unless ``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``), refuses the change with
INVALID_REQUEST and Kafka's message. Once stored, the new context serves every connection accepted
from then on; connections already open keep the context they shook hands with. A change learnt from
ZooKeeper (made through another broker) is built off the loop the same way and installed when ready.
Naming the same file again reloads it when it was rewritten in place.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Mapping, Protocol

from tieredlog.config import LISTENER_PREFIX, BrokerConfig, BrokerConfigError
from tieredlog.errors import InvalidRequestError
from tieredlog.security.tls import ListenerTls
from tieredlog.security.tls_config import build_listener_tls, ensure_compatible, store_stamp

log = logging.getLogger(__name__)

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS
RECONFIGURABLE_SSL_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
})


def signature(config: BrokerConfig, listener: str) -> tuple[Any, ...]:
    """What of the config the listener's stores are built from."""
    return tuple(config.listener_value(listener, name) for name in sorted(RECONFIGURABLE_SSL_CONFIGS))


class Reconfigurable(Protocol):
    """Where the dynamic broker configs (tieredlog.server.dynamic_config) call the parts they change."""

    @property
    def validators(self) -> list[Callable[[BrokerConfig, Mapping[str, str]], Awaitable[None]]]: ...

    @property
    def reconfigurables(self) -> list[Callable[[BrokerConfig], None]]: ...


class DynamicTls:
    """Keeps ``tls`` (the listeners' TLS sides, read by the acceptors at each accept) in step with the
    dynamic broker configs."""

    def __init__(self, tls: dict[str, ListenerTls], config: BrokerConfig) -> None:
        self.tls = tls
        self._signatures = {name: signature(config, name) for name in tls}
        # built by validate() for a change not yet applied: listener -> (signature, its TLS side)
        self._prepared: dict[str, tuple[tuple[Any, ...], ListenerTls]] = {}
        self._latest = config

    def register(self, dynamic_config: Reconfigurable) -> None:
        dynamic_config.validators.append(self.validate)
        dynamic_config.reconfigurables.append(self.reconfigure)

    def _build(self, new: BrokerConfig, level: Mapping[str, str] | None = None
               ) -> dict[str, tuple[tuple[Any, ...], ListenerTls]]:
        """Blocking: the TLS side of every listener whose stores change: their configs, or (Kafka's
        reload of updated files) a store file rewritten in place and named again in ``level``."""
        out = {}
        for name, current in self.tls.items():
            sig = signature(new, name)
            if sig == self._signatures[name]:
                named = level is not None and any(f"{LISTENER_PREFIX}{name.lower()}.{c}" in level
                                                  for c in ("ssl.keystore.location", "ssl.truststore.location"))
                if not named or store_stamp(new, name) == current.stamp:
                    continue
            try:
                built = build_listener_tls(new, name, current.security_protocol)
                ensure_compatible(current, built, allow_dn_changes=bool(new.listener_value(name, "ssl.allow.dn.changes")),
                                  allow_san_changes=bool(new.listener_value(name, "ssl.allow.san.changes")))
            except BrokerConfigError as exc:
                raise InvalidRequestError(f"Validation of dynamic config update of SSLFactory failed: {exc}") from None
            out[name] = (sig, built)
        return out

    async def validate(self, new: BrokerConfig, level: Mapping[str, str]) -> None:
        """Before ``level`` is stored: InvalidRequestError when a listener's new stores cannot be used."""
        prepared = await asyncio.get_running_loop().run_in_executor(None, self._build, new, level)
        self._prepared.update(prepared)

    def reconfigure(self, config: BrokerConfig) -> None:
        """The event loop, after each change: install what validate() built, or build it off the loop."""
        self._latest = config
        pending = False
        for name in self.tls:
            sig = signature(config, name)
            prepared = self._prepared.pop(name, None)
            if prepared is not None and prepared[0] == sig:
                self._install(name, sig, prepared[1])
            elif sig != self._signatures[name]:
                pending = True
        if pending:
            asyncio.get_running_loop().create_task(self._rebuild(config))

    async def _rebuild(self, config: BrokerConfig) -> None:
        try:
            built = await asyncio.get_running_loop().run_in_executor(None, self._build, config)
        except InvalidRequestError as exc:
            log.warning("TLS stores of the listeners unchanged: %s", exc)
            return
        for name, (sig, tls) in built.items():
            if sig == signature(self._latest, name):  # not overtaken by a later change
                self._install(name, sig, tls)

    def _install(self, name: str, sig: tuple[Any, ...], tls: ListenerTls) -> None:
        self.tls[name] = tls
        self._signatures[name] = sig
        log.info("listener %s: new connections use the reconfigured TLS key and trust stores", name)
