"""Helpers of the dynamic broker config tests: IncrementalAlterConfigs on the cluster-wide default
(as kafka-configs.sh --entity-default sends it), and DescribeConfigs synonyms in the order sent."""

from __future__ import annotations

from tieredlog.clients.blocking import KafkaClient
from tieredlog.protocol.api import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

_OPS = {"SET": 0, "DELETE": 1}


def alter_cluster_default(bootstrap: str, validate_only: bool = False, name: str = "", **ops: tuple[str, str | None]) -> tuple[str, str | None]:
    """IncrementalAlterConfigs on the cluster-wide default (resource name "", as kafka-configs.sh
    --entity-default sends it; librdkafka only addresses one broker id): (error name, message)."""
    configs = [{"name": k.replace("_", "."), "config_operation": _OPS[op], "value": v} for k, (op, v) in ops.items()]
    with KafkaClient(bootstrap) as c:
        resp = c.request(INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 4, "resource_name": name, "configs": configs}], "validate_only": validate_only}, version=1)
    r = resp.responses[0]
    return r.error_code.name, r.error_message


def describe_synonyms(bootstrap: str, rtype: int, name: str, config: str) -> list[tuple[str, str | None, int]]:
    """The synonyms in the order sent (librdkafka keys them by name, losing the levels of one name)."""
    with KafkaClient(bootstrap) as c:
        resp = c.request(DESCRIBE_CONFIGS, {"resources": [{"resource_type": rtype, "resource_name": name,
                                                           "configuration_keys": [config]}],
                                            "include_synonyms": True, "include_documentation": False}, version=4)
    (entry,) = resp.results[0].configs
    return [(s.name, s.value, s.source) for s in entry.synonyms]
