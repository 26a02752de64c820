"""``--command-config FILE``: the client properties file Kafka's tools take (kafka-topics.sh,
kafka-consumer-groups.sh, kafka-configs.sh, ...), so a tool reaches a TLS or SASL listener as a Kafka
client would. Kafka's names: ``security.protocol`` (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL),
``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.jaas.config`` (or librdkafka's
``sasl.username`` / ``sasl.password``), ``ssl.truststore.location`` (PEM; unset: the system's CAs),
``ssl.keystore.location`` / ``ssl.key.password`` (a client certificate, PEM),
``ssl.endpoint.identification.algorithm`` (empty: no host name check). Other keys are ignored.
"""

from __future__ import annotations

import argparse
import ssl

from tieredlog.clients.blocking import KafkaClient
from tieredlog.config import read_properties
from tieredlog.security import scram
from tieredlog.security.jaas import JaasConfigError, parse_single_module
from tieredlog.security.sasl.client import SaslClientCredentials

SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")


class CommandConfigError(ValueError):
    """The properties cannot be used; the message names the key at fault, never a secret."""


class ClientSettings:
    """How a tool connects: the security settings of ``--command-config`` (none: PLAINTEXT)."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        props = props or {}
        self.protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if self.protocol not in SECURITY_PROTOCOLS:
            raise CommandConfigError(f"Invalid security.protocol {self.protocol}: use one of "
                                     f"{', '.join(SECURITY_PROTOCOLS)}")
        self.sasl: SaslClientCredentials | None = None
        if self.protocol.startswith("SASL_"):
            self.sasl = _sasl_credentials(props)
        self.ssl_context: ssl.SSLContext | None = None
        if self.protocol.endswith("SSL"):
            self.ssl_context = _ssl_context(props)

    def client(self, address: str, client_id: str = "tieredlog-tools", timeout: float = 30.0) -> KafkaClient:
        """Not connected yet: ``with`` (or ``connect()``) connects it and logs in."""
        return KafkaClient(address, client_id=client_id, timeout=timeout, ssl_context=self.ssl_context, sasl=self.sasl)


def same_as(client: KafkaClient, address: str) -> KafkaClient:
    """A client of another broker (the controller, a partition's leader) with ``client``'s id, timeout
    and security: what the tool was told to use for the bootstrap broker goes for every broker."""
    return client.for_node(address)


def load(path: str | None) -> ClientSettings:
    if not path:
        return ClientSettings()
    try:
        props = read_properties(path)
    except OSError as exc:
        raise CommandConfigError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
    return ClientSettings(props)


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties file (Kafka's names): security.protocol, sasl.mechanism, "
                             "sasl.jaas.config, ssl.truststore.location, ...")


def from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ClientSettings:
    """The settings of ``--command-config``; a file that cannot be used ends the tool as a usage error."""
    try:
        return load(args.command_config)
    except CommandConfigError as exc:
        parser.error(str(exc))
        raise  # parser.error exits


def _sasl_credentials(props: dict[str, str]) -> SaslClientCredentials:
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip()
    username, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas:
        try:
            entry = parse_single_module(jaas)
        except JaasConfigError as exc:
            raise CommandConfigError(f"Invalid sasl.jaas.config: {exc}") from None
        username, password = entry.options.get("username", username), entry.options.get("password", password)
    if mechanism not in ("PLAIN", *scram.MECHANISMS):
        raise CommandConfigError(f"sasl.mechanism {mechanism} is not supported: use PLAIN, SCRAM-SHA-256 or "
                                 "SCRAM-SHA-512")
    if not username or password is None:
        raise CommandConfigError("SASL needs a username and a password: sasl.jaas.config's username= and "
                                 "password= (or sasl.username and sasl.password)")
    return SaslClientCredentials(mechanism, username, password)


def _ssl_context(props: dict[str, str]) -> ssl.SSLContext:
    store_type = props.get("ssl.truststore.type", "PEM").strip().upper()
    if store_type != "PEM":
        raise CommandConfigError(f"ssl.truststore.type {store_type} is not supported: use PEM")
    location = props.get("ssl.truststore.location")
    try:
        ctx = ssl.create_default_context(cafile=location) if location else ssl.create_default_context()
        if not props.get("ssl.endpoint.identification.algorithm", "https").strip():
            ctx.check_hostname = False
        keystore = props.get("ssl.keystore.location")
        if keystore:
            ctx.load_cert_chain(keystore, password=props.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        # names the files, never ssl.key.password
        raise CommandConfigError(f"cannot use ssl.truststore.location / ssl.keystore.location: {exc}") from None
    return ctx
