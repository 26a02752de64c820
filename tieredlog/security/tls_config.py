"""TLS as the broker configs set it: which listeners get a server context, and the client context of
the broker's own connections to other brokers.

Every SSL and SASL_SSL listener gets a server ``SSLContext`` built from its ssl.* configs, each read as
``listener.name.<listener>.<config>`` when set, else as the plain config (Kafka's precedence). When the
inter-broker listener is SSL or SASL_SSL, the broker's own connections (the controller's, the replica
fetchers', the transaction marker writer's, the remote log metadata client's) get a client context from
that listener's configs: its trust store, and its key store as the client certificate. The contexts
themselves are built by tieredlog.security.tls; a store that cannot be used is a BrokerConfigError here.
"""

from __future__ import annotations

import ssl
from typing import Any, Callable, TypeVar

from tieredlog.config import BrokerConfig, BrokerConfigError, Password
from tieredlog.security import tls
from tieredlog.security.tls import TLS_PROTOCOLS, ListenerTls, TlsConfigError

T = TypeVar("T")


class SslConfig:
    """One listener's ssl.* configs, listener overrides applied: the ``SslSettings`` of a broker config."""

    def __init__(self, config: BrokerConfig, listener: str, security_protocol: str) -> None:
        self.config = config
        self.listener = listener
        self.security_protocol = security_protocol

    def get(self, name: str) -> Any:
        return self.config.listener_value(self.listener, name)

    def secret(self, name: str) -> str | None:
        value = self.get(name)
        if value is None:
            return None
        return value.value if isinstance(value, Password) else str(value)

    def key(self, name: str) -> str:
        return self.config.listener_key(self.listener, name)


def _as_config_error(build: Callable[[], T]) -> T:
    try:
        return build()
    except TlsConfigError as exc:
        raise BrokerConfigError(str(exc)) from None


def listener_tls(config: BrokerConfig) -> dict[str, ListenerTls]:
    """A ``ListenerTls`` for every SSL and SASL_SSL listener, by listener name. BrokerConfigError
    (one line) when a store cannot be used."""
    out = {}
    for listener in config.listeners:
        if listener.security_protocol not in TLS_PROTOCOLS:
            continue
        out[listener.name] = build_listener_tls(config, listener.name, listener.security_protocol)
    return out


def build_listener_tls(config: BrokerConfig, listener: str, security_protocol: str) -> ListenerTls:
    """One listener's TLS side (blocking: it reads the stores). BrokerConfigError when a store cannot be used."""
    return _as_config_error(lambda: tls.build_listener_tls(SslConfig(config, listener, security_protocol)))


def store_stamp(config: BrokerConfig, listener: str) -> tuple[tuple[str, int, int], ...]:
    """(path, modification time, size) of the listener's key and trust store files (blocking)."""
    return tls.store_stamp(SslConfig(config, listener, ""))


def listener_client_context(config: BrokerConfig, listener: str, security_protocol: str) -> ssl.SSLContext:
    """The client context for connections to ``listener`` of other brokers. BrokerConfigError when a
    store cannot be used."""
    return _as_config_error(lambda: tls.client_context(SslConfig(config, listener, security_protocol)))


def inter_broker_client_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The client context of the broker's own connections to other brokers: None when the
    inter-broker listener is PLAINTEXT or SASL_PLAINTEXT."""
    name, protocol = config.inter_broker_listener
    if protocol not in TLS_PROTOCOLS:
        return None
    return listener_client_context(config, name, protocol)


def ensure_compatible(old: ListenerTls, new: ListenerTls, *, allow_dn_changes: bool, allow_san_changes: bool) -> None:
    """``tls.ensure_compatible`` with its refusal as a BrokerConfigError."""
    _as_config_error(lambda: tls.ensure_compatible(old, new, allow_dn_changes=allow_dn_changes,
                                                   allow_san_changes=allow_san_changes))
