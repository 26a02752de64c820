"""Which node a request goes to, from the cluster's metadata: a broker's inter-broker endpoint."""

from __future__ import annotations

from tieredlog.cluster.znodes import BrokerInfo, EndPoint


def inter_broker_endpoint(broker: BrokerInfo, listener_name: str | None, security_protocol: str) -> EndPoint | None:
    """The endpoint brokers and the controller talk to each other on: ``inter.broker.listener.name``,
    else the listener named after ``security.inter.broker.protocol`` (Kafka's default), else the first
    listener using that protocol."""
    if listener_name:
        return next((e for e in broker.endpoints if e.listener_name == listener_name.upper()), None)
    protocol = security_protocol.upper()
    return next((e for e in broker.endpoints if e.listener_name == protocol), None) or \
        next((e for e in broker.endpoints if e.security_protocol == protocol), None)

