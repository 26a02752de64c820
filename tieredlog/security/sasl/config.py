"""SASL settings of each listener, read from the broker's configs with Kafka's names and precedence:

- ``listener.name.<l>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms``;
- a mechanism's JAAS: ``listener.name.<l>.<mechanism>.sasl.jaas.config`` (mechanism in lower case),
  else ``listener.name.<l>.sasl.jaas.config``, else ``sasl.jaas.config``. (Kafka reads only the first
  and a static JAAS file; the two fallbacks let one value serve every listener.) PLAIN's users are its
  PlainLoginModule's ``user_<name>="<password>"`` options; ``username``/``password`` are what the
  broker itself logs in with on the inter-broker listener;
- ``listener.name.<l>.<mechanism>.connections.max.reauth.ms``, else ``connections.max.reauth.ms`` as
  the listener sees it (KIP-368).

Everything is checked once, at start-up (``BrokerConfigError`` naming the key, never the value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tieredlog.config import BrokerConfig, BrokerConfigError, Password
from tieredlog.security.jaas import PLAIN_LOGIN_MODULE, JaasConfigError, JaasEntry, parse_single_module
from tieredlog.security.sasl.client import SaslClientCredentials
from tieredlog.security.sasl.mechanisms import PLAIN, SUPPORTED_MECHANISMS, PasswordCheck, plain_users_check

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


def is_sasl(security_protocol: str) -> bool:
    return security_protocol.upper() in SASL_PROTOCOLS


@dataclass(frozen=True)
class ListenerSasl:
    """How one SASL listener authenticates its connections."""

    listener_name: str
    mechanisms: tuple[str, ...]
    plain_check: PasswordCheck | None = field(default=None, repr=False)
    reauth_ms: dict[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms
    max_receive_size: int = 524288
    failed_authentication_delay_ms: int = 100


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.value if isinstance(value, Password) else str(value)


def jaas_entry(config: BrokerConfig, listener: str, mechanism: str) -> tuple[JaasEntry | None, str]:
    """(the login module configured for ``mechanism`` on ``listener``, the key it came from)."""
    own = config.listener_overrides.get(listener.lower(), {})
    key = f"{mechanism.lower()}.sasl.jaas.config"
    if key in own:
        raw, where = own[key], f"listener.name.{listener.lower()}.{key}"
    else:
        raw, where = config.listener_value(listener, "sasl.jaas.config"), config.listener_key(listener, "sasl.jaas.config")
    text = _text(raw)
    if text is None or not text.strip():
        return None, where
    try:
        return parse_single_module(text), where
    except JaasConfigError as exc:
        raise BrokerConfigError(f"Invalid value for configuration {where}: {exc}") from None


def _int_setting(config: BrokerConfig, listener: str, mechanism: str, name: str) -> int:
    own = config.listener_overrides.get(listener.lower(), {})
    key = f"{mechanism.lower()}.{name}"
    raw = own[key] if key in own else config.listener_value(listener, name)
    try:
        value = int(str(raw).strip())
    except ValueError:
        where = f"listener.name.{listener.lower()}.{key}" if key in own else config.listener_key(listener, name)
        raise BrokerConfigError(f"Invalid value {raw} for configuration {where}: expected int") from None
    return max(value, 0)


def enabled_mechanisms(config: BrokerConfig, listener: str) -> tuple[str, ...]:
    raw = config.listener_value(listener, "sasl.enabled.mechanisms")
    key = config.listener_key(listener, "sasl.enabled.mechanisms")
    mechanisms = tuple(dict.fromkeys(m.strip() for m in str(raw or "").split(",") if m.strip()))
    if not mechanisms:
        raise BrokerConfigError(f"No SASL mechanisms are enabled for listener {listener} ({key})")
    for m in mechanisms:
        if m not in SUPPORTED_MECHANISMS:
            raise BrokerConfigError(
                f"SASL mechanism {m} of listener {listener} ({key}) is not supported: tieredlog serves "
                f"{', '.join(SUPPORTED_MECHANISMS)}")
    return mechanisms


def _plain_users(config: BrokerConfig, listener: str) -> PasswordCheck:
    entry, where = jaas_entry(config, listener, PLAIN)
    if entry is None:
        raise BrokerConfigError(
            f"SASL mechanism PLAIN of listener {listener} has no JAAS configuration: set "
            f"listener.name.{listener.lower()}.plain.sasl.jaas.config to a {PLAIN_LOGIN_MODULE} with user_<name> options")
    if entry.login_module != PLAIN_LOGIN_MODULE:
        raise BrokerConfigError(f"{where} must configure {PLAIN_LOGIN_MODULE} for SASL mechanism PLAIN")
    users = {k[len("user_"):]: v for k, v in entry.options.items() if k.startswith("user_") and len(k) > len("user_")}
    return plain_users_check(users)


def listener_sasl(config: BrokerConfig, listener: str) -> ListenerSasl:
    mechanisms = enabled_mechanisms(config, listener)
    return ListenerSasl(
        listener_name=listener,
        mechanisms=mechanisms,
        plain_check=_plain_users(config, listener) if PLAIN in mechanisms else None,
        reauth_ms={m: _int_setting(config, listener, m, "connections.max.reauth.ms") for m in mechanisms},
        max_receive_size=int(config.listener_value(listener, "sasl.server.max.receive.size")),
        failed_authentication_delay_ms=int(config.listener_value(listener, "connection.failed.authentication.delay.ms")),
    )


def sasl_listeners(config: BrokerConfig) -> dict[str, ListenerSasl]:
    """The settings of every SASL listener, by listener name; BrokerConfigError when one is wrong."""
    out = {l.name: listener_sasl(config, l.name) for l in config.listeners if is_sasl(l.security_protocol)}
    inter_broker_credentials(config)  # its checks too, at start-up
    return out


def inter_broker_credentials(config: BrokerConfig) -> SaslClientCredentials | None:
    """What the broker logs in with on the inter-broker listener: ``sasl.mechanism.inter.broker.protocol``
    and that mechanism's JAAS ``username`` / ``password``; None when that listener is not SASL."""
    listener, protocol = config.inter_broker_listener
    return listener_client_credentials(config, listener, protocol, "inter-broker communication")


def listener_client_credentials(config: BrokerConfig, listener: str, protocol: str,
                                purpose: str) -> SaslClientCredentials | None:
    """What the broker logs in with when it is a client of one of its own listeners (the inter-broker
    one; the one the __remote_log_metadata clients use): as on the inter-broker listener."""
    if not is_sasl(protocol):
        return None
    mechanism = str(config.listener_value(listener, "sasl.mechanism.inter.broker.protocol") or "").strip()
    if mechanism not in enabled_mechanisms(config, listener):
        raise BrokerConfigError(
            f"sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when SASL is used for "
            f"{purpose} (listener {listener}: {mechanism})")
    entry, where = jaas_entry(config, listener, mechanism)
    username = entry.options.get("username") if entry else None
    password = entry.options.get("password") if entry else None
    if not config.get("zookeeper.connect"):
        # a broker alone opens no connection to another broker
        return SaslClientCredentials(mechanism, username or "", password or "")
    if not username or password is None:
        raise BrokerConfigError(f"{where} must give the username and password this broker logs in with on "
                                f"listener {listener} for {purpose} (SASL mechanism {mechanism})")
    return SaslClientCredentials(mechanism, username, password)
