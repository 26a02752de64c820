"""The broker configs the controller reads, under Kafka's names and with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tieredlog.clients.node_clients import PLAINTEXT, ListenerSecurity
from tieredlog.config import BrokerConfig


@dataclass(frozen=True)
class ControllerConfig:
    unclean_leader_election_enable: bool = False  # the broker default; a topic's config overrides it
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    inter_broker_listener_name: str | None = None
    security_inter_broker_protocol: str = "PLAINTEXT"
    controller_socket_timeout_ms: int = 30000
    delete_topic_enable: bool = True
    # TLS of the controller's connections when the inter-broker listener is SSL or SASL_SSL, and what
    # they log in with when it is SASL_PLAINTEXT or SASL_SSL
    inter_broker_security: ListenerSecurity = PLAINTEXT
    # internal topic -> the replication factor configured for it: one created with fewer replicas
    # (too few brokers then) is raised to it once enough brokers are registered
    internal_topic_replication_factors: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_broker_config(cls, config: BrokerConfig,
                           inter_broker_security: ListenerSecurity = PLAINTEXT) -> "ControllerConfig":
        """``inter_broker_security``: the server builds it from the same config (TLS context, SASL credentials)."""
        return cls(
            unclean_leader_election_enable=bool(config["unclean.leader.election.enable"]),
            auto_leader_rebalance_enable=bool(config["auto.leader.rebalance.enable"]),
            leader_imbalance_check_interval_seconds=int(config["leader.imbalance.check.interval.seconds"]),
            leader_imbalance_per_broker_percentage=int(config["leader.imbalance.per.broker.percentage"]),
            inter_broker_listener_name=config.get("inter.broker.listener.name"),
            security_inter_broker_protocol=str(config["security.inter.broker.protocol"]),
            controller_socket_timeout_ms=int(config["controller.socket.timeout.ms"]),
            delete_topic_enable=bool(config["delete.topic.enable"]),
            inter_broker_security=inter_broker_security,
            internal_topic_replication_factors=internal_topic_replication_factors(config),
        )


def internal_topic_replication_factors(config: BrokerConfig) -> dict[str, int]:
    """Kafka's replication-factor configs of its internal topics; the metadata topic's is the
    topic-based RLMM's ``rlmm.config.remote.log.metadata.topic.replication.factor`` (default 3)."""
    rlmm = config.plugin_configs(str(config["remote.log.metadata.manager.impl.prefix"]))
    try:
        metadata_rf = int(rlmm.get("remote.log.metadata.topic.replication.factor", 3))
    except ValueError:
        metadata_rf = 3  # the RLMM refuses it at start-up with its own message
    return {"__consumer_offsets": int(config["offsets.topic.replication.factor"]),
            "__transaction_state": int(config["transaction.state.log.replication.factor"]),
            "__remote_log_metadata": metadata_rf}
